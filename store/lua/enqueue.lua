-- Create a job and queue it, idempotently on its id; or adopt a raw entry a producer pushed.
-- A new job becomes its user's fair entry of its class (ready:hi + inready:hi for interactive,
-- ready:lo + inready for bulk) when the user has none (at the front when the user has nothing
-- running), else waits in that class's backlog (hibacklog:<user> / backlog:<user>, FIFO): one
-- user's long run never stands between another user and the next free slot, in either class.
-- Adopted entries go to the front of their ready list (they were already claimed once).
-- KEYS[1] job:<id>   KEYS[2] ready list of its priority   KEYS[3] ready:lo   KEYS[4] processing list
--         holding the raw entry being adopted (any key when ARGV[7] is '')
-- KEYS[5..12] the state block of the job's user (Keys.state_keys(user)): events, active, inready,
--         backlog:<user>, run:-, events:run:-, runwait:-, runjobs:-
-- KEYS[13..15] the interactive class's keys (Keys.hi_keys(user)): ready:hi, inready:hi, hibacklog:<user>
-- ARGV: 1 id, 2 kind, 3 user, 4 payload JSON, 5 priority, 6 after JSON, 7 raw entry to remove ('' none)
-- Returns {1, 'queued'} when created, {0, <state>} when the id already exists (nothing queued).
-- needs: base, ctx, classes, fairness, state
if ARGV[7] ~= '' then redis.call('LREM', KEYS[4], 1, ARGV[7]) end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('HGET', KEYS[1], 'state')}
end
local id = ARGV[1]
local ctx = with_hi(state_ctx(5, KEYS[1], id, ARGV[3], '', '', KEYS[3], 0), 13)
ctx.row = {}  -- a new hash: its fields are the ones set_state writes (no read-back of its event row)
set_state(ctx, nil, 'queued', {'id', id, 'kind', ARGV[2], 'user', ARGV[3], 'payload', ARGV[4],
  'priority', ARGV[5], 'after', ARGV[6], 'attempts', 0, 'tries', 0, 'interruptions', 0, 'crashes', 0,
  'waits', 0, 'created_at', now_ms()}, false)
if ARGV[7] ~= '' then
  redis.call('RPUSH', KEYS[2], id)
  if ARGV[5] == 'interactive' then wake(KEYS[3]) end
else
  queue_job(ctx, id, ARGV[5] == 'interactive')  -- (an interactive push leaves a wake token)
end
return {1, 'queued'}
