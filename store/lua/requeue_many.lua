-- requeue.lua over many entries of one processing list, in one call (the reaper's pass over a dead
-- host's lists, a dead slot's list). Sent after the lib parts both need and after requeue.lua's own text, unchanged,
-- as the body of `local function requeue_one()` (scripts.batch_text): every entry goes through
-- exactly requeue.lua's logic, the owner re-check included, with KEYS and ARGV set to what
-- Queue.requeue would send for it. One implementation: a fix to requeue.lua is a fix here.
-- The entries are done one after another inside this one atomic step (an order the per-entry calls
-- could also take). The job's own key names are built on the queue's base (given in KEYS) by lib/keys,
-- as store/keys.py spells them (all keep the {queue} hash tag: one cluster slot); the job's user,
-- kind and run are read here, in the same step as its requeue.
-- KEYS[1] processing list  KEYS[2] started  KEYS[3] waitusers  KEYS[4] ready:lo  KEYS[5] finished
-- KEYS[6] events  KEYS[7] active  KEYS[8] inready  KEYS[9] proclists  KEYS[10] host:<owner host>
-- KEYS[11] ready:hi  KEYS[12] the queue's base '<prefix>:{<queue>}'
-- ARGV: 1 reason, 2 owner incarnation that must be gone ('' = the caller saw the death itself),
--       3 crash cap, 4 lock TTL ms, 5 retention s, 6 '1' if the list is dead, 7.. the entries
-- Returns requeue.lua's verdict per entry, in the entries' order ('alive' | 'gone' | 'requeued' |
-- 'failed' | 'raw').
-- needs: keys
local F = {unpack(KEYS, 1, 12)}
local base = F[12]
local reason, owner, cap, ttl, retention, dead = unpack(ARGV, 1, 6)
local entries = {}  -- copied first: ARGV is rewritten per entry below
for i = 7, #ARGV do entries[#entries + 1] = ARGV[i] end
local out = {}
for n, e in ipairs(entries) do
  local f = redis.call('HMGET', keyname(base, 'job', e), 'user', 'kind', 'run')
  local user = f[1] or ''
  local kind = (f[2] and f[2] ~= '') and f[2] or '-'
  local run = (f[3] and f[3] ~= '') and f[3] or '-'
  -- requeue.lua's KEYS, in its header's order (store/script_args.py RequeueCall)
  KEYS[1], KEYS[2], KEYS[3] = F[1], keyname(base, 'job', e), F[2]
  KEYS[4], KEYS[5], KEYS[6] = keyname(base, 'lock', user), keyname(base, 'wait', user), F[3]
  KEYS[7], KEYS[8], KEYS[9] = F[4], F[5], keyname(base, 'deps', e)
  local block = state_keys(base, user, run)
  KEYS[10], KEYS[11], KEYS[12], KEYS[13] = F[6], F[7], F[8], block[4]
  KEYS[14], KEYS[15], KEYS[16], KEYS[17] = block[5], block[6], block[7], block[8]
  KEYS[18], KEYS[19] = keyname(base, 'sem', kind, user), keyname(base, 'semwait', kind, user)
  KEYS[20], KEYS[21], KEYS[22], KEYS[23] = F[9], F[10], F[11], base
  -- requeue.lua's ARGV: entry, reason, owner, cap, lock TTL, retention, user, list dead, no stamp
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5] = e, reason, owner, cap, ttl
  ARGV[6], ARGV[7], ARGV[8], ARGV[9] = retention, user, dead, ''
  out[n] = requeue_one()[1]
end
return out
