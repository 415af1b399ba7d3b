-- Retry a run: its failed (and dead; with ARGV[3] '1' also cancelled) jobs are queued again (tries,
-- error and finish reset; attempts kept), through the fairness path of a new job of the run's class. The run goes back
-- to `running` (its cancel flag cleared) and run_started is written again. A run with nothing to
-- retry is left as it is.
-- The caller reads runjobs:<run> (LRANGE) first to pass each job's keys.
-- KEYS[1] run:<run>  KEYS[2] runjobs:<run>  KEYS[3] events:run:<run>  KEYS[4] runwait:<run>
-- KEYS[5] events  KEYS[6] active  KEYS[7] inready  KEYS[8] backlog:<user>  KEYS[9] ready:hi
-- KEYS[10] ready:lo  KEYS[11] finished  KEYS[12] inready:hi  KEYS[13] hibacklog:<user>
-- KEYS[14..] per job of the run: job:<id>
-- ARGV: 1 run id, 2 retention s, 3 '1' to retry cancelled jobs too, 4 user
-- Returns {'retried', n jobs queued again, run state} | {'nothing', run state} | {'missing'}
-- needs: base, ctx, events, fairness, keys, state
local run_id, retention, user = ARGV[1], tonumber(ARGV[2]), ARGV[4]
local v = redis.call('HMGET', KEYS[1], 'state', 'priority')
local rstate, prio = v[1], v[2] or 'bulk'
if not rstate then return {'missing'} end
local want = {failed = true, dead = true}
if ARGV[3] == '1' then want.cancelled = true end
local picked = {}
for i = 14, #KEYS do
  local j = redis.call('HMGET', KEYS[i], 'state', 'id', 'key', 'kind')
  if j[1] and want[j[1]] then
    picked[#picked + 1] = {key = KEYS[i], state = j[1], id = j[2], item = j[3] or '', kind = j[4]}
  end
end
if #picked == 0 then return {'nothing', rstate} end
local now = now_ms()
local ctx = with_hi({user = user, run_id = run_id, events = KEYS[5], active = KEYS[6], inready = KEYS[7],
  backlog = KEYS[8], run = KEYS[1], runev = KEYS[3], runwait = KEYS[4], runjobs = KEYS[2],
  ready_lo = KEYS[10], retention = retention}, {KEYS[9], KEYS[12], KEYS[13]})
redis.call('HSET', KEYS[1], 'state', 'running', 'cancel', '', 'finished_at', '')
for _, k in ipairs({KEYS[1], KEYS[2], KEYS[3], KEYS[4]}) do redis.call('PERSIST', k) end
-- run_started first: a watcher sees the run reopen, then its jobs move.
local _, _, _, c0 = run_view(ctx)
for _, t in ipairs(picked) do
  local b = RUN_COUNT[t.state]
  c0[b] = c0[b] - 1
  c0.queued = c0.queued + 1
end
emit(ctx, 'run_started', 'running', c0, nil)
for _, t in ipairs(picked) do
  ctx.job, ctx.id, ctx.item = t.key, t.id, t.item
  set_state(ctx, t.state, 'queued', {'tries', 0, 'error', '', 'finished_at', '', 'cancel', '', 'token', ''}, false, now)
  redis.call('PERSIST', t.key)
  -- out of the history at once, indexes included (lib/terminal on_terminal): it is not finished now
  redis.call('ZREM', KEYS[11], t.id)
  redis.call('ZREM', finished_index(KEYS[11], 'state:' .. t.state), t.id)
  redis.call('ZREM', finished_index(KEYS[11], 'user:' .. user), t.id)
  if t.kind then redis.call('ZREM', finished_index(KEYS[11], 'kind:' .. t.kind), t.id) end
  queue_job(ctx, t.id, prio == 'interactive')
end
return {'retried', #picked, 'running'}
