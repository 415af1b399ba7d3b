-- requeue.lua over many entries of one processing list, in one call (the reaper's pass over a dead
-- host's lists, a dead slot's list). Sent after lib.lua and after requeue.lua's own text, unchanged,
-- as the body of `local function requeue_one()` (scripts.batch_text): every entry goes through
-- exactly requeue.lua's logic, the owner re-check included, with KEYS and ARGV set to what
-- Queue.requeue would send for it. One implementation: a fix to requeue.lua is a fix here.
-- The entries are done one after another inside this one atomic step (an order the per-entry calls
-- could also take). The job's own key names are built from the queue's base the way
-- store/keys.py spells them, as take_job does (all keep the {queue} hash tag: one cluster slot);
-- the job's user, kind and run are read here, in the same step as its requeue.
-- KEYS[1] processing list  KEYS[2] started  KEYS[3] waitusers  KEYS[4] ready:lo  KEYS[5] finished
-- KEYS[6] events  KEYS[7] active  KEYS[8] inready  KEYS[9] proclists  KEYS[10] host:<owner host>
-- KEYS[11] ready:hi
-- ARGV: 1 base '<prefix>:{<queue>}', 2 reason, 3 owner incarnation that must be gone ('' = the caller
--       saw the death itself), 4 crash cap, 5 lock TTL ms, 6 retention s, 7 '1' if the list is dead,
--       8.. the entries
-- Returns requeue.lua's verdict per entry, in the entries' order ('alive' | 'gone' | 'requeued' |
-- 'failed' | 'raw').
-- needs: (no lib part)
local F = {unpack(KEYS, 1, 11)}
local base, reason, owner, cap, ttl, retention, dead = unpack(ARGV, 1, 7)
local entries = {}  -- copied first: ARGV is rewritten per entry below
for i = 8, #ARGV do entries[#entries + 1] = ARGV[i] end
local out = {}
for n, e in ipairs(entries) do
  local f = redis.call('HMGET', base .. ':job:' .. e, 'user', 'kind', 'run')
  local user = f[1] or ''
  local kind = (f[2] and f[2] ~= '') and f[2] or '-'
  local run = (f[3] and f[3] ~= '') and f[3] or '-'
  -- requeue.lua's KEYS, in its header's order (Queue._job_keys + proclists + host)
  KEYS[1], KEYS[2], KEYS[3] = F[1], base .. ':job:' .. e, F[2]
  KEYS[4], KEYS[5], KEYS[6] = base .. ':lock:' .. user, base .. ':wait:' .. user, F[3]
  KEYS[7], KEYS[8], KEYS[9] = F[4], F[5], base .. ':deps:' .. e
  KEYS[10], KEYS[11], KEYS[12], KEYS[13] = F[6], F[7], F[8], base .. ':backlog:' .. user
  KEYS[14], KEYS[15] = base .. ':run:' .. run, base .. ':events:run:' .. run
  KEYS[16], KEYS[17] = base .. ':runwait:' .. run, base .. ':runjobs:' .. run
  KEYS[18], KEYS[19] = base .. ':sem:' .. kind .. ':' .. user, base .. ':semwait:' .. kind .. ':' .. user
  KEYS[20], KEYS[21], KEYS[22] = F[9], F[10], F[11]
  -- requeue.lua's ARGV: entry, reason, owner, cap, lock TTL, retention, user, list dead, no stamp
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5] = e, reason, owner, cap, ttl
  ARGV[6], ARGV[7], ARGV[8], ARGV[9] = retention, user, dead, ''
  out[n] = requeue_one()[1]
end
return out
