-- Create a run and all its jobs in one step: each job queued (interactive: ready:hi; bulk: through
-- the user's fair entry and backlog) or `skipped` when a completed job of the same kind and user
-- with the same input hash is still in retention (its result copied, `skipped_from` naming it; no
-- slot time). Idempotent on the run id. Writes run_started (and run_finished if every job skipped).
-- The caller (Python) first GETs each item's done:<kind>:<user>:<hash> key (one MGET) to learn the
-- source job ids, and passes job:<source> for each; the script re-reads done:… and skips only while
-- it still names that source (else the item is queued: never a key built here).
-- KEYS[1] run:<run>  KEYS[2] runjobs:<run>  KEYS[3] runs  KEYS[4] userruns:<user>
-- KEYS[5] events:run:<run>  KEYS[6] runwait:<run>  KEYS[7] events  KEYS[8] active  KEYS[9] inready
-- KEYS[10] backlog:<user>  KEYS[11] ready:hi  KEYS[12] ready:lo
-- KEYS[13..] per item, 3 keys: job:<job id>, done:<kind>:<user>:<input hash> (done:- without a hash
--            or with overwrite), job:<source id> (job:- when the MGET found none)
-- KEYS[#KEYS - 1] inready:hi  KEYS[#KEYS] hibacklog:<user> (the interactive class's fair keys)
-- ARGV: 1 run id, 2 user, 3 kind, 4 priority interactive|bulk, 5 max_parallel (0 = none),
--       6 overwrite '1'|'0', 7 retention s,
--       8.. per item, 5 values: job id, item key, payload JSON, input hash ('' none), source id ('' none)
-- Returns {1, state, total, queued, skipped} when created, {0, state, total} when the run id exists.
local run_id, user, kind, prio = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local retention = tonumber(ARGV[7])
if redis.call('EXISTS', KEYS[1]) == 1 then
  local v = redis.call('HMGET', KEYS[1], 'state', 'total')
  return {0, v[1] or '', tonumber(v[2] or '0')}
end
local n = (#KEYS - 14) / 3
local now = now_ms()
local ctx = {user = user, run_id = run_id, item = '', events = KEYS[7], active = KEYS[8], inready = KEYS[9],
  backlog = KEYS[10], run = KEYS[1], runev = KEYS[5], runwait = KEYS[6], runjobs = KEYS[2],
  ready_lo = KEYS[12], retention = retention}
with_hi(ctx, {KEYS[11], KEYS[#KEYS - 1], KEYS[#KEYS]})

-- First pass: which items are skipped (so every event below carries counts that add up to total).
local results, nskip = {}, 0
for i = 0, n - 1 do
  local a = 8 + 5 * i
  local src = ARGV[a + 4]
  if src ~= '' and ARGV[6] ~= '1' and redis.call('GET', KEYS[14 + 3 * i]) == src then
    local sv = redis.call('HMGET', KEYS[15 + 3 * i], 'state', 'result')
    if sv[1] == 'completed' then results[i] = sv[2] or ''; nskip = nskip + 1 end
  end
end
local counts = {total = n, queued = n - nskip, waiting = 0, running = 0, completed = 0, failed = 0,
  cancelled = 0, skipped = nskip}
local final = (n - nskip == 0) and 'completed' or nil
redis.call('HSET', KEYS[1], 'id', run_id, 'user', user, 'kind', kind, 'state', 'pending', 'priority', prio,
  'max_parallel', ARGV[5], 'overwrite', ARGV[6], 'created_at', now, 'total', n, 'queued', n - nskip,
  'waiting', 0, 'running', 0, 'completed', 0, 'failed', 0, 'cancelled', 0, 'skipped', nskip)
-- Newest first, exactly: runs made in the same millisecond keep their order (a thousandth of a ms
-- after the newest; the score's whole part stays the created ms the retention trims by).
local order = now
local newest = redis.call('ZREVRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2]
if newest and tonumber(newest) >= order then order = tonumber(newest) + 0.001 end
redis.call('ZADD', KEYS[3], order, run_id)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - retention * 1000)
redis.call('ZADD', KEYS[4], order, run_id)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - retention * 1000)
emit(ctx, 'run_started', 'pending', counts, nil)
redis.call('EXPIRE', KEYS[5], retention)

local ids, backlog, fair_done = {}, {}, false
for i = 0, n - 1 do
  local jk = KEYS[13 + 3 * i]
  local a = 8 + 5 * i
  local id, key, payload, hash, src = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  ids[#ids + 1] = id
  ctx.job, ctx.id, ctx.item = jk, id, key
  local common = {'id', id, 'kind', kind, 'user', user, 'payload', payload, 'priority', prio, 'after', '[]',
    'attempts', 0, 'tries', 0, 'interruptions', 0, 'crashes', 0, 'waits', 0, 'created_at', now,
    'run', run_id, 'key', key, 'input_hash', hash}
  if results[i] then
    redis.call('HSET', jk, 'state', 'skipped', 'result', results[i], 'skipped_from', src, 'finished_at', now,
      unpack(common))
    redis.call('EXPIRE', jk, retention)
    emit(ctx, 'job_skipped', 'pending', counts, 'skipped')
  else
    redis.call('HSET', jk, 'state', 'queued', unpack(common))
    emit(ctx, 'job_queued', 'pending', counts, 'queued')
    if not fair_done then
      queue_job(ctx, id, prio == 'interactive')  -- the user's fair entry of the class, else its backlog
      fair_done = true
    else
      backlog[#backlog + 1] = id  -- the user's turn is taken (by now, surely): straight to its backlog
    end
  end
end
for i = 1, #ids, 1000 do redis.call('RPUSH', KEYS[2], unpack(ids, i, math.min(i + 999, #ids))) end
local _, _, backlog_key = fair_keys(ctx, prio == 'interactive')
for i = 1, #backlog, 1000 do redis.call('RPUSH', backlog_key, unpack(backlog, i, math.min(i + 999, #backlog))) end
if prio == 'interactive' and n > nskip and redis.call('LINDEX', KEYS[12], -1) ~= '~wake' then
  redis.call('RPUSH', KEYS[12], '~wake')
end
if final then finish_run(ctx, final, counts, now) end
return {1, final or 'pending', n, n - nskip, nskip}
