-- Move an entry that cannot be decoded or validated to the dead-letter list, with the reason.
-- KEYS[1] processing list  KEYS[2] dead  KEYS[3] job:<entry> (may not exist)  KEYS[4] finished
-- KEYS[5] deps:<entry>  KEYS[6] ready:lo
-- KEYS[7..14] the state block of the job's user and run (Keys.state_keys; any user when no hash)
-- KEYS[15..17] the interactive class's keys of that user (Keys.hi_keys): its fair turn passes on
-- ARGV: 1 entry, 2 reason, 3 retention s, 4 the raw job hash as JSON ('' if none), 5 the entry as
--       valid UTF-8 (undecodable bytes backslash-escaped), so the dead letter is always valid JSON
-- A dead letter (the one description of its shape; LPUSHed onto KEYS[2] as JSON):
--   {raw: the entry as claimed (ARGV[5]), job: the job hash as a JSON object string, '' if none
--    (ARGV[4]), reason: why it could not be decoded (ARGV[2]), at: Redis TIME ms}
-- Returns 1 when moved, 0 when the entry was no longer in the list.
-- needs: base, ctx, state, terminal
local entry = ARGV[1]
if not redis.call('LPOS', KEYS[1], entry) then return 0 end
local now = now_ms()
redis.call('LREM', KEYS[1], 1, entry)
redis.call('LPUSH', KEYS[2], cjson.encode({raw = ARGV[5], job = ARGV[4], reason = ARGV[2], at = now}))
local j = redis.call('HMGET', KEYS[3], 'state', 'user', 'run', 'key')
if j[1] and not TERMINAL[j[1]] then
  local ctx = with_hi(state_ctx(7, KEYS[3], entry, j[2], j[3], j[4], KEYS[6], ARGV[3]), 15)
  set_state(ctx, j[1], 'dead', {'error', err_json('undecodable', ARGV[2]), 'finished_at', now, 'token', ''}, nil, now)
  on_terminal(KEYS[3], KEYS[5], {lo = KEYS[6], hi = KEYS[15]}, KEYS[4], entry, now, ARGV[3])
end
return 1
