-- A slot's claim and start in one step (lib/attempt.lua take_job): move the next entry from ready:hi, else
-- ready:lo, into the processing list (or take the entry a blocking BLMOVE already moved there), read
-- the job and start it (lib/attempt.lua start_job). One round trip, and the job record comes back with the
-- answer (no separate HGETALL). Never blocks: an idle slot BLMOVEs first, then calls this with
-- the entry it got.
-- KEYS[1] processing list  KEYS[2] ready:hi  KEYS[3] ready:lo  KEYS[4] started  KEYS[5] waitusers
-- KEYS[6] finished  KEYS[7] events  KEYS[8] active  KEYS[9] inready  KEYS[10] busy:<worker id>
-- KEYS[11] host:<our host> (its PTTL is our lease)  KEYS[12] inready:hi
-- KEYS[13] the queue's base '<prefix>:{<queue>}': the job's own keys (job, lock, wait, deps, backlog,
-- run, sem, … of its user, kind and run, known only once the entry is claimed) are built from it
-- through lib/keys, as store/keys.py spells them, under the same {queue} hash tag.
-- ARGV: 1 the entry BLMOVE moved into the list ('' = claim one here),
--       2 random token suffix (the same on a retry), 3 worker id, 4 slot pid, 5 lock TTL ms,
--       6 retention s, 7 max waits, 8 busy-state TTL ms, 9 '1' on a retry after a lost reply (the
--       entry our list already holds is taken again), 10 kind limits JSON {kind: [timeout ms,
--       per_user], "*": [...] for kinds this slot does not know}, 11 ms our lease must have left (0: no fence)
-- Returns {'empty'} | {'nolease', entry} | {'raw', entry} | {'bad', entry, record} | {'job', entry, record, start answer}
--   (lib/attempt.lua take_job). 'bad': a hash it cannot start (no user, kind or state, or an
--   `after` that is no list of ids): the slot dead-letters it. take.lua is the one script that
--   starts a job. The start answer (lib/attempt.lua start_job):
--   {'run', token, attempt, started_at, created_at or -1} |
--   {'parked', 'user'|'dependency'|'run', user or dep id or run id} |
--   {'ended', state, error kind, message} | {'stale', state}
--   (decoded by slots/answers.py into Started | Parked | Ended | Stale).
-- needs: base, attempt
return take_job(
  {proc = KEYS[1], hi = KEYS[2], lo = KEYS[3], started = KEYS[4], waitusers = KEYS[5], finished = KEYS[6],
   events = KEYS[7], active = KEYS[8], inready = KEYS[9], busy = KEYS[10], host = KEYS[11],
   inready_hi = KEYS[12]},
  {base = KEYS[13], given = ARGV[1], retry = ARGV[9] == '1', suffix = ARGV[2], worker = ARGV[3],
   pid = tonumber(ARGV[4]), lock_ttl = tonumber(ARGV[5]), retention = ARGV[6], max_waits = tonumber(ARGV[7]),
   busy_ttl = tonumber(ARGV[8]), limits = cjson.decode(ARGV[10]), min_lease = tonumber(ARGV[11]), now = now_ms()})
