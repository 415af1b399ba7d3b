-- Cancel a job. Not yet running: taken out of whichever list holds it and ended at once. Running, or
-- in a slot's hands between claim and start: flagged; the slot sees the flag (take.lua, or its poll
-- while the child runs) and the runner kills the attempt's process group.
-- KEYS[1] job:<id>  KEYS[2] ready:hi  KEYS[3] ready:lo  KEYS[4] wait:<user>  KEYS[5] waitusers
-- KEYS[6] delayed  KEYS[7] finished  KEYS[8] deps:<id>  KEYS[9] lock:<user>
-- KEYS[10..17] the state block of the job's user and run (Keys.state_keys(user, run))
-- KEYS[18] semwait:<kind>:<user>
-- KEYS[19..21] the interactive class's keys (Keys.hi_keys(user)): ready:hi, inready:hi, hibacklog:<user>
-- KEYS[22..] deps:<dep> for each `after` dependency
-- A cancelled fair entry passes the user's turn of its class to the next of its backlog (set_state).
-- ARGV: 1 id, 2 retention s, 3 lock TTL ms, 4 user
-- Returns {'cancelled'} | {'signalled'} | {'already', state} | {'missing'}
-- needs: base, ctx, classes, state, terminal, lock
local id = ARGV[1]
local j = redis.call('HMGET', KEYS[1], 'state', 'run', 'key')
local state = j[1]
if not state then return {'missing'} end
if TERMINAL[state] then return {'already', state} end
redis.call('HSET', KEYS[1], 'cancel', '1')
if state == 'running' then return {'signalled'} end
local ctx = with_hi(state_ctx(10, KEYS[1], id, ARGV[4], j[2], j[3], KEYS[3], ARGV[2]), 19)
-- (wait lists, semwait, runwait and deps hold an interactive job as '!' .. id: lib/classes park_entry)
local removed = redis.call('LREM', KEYS[2], 0, id) + redis.call('LREM', KEYS[3], 0, id)
  + unpark(KEYS[4], id) + redis.call('ZREM', KEYS[6], id, '!' .. id)
  + redis.call('LREM', ctx.backlog, 0, id) + redis.call('LREM', ctx.backlog_hi, 0, id) + unpark(KEYS[18], id)
if ctx.run_id ~= '' then removed = removed + unpark(ctx.runwait, id) end
for i = 22, #KEYS do removed = removed + unpark(KEYS[i], id) end
if removed == 0 then return {'signalled'} end
local now = now_ms()
set_state(ctx, state, 'cancelled', {'error', err_json('cancelled', 'cancelled while ' .. state),
  'finished_at', now, 'token', ''}, true, now)
on_terminal(KEYS[1], KEYS[8], {lo = KEYS[3], hi = KEYS[2]}, KEYS[7], id, now, ARGV[2])
if redis.call('LLEN', KEYS[4]) == 0 then redis.call('SREM', KEYS[5], ARGV[4]) end
if redis.call('GET', KEYS[9]) == 'r:' .. id then
  promote_waiter(KEYS[9], KEYS[4], KEYS[5], {lo = KEYS[3], hi = KEYS[2]}, ARGV[4], tonumber(ARGV[3]))
end
return {'cancelled'}
