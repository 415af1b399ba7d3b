-- Move retries whose backoff has passed from `delayed` back to the front of their ready list: a retry
-- keeps its priority and place (CONTRACT). Members are job ids; an interactive job's member is
-- '!' .. id (settle.lua), so it goes back to ready:hi, never behind the bulk backlog.
-- KEYS[1] delayed  KEYS[2] ready:lo  KEYS[3] ready:hi     ARGV: 1 batch size     Returns how many moved.
-- (lib/classes push_front: the '!' marking is park_entry's, and a push onto ready:hi leaves a wake token.)
-- needs: base, classes
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms(), 'LIMIT', 0, tonumber(ARGV[1]))
for i = 1, #due do
  redis.call('ZREM', KEYS[1], due[i])
  push_front({lo = KEYS[2], hi = KEYS[3]}, due[i])
end
return #due
