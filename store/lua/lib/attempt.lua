-- lib/attempt: the slot's hot path: start, settle, take (settle.lua, take.lua, settle_take.lua).
-- needs: base, keys, ctx, classes, state, lock, terminal

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
--    job_of (id → its job key, for a reserved waiter's class; nil: no takeover)
--    (keys); dep_pairs {{job:<dep>, deps:<dep>, dep id}, …}; id, user, suffix, worker, timeout_ms,
--    lock_ttl, retention, max_waits, busy_state (table: attempt and started_at filled in here),
--    busy_ttl, per_user, now.
-- j: the job's fields (state, cancel, waits, created_at, run, key, token, attempts, started_at; all of
--    them: ctx.row, so set_state writes the change with its event and reads no row back).
-- Returns the start answer (take.lua's header).
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
    on_terminal(T.job, T.deps, T.ready, T.finished, id, now, T.retention, {st, j.user, j.kind})
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
-- requeue go back to their own class's list; markdown: a completed attempt's Markdown, kept under
-- markdown_key, so a fenced attempt's copy is never written). Returns {'ok', promoted id or ''} | {'fenced'}.
local function settle_job(S)
  local id, token, outcome, now = S.id, S.token, S.outcome, S.now
  if not S.keep_busy then clear_busy(S.busy, id) end
  -- (user and kind: the history indexes on_terminal writes; the state is the one set here)
  local j = redis.call('HMGET', S.job, 'token', 'state', 'run', 'key', 'conc', 'priority', 'input_hash', 'user', 'kind')
  if j[1] ~= token then
    redis.call('LREM', S.proc, 0, id)  -- our own list: never leave a stale copy behind
    return {'fenced'}
  end
  local ctx = new_ctx(S.job, id, S.user, j[3], j[4], S.block, S.ready_lo, S.retention)
  ctx.ready_hi = S.ready_hi
  -- (no ctx.row here: the settle's change is written, then its event row read back, as measured
  -- cheaper for Redis than building the row in Lua: bench/bench_pool.py --scripts-ab)
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
    on_terminal(S.job, S.deps, ready, S.finished, id, now, S.retention, {'completed', j[8], j[9]})
    if S.markdown then redis.call('SET', S.markdown_key, S.markdown, 'PX', tonumber(S.retention) * 1000) end
    if j[7] then
      -- A run item: skip trusts the hash this attempt took of what it read, not the submit-time one.
      redis.call('HSET', S.job, 'input_hash', S.input_hash)
      if S.input_hash ~= '' then redis.call('SET', S.done, id, 'PX', tonumber(S.retention) * 1000) end
    end
  elseif outcome == 'failed' or outcome == 'cancelled' then
    if S.counts_try then redis.call('HINCRBY', S.job, 'tries', 1) end
    set_state(ctx, old, outcome, {'error', S.error, 'finished_at', now, 'token', ''}, false, now)
    on_terminal(S.job, S.deps, ready, S.finished, id, now, S.retention, {outcome, j[8], j[9]})
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

-- Claim (or take the given, already claimed entry) and start it. The job's own key names depend on
-- its user, kind and run, known only after the claim: they are built from the queue's base (passed
-- in KEYS) through lib/keys, the Lua mirror of store/keys.py (every name keeps the {queue} hash tag,
-- so all stay in one cluster slot).
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
    local cur = redis.call('HMGET', keyname(A.base, 'job', e), 'state', 'token')
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
  local job_key = keyname(base, 'job', e)
  local flat = redis.call('HGETALL', job_key)
  if #flat == 0 then return {'raw', e} end
  local j = {}
  for i = 1, #flat, 2 do j[flat[i]] = flat[i + 1] end
  if not j.user or not j.kind or not j.state then return {'bad', e, flat} end
  local user, kind = j.user, j.kind
  local dep_pairs = {}
  if j.after and j.after ~= '' and j.after ~= '[]' and j.after ~= 'null' then  -- null: none, as decode_job reads it
    local ok, after = pcall(cjson.decode, j.after)
    if not ok or type(after) ~= 'table' then return {'bad', e, flat} end
    for _, d in ipairs(after) do
      if type(d) ~= 'string' then return {'bad', e, flat} end
      dep_pairs[#dep_pairs + 1] = {keyname(base, 'job', d), keyname(base, 'deps', d), d}
    end
  end
  local lim = A.limits[kind] or A.limits['*']
  local ctx = new_ctx(job_key, e, user, j.run, j.key, state_keys(base, user, j.run), F.lo, A.retention)
  with_hi(ctx, {F.hi, F.inready_hi, keyname(base, 'hibacklog', user)})
  ctx.interactive = j.priority == 'interactive'
  ctx.row = j  -- every field, as read: set_state reads no row back
  local T = {proc = F.proc, job = job_key, started = F.started, lock = keyname(base, 'lock', user),
    wait = keyname(base, 'wait', user), waitusers = F.waitusers, ready = {lo = F.lo, hi = F.hi}, finished = F.finished,
    deps = keyname(base, 'deps', e), ctx = ctx, sem = keyname(base, 'sem', kind, user),
    semwait = keyname(base, 'semwait', kind, user), busy = F.busy, dep_pairs = dep_pairs,
    job_of = function(x) return keyname(base, 'job', x) end,
    id = e, user = user, suffix = A.suffix, worker = A.worker, timeout_ms = lim[1], lock_ttl = A.lock_ttl,
    retention = A.retention, max_waits = A.max_waits, busy_ttl = A.busy_ttl, per_user = lim[2], now = A.now,
    busy_state = {worker = A.worker, pid = A.pid, kind = kind, job_id = e, user = user,
      file = file_of(j.payload), attempt = 0}}
  return {'job', e, flat, start_job(T, j)}
end
