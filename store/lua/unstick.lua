-- Sweep for one user with parked jobs: if nobody holds or has reserved the lock (a release was lost
-- with a crash, or a reservation expired), promote the head waiter.
-- KEYS[1] lock:<user>  KEYS[2] wait:<user>  KEYS[3] waitusers  KEYS[4] ready:lo  KEYS[5] ready:hi
-- ARGV: 1 user, 2 lock TTL ms        Returns the promoted id, or ''.
-- needs: lock
if redis.call('EXISTS', KEYS[1]) == 1 then return '' end
if redis.call('LLEN', KEYS[2]) == 0 then redis.call('SREM', KEYS[3], ARGV[1]) return '' end
return promote_waiter(KEYS[1], KEYS[2], KEYS[3], {lo = KEYS[4], hi = KEYS[5]}, ARGV[1], tonumber(ARGV[2])) or ''
