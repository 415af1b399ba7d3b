-- Queue the next chunk of a sealed run's jobs (run_submit.lua staged them, unqueued), from the
-- run's cursor `queued_to`: each job still `queued` is either skipped — a completed job of the same
-- user and kind with the same input hash is in retention (done:<kind>:<user>:<hash> names it) and
-- the run is not `overwrite` — or queued: its staging expiry ends and it goes through the user's
-- fair entry and backlog of its class (lib/fairness queue_job: one call per job, so the queuing rule
-- stays lib/fairness's). A skipped job goes through set_state (run counts, job_skipped with
-- `skipped_from`, the run's end if it was the last) and on_terminal (every history index, dependents,
-- retention), like every other terminal state. A job no longer `queued` (a `runs cancel` during the
-- queuing) is left as it is. Any caller may move the cursor (the submitter, its retry, the
-- housekeeper for a submitter that died): each chunk is atomic and starts where the last one ended.
-- KEYS[1] run:<run>  KEYS[2] runjobs:<run>  KEYS[3] events:run:<run>  KEYS[4] runwait:<run>
-- KEYS[5] events  KEYS[6] active  KEYS[7] inready  KEYS[8] backlog:<user>  KEYS[9] ready:hi
-- KEYS[10] ready:lo  KEYS[11] finished  KEYS[12] runqueue  KEYS[13] inready:hi  KEYS[14] hibacklog:<user>
-- KEYS[15] the queue's base '<prefix>:{<queue>}': the jobs' own keys (job:<id>, deps:<id>,
--          done:<kind>:<user>:<hash>, job:<source>) are built on it by lib/keys, under its hash tag
-- ARGV: 1 run id, 2 at most this many jobs, 3 retention s
-- Returns {'more', queued_to} | {'done', total} | {'unsealed'} | {'missing'}
-- needs: base, ctx, events, fairness, keys, state, terminal
local base, run_id, max, retention = KEYS[15], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local h = redis.call('HMGET', KEYS[1], 'user', 'kind', 'priority', 'overwrite', 'queued_to', 'total', 'staging')
if not h[1] then
  redis.call('ZREM', KEYS[12], run_id)
  return {'missing'}
end
if h[7] == '1' then return {'unsealed'} end
local user, kind, prio, overwrite = h[1], h[2], h[3], h[4] == '1'
local from, total = tonumber(h[5]), tonumber(h[6] or '0')
if not from or from >= total then  -- done (or a run made before the cursor: queued at its creation)
  redis.call('ZREM', KEYS[12], run_id)
  return {'done', total}
end
local ids = redis.call('LRANGE', KEYS[2], from, from + max - 1)
local now = now_ms()
local ctx = new_ctx('', '', user, run_id, '', {KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[1], KEYS[3], KEYS[4], KEYS[2]},
  KEYS[10], retention)
with_hi(ctx, {KEYS[9], KEYS[13], KEYS[14]})
local hi = prio == 'interactive'
ctx.interactive = hi
local rstate, counts = nil, nil

for _, id in ipairs(ids) do
  local jk = keyname(base, 'job', id)
  local j = redis.call('HMGET', jk, 'state', 'key', 'input_hash')
  if j[1] == 'queued' then
    ctx.job, ctx.id, ctx.item = jk, id, j[2] or ''
    local src, result = nil, nil
    if not overwrite and j[3] and j[3] ~= '' then
      src = redis.call('GET', keyname(base, 'done', kind, user, j[3]))
      if src then
        local sv = redis.call('HMGET', keyname(base, 'job', src), 'state', 'result')
        if sv[1] == 'completed' then result = sv[2] or '' else src = nil end
      end
    end
    if src then
      ctx.skipped_from = src
      set_state(ctx, 'queued', 'skipped', {'result', result, 'skipped_from', src, 'finished_at', now}, true, now)
      ctx.skipped_from = nil
      on_terminal(jk, keyname(base, 'deps', id), KEYS[10], KEYS[11], id, now, retention)
      rstate = nil  -- the counts moved: read again for the next job_queued
    else
      redis.call('PERSIST', jk)
      if not rstate then
        local st, _, _, c = run_view(ctx)
        rstate, counts = st, c
      end
      emit(ctx, 'job_queued', rstate, counts, 'queued')
      queue_job(ctx, id, hi)
    end
  end
end
local to = from + #ids
redis.call('HSET', KEYS[1], 'queued_to', to)
if to >= total or #ids == 0 then
  redis.call('ZREM', KEYS[12], run_id)
  return {'done', total}
end
return {'more', to}
