-- Create a job and queue it, idempotently on its id; or adopt a raw entry a producer pushed.
-- KEYS[1] job:<id>   KEYS[2] ready list of its priority   KEYS[3] ready:lo   KEYS[4] processing list
--         holding the raw entry being adopted (any key when ARGV[7] is '')
-- ARGV: 1 id, 2 kind, 3 user, 4 payload JSON, 5 priority, 6 after JSON, 7 raw entry to remove ('' none)
-- Returns {1, 'queued'} when created, {0, <state>} when the id already exists (nothing queued).
-- Adopted entries go to the front (they were already claimed once); new ones to the back.
if ARGV[7] ~= '' then redis.call('LREM', KEYS[4], 1, ARGV[7]) end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('HGET', KEYS[1], 'state')}
end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'kind', ARGV[2], 'user', ARGV[3], 'payload', ARGV[4],
  'priority', ARGV[5], 'after', ARGV[6], 'state', 'queued', 'attempts', 0, 'tries', 0,
  'interruptions', 0, 'crashes', 0, 'waits', 0, 'created_at', now_ms())
if ARGV[7] ~= '' then
  redis.call('RPUSH', KEYS[2], ARGV[1])
else
  redis.call('LPUSH', KEYS[2], ARGV[1])
end
-- A slot idles blocked on ready:lo; a wake token at its pop end makes one look at ready:hi.
if ARGV[5] == 'interactive' and redis.call('LINDEX', KEYS[3], -1) ~= '~wake' then
  redis.call('RPUSH', KEYS[3], '~wake')
end
return {1, 'queued'}
