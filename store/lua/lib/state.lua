-- lib/state: the one state change.
-- Every job state change goes through set_state (one place): the job's `state`, the per-user
-- `active` count, the user's fair entry (fairness), the run's counts and state, max_parallel
-- releases, and the event written to the run's stream and the queue's `events` stream, all in
-- the caller's atomic step, so none of them can drift from the job hashes.
-- needs: base, fairness, classes, events, runs

-- A job state's bucket in the run's counts (`dead` counts as failed, CONTRACT "Runs").
local RUN_COUNT = {queued = 'queued', waiting = 'waiting', running = 'running', completed = 'completed',
  failed = 'failed', dead = 'failed', cancelled = 'cancelled', skipped = 'skipped'}
local EVENT_TYPE = {queued = 'job_queued', waiting = 'job_waiting', running = 'job_started',
  completed = 'job_completed', failed = 'job_failed', dead = 'job_failed', cancelled = 'job_cancelled',
  skipped = 'job_skipped'}

-- Move the job from `old` (nil: a new job) to `new`. `fields`: further HSET field/value pairs.
-- `consume_fair`: the job leaves the user's turn (true on running and terminal states; pass it for
-- a dependency park, never for a park behind the user's lock, semaphore or max_parallel: then the
-- top-up waits until the parked job runs, so one user's jobs never drain through every slot).
-- With ctx.row (the caller read the job's fields in this step: lib/events row_values) the change is
-- written with its event, in one HSET (no read-back of the row): nothing here reads the job hash.
-- Returns the run's state ('' for a plain job).
local function set_state(ctx, old, new, fields, consume_fair, now)
  local write = nil
  if ctx.row then
    write = {'state', new}
    for _, x in ipairs(fields or {}) do write[#write + 1] = x end
  else
    redis.call('HSET', ctx.job, 'state', new, unpack(fields or {}))
  end
  if new == 'running' and old ~= 'running' then
    ctx.n_active = redis.call('HINCRBY', ctx.active, ctx.user, 1)
  elseif old == 'running' and new ~= 'running' then
    ctx.n_active = redis.call('HINCRBY', ctx.active, ctx.user, -1)
  end
  if consume_fair == nil then consume_fair = new == 'running' or TERMINAL[new] end
  if consume_fair then drop_fair(ctx) end
  if ctx.run_id == '' then
    emit(ctx, EVENT_TYPE[new], nil, nil, new, nil, write)
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
  emit(ctx, EVENT_TYPE[new], rstate, counts, new, nil, write)
  if final then finish_run(ctx, final, counts, now or now_ms()) end
  return rstate
end
