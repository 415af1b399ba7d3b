-- Shared prelude, prepended by store/scripts.py to every script (Redis has no include).
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
-- The run streams are capped here; the queue-wide stream is trimmed by the housekeeper only
-- (supervisor/stream_trim.py), below what every consumer group has acknowledged.
local RUN_MAXLEN = '10000'
-- A queue-wide job event carries what a row of the platform's table needs (CONTRACT "Events consumers")
local ROW_FIELDS = {'attempts', 'tries', 'worker', 'error', 'created_at', 'started_at', 'finished_at', 'user', 'kind'}

local function err_json(kind, message)
  return cjson.encode({kind = kind, message = message})
end

-- The context of one job for set_state: its key, id, user, run id ('' = plain job), item key, and
-- its state block: events, active, inready, backlog:<user>, run:<run>, events:run:<run>,
-- runwait:<run>, runjobs:<run> (b: a table of those eight names, in that order).
-- The interactive class's own fair keys (ready:hi, inready:hi, hibacklog:<user>) are set by
-- with_hi; a script without them can queue and consume bulk turns only.
local function new_ctx(job_key, id, user, run_id, item_key, b, ready_lo, retention_s)
  return {job = job_key, id = id, user = user or '', run_id = run_id or '', item = item_key or '',
    events = b[1], active = b[2], inready = b[3], backlog = b[4],
    run = b[5], runev = b[6], runwait = b[7], runjobs = b[8],
    ready_lo = ready_lo, retention = tonumber(retention_s) or 604800}
end

-- The same, with the state block at KEYS[i..i+7] (keys.py Keys.state_keys).
local function state_ctx(i, job_key, id, user, run_id, item_key, ready_lo, retention_s)
  return new_ctx(job_key, id, user, run_id, item_key,
    {KEYS[i], KEYS[i + 1], KEYS[i + 2], KEYS[i + 3], KEYS[i + 4], KEYS[i + 5], KEYS[i + 6], KEYS[i + 7]},
    ready_lo, retention_s)
end

-- Add the interactive class's keys to ctx: ready:hi, inready:hi, hibacklog:<user>, from KEYS[i..i+2]
-- (keys.py Keys.hi_keys) or, with i a table, from it.
local function with_hi(ctx, i)
  local t = type(i) == 'table' and i or {KEYS[i], KEYS[i + 1], KEYS[i + 2]}
  ctx.ready_hi, ctx.inready_hi, ctx.backlog_hi = t[1], t[2], t[3]
  return ctx
end

-- --- classes: interactive before bulk, each in its order -----------------------------------------

-- A slot idles blocked on ready:lo; a wake token at its pop end makes one look at ready:hi. Every
-- push onto ready:hi leaves one (never two in a row).
local function wake(ready_lo)
  if redis.call('LINDEX', ready_lo, -1) ~= '~wake' then redis.call('RPUSH', ready_lo, '~wake') end
end

-- An entry parked in a wait list (wait:<user>, semwait:<kind>:<user>, runwait:<run>) carries its
-- class: '!' .. id for an interactive job, the id for a bulk one (job ids never hold '!'; the
-- `delayed` zset's convention). unmark: the id and whether it is interactive.
local function unmark(e)
  if string.sub(e, 1, 1) == '!' then return string.sub(e, 2), true end
  return e, false
end

-- Insert e behind a wait list's interactive entries, before its first bulk one (the lists hold a
-- few entries: a user's parked turns, not its backlog).
local function insert_before_bulk(list, e)
  local last = redis.call('LINDEX', list, -1)
  if not last or string.sub(last, 1, 1) == '!' then redis.call('RPUSH', list, e) return end
  for _, x in ipairs(redis.call('LRANGE', list, 0, -1)) do
    if string.sub(x, 1, 1) ~= '!' then
      redis.call('LINSERT', list, 'BEFORE', x, e)
      return
    end
  end
end

-- Park in a wait list in promotion order: the list's interactive entries first, each class FIFO.
local function park_entry(list, id, interactive)
  if interactive then insert_before_bulk(list, '!' .. id) else redis.call('RPUSH', list, id) end
end

-- LREM an id from a wait list in either class's spelling; returns how many went.
local function unpark(list, id)
  return redis.call('LREM', list, 0, id) + redis.call('LREM', list, 0, '!' .. id)
end

-- Put a promoted or released entry (marked as park_entry marks it) at the front (pop end) of its
-- class's ready list: ready is {lo = ready:lo, hi = ready:hi} (hi nil: a caller without ready:hi
-- puts every entry on ready:lo). Returns the id.
local function push_front(ready, e)
  local id, hi = unmark(e)
  if hi and ready.hi then
    redis.call('RPUSH', ready.hi, id)
    wake(ready.lo)
  else
    redis.call('RPUSH', ready.lo, id)
  end
  return id
end

-- --- fairness: one "fair" entry per user and class in its ready list, the rest in its backlog ----
-- bulk: ready:lo, inready, backlog:<user>; interactive: ready:hi, inready:hi, hibacklog:<user>.

local function fair_keys(ctx, hi)
  if hi then return ctx.ready_hi, ctx.inready_hi, ctx.backlog_hi end
  return ctx.ready_lo, ctx.inready, ctx.backlog
end

-- A user with nothing running goes to the pop end (the front): it starts on the next free slot
-- even behind another user's long run; else to the back, behind every other user's turn.
local function push_fair(ctx, hi, id)
  local ready = fair_keys(ctx, hi)
  -- set_state remembers the count its HINCRBY returned: no second read of the same field.
  local n = ctx.n_active or tonumber(redis.call('HGET', ctx.active, ctx.user) or '0')
  if n <= 0 then redis.call('RPUSH', ready, id) else redis.call('LPUSH', ready, id) end
  if hi then wake(ctx.ready_lo) end
end

-- Queue a new (or retried) job of its class (hi: interactive, which needs with_hi): the user's
-- fair entry of that class when it has none, else the back of its backlog.
local function queue_job(ctx, id, hi)
  local _, inready, backlog = fair_keys(ctx, hi)
  if redis.call('HSETNX', inready, ctx.user, id) == 1 then
    push_fair(ctx, hi, id)
  else
    redis.call('RPUSH', backlog, id)
  end
end

local function queue_bulk(ctx, id)
  queue_job(ctx, id, false)
end

-- The user's fair entry of a class was consumed (started, ended, or parked behind a dependency):
-- the next of that class's backlog takes its place.
local function topup(ctx, hi)
  local ready, inready, backlog = fair_keys(ctx, hi)
  local nxt
  if ctx.n_active then
    -- The user's running count is known (set_state's HINCRBY): one LMOVE pops and places it.
    nxt = redis.call('LMOVE', backlog, ready, 'LEFT', ctx.n_active <= 0 and 'RIGHT' or 'LEFT')
    if nxt then
      redis.call('HSET', inready, ctx.user, nxt)
      if hi then wake(ctx.ready_lo) end
    end
  else
    nxt = redis.call('LPOP', backlog)
    if nxt then
      redis.call('HSET', inready, ctx.user, nxt)
      push_fair(ctx, hi, nxt)
    end
  end
  if not nxt then redis.call('HDEL', inready, ctx.user) end
end

-- The job leaves its user's turn: whichever class's fair entry it is passes to that class's next.
-- ctx.interactive (true / false; nil: unknown) spares the start path the other class's HGET.
local function drop_fair(ctx)
  if ctx.inready_hi and ctx.interactive ~= false and redis.call('HGET', ctx.inready_hi, ctx.user) == ctx.id then
    topup(ctx, true)
  elseif ctx.interactive ~= true and redis.call('HGET', ctx.inready, ctx.user) == ctx.id then
    topup(ctx, false)
  end
end

-- --- events and runs ---------------------------------------------------------------------------

local function run_view(ctx)
  local v = redis.call('HMGET', ctx.run, 'state', 'cancel', 'max_parallel', unpack(COUNTS))
  local counts = {}
  for i, name in ipairs(COUNTS) do counts[name] = tonumber(v[i + 3] or '0') or 0 end
  return v[1] or 'pending', v[2] == '1', tonumber(v[3] or '0') or 0, counts
end

-- One event: {type, run_id, state, counts, job_id, key, job_state} (+ extra fields), field `e`.
-- Readers add `id` (the stream id). Plain jobs: run_id, state and counts are null. A job's state
-- change also carries the job's row fields (ROW_FIELDS, as the hash has them after the change:
-- times in ms), and its queue-wide stream id is kept in the job's `event_id` (the row's version).
-- `skipped_from` (job events only): ctx.skipped_from, set by the caller that skips a job, else null.
local function emit(ctx, etype, run_state, counts, job_state, extra)
  local ev = {type = etype, run_id = ctx.run_id ~= '' and ctx.run_id or cjson.null,
    state = run_state or cjson.null, counts = counts or cjson.null,
    job_id = job_state and ctx.id or cjson.null, key = (job_state and ctx.item ~= '') and ctx.item or cjson.null,
    job_state = job_state or cjson.null}
  if job_state then ev.skipped_from = ctx.skipped_from or cjson.null end
  local row = job_state and etype ~= 'job_progress'
  if row then
    local v = redis.call('HMGET', ctx.job, unpack(ROW_FIELDS))
    for i, name in ipairs(ROW_FIELDS) do
      local x = v[i]
      if name == 'error' then
        local ok, e = pcall(cjson.decode, x or 'null')
        ev[name] = (ok and type(e) == 'table') and e or cjson.null
      elseif name == 'worker' or name == 'user' or name == 'kind' then
        ev[name] = x or cjson.null
      elseif name == 'attempts' or name == 'tries' then
        ev[name] = tonumber(x or '0') or 0
      else
        ev[name] = x and tonumber(x) or cjson.null
      end
    end
  end
  if extra then for k, v in pairs(extra) do ev[k] = v end end
  local body = cjson.encode(ev)
  if ctx.run_id ~= '' and RUN_STREAM[etype] then
    redis.call('XADD', ctx.runev, 'MAXLEN', '~', RUN_MAXLEN, '*', 'e', body)
  end
  if etype ~= 'job_progress' or ctx.run_id == '' then
    local id = redis.call('XADD', ctx.events, '*', 'e', body)
    if row then redis.call('HSET', ctx.job, 'event_id', id) end
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
    ctx.n_active = redis.call('HINCRBY', ctx.active, ctx.user, 1)
  elseif old == 'running' and new ~= 'running' then
    ctx.n_active = redis.call('HINCRBY', ctx.active, ctx.user, -1)
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
    if w then push_front({lo = ctx.ready_lo, hi = ctx.ready_hi}, w) end
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

-- Every terminal path (success, failure, cancel, dead-letter, crash cap) goes through here, so no
-- path can forget the dependents (rq#2006) or the history indexes. Beside `finished` (id -> finish
-- ms), the same id and score go to `finished:state:<state>`, `finished:user:<user>` and
-- `finished:kind:<kind>` (names built on `finished`'s, so the same hash tag; client/history.py spells
-- them and reads them), so a filtered history page or the failed count is a range read, not a walk
-- of the job hashes. `finished:trim` keeps per index ('state:<s>', 'user:<u>', 'kind:<k>') a score
-- at or below its oldest entry (ZADD LT), so the housekeeper's trim (history.trim) visits only the
-- indexes holding something past the retention. A hash without user or kind (a dead-lettered bad
-- record) is in `finished` only: history cannot decode it anyway.
-- The dependents go back to the front of their class's ready list: `ready` is ready:lo's name or
-- {lo, hi} (push_front).
local function on_terminal(job_key, deps_key, ready, finished_key, id, now, retention_s)
  if type(ready) ~= 'table' then ready = {lo = ready} end
  local deps = redis.call('LRANGE', deps_key, 0, -1)
  if #deps > 0 then
    for i = 1, #deps do push_front(ready, deps[i]) end
    redis.call('DEL', deps_key)
  end
  redis.call('ZADD', finished_key, now, id)
  redis.call('EXPIRE', job_key, retention_s)
  local j = redis.call('HMGET', job_key, 'state', 'user', 'kind')
  local state, user, kind = j[1], j[2], j[3]
  if not (state and user and kind) then return end
  -- (a run job reopened by run_retry.lua left every index then: nothing of its old end is here)
  local s, u, k = 'state:' .. state, 'user:' .. user, 'kind:' .. kind
  redis.call('ZADD', finished_key .. ':' .. s, now, id)
  redis.call('ZADD', finished_key .. ':' .. u, now, id)
  redis.call('ZADD', finished_key .. ':' .. k, now, id)
  redis.call('ZADD', finished_key .. ':trim', 'LT', now, s, now, u, now, k)
end

-- --- the slot's hot path: start, settle, take (start.lua, settle.lua, take.lua, settle_take.lua) --

-- A slot's busy state names this job: delete it (a late clean-up of an old attempt never erases
-- the state of a newer job the same slot already started).
local function clear_busy(busy_key, id)
  local cur = redis.call('GET', busy_key)
  if cur then
    local ok, st = pcall(cjson.decode, cur)
    if not ok or type(st) ~= 'table' or st.job_id == id then redis.call('DEL', busy_key) end
  end
end

-- Start one claimed job: stamp, cancel check, dependencies, max_parallel, the kind's per-user
-- concurrency (lock, semaphore or none) or park, attempt token, state change, busy state.
-- T: proc, job, started, lock, wait, waitusers, ready ({lo, hi}), finished, deps, ctx, sem, semwait, busy,
--    job_of (id → its job key, for a reserved waiter's class; nil: start.lua, no takeover)
--    (keys); dep_pairs {{job:<dep>, deps:<dep>, dep id}, …}; id, user, suffix, worker, timeout_ms,
--    lock_ttl, retention, max_waits, busy_state (table: attempt and started_at filled in here),
--    busy_ttl, per_user, now.
-- j: the job's fields (state, cancel, waits, created_at, run, key, token, attempts, started_at).
-- Returns start.lua's answer (see its header).
local function start_job(T, j)
  local id, user, ttl, now, ctx = T.id, T.user, T.lock_ttl, T.now, T.ctx
  local state = j.state
  local reserved = nil  -- read lazily: only the paths that do not take the lock need it

  local function is_reserved()
    if reserved == nil then reserved = redis.call('GET', T.lock) == 'r:' .. id end
    return reserved
  end

  local function pass_reservation()
    if is_reserved() then promote_waiter(T.lock, T.wait, T.waitusers, T.ready, user, ttl) end
  end

  local function unclaim()
    redis.call('LREM', T.proc, 1, id)
    redis.call('HDEL', T.started, id)
  end

  local function finish(st, kind, msg)
    unclaim()
    set_state(ctx, state, st, {'error', err_json(kind, msg), 'finished_at', now, 'token', ''}, true, now)
    on_terminal(T.job, T.deps, T.ready, T.finished, id, now, T.retention)
    pass_reservation()
    return {'ended', st, kind, msg}
  end

  -- Parked in its class's order (park_entry): promoted interactive first, each class FIFO.
  local function park(list, reason, detail, consume_fair)
    unclaim()
    park_entry(list, id, j.priority == 'interactive')
    set_state(ctx, state, 'waiting', {'waits', (tonumber(j.waits) or 0) + 1}, consume_fair, now)
    return {'parked', reason, detail}
  end

  -- Our own retry after a reply lost to a connection error: the first call did start it.
  if state == 'running' and redis.call('LPOS', T.proc, id) then
    local tok = j.token or ''
    if string.sub(tok, -#T.suffix - 1) == '.' .. T.suffix then
      return {'run', tok, tonumber(j.attempts), tonumber(j.started_at), tonumber(j.created_at or '-1')}
    end
  end
  -- A duplicate entry of a finished or running job (e.g. after a failover): the other copy owns it.
  if TERMINAL[state] or state == 'running' then
    unclaim()
    pass_reservation()
    return {'stale', state}
  end
  if j.cancel == '1' then
    return finish('cancelled', 'cancelled', 'cancelled before it started')
  end
  if (tonumber(j.waits) or 0) >= T.max_waits then
    -- Nothing was killed: not a timeout (ErrorKind.WAITED_TOO_LONG).
    return finish('failed', 'waited_too_long', 'waited ' .. T.max_waits .. ' times for its user or dependencies (pool.max_waits)')
  end

  for _, d in ipairs(T.dep_pairs) do
    local dstate = redis.call('HGET', d[1], 'state')
    if not dstate then
      return finish('failed', 'dependency_failed', 'dependency ' .. d[3] .. ' not found (unknown id, or expired)')
    elseif dstate ~= 'completed' then
      if TERMINAL[dstate] then
        return finish('failed', 'dependency_failed', 'dependency ' .. d[3] .. ' ended ' .. dstate)
      end
      pass_reservation()
      return park(d[2], 'dependency', d[3], true)
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

  local attempt = (tonumber(j.attempts) or 0) + 1
  local token = attempt .. '.' .. T.suffix
  local conc = 'lock'
  if T.per_user == 1 then
    -- Take the lock if it is free (one command: SET NX GET answers what was there instead).
    local prev = redis.call('SET', T.lock, token, 'NX', 'PX', ttl, 'GET')
    if not prev then
      if redis.call('LLEN', T.wait) > 0 then
        -- Free lock but waiters: a promotion was lost. Queue behind them and promote the head now
        -- (which replaces the lock we just set).
        local r = park(T.wait, 'user', user, false)
        redis.call('SADD', T.waitusers, user)
        promote_waiter(T.lock, T.wait, T.waitusers, T.ready, user, ttl)
        return r
      end
    elseif prev == 'r:' .. id then
      redis.call('SET', T.lock, token, 'PX', ttl)  -- reserved for us by the release that promoted us
    elseif j.priority == 'interactive' and T.job_of and string.sub(prev, 1, 2) == 'r:'
        and redis.call('HGET', T.job_of(string.sub(prev, 3)), 'priority') ~= 'interactive' then
      -- The release promoted a bulk waiter before this interactive job of the same user was
      -- claimed (it was queued, not parked): interactive goes first (CONTRACT), so it takes the
      -- lock. The bulk job, still at the front of ready:lo, goes back to the head of the user's
      -- bulk waiters (already claimed by a slot: its start parks it behind this attempt).
      redis.call('SET', T.lock, token, 'PX', ttl)
      local b = string.sub(prev, 3)
      if redis.call('LREM', T.ready.lo, -1, b) > 0 then
        insert_before_bulk(T.wait, b)
        redis.call('SADD', T.waitusers, user)
      end
    else
      redis.call('SADD', T.waitusers, user)
      return park(T.wait, 'user', user, false)
    end
  else
    pass_reservation()
    conc = 'none'
    if T.per_user > 1 then
      conc = 'sem'
      redis.call('ZREMRANGEBYSCORE', T.sem, '-inf', now)
      if redis.call('ZCARD', T.sem) >= T.per_user then
        return park(T.semwait, 'user', user, false)
      end
      redis.call('ZADD', T.sem, now + ttl, token)
    end
  end

  set_state(ctx, state, 'running', {'attempts', attempt, 'token', token, 'started_at', now, 'worker', T.worker,
    'timeout_ms', T.timeout_ms, 'conc', conc, 'proc', T.proc}, true, now)
  redis.call('HSET', T.started, id, now)
  local busy = T.busy_state
  busy.attempt = attempt
  busy.started_at = now
  redis.call('SET', T.busy, cjson.encode(busy), 'PX', T.busy_ttl)
  return {'run', token, attempt, now, tonumber(j.created_at or '-1')}
end

-- Settle one attempt, fenced by its token, and release what it held (S: settle.lua's keys and
-- arguments by name; keep_busy: the caller starts the slot's next job, whose busy state replaces
-- this one, or clears it itself; ready_hi: promoted waiters, released run waiters, dependents and a
-- requeue go back to their own class's list). Returns {'ok', promoted id or ''} | {'fenced'}.
local function settle_job(S)
  local id, token, outcome, now = S.id, S.token, S.outcome, S.now
  if not S.keep_busy then clear_busy(S.busy, id) end
  local j = redis.call('HMGET', S.job, 'token', 'state', 'run', 'key', 'conc', 'priority', 'input_hash')
  if j[1] ~= token then
    redis.call('LREM', S.proc, 0, id)  -- our own list: never leave a stale copy behind
    return {'fenced'}
  end
  local ctx = new_ctx(S.job, id, S.user, j[3], j[4], S.block, S.ready_lo, S.retention)
  ctx.ready_hi = S.ready_hi
  local ready = {lo = S.ready_lo, hi = S.ready_hi}
  local old = j[2]
  local fields = {}
  if not S.launched then
    -- No handler process started (a rejected input): this start is taken back out of 'attempts'.
    redis.call('HINCRBY', S.job, 'attempts', -1)
  end
  redis.call('LREM', S.proc, 1, id)
  redis.call('HDEL', S.started, id)
  local promoted = release_held(j[5], token, S.lock, S.wait, S.waitusers, ready, S.user, S.lock_ttl,
    S.sem, S.semwait)
  -- The fair entry was consumed when the attempt started: nothing of the user's turn to pass on here.
  if outcome == 'completed' then
    set_state(ctx, old, 'completed', {'result', S.result, 'error', '', 'finished_at', now, 'token', ''}, false, now)
    on_terminal(S.job, S.deps, ready, S.finished, id, now, S.retention)
    if j[7] then
      -- A run item: skip trusts the hash this attempt took of what it read, not the submit-time one.
      redis.call('HSET', S.job, 'input_hash', S.input_hash)
      if S.input_hash ~= '' then redis.call('SET', S.done, id, 'PX', tonumber(S.retention) * 1000) end
    end
  elseif outcome == 'failed' or outcome == 'cancelled' then
    if S.counts_try then redis.call('HINCRBY', S.job, 'tries', 1) end
    set_state(ctx, old, outcome, {'error', S.error, 'finished_at', now, 'token', ''}, false, now)
    on_terminal(S.job, S.deps, ready, S.finished, id, now, S.retention)
  elseif outcome == 'retry' then
    redis.call('HINCRBY', S.job, 'tries', 1)
    set_state(ctx, old, 'queued', {'error', S.error, 'token', ''}, false, now)
    redis.call('ZADD', S.delayed, now + S.backoff, j[6] == 'interactive' and ('!' .. id) or id)
  elseif outcome == 'requeue' then
    redis.call('HINCRBY', S.job, 'interruptions', 1)
    set_state(ctx, old, 'queued', {'token', ''}, false, now)
    push_front(ready, j[6] == 'interactive' and ('!' .. id) or id)  -- back to its class, at the front
  else
    return redis.error_reply('unknown outcome ' .. tostring(outcome))
  end
  return {'ok', promoted or ''}
end

-- Move the next entry into the processing list: interactive first, then bulk. A wake token
-- (keys.py Keys.WAKE) is dropped: it only makes a blocked slot look at ready:hi, done here anyway.
-- Never blocks (BLMOVE cannot run in a script): false when both lists are empty.
local function claim_entry(proc, hi, lo)
  local e = redis.call('LMOVE', hi, proc, 'RIGHT', 'LEFT')
  if e then return e end
  for _ = 1, 1000 do
    e = redis.call('LMOVE', lo, proc, 'RIGHT', 'LEFT')
    if e ~= '~wake' then return e end
    redis.call('LPOP', proc)  -- the wake token just landed at our list's left end
  end
  return false
end

-- BusyState.file: the payload's `file`, when it is a string (large payloads are not decoded).
local function file_of(payload)
  if payload and #payload <= 65536 then
    local ok, p = pcall(cjson.decode, payload)
    if ok and type(p) == 'table' and type(p.file) == 'string' then return p.file end
  end
  return cjson.null
end

-- Claim (or take the given, already claimed entry) and start it, building the job's own key names
-- from the queue's base the way store/keys.py spells them (every name keeps the {queue} hash
-- tag, so all stay in one cluster slot; tests/perf_correctness checks the spelling against Keys).
-- F: proc, hi, lo, started, waitusers, finished, events, active, inready, busy, inready_hi (keys).
-- F.host: our host key (its PTTL is the host's lease).
-- A: base, given (entry already in proc, '' = claim), min_lease (ms the lease must have left; 0 = no
--    fence, no check), skip (an id never taken again: the job just
--    settled), retry (an earlier call with this suffix may have landed: adopt what proc holds),
--    suffix, worker, pid, lock_ttl, retention, max_waits, busy_ttl, limits {kind: {timeout ms,
--    per_user}, ['*'] = for kinds not configured}, now.
-- Returns {'empty'} | {'nolease', given entry or ''} | {'raw', entry} (no job hash: a producer's raw entry, or gone) |
--   {'bad', entry, record} (a hash without user or kind: the slot dead-letters it) |
--   {'job', entry, record, start answer}; record = the job hash as read before the start (HGETALL).
local function take_job(F, A)
  local e = A.given
  if A.retry then
    for _, x in ipairs(redis.call('LRANGE', F.proc, 0, -1)) do
      if x ~= A.skip then e = x break end
    end
  end
  if e == '~wake' then
    redis.call('LREM', F.proc, 1, e)
    e = ''
  end
  -- A retry whose first call started this entry (running, our token suffix, still in our list)
  -- adopts that attempt below (start_job); only it is exempt from the lease check.
  local adopting = false
  if A.retry and e and e ~= '' and #e < 512 then
    local cur = redis.call('HMGET', A.base .. ':job:' .. e, 'state', 'token')
    adopting = cur[1] == 'running' and cur[2] and string.sub(cur[2], -#A.suffix - 1) == '.' .. A.suffix
      and redis.call('LPOS', F.proc, e) and true or false
  end
  -- No start on a lapsing lease: our host key (renewed by our supervisor's heartbeat) must outlive
  -- one more poll of the attempt plus its kill, or the attempt could run on after another host's
  -- reaper reclaims it. The entry a BLMOVE gave (or a retry found) stays in our list for the slot
  -- to put back.
  if not adopting and A.min_lease > 0 and redis.call('PTTL', F.host) < A.min_lease then
    return {'nolease', e or ''}
  end
  -- The entry must still be in our list (the reaper may have judged it stuck and taken it back, or
  -- a lost 'parked' reply's release promoted it back to ready): otherwise it is not ours to start.
  if e and e ~= '' and not redis.call('LPOS', F.proc, e) then return {'empty'} end
  if not e or e == '' then
    e = claim_entry(F.proc, F.hi, F.lo)
    if not e then return {'empty'} end
  end
  if #e >= 512 then return {'raw', e} end
  local base = A.base
  local job_key = base .. ':job:' .. e
  local flat = redis.call('HGETALL', job_key)
  if #flat == 0 then return {'raw', e} end
  local j = {}
  for i = 1, #flat, 2 do j[flat[i]] = flat[i + 1] end
  if not j.user or not j.kind or not j.state then return {'bad', e, flat} end
  local user, kind = j.user, j.kind
  local dep_pairs = {}
  if j.after and j.after ~= '' and j.after ~= '[]' then
    local ok, after = pcall(cjson.decode, j.after)
    if not ok or type(after) ~= 'table' then return {'bad', e, flat} end
    for _, d in ipairs(after) do
      if type(d) ~= 'string' then return {'bad', e, flat} end
      dep_pairs[#dep_pairs + 1] = {base .. ':job:' .. d, base .. ':deps:' .. d, d}
    end
  end
  local run = (j.run and j.run ~= '') and j.run or '-'
  local lim = A.limits[kind] or A.limits['*']
  local ctx = new_ctx(job_key, e, user, j.run, j.key,
    {F.events, F.active, F.inready, base .. ':backlog:' .. user, base .. ':run:' .. run,
     base .. ':events:run:' .. run, base .. ':runwait:' .. run, base .. ':runjobs:' .. run},
    F.lo, A.retention)
  with_hi(ctx, {F.hi, F.inready_hi, base .. ':hibacklog:' .. user})
  ctx.interactive = j.priority == 'interactive'
  local T = {proc = F.proc, job = job_key, started = F.started, lock = base .. ':lock:' .. user,
    wait = base .. ':wait:' .. user, waitusers = F.waitusers, ready = {lo = F.lo, hi = F.hi}, finished = F.finished,
    deps = base .. ':deps:' .. e, ctx = ctx, sem = base .. ':sem:' .. kind .. ':' .. user,
    semwait = base .. ':semwait:' .. kind .. ':' .. user, busy = F.busy, dep_pairs = dep_pairs,
    job_of = function(x) return base .. ':job:' .. x end,
    id = e, user = user, suffix = A.suffix, worker = A.worker, timeout_ms = lim[1], lock_ttl = A.lock_ttl,
    retention = A.retention, max_waits = A.max_waits, busy_ttl = A.busy_ttl, per_user = lim[2], now = A.now,
    busy_state = {worker = A.worker, pid = A.pid, kind = kind, job_id = e, user = user,
      file = file_of(j.payload), attempt = 0}}
  return {'job', e, flat, start_job(T, j)}
end
