-- Move retries whose backoff has passed from `delayed` to the back of ready:lo.
-- KEYS[1] delayed  KEYS[2] ready:lo     ARGV: 1 batch size     Returns how many moved.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms(), 'LIMIT', 0, tonumber(ARGV[1]))
for i = 1, #due do
  redis.call('ZREM', KEYS[1], due[i])
  redis.call('LPUSH', KEYS[2], due[i])
end
return #due
