-- Everything after BLMOVE, in one atomic step: stamp, cancel check, dependencies, lock-or-park,
-- attempt token. The BLMOVE→start gap is the only non-atomic one; the reaper covers it.
-- KEYS[1] processing list  KEYS[2] job:<id>  KEYS[3] started  KEYS[4] lock:<user>  KEYS[5] wait:<user>
-- KEYS[6] waitusers  KEYS[7] ready:lo  KEYS[8] finished  KEYS[9] deps:<id>  KEYS[10] busy:<worker id>
-- KEYS[11..] pairs (job:<dep>, deps:<dep>) for each `after` dependency
-- ARGV: 1 id, 2 random token suffix (the same on a retry of the same claim), 3 worker id, 4 timeout ms, 5 lock TTL ms, 6 retention s,
--       7 max waits, 8 user, 9 the slot's busy state as JSON (types.BusyState; attempt and started_at
--       are filled in here), 10 busy-state TTL ms (longest timeout + 120 s)
-- Busy state is written only on 'run', i.e. once the slot holds the user's lock, in the same step.
-- Returns {'run', token, attempt, started_at, created_at or -1} | {'parked', 'user'|'dependency', user or dep id} |
--         {'ended', state, error kind, message} | {'stale', state} | {'missing'}
--         (decoded by slots/queue.py into Run | Parked | Ended | Stale | Missing)
local id, user, ttl = ARGV[1], ARGV[8], tonumber(ARGV[5])
if redis.call('EXISTS', KEYS[2]) == 0 then return {'missing'} end
local now = now_ms()
local state = redis.call('HGET', KEYS[2], 'state')
local reserved = redis.call('GET', KEYS[4]) == 'r:' .. id

local function pass_reservation()
  if reserved then promote_waiter(KEYS[4], KEYS[5], KEYS[6], KEYS[7], user, ttl) end
end

local function unclaim()
  redis.call('LREM', KEYS[1], 1, id)
  redis.call('HDEL', KEYS[3], id)
end

local function finish(st, kind, msg)
  unclaim()
  redis.call('HSET', KEYS[2], 'state', st, 'error', err_json(kind, msg), 'finished_at', now, 'token', '')
  on_terminal(KEYS[2], KEYS[9], KEYS[7], KEYS[8], id, now, ARGV[6])
  pass_reservation()
  return {'ended', st, kind, msg}
end

local function park(list, reason, detail)
  unclaim()
  redis.call('RPUSH', list, id)
  redis.call('HSET', KEYS[2], 'state', 'waiting')
  redis.call('HINCRBY', KEYS[2], 'waits', 1)
  return {'parked', reason, detail}
end

-- Our own retry after a reply lost to a connection error: the first call did start it.
if state == 'running' and redis.call('LPOS', KEYS[1], id) then
  local tok = redis.call('HGET', KEYS[2], 'token') or ''
  if string.sub(tok, -#ARGV[2] - 1) == '.' .. ARGV[2] then
    return {'run', tok, tonumber(redis.call('HGET', KEYS[2], 'attempts')),
      tonumber(redis.call('HGET', KEYS[2], 'started_at')), tonumber(redis.call('HGET', KEYS[2], 'created_at') or '-1')}
  end
end
-- A duplicate entry of a finished or running job (e.g. after a failover): the other copy owns it.
if TERMINAL[state] or state == 'running' then
  unclaim()
  pass_reservation()
  return {'stale', state}
end
if redis.call('HGET', KEYS[2], 'cancel') == '1' then
  return finish('cancelled', 'cancelled', 'cancelled before it started')
end
if tonumber(redis.call('HGET', KEYS[2], 'waits') or '0') >= tonumber(ARGV[7]) then
  -- Nothing was killed: not a timeout (ErrorKind.WAITED_TOO_LONG).
  return finish('failed', 'waited_too_long', 'waited ' .. ARGV[7] .. ' times for its user or dependencies (pool.max_waits)')
end

for i = 11, #KEYS, 2 do
  local dep_id = string.match(KEYS[i], ':job:(.*)$')
  local dstate = redis.call('HGET', KEYS[i], 'state')
  if not dstate then
    return finish('failed', 'dependency_failed', 'dependency ' .. dep_id .. ' not found (unknown id, or expired)')
  elseif dstate ~= 'completed' then
    if TERMINAL[dstate] then
      return finish('failed', 'dependency_failed', 'dependency ' .. dep_id .. ' ended ' .. dstate)
    end
    pass_reservation()
    return park(KEYS[i + 1], 'dependency', dep_id)
  end
end

local lockval = redis.call('GET', KEYS[4])
if not lockval then
  if redis.call('LLEN', KEYS[5]) > 0 then
    -- Free lock but waiters: a promotion was lost. Queue behind them and promote the head now.
    local r = park(KEYS[5], 'user', user)
    redis.call('SADD', KEYS[6], user)
    promote_waiter(KEYS[4], KEYS[5], KEYS[6], KEYS[7], user, ttl)
    return r
  end
elseif not reserved then
  redis.call('SADD', KEYS[6], user)
  return park(KEYS[5], 'user', user)
end

local attempt = redis.call('HINCRBY', KEYS[2], 'attempts', 1)
local token = attempt .. '.' .. ARGV[2]
redis.call('SET', KEYS[4], token, 'PX', ttl)
redis.call('HSET', KEYS[2], 'state', 'running', 'token', token, 'started_at', now, 'worker', ARGV[3],
  'timeout_ms', ARGV[4])
redis.call('HSET', KEYS[3], id, now)
local busy = cjson.decode(ARGV[9])
busy.attempt = attempt
busy.started_at = now
redis.call('SET', KEYS[10], cjson.encode(busy), 'PX', tonumber(ARGV[10]))
return {'run', token, attempt, now, tonumber(redis.call('HGET', KEYS[2], 'created_at') or '-1')}
