-- Clear a slot's busy state, but only while it still names this job: a late clean-up of an old
-- attempt (a slow settle, a retry after a lost reply) never erases a newer job's state.
-- KEYS[1] busy:<worker id>
-- ARGV: 1 job id
-- Returns 1 when deleted, 0 when absent or naming another job.
-- needs: (no lib part)
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
local ok, st = pcall(cjson.decode, cur)
if ok and type(st) == 'table' and st.job_id ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])  -- ours, or undecodable junk nobody can own
return 1
