-- Move retries whose backoff has passed from `delayed` back to the front of their ready list: a retry
-- keeps its priority and place (CONTRACT). Members are job ids; an interactive job's member is
-- '!' .. id (settle.lua), so it goes back to ready:hi, never behind the bulk backlog.
-- KEYS[1] delayed  KEYS[2] ready:lo  KEYS[3] ready:hi     ARGV: 1 batch size     Returns how many moved.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms(), 'LIMIT', 0, tonumber(ARGV[1]))
local hi = false
for i = 1, #due do
  redis.call('ZREM', KEYS[1], due[i])
  if string.sub(due[i], 1, 1) == '!' then
    redis.call('RPUSH', KEYS[3], string.sub(due[i], 2))
    hi = true
  else
    redis.call('RPUSH', KEYS[2], due[i])
  end
end
if hi and redis.call('LINDEX', KEYS[2], -1) ~= '~wake' then redis.call('RPUSH', KEYS[2], '~wake') end
return #due
