-- Cancel a run: its queued and waiting jobs end `cancelled` at once (taken out of ready, backlog,
-- wait, semwait, runwait and delayed); running jobs, and jobs in a slot's hands between claim and
-- start, get the job `cancel` flag (the slot's poll kills the group; take.lua ends a claimed one
-- `cancelled` without running it). Finished jobs stay as they are. The run's `cancel` flag makes
-- its final state `cancelled` (CONTRACT) once the flagged jobs have ended.
-- The caller reads runjobs:<run> (LRANGE) first to pass each job's keys.
-- KEYS[1] run:<run>  KEYS[2] runjobs:<run>  KEYS[3] events:run:<run>  KEYS[4] runwait:<run>
-- KEYS[5] events  KEYS[6] active  KEYS[7] inready  KEYS[8] backlog:<user>  KEYS[9] ready:hi
-- KEYS[10] ready:lo  KEYS[11] delayed  KEYS[12] finished  KEYS[13] wait:<user>  KEYS[14] waitusers
-- KEYS[15] lock:<user>  KEYS[16] semwait:<kind>:<user>  KEYS[17] inready:hi  KEYS[18] hibacklog:<user>
-- KEYS[19..] per job of the run, 2 keys: job:<id>, deps:<id>
-- ARGV: 1 run id, 2 retention s, 3 lock TTL ms, 4 user
-- Returns {'cancelled', n cancelled at once, n signalled (running or claimed)} |
--         {'already', final state} (the run had ended: nothing changed) | {'missing'}
-- needs: base, ctx, classes, events, runs, state, terminal, lock
local run_id, retention, user = ARGV[1], tonumber(ARGV[2]), ARGV[4]
local rstate = redis.call('HGET', KEYS[1], 'state')
if not rstate then return {'missing'} end
if FINAL_RUN[rstate] then return {'already', rstate} end
redis.call('HSET', KEYS[1], 'cancel', '1')

-- Which of the run's jobs are unfinished, and where each one can be.
local njobs = (#KEYS - 18) / 2
local todo, byid = {}, {}
for i = 0, njobs - 1 do
  local jk = KEYS[19 + 2 * i]
  local v = redis.call('HMGET', jk, 'state', 'id', 'key')
  if v[1] and not TERMINAL[v[1]] then
    redis.call('HSET', jk, 'cancel', '1')
    if v[1] ~= 'running' then
      local t = {key = jk, deps = KEYS[20 + 2 * i], id = v[2], item = v[3] or '', state = v[1]}
      todo[#todo + 1] = t
      byid[v[2]] = t
    end
  end
end

-- Lists a run's jobs wait in: rebuilt once each without them (not one LREM per job). Wait lists
-- hold an interactive job as '!' .. id (lib/classes park_entry).
local function strip(list)
  local items = redis.call('LRANGE', list, 0, -1)
  local keep, hit = {}, false
  for _, e in ipairs(items) do
    local t = byid[unmark(e)]
    if t then t.removed = true; hit = true else keep[#keep + 1] = e end
  end
  if hit then
    redis.call('DEL', list)
    for i = 1, #keep, 1000 do redis.call('RPUSH', list, unpack(keep, i, math.min(i + 999, #keep))) end
  end
end
if #todo > 0 then
  for _, list in ipairs({KEYS[8], KEYS[18], KEYS[4], KEYS[13], KEYS[16], KEYS[9], KEYS[10]}) do strip(list) end
  for _, t in ipairs(todo) do
    if not t.removed then
      if redis.call('ZREM', KEYS[11], t.id, '!' .. t.id) > 0 then t.removed = true end
    end
  end
end
if redis.call('LLEN', KEYS[13]) == 0 then redis.call('SREM', KEYS[14], user) end

local now = now_ms()
local ctx = with_hi({user = user, run_id = run_id, events = KEYS[5], active = KEYS[6], inready = KEYS[7],
  backlog = KEYS[8], run = KEYS[1], runev = KEYS[3], runwait = KEYS[4], runjobs = KEYS[2],
  ready_lo = KEYS[10], retention = retention}, {KEYS[9], KEYS[17], KEYS[18]})
local cancelled, signalled = 0, 0
for _, t in ipairs(todo) do
  if t.removed then
    ctx.job, ctx.id, ctx.item = t.key, t.id, t.item
    set_state(ctx, t.state, 'cancelled', {'error', err_json('cancelled', 'run cancelled while ' .. t.state),
      'finished_at', now, 'token', ''}, true, now)
    on_terminal(t.key, t.deps, {lo = KEYS[10], hi = KEYS[9]}, KEYS[12], t.id, now, retention)
    if redis.call('GET', KEYS[15]) == 'r:' .. t.id then
      promote_waiter(KEYS[15], KEYS[13], KEYS[14], {lo = KEYS[10], hi = KEYS[9]}, user, tonumber(ARGV[3]))
    end
    cancelled = cancelled + 1
  else
    signalled = signalled + 1  -- in a slot's hands: take.lua ends it cancelled
  end
end
-- Running jobs were flagged above; count them as signalled too.
local _, _, _, counts = run_view(ctx)
signalled = counts.running + signalled
return {'cancelled', cancelled, signalled}
