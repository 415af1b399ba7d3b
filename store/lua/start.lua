-- Start a job already in the processing list, with every key given by the caller (the logic is
-- lib/attempt.lua start_job, shared with take.lua and settle_take.lua, which the slot itself uses):
-- stamp, cancel check, dependencies, max_parallel, the kind's per-user concurrency (lock,
-- semaphore or none) or park, attempt token, and the state change (lib/state.lua set_state).
-- KEYS[1] processing list  KEYS[2] job:<id>  KEYS[3] started  KEYS[4] lock:<user>  KEYS[5] wait:<user>
-- KEYS[6] waitusers  KEYS[7] ready:lo  KEYS[8] finished  KEYS[9] deps:<id>
-- KEYS[10..17] the state block of the job's user and run (Keys.state_keys(user, run))
-- KEYS[18] sem:<kind>:<user>  KEYS[19] semwait:<kind>:<user>  KEYS[20] busy:<worker id>
-- KEYS[21..23] the interactive class's keys (Keys.hi_keys(user)): ready:hi, inready:hi, hibacklog:<user>
-- KEYS[24..] pairs (job:<dep>, deps:<dep>) for each `after` dependency
-- ARGV: 1 id, 2 random token suffix (the same on a retry of the same claim), 3 worker id, 4 timeout ms, 5 lock TTL ms, 6 retention s,
--       7 max waits, 8 user, 9 the slot's busy state as JSON (records.BusyState; attempt and started_at
--       are filled in here), 10 busy-state TTL ms (longest timeout + 120 s), 11 the kind's per_user
--       (1: the user's lock, as every per_user = 1 kind shares it; 0: no limit; N > 1: a semaphore
--       of N per kind and user)
-- Busy state is written only on 'run', i.e. once the slot holds the user's lock, in the same step.
-- Parks: behind an unfinished dependency (the user's turn passes to its next job), behind the
-- user's lock or semaphore, or behind the run's max_parallel (the user's turn stays with this job).
-- Returns {'run', token, attempt, started_at, created_at or -1} |
--         {'parked', 'user'|'dependency'|'run', user or dep id or run id} |
--         {'ended', state, error kind, message} | {'stale', state} | {'missing'}
--         (decoded by slots/queue.py into Run | Parked | Ended | Stale | Missing)
-- needs: base, ctx, attempt
local j = redis.call('HMGET', KEYS[2], 'state', 'cancel', 'waits', 'created_at', 'run', 'key', 'token',
  'attempts', 'started_at', 'priority')
if not j[1] then return {'missing'} end
local id, user = ARGV[1], ARGV[8]
-- Only an entry in the caller's own list: one the reaper took back, a failover lost or a lost
-- 'parked' reply already moved is someone else's to start (or already parked).
if not redis.call('LPOS', KEYS[1], id) then return {'stale', j[1]} end
local dep_pairs = {}
for i = 24, #KEYS, 2 do
  dep_pairs[#dep_pairs + 1] = {KEYS[i], KEYS[i + 1], string.match(KEYS[i], ':job:(.*)$')}
end
local now = now_ms()
return start_job({proc = KEYS[1], job = KEYS[2], started = KEYS[3], lock = KEYS[4], wait = KEYS[5],
  waitusers = KEYS[6], ready = {lo = KEYS[7], hi = KEYS[21]}, finished = KEYS[8], deps = KEYS[9],
  ctx = with_hi(state_ctx(10, KEYS[2], id, user, j[5], j[6], KEYS[7], ARGV[6]), 21), sem = KEYS[18], semwait = KEYS[19],
  busy = KEYS[20], dep_pairs = dep_pairs, id = id, user = user, suffix = ARGV[2], worker = ARGV[3],
  timeout_ms = ARGV[4], lock_ttl = tonumber(ARGV[5]), retention = ARGV[6], max_waits = tonumber(ARGV[7]),
  busy_state = cjson.decode(ARGV[9]), busy_ttl = tonumber(ARGV[10]), per_user = tonumber(ARGV[11] or '1'),
  now = now},
  {state = j[1], cancel = j[2], waits = j[3], created_at = j[4], run = j[5], key = j[6], token = j[7],
   attempts = j[8], started_at = j[9], priority = j[10]})
