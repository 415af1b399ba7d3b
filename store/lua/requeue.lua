-- Put an entry of a dead (or stuck) owner's processing list back at the front of its class's ready
-- list (ready:hi for an interactive job, else ready:lo), in one step
-- that re-checks what the caller decided on: the entry is still there and, for a remote owner, the
-- owner's host is still dead. Never LREM-then-LPUSH from Python (kombu#1405).
-- KEYS[1] processing list  KEYS[2] job:<entry>  KEYS[3] started  KEYS[4] lock:<user>  KEYS[5] wait:<user>
-- KEYS[6] waitusers  KEYS[7] ready:lo  KEYS[8] finished  KEYS[9] deps:<entry>
-- KEYS[10..17] the state block of the job's user and run (Keys.state_keys(user, run))
-- KEYS[18] sem:<kind>:<user>  KEYS[19] semwait:<kind>:<user>  KEYS[20] proclists  KEYS[21] host:<owner host>
-- KEYS[22] ready:hi  KEYS[23] the queue's base '<prefix>:{<queue>}' (lib/keys: names read from data)
-- ARGV: 1 entry, 2 reason crash|drain|deadline|unclaim, 3 owner incarnation that must be gone ('' =
--       the caller saw the death itself), 4 crash cap, 5 lock TTL ms, 6 retention s, 7 user,
--       8 '1' if the list is dead (drop it from proclists once empty), 9 the claim stamp (ms) the
--       caller judged too old ('' = none): another stamp now means the entry was started (or
--       claimed again) since, so its attempt is young and is left alone
-- Returns {'alive'} | {'gone'} | {'requeued'} | {'failed'} (crash cap reached) | {'raw'}
-- needs: base, ctx, classes, keys, lock, state, terminal
local entry, reason = ARGV[1], ARGV[2]
if ARGV[3] ~= '' and redis.call('GET', KEYS[21]) == ARGV[3] then return {'alive'} end
if (ARGV[9] or '') ~= '' and tonumber(redis.call('HGET', KEYS[3], entry)) ~= tonumber(ARGV[9]) then
  return {'alive'}
end

local function tidy()
  if ARGV[8] == '1' and redis.call('LLEN', KEYS[1]) == 0 then redis.call('HDEL', KEYS[20], KEYS[1]) end
end

if not redis.call('LPOS', KEYS[1], entry) then tidy() return {'gone'} end
-- A duplicate entry of a running job (left in our list by a failover, found by Slot.reconcile or a
-- NoLease 'unclaim'; or in a dead slot's or dead host's list) whose attempt is owned elsewhere: then
-- only our entry goes ('gone'): the job, its lock, its state and its `started` stamp are that
-- attempt's. The attempt names its processing list (`proc`, set by start_job with the state): when
-- that is not our list and still holds the entry, that list owns the job: a live slot settles it, a
-- dead one's list is requeued by its own death path or the reaper, so nothing is stranded. This
-- tells a worker's incarnations apart (one worker id, one busy key, a list each). Without the entry
-- in that list (or with it our own) the job is requeued as before: a running job must keep an entry
-- in some list (a `proc` that is no processing list of this base, lib/keys proc_parts, is none).
-- A job started before `proc` existed has none: for it, the older evidence: its `worker` is not
-- this list's (KEYS[1] = <base>:proc:<host>:<incarnation>:<slot>.<n>, worker <host>-slot<slot>) and
-- that worker's busy state (busy:<worker>, lib/keys on KEYS[23]: one cluster slot) names the job
-- at its current `attempts`.
local function owned_elsewhere(proc, worker, attempts)
  if proc and proc ~= '' then
    return proc ~= KEYS[1] and proc_parts(KEYS[23], proc) and redis.call('LPOS', proc, entry) and true or false
  end
  local a = tonumber(attempts)
  if not worker or worker == '' or not a then return false end
  local host, _, slot = proc_parts(KEYS[23], KEYS[1])
  if not host or worker == host .. '-slot' .. slot then return false end
  local cur = redis.call('GET', keyname(KEYS[23], 'busy', worker))
  if not cur then return false end
  local ok, st = pcall(cjson.decode, cur)
  return ok and type(st) == 'table' and st.job_id == entry and tonumber(st.attempt) == a
end

redis.call('LREM', KEYS[1], 1, entry)
local j = redis.call('HMGET', KEYS[2], 'state', 'token', 'run', 'key', 'conc', 'worker', 'attempts', 'proc',
  'priority')
local ready = {lo = KEYS[7], hi = KEYS[22]}
local state = j[1]
if state == 'running' and owned_elsewhere(j[8], j[6], j[7]) then tidy() return {'gone'} end
redis.call('HDEL', KEYS[3], entry)
if not state then
  -- A raw producer entry or an expired job: the next claim decodes or dead-letters it.
  redis.call('RPUSH', KEYS[7], entry)
  tidy()
  return {'raw'}
end
if TERMINAL[state] then tidy() return {'gone'} end
if state == 'running' then
  local now = now_ms()
  local ctx = state_ctx(10, KEYS[2], entry, ARGV[7], j[3], j[4], KEYS[7], ARGV[6])
  ctx.ready_hi = KEYS[22]
  release_held(j[5], j[2], KEYS[4], KEYS[5], KEYS[6], ready, ARGV[7], tonumber(ARGV[5]), KEYS[18], KEYS[19])
  redis.call('HINCRBY', KEYS[2], 'interruptions', 1)
  if reason ~= 'drain' and reason ~= 'unclaim' then
    local crashes = redis.call('HINCRBY', KEYS[2], 'crashes', 1)
    if crashes >= tonumber(ARGV[4]) then
      set_state(ctx, state, 'failed', {'finished_at', now, 'token', '',
        'error', err_json('crash_cap', 'interrupted ' .. crashes .. ' times (' .. reason .. '); pool.crash_cap is ' .. ARGV[4])},
        false, now)
      on_terminal(KEYS[2], KEYS[9], ready, KEYS[8], entry, now, ARGV[6])
      tidy()
      return {'failed'}
    end
  end
  set_state(ctx, state, 'queued', {'token', ''}, false, now)
end
push_front(ready, j[9] == 'interactive' and ('!' .. entry) or entry)
tidy()
return {'requeued'}
