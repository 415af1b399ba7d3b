-- Take back a chunk of what an unsealed run's submission staged (run_submit.lua refused a later
-- chunk: a job id in its way), from the end of runjobs:<run>; once nothing is left, the run hash
-- too. Only a run still unsealed and still carrying this submission's digest is touched (a sealed
-- run is never taken back), and of each job only a hash of this run staged at the run's
-- created_at (never a job that was in the way).
-- KEYS[1] run:<run>  KEYS[2] runjobs:<run>  KEYS[3] the queue's base '<prefix>:{<queue>}' (job:<id>
--         is built on it by lib/keys)
-- ARGV: 1 run id, 2 digest, 3 at most this many jobs
-- Returns {'more'} | {'gone'} | {'kept'} (sealed, or another submission's: nothing done)
-- needs: keys
local base, run_id, digest, max = KEYS[3], ARGV[1], ARGV[2], tonumber(ARGV[3])
local h = redis.call('HMGET', KEYS[1], 'digest', 'staging', 'created_at')
if not h[1] then return {'gone'} end
if h[1] ~= digest or h[2] ~= '1' then return {'kept'} end
local ids = redis.call('RPOP', KEYS[2], max)
if ids then
  for _, id in ipairs(ids) do
    local jk = keyname(base, 'job', id)
    local j = redis.call('HMGET', jk, 'run', 'created_at')
    if j[1] == run_id and j[2] == h[3] then redis.call('DEL', jk) end
  end
end
if redis.call('LLEN', KEYS[2]) > 0 then
  redis.call('HSET', KEYS[1], 'staged', redis.call('LLEN', KEYS[2]))
  return {'more'}
end
redis.call('DEL', KEYS[1])
return {'gone'}
