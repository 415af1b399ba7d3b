-- Settle one attempt and release its user lock, fenced by the attempt token.
-- KEYS[1] processing list  KEYS[2] job:<id>  KEYS[3] started  KEYS[4] lock:<user>  KEYS[5] wait:<user>
-- KEYS[6] waitusers  KEYS[7] ready:lo  KEYS[8] finished  KEYS[9] deps:<id>  KEYS[10] delayed
-- KEYS[11] busy:<worker id> (cleared while it still names this job, fenced or not)
-- ARGV: 1 id, 2 token, 3 outcome completed|failed|cancelled|retry|requeue, 4 result JSON ('' none),
--       5 error JSON ('' none), 6 lock TTL ms, 7 retention s, 8 retry backoff ms, 9 user,
--       10 '1' if a failure counts as a business try, 11 '0' if no handler process was started (a
--       rejected input): this start is taken back out of 'attempts', which counts handler starts
-- Returns {'ok', promoted waiter id or ''} | {'fenced'} when this attempt no longer owns the job.
local id, token, outcome = ARGV[1], ARGV[2], ARGV[3]
local cur = redis.call('GET', KEYS[11])
if cur then
  local ok, st = pcall(cjson.decode, cur)
  if not ok or type(st) ~= 'table' or st.job_id == id then redis.call('DEL', KEYS[11]) end
end
if redis.call('HGET', KEYS[2], 'token') ~= token then
  redis.call('LREM', KEYS[1], 0, id)  -- our own list: never leave a stale copy behind
  return {'fenced'}
end
local now = now_ms()
if ARGV[11] == '0' then redis.call('HINCRBY', KEYS[2], 'attempts', -1) end
redis.call('LREM', KEYS[1], 1, id)
redis.call('HDEL', KEYS[3], id)
local promoted = release_lock(KEYS[4], KEYS[5], KEYS[6], KEYS[7], ARGV[9], token, tonumber(ARGV[6]))
if outcome == 'completed' then
  redis.call('HSET', KEYS[2], 'state', 'completed', 'result', ARGV[4], 'error', '', 'finished_at', now, 'token', '')
  on_terminal(KEYS[2], KEYS[9], KEYS[7], KEYS[8], id, now, ARGV[7])
elseif outcome == 'failed' or outcome == 'cancelled' then
  if ARGV[10] == '1' then redis.call('HINCRBY', KEYS[2], 'tries', 1) end
  redis.call('HSET', KEYS[2], 'state', outcome, 'error', ARGV[5], 'finished_at', now, 'token', '')
  on_terminal(KEYS[2], KEYS[9], KEYS[7], KEYS[8], id, now, ARGV[7])
elseif outcome == 'retry' then
  redis.call('HINCRBY', KEYS[2], 'tries', 1)
  redis.call('HSET', KEYS[2], 'state', 'queued', 'error', ARGV[5], 'token', '')
  redis.call('ZADD', KEYS[10], now + tonumber(ARGV[8]), id)
elseif outcome == 'requeue' then
  redis.call('HINCRBY', KEYS[2], 'interruptions', 1)
  redis.call('HSET', KEYS[2], 'state', 'queued', 'token', '')
  redis.call('RPUSH', KEYS[7], id)
else
  return redis.error_reply('unknown outcome ' .. tostring(outcome))
end
return {'ok', promoted or ''}
