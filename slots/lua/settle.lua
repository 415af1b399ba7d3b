-- Settle one attempt and release what it held (the user's lock or its semaphore place), fenced by
-- the attempt token; the state change goes through lib.lua set_state (counts, events, max_parallel).
-- KEYS[1] processing list  KEYS[2] job:<id>  KEYS[3] started  KEYS[4] lock:<user>  KEYS[5] wait:<user>
-- KEYS[6] waitusers  KEYS[7] ready:lo  KEYS[8] finished  KEYS[9] deps:<id>
-- KEYS[10..17] the state block of the job's user and run (Keys.state_keys(user, run))
-- KEYS[18] sem:<kind>:<user>  KEYS[19] semwait:<kind>:<user>  KEYS[20] delayed
-- KEYS[21] busy:<worker id> (cleared while it still names this job, fenced or not)
-- KEYS[22] done:<kind>:<user>:<input hash> (done:- when the job has no input hash)
-- ARGV: 1 id, 2 token, 3 outcome completed|failed|cancelled|retry|requeue, 4 result JSON ('' none),
--       5 error JSON ('' none), 6 lock TTL ms, 7 retention s, 8 retry backoff ms, 9 user,
--       10 '1' if a failure counts as a business try, 11 '0' if no handler process was started (a
--       rejected input): this start is taken back out of 'attempts', which counts handler starts
-- A retry waits in `delayed` as its id, or '!' .. id for an interactive job (promote_due.lua).
-- Returns {'ok', promoted waiter id or ''} | {'fenced'} when this attempt no longer owns the job.
local id, token, outcome = ARGV[1], ARGV[2], ARGV[3]
local cur = redis.call('GET', KEYS[21])
if cur then
  local ok, st = pcall(cjson.decode, cur)
  if not ok or type(st) ~= 'table' or st.job_id == id then redis.call('DEL', KEYS[21]) end
end
local j = redis.call('HMGET', KEYS[2], 'token', 'state', 'run', 'key', 'conc', 'priority', 'input_hash')
if j[1] ~= token then
  redis.call('LREM', KEYS[1], 0, id)  -- our own list: never leave a stale copy behind
  return {'fenced'}
end
local now = now_ms()
local ctx = state_ctx(10, KEYS[2], id, ARGV[9], j[3], j[4], KEYS[7], ARGV[7])
local old = j[2]
if ARGV[11] == '0' then redis.call('HINCRBY', KEYS[2], 'attempts', -1) end
redis.call('LREM', KEYS[1], 1, id)
redis.call('HDEL', KEYS[3], id)
local promoted = release_held(j[5], token, KEYS[4], KEYS[5], KEYS[6], KEYS[7], ARGV[9], tonumber(ARGV[6]),
  KEYS[18], KEYS[19])
-- The fair entry was consumed when the attempt started: nothing of the user's turn to pass on here.
if outcome == 'completed' then
  set_state(ctx, old, 'completed', {'result', ARGV[4], 'error', '', 'finished_at', now, 'token', ''}, false, now)
  on_terminal(KEYS[2], KEYS[9], KEYS[7], KEYS[8], id, now, ARGV[7])
  if j[7] and j[7] ~= '' then redis.call('SET', KEYS[22], id, 'PX', tonumber(ARGV[7]) * 1000) end
elseif outcome == 'failed' or outcome == 'cancelled' then
  if ARGV[10] == '1' then redis.call('HINCRBY', KEYS[2], 'tries', 1) end
  set_state(ctx, old, outcome, {'error', ARGV[5], 'finished_at', now, 'token', ''}, false, now)
  on_terminal(KEYS[2], KEYS[9], KEYS[7], KEYS[8], id, now, ARGV[7])
elseif outcome == 'retry' then
  redis.call('HINCRBY', KEYS[2], 'tries', 1)
  set_state(ctx, old, 'queued', {'error', ARGV[5], 'token', ''}, false, now)
  redis.call('ZADD', KEYS[20], now + tonumber(ARGV[8]), j[6] == 'interactive' and ('!' .. id) or id)
elseif outcome == 'requeue' then
  redis.call('HINCRBY', KEYS[2], 'interruptions', 1)
  set_state(ctx, old, 'queued', {'token', ''}, false, now)
  redis.call('RPUSH', KEYS[7], id)
else
  return redis.error_reply('unknown outcome ' .. tostring(outcome))
end
return {'ok', promoted or ''}
