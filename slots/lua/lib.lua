-- Shared prelude, prepended by slots/scripts.py to every script (Redis has no include).
-- Defines no keys of its own: every function takes the keys its caller received in KEYS.
--
-- Every job state change goes through set_state (one place): the job's `state`, the per-user
-- `active` count, the user's fair entry (fairness), the run's counts and state, max_parallel
-- releases, and the event written to the run's stream and the queue's `events` stream, all in
-- the caller's atomic step, so none of them can drift from the job hashes.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local TERMINAL = {completed = true, failed = true, cancelled = true, skipped = true, dead = true}
-- A job state's bucket in the run's counts (`dead` counts as failed, CONTRACT "Runs").
local RUN_COUNT = {queued = 'queued', waiting = 'waiting', running = 'running', completed = 'completed',
  failed = 'failed', dead = 'failed', cancelled = 'cancelled', skipped = 'skipped'}
local EVENT_TYPE = {queued = 'job_queued', waiting = 'job_waiting', running = 'job_started',
  completed = 'job_completed', failed = 'job_failed', dead = 'job_failed', cancelled = 'job_cancelled',
  skipped = 'job_skipped'}
-- The run stream carries the contract's types only; job_queued / job_waiting go to `events` alone.
local RUN_STREAM = {job_started = true, job_completed = true, job_failed = true, job_cancelled = true,
  job_skipped = true, job_progress = true, run_started = true, run_finished = true}
local COUNTS = {'total', 'queued', 'waiting', 'running', 'completed', 'failed', 'cancelled', 'skipped'}
local FINAL_RUN = {completed = true, partial_success = true, failed = true, cancelled = true}
local RUN_MAXLEN, QUEUE_MAXLEN = '10000', '100000'

local function err_json(kind, message)
  return cjson.encode({kind = kind, message = message})
end

-- The context of one job for set_state: its key, id, user, run id ('' = plain job), item key, and
-- the 8-key state block at KEYS[i..i+7] (keys.py Keys.state_keys): events, active, inready,
-- backlog:<user>, run:<run>, events:run:<run>, runwait:<run>, runjobs:<run>.
local function state_ctx(i, job_key, id, user, run_id, item_key, ready_lo, retention_s)
  return {job = job_key, id = id, user = user or '', run_id = run_id or '', item = item_key or '',
    events = KEYS[i], active = KEYS[i + 1], inready = KEYS[i + 2], backlog = KEYS[i + 3],
    run = KEYS[i + 4], runev = KEYS[i + 5], runwait = KEYS[i + 6], runjobs = KEYS[i + 7],
    ready_lo = ready_lo, retention = tonumber(retention_s) or 604800}
end

-- --- fairness: one "fair" entry per user in ready:lo, the rest in backlog:<user> ---------------

-- A user with nothing running goes to the pop end (the front): it starts on the next free slot
-- even behind another user's long run; else to the back, behind every other user's turn.
local function push_fair(ctx, id)
  local n = tonumber(redis.call('HGET', ctx.active, ctx.user) or '0')
  if n <= 0 then redis.call('RPUSH', ctx.ready_lo, id) else redis.call('LPUSH', ctx.ready_lo, id) end
end

-- Queue a new (or retried) bulk job: the user's fair entry when it has none, else its backlog.
local function queue_bulk(ctx, id)
  if redis.call('HSETNX', ctx.inready, ctx.user, id) == 1 then
    push_fair(ctx, id)
  else
    redis.call('RPUSH', ctx.backlog, id)
  end
end

-- The user's fair entry was consumed (started, ended, or parked behind a dependency): the next of
-- its backlog takes its place.
local function topup(ctx)
  local nxt = redis.call('LPOP', ctx.backlog)
  if nxt then
    redis.call('HSET', ctx.inready, ctx.user, nxt)
    push_fair(ctx, nxt)
  else
    redis.call('HDEL', ctx.inready, ctx.user)
  end
end

local function drop_fair(ctx)
  if redis.call('HGET', ctx.inready, ctx.user) == ctx.id then topup(ctx) end
end

-- --- events and runs ---------------------------------------------------------------------------

local function run_view(ctx)
  local v = redis.call('HMGET', ctx.run, 'state', 'cancel', 'max_parallel', unpack(COUNTS))
  local counts = {}
  for i, name in ipairs(COUNTS) do counts[name] = tonumber(v[i + 3] or '0') or 0 end
  return v[1] or 'pending', v[2] == '1', tonumber(v[3] or '0') or 0, counts
end

-- One event: {type, run_id, state, counts, job_id, key, job_state} (+ extra fields), field `e`.
-- Readers add `id` (the stream id). Plain jobs: run_id, state and counts are null.
local function emit(ctx, etype, run_state, counts, job_state, extra)
  local ev = {type = etype, run_id = ctx.run_id ~= '' and ctx.run_id or cjson.null,
    state = run_state or cjson.null, counts = counts or cjson.null,
    job_id = job_state and ctx.id or cjson.null, key = (job_state and ctx.item ~= '') and ctx.item or cjson.null,
    job_state = job_state or cjson.null}
  if extra then for k, v in pairs(extra) do ev[k] = v end end
  local body = cjson.encode(ev)
  if ctx.run_id ~= '' and RUN_STREAM[etype] then
    redis.call('XADD', ctx.runev, 'MAXLEN', '~', RUN_MAXLEN, '*', 'e', body)
  end
  if etype ~= 'job_progress' or ctx.run_id == '' then
    redis.call('XADD', ctx.events, 'MAXLEN', '~', QUEUE_MAXLEN, '*', 'e', body)
  end
end

-- CONTRACT: cancelled if `runs cancel` came while jobs remained; else completed if none failed or
-- was cancelled; failed if none completed or was skipped; else partial_success.
local function final_state(cancel, c)
  if cancel then return 'cancelled' end
  if c.failed == 0 and c.cancelled == 0 then return 'completed' end
  if c.completed + c.skipped == 0 then return 'failed' end
  return 'partial_success'
end

local function finish_run(ctx, state, counts, now)
  redis.call('HSET', ctx.run, 'state', state, 'finished_at', now)
  for _, k in ipairs({ctx.run, ctx.runjobs, ctx.runwait}) do redis.call('EXPIRE', k, ctx.retention) end
  emit(ctx, 'run_finished', state, counts, nil)
  redis.call('EXPIRE', ctx.runev, ctx.retention)
end

-- --- the one state change ------------------------------------------------------------------------

-- Move the job from `old` (nil: a new job) to `new`. `fields`: further HSET field/value pairs.
-- `consume_fair`: the job leaves the user's turn (true on running and terminal states; pass it for
-- a dependency park, never for a park behind the user's lock, semaphore or max_parallel: then the
-- top-up waits until the parked job runs, so one user's jobs never drain through every slot).
-- Returns the run's state ('' for a plain job).
local function set_state(ctx, old, new, fields, consume_fair, now)
  redis.call('HSET', ctx.job, 'state', new, unpack(fields or {}))
  if new == 'running' and old ~= 'running' then
    redis.call('HINCRBY', ctx.active, ctx.user, 1)
  elseif old == 'running' and new ~= 'running' then
    redis.call('HINCRBY', ctx.active, ctx.user, -1)
  end
  if consume_fair == nil then consume_fair = new == 'running' or TERMINAL[new] end
  if consume_fair then drop_fair(ctx) end
  if ctx.run_id == '' then
    emit(ctx, EVENT_TYPE[new], nil, nil, new)
    return ''
  end
  local o, n = RUN_COUNT[old or ''], RUN_COUNT[new]
  if o ~= n then
    if o then redis.call('HINCRBY', ctx.run, o, -1) end
    redis.call('HINCRBY', ctx.run, n, 1)
  end
  local rstate, cancel, maxp, counts = run_view(ctx)
  if new == 'running' and rstate == 'pending' then
    rstate = 'running'
    redis.call('HSET', ctx.run, 'state', rstate)
  end
  if old == 'running' and new ~= 'running' and maxp > 0 then
    local w = redis.call('LPOP', ctx.runwait)
    if w then redis.call('RPUSH', ctx.ready_lo, w) end
  end
  local ended = counts.completed + counts.failed + counts.cancelled + counts.skipped
  local final = nil
  if ended == counts.total and counts.total > 0 and not FINAL_RUN[rstate] then
    final = final_state(cancel, counts)
    rstate = final
  end
  emit(ctx, EVENT_TYPE[new], rstate, counts, new)
  if final then finish_run(ctx, final, counts, now or now_ms()) end
  return rstate
end

-- --- the user's lock (per_user = 1) --------------------------------------------------------------

-- Hand the user's lock to the head of its wait list, reserved for that job ('r:<id>') so a later
-- job of the same user cannot overtake it, and push the head to the front of ready:lo.
-- With no waiter the lock is deleted (a stale waitusers member is dropped by the unstick sweep).
-- Returns the promoted id or false.
local function promote_waiter(lock_key, wait_key, waitusers_key, ready_lo, user, ttl_ms)
  local head = redis.call('LPOP', wait_key)
  if head then
    redis.call('SET', lock_key, 'r:' .. head, 'PX', ttl_ms)
    redis.call('RPUSH', ready_lo, head)
    if redis.call('LLEN', wait_key) == 0 then redis.call('SREM', waitusers_key, user) end
    return head
  end
  redis.call('DEL', lock_key)
  return false
end

-- Compare-and-release: only the attempt whose token holds the lock may free it.
local function release_lock(lock_key, wait_key, waitusers_key, ready_lo, user, token, ttl_ms)
  if token == nil or token == false or token == '' then return false end
  if redis.call('GET', lock_key) ~= token then return false end
  return promote_waiter(lock_key, wait_key, waitusers_key, ready_lo, user, ttl_ms)
end

-- per_user = N > 1: give the token's place back and wake the head waiter (no reservation: N > 1
-- promises no order between the user's jobs).
local function release_sem(sem_key, semwait_key, ready_lo, token)
  if token == nil or token == false or token == '' then return end
  if redis.call('ZREM', sem_key, token) == 1 then
    local w = redis.call('LPOP', semwait_key)
    if w then redis.call('RPUSH', ready_lo, w) end
  end
end

-- Release whatever concurrency the running attempt held (its `conc` field: 'lock' | 'sem' | '').
local function release_held(conc, token, lock_key, wait_key, waitusers_key, ready_lo, user, ttl_ms, sem_key, semwait_key)
  if conc == 'sem' then
    release_sem(sem_key, semwait_key, ready_lo, token)
    return false
  elseif conc == 'none' then
    return false
  end
  return release_lock(lock_key, wait_key, waitusers_key, ready_lo, user, token, ttl_ms)
end

-- Every terminal path (success, failure, cancel, dead-letter, crash cap) goes through here, so no
-- path can forget the dependents (rq#2006) or the history index.
local function on_terminal(job_key, deps_key, ready_lo, finished_key, id, now, retention_s)
  local deps = redis.call('LRANGE', deps_key, 0, -1)
  if #deps > 0 then
    for i = 1, #deps do redis.call('RPUSH', ready_lo, deps[i]) end
    redis.call('DEL', deps_key)
  end
  redis.call('ZADD', finished_key, now, id)
  redis.call('EXPIRE', job_key, retention_s)
end
