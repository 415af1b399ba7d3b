-- lib/lock: the user's lock (per_user = 1) and the kind's semaphore (per_user = N > 1): promotion
-- of the head waiter, compare-and-release.
-- needs: classes

-- Hand the user's lock to the head of its wait list, reserved for that job ('r:<id>') so a later
-- job of the same user cannot overtake it, and push the head to the front of its class's ready list
-- (ready: {lo, hi}, see push_front). The wait list holds interactive waiters first (park_entry), so
-- the head is the user's first interactive waiter, else its first bulk one.
-- With no waiter the lock is deleted (`deleted`: the caller already did), a stale waitusers member
-- is dropped by the unstick sweep. Returns the promoted id or false.
local function promote_waiter(lock_key, wait_key, waitusers_key, ready, user, ttl_ms, deleted)
  local e = redis.call('LPOP', wait_key)
  if e then
    local head = unmark(e)
    redis.call('SET', lock_key, 'r:' .. head, 'PX', ttl_ms)
    push_front(ready, e)
    if redis.call('LLEN', wait_key) == 0 then redis.call('SREM', waitusers_key, user) end
    return head
  end
  if not deleted then redis.call('DEL', lock_key) end
  return false
end

-- Compare-and-release: only the attempt whose token holds the lock may free it. GETDEL reads and
-- frees in one command; a lock that turns out not to be ours (it expired and another attempt took
-- it: rare) is put back at once, with a full TTL.
local function release_lock(lock_key, wait_key, waitusers_key, ready, user, token, ttl_ms)
  if token == nil or token == false or token == '' then return false end
  local cur = redis.call('GETDEL', lock_key)
  if cur ~= token then
    if cur then redis.call('SET', lock_key, cur, 'PX', ttl_ms) end
    return false
  end
  return promote_waiter(lock_key, wait_key, waitusers_key, ready, user, ttl_ms, true)
end

-- per_user = N > 1: give the token's place back and wake the head waiter (interactive first, as
-- in wait:<user>; no reservation: N > 1 promises no order between the user's running jobs).
local function release_sem(sem_key, semwait_key, ready, token)
  if token == nil or token == false or token == '' then return end
  if redis.call('ZREM', sem_key, token) == 1 then
    local w = redis.call('LPOP', semwait_key)
    if w then push_front(ready, w) end
  end
end

-- Release whatever concurrency the running attempt held (its `conc` field: 'lock' | 'sem' | '').
local function release_held(conc, token, lock_key, wait_key, waitusers_key, ready, user, ttl_ms, sem_key, semwait_key)
  if conc == 'sem' then
    release_sem(sem_key, semwait_key, ready, token)
    return false
  elseif conc == 'none' then
    return false
  end
  return release_lock(lock_key, wait_key, waitusers_key, ready, user, token, ttl_ms)
end
