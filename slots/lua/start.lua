-- Everything after BLMOVE, in one atomic step: stamp, cancel check, dependencies, max_parallel,
-- the kind's per-user concurrency (lock, semaphore or none) or park, attempt token, and the state
-- change (lib.lua set_state: counts, fairness top-up, events). The BLMOVE→start gap is the only
-- non-atomic one; the reaper covers it.
-- KEYS[1] processing list  KEYS[2] job:<id>  KEYS[3] started  KEYS[4] lock:<user>  KEYS[5] wait:<user>
-- KEYS[6] waitusers  KEYS[7] ready:lo  KEYS[8] finished  KEYS[9] deps:<id>
-- KEYS[10..17] the state block of the job's user and run (Keys.state_keys(user, run))
-- KEYS[18] sem:<kind>:<user>  KEYS[19] semwait:<kind>:<user>  KEYS[20] busy:<worker id>
-- KEYS[21..] pairs (job:<dep>, deps:<dep>) for each `after` dependency
-- ARGV: 1 id, 2 random token suffix (the same on a retry of the same claim), 3 worker id, 4 timeout ms, 5 lock TTL ms, 6 retention s,
--       7 max waits, 8 user, 9 the slot's busy state as JSON (types.BusyState; attempt and started_at
--       are filled in here), 10 busy-state TTL ms (longest timeout + 120 s), 11 the kind's per_user
--       (1: the user's lock, as every per_user = 1 kind shares it; 0: no limit; N > 1: a semaphore
--       of N per kind and user)
-- Busy state is written only on 'run', i.e. once the slot holds the user's lock, in the same step.
-- Parks: behind an unfinished dependency (the user's turn passes to its next job), behind the
-- user's lock or semaphore, or behind the run's max_parallel (the user's turn stays with this job).
-- Returns {'run', token, attempt, started_at, created_at or -1} |
--         {'parked', 'user'|'dependency'|'run', user or dep id or run id} |
--         {'ended', state, error kind, message} | {'stale', state} | {'missing'}
--         (decoded by slots/queue.py into Run | Parked | Ended | Stale | Missing)
local id, user, ttl = ARGV[1], ARGV[8], tonumber(ARGV[5])
local per_user = tonumber(ARGV[11] or '1')
local j = redis.call('HMGET', KEYS[2], 'state', 'cancel', 'waits', 'created_at', 'run', 'key', 'token',
  'attempts', 'started_at')
local state = j[1]
if not state then return {'missing'} end
local now = now_ms()
local ctx = state_ctx(10, KEYS[2], id, user, j[5], j[6], KEYS[7], ARGV[6])
local lockval = redis.call('GET', KEYS[4])
local reserved = lockval == 'r:' .. id

local function pass_reservation()
  if reserved then promote_waiter(KEYS[4], KEYS[5], KEYS[6], KEYS[7], user, ttl) end
end

local function unclaim()
  redis.call('LREM', KEYS[1], 1, id)
  redis.call('HDEL', KEYS[3], id)
end

local function finish(st, kind, msg)
  unclaim()
  set_state(ctx, state, st, {'error', err_json(kind, msg), 'finished_at', now, 'token', ''}, true, now)
  on_terminal(KEYS[2], KEYS[9], KEYS[7], KEYS[8], id, now, ARGV[6])
  pass_reservation()
  return {'ended', st, kind, msg}
end

local function park(list, reason, detail, consume_fair)
  unclaim()
  redis.call('RPUSH', list, id)
  redis.call('HINCRBY', KEYS[2], 'waits', 1)
  set_state(ctx, state, 'waiting', nil, consume_fair, now)
  return {'parked', reason, detail}
end

-- Our own retry after a reply lost to a connection error: the first call did start it.
if state == 'running' and redis.call('LPOS', KEYS[1], id) then
  local tok = j[7] or ''
  if string.sub(tok, -#ARGV[2] - 1) == '.' .. ARGV[2] then
    return {'run', tok, tonumber(j[8]), tonumber(j[9]), tonumber(j[4] or '-1')}
  end
end
-- A duplicate entry of a finished or running job (e.g. after a failover): the other copy owns it.
if TERMINAL[state] or state == 'running' then
  unclaim()
  pass_reservation()
  return {'stale', state}
end
if j[2] == '1' then
  return finish('cancelled', 'cancelled', 'cancelled before it started')
end
if tonumber(j[3] or '0') >= tonumber(ARGV[7]) then
  -- Nothing was killed: not a timeout (ErrorKind.WAITED_TOO_LONG).
  return finish('failed', 'waited_too_long', 'waited ' .. ARGV[7] .. ' times for its user or dependencies (pool.max_waits)')
end

for i = 21, #KEYS, 2 do
  local dep_id = string.match(KEYS[i], ':job:(.*)$')
  local dstate = redis.call('HGET', KEYS[i], 'state')
  if not dstate then
    return finish('failed', 'dependency_failed', 'dependency ' .. dep_id .. ' not found (unknown id, or expired)')
  elseif dstate ~= 'completed' then
    if TERMINAL[dstate] then
      return finish('failed', 'dependency_failed', 'dependency ' .. dep_id .. ' ended ' .. dstate)
    end
    pass_reservation()
    return park(KEYS[i + 1], 'dependency', dep_id, true)
  end
end

if ctx.run_id ~= '' then
  local r = redis.call('HMGET', ctx.run, 'max_parallel', 'running')
  local maxp = tonumber(r[1] or '0') or 0
  if maxp > 0 and (tonumber(r[2] or '0') or 0) >= maxp then
    pass_reservation()
    return park(ctx.runwait, 'run', ctx.run_id, false)
  end
end

local conc = 'lock'
if per_user == 1 then
  if not lockval then
    if redis.call('LLEN', KEYS[5]) > 0 then
      -- Free lock but waiters: a promotion was lost. Queue behind them and promote the head now.
      local r = park(KEYS[5], 'user', user, false)
      redis.call('SADD', KEYS[6], user)
      promote_waiter(KEYS[4], KEYS[5], KEYS[6], KEYS[7], user, ttl)
      return r
    end
  elseif not reserved then
    redis.call('SADD', KEYS[6], user)
    return park(KEYS[5], 'user', user, false)
  end
else
  pass_reservation()
  conc = 'none'
  if per_user > 1 then
    conc = 'sem'
    redis.call('ZREMRANGEBYSCORE', KEYS[18], '-inf', now)
    if redis.call('ZCARD', KEYS[18]) >= per_user then
      return park(KEYS[19], 'user', user, false)
    end
  end
end

local attempt = redis.call('HINCRBY', KEYS[2], 'attempts', 1)
local token = attempt .. '.' .. ARGV[2]
if conc == 'lock' then
  redis.call('SET', KEYS[4], token, 'PX', ttl)
elseif conc == 'sem' then
  redis.call('ZADD', KEYS[18], now + ttl, token)
end
set_state(ctx, state, 'running', {'token', token, 'started_at', now, 'worker', ARGV[3], 'timeout_ms', ARGV[4],
  'conc', conc}, true, now)
redis.call('HSET', KEYS[3], id, now)
local busy = cjson.decode(ARGV[9])
busy.attempt = attempt
busy.started_at = now
redis.call('SET', KEYS[20], cjson.encode(busy), 'PX', tonumber(ARGV[10]))
return {'run', token, attempt, now, tonumber(j[4] or '-1')}
