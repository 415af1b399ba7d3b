-- Shared prelude, prepended by slots/queue.py to every script that needs it (Redis has no include).
-- Defines no keys of its own: every function takes the keys its caller received in KEYS.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local TERMINAL = {completed = true, failed = true, cancelled = true, skipped = true, dead = true}

-- Hand the user's lock to the head of its wait list, reserved for that job ('r:<id>') so a later
-- job of the same user cannot overtake it, and push the head to the front of ready:lo.
-- With no waiter the lock is deleted. Returns the promoted id or false.
local function promote_waiter(lock_key, wait_key, waitusers_key, ready_lo, user, ttl_ms)
  local head = redis.call('LPOP', wait_key)
  if head then
    redis.call('SET', lock_key, 'r:' .. head, 'PX', ttl_ms)
    redis.call('RPUSH', ready_lo, head)
    if redis.call('LLEN', wait_key) == 0 then redis.call('SREM', waitusers_key, user) end
    return head
  end
  redis.call('DEL', lock_key)
  redis.call('SREM', waitusers_key, user)
  return false
end

-- Compare-and-release: only the attempt whose token holds the lock may free it.
local function release_lock(lock_key, wait_key, waitusers_key, ready_lo, user, token, ttl_ms)
  if token == nil or token == false or token == '' then return false end
  if redis.call('GET', lock_key) ~= token then return false end
  return promote_waiter(lock_key, wait_key, waitusers_key, ready_lo, user, ttl_ms)
end

-- Every terminal path (success, failure, cancel, dead-letter, crash cap) goes through here, so no
-- path can forget the dependents (rq#2006) or the history index.
local function on_terminal(job_key, deps_key, ready_lo, finished_key, id, now, retention_s)
  local deps = redis.call('LRANGE', deps_key, 0, -1)
  for i = 1, #deps do redis.call('RPUSH', ready_lo, deps[i]) end
  redis.call('DEL', deps_key)
  redis.call('ZADD', finished_key, now, id)
  redis.call('EXPIRE', job_key, retention_s)
end

local function err_json(kind, message)
  return cjson.encode({kind = kind, message = message})
end
