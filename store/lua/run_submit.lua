-- Stage one chunk of a run's items; the chunk that brings the staged count to the total seals the
-- run. A run is written in chunks so no one script holds Redis for long (client.py RUN_CHUNK_*),
-- and it is sealed by its last one so a submission that timed out half way leaves nothing a retry
-- could duplicate: staged jobs are hashes in state `queued` that no ready list holds (nothing of an
-- unsealed run is claimable), and the run hash, runjobs:<run> and every staged job hash expire
-- together at the run's `stage_until` (PEXPIREAT, the same instant for all: an unsealed run that
-- nobody finishes disappears whole). The run is in no index (runs, userruns) before its seal.
-- Idempotent: the run hash keeps the digest of the submission (user, kind, options, items) and
-- `staged`, the count written so far; a chunk is written only at that cursor, so a retry after a
-- lost reply is told where to go on ({'at', staged}) instead of writing anything twice.
-- The seal sets the counts (every job `queued`: skip is decided as each job is queued), adds the
-- run to `runs`, `userruns:<user>` and `runqueue`, writes run_started, and ends the expiry of the
-- run hash and its job list; run_queue.lua then queues the jobs, chunk by chunk (each job's own
-- expiry ends as it is queued).
-- Job ids are `<run>/<n>` (submission.run_job_id): no plain job has a '/', so the only jobs a chunk can
-- find in its way are leftovers; a chunk refuses ({'collision', id}) before writing anything, and
-- the caller removes what earlier chunks staged (run_abort.lua).
-- KEYS[1] run:<run>  KEYS[2] runjobs:<run>  KEYS[3] runs  KEYS[4] userruns:<user>
-- KEYS[5] events:run:<run>  KEYS[6] events  KEYS[7] runqueue
-- KEYS[8..] per item of the chunk: job:<run>/<n>
-- ARGV: 1 run id, 2 user, 3 kind, 4 priority interactive|bulk, 5 max_parallel (0 = none),
--       6 overwrite '1'|'0', 7 retention s, 8 digest, 9 total items, 10 index of the chunk's first item
--       (0-based), 11 staging lifetime ms (from the first chunk),
--       12.. per item, 4 values: job id, item key, payload JSON, input hash ('' none)
-- Returns {'staged', staged} | {'sealed', run state, total} (sealed now or before: nothing more to
--   stage) | {'at', staged} (the cursor is elsewhere: nothing written) | {'expired'} (no run hash and
--   a chunk other than the first) | {'different'} (the run id exists with another digest) |
--   {'collision', job id} | {'legacy', run state} (a run made before digests: returned as it is)
-- needs: base, events
local run_id, user, kind, prio = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local retention, digest, total, start = tonumber(ARGV[7]), ARGV[8], tonumber(ARGV[9]), tonumber(ARGV[10])
local m = #KEYS - 7
local h = redis.call('HMGET', KEYS[1], 'created_at', 'digest', 'staging', 'staged', 'state', 'total', 'stage_until')
local now = now_ms()
local created, until_ms = tonumber(h[1]), tonumber(h[7])
if created then
  if not h[2] then return {'legacy', h[5] or ''} end
  if h[2] ~= digest then return {'different'} end
  if h[3] ~= '1' then return {'sealed', h[5] or '', tonumber(h[6] or '0')} end
  if tonumber(h[4]) ~= start then return {'at', tonumber(h[4])} end
elseif start ~= 0 then
  return {'expired'}
end
for i = 1, m do
  if redis.call('EXISTS', KEYS[7 + i]) == 1 then return {'collision', ARGV[12 + 4 * (i - 1)]} end
end
if not created then
  created, until_ms = now, now + tonumber(ARGV[11])
  redis.call('HSET', KEYS[1], 'id', run_id, 'user', user, 'kind', kind, 'state', 'pending', 'priority', prio,
    'max_parallel', ARGV[5], 'overwrite', ARGV[6], 'created_at', created, 'digest', digest, 'staging', '1',
    'staged', 0, 'stage_until', until_ms)
  redis.call('PEXPIREAT', KEYS[1], until_ms)
end

local ids = {}
for i = 1, m do
  local a = 12 + 4 * (i - 1)
  local jk = KEYS[7 + i]
  ids[i] = ARGV[a]
  redis.call('HSET', jk, 'id', ARGV[a], 'kind', kind, 'user', user, 'payload', ARGV[a + 2], 'priority', prio,
    'after', '[]', 'state', 'queued', 'attempts', 0, 'tries', 0, 'interruptions', 0, 'crashes', 0, 'waits', 0,
    'created_at', created, 'run', run_id, 'key', ARGV[a + 1], 'input_hash', ARGV[a + 3])
  redis.call('PEXPIREAT', jk, until_ms)
end
for i = 1, m, 1000 do redis.call('RPUSH', KEYS[2], unpack(ids, i, math.min(i + 999, m))) end
redis.call('PEXPIREAT', KEYS[2], until_ms)
local staged = start + m
redis.call('HSET', KEYS[1], 'staged', staged)
if staged < total then return {'staged', staged} end

-- The seal: the run exists from here on.
redis.call('HDEL', KEYS[1], 'staging', 'stage_until')
redis.call('HSET', KEYS[1], 'total', total, 'queued', total, 'waiting', 0, 'running', 0, 'completed', 0,
  'failed', 0, 'cancelled', 0, 'skipped', 0, 'queued_to', 0)
redis.call('PERSIST', KEYS[1])
redis.call('PERSIST', KEYS[2])
-- Newest first, exactly: runs sealed in the same millisecond keep their order (a thousandth of a ms
-- after the newest; the score's whole part stays the ms the retention trims by).
local order = now
local newest = redis.call('ZREVRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2]
if newest and tonumber(newest) >= order then order = tonumber(newest) + 0.001 end
redis.call('ZADD', KEYS[3], order, run_id)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - retention * 1000)
redis.call('ZADD', KEYS[4], order, run_id)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - retention * 1000)
redis.call('ZADD', KEYS[7], now, run_id)
local ctx = {user = user, run_id = run_id, item = '', events = KEYS[6], runev = KEYS[5]}
emit(ctx, 'run_started', 'pending', {total = total, queued = total, waiting = 0, running = 0, completed = 0,
  failed = 0, cancelled = 0, skipped = 0}, nil)
redis.call('EXPIRE', KEYS[5], retention)
return {'sealed', 'pending', total}
