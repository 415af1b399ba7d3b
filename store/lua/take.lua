-- A slot's claim and start in one step (lib.lua take_job): move the next entry from ready:hi, else
-- ready:lo, into the processing list (or take the entry a blocking BLMOVE already moved there), read
-- the job and start it (lib.lua start_job). One round trip, and the job record comes back with the
-- answer (no separate HGETALL). Never blocks: an idle slot BLMOVEs first, then calls this with
-- the entry it got.
-- KEYS[1] processing list  KEYS[2] ready:hi  KEYS[3] ready:lo  KEYS[4] started  KEYS[5] waitusers
-- KEYS[6] finished  KEYS[7] events  KEYS[8] active  KEYS[9] inready  KEYS[10] busy:<worker id>
-- KEYS[11] host:<our host> (its PTTL is our lease)  KEYS[12] inready:hi
-- The job's own keys (job, lock, wait, deps, backlog, run, sem, … of its user, kind and run) are
-- built from ARGV[1] as store/keys.py spells them, under the same {queue} hash tag.
-- ARGV: 1 base '<prefix>:{<queue>}', 2 the entry BLMOVE moved into the list ('' = claim one here),
--       3 random token suffix (the same on a retry), 4 worker id, 5 slot pid, 6 lock TTL ms,
--       7 retention s, 8 max waits, 9 busy-state TTL ms, 10 '1' on a retry after a lost reply (the
--       entry our list already holds is taken again), 11 kind limits JSON {kind: [timeout ms,
--       per_user], "*": [...] for kinds this slot does not know}, 12 ms our lease must have left (0: no fence)
-- Returns {'empty'} | {'nolease', entry} | {'raw', entry} | {'bad', entry, record} | {'job', entry, record, start answer}
--   (lib.lua take_job; the start answer is start.lua's).
-- needs: base, attempt
return take_job(
  {proc = KEYS[1], hi = KEYS[2], lo = KEYS[3], started = KEYS[4], waitusers = KEYS[5], finished = KEYS[6],
   events = KEYS[7], active = KEYS[8], inready = KEYS[9], busy = KEYS[10], host = KEYS[11],
   inready_hi = KEYS[12]},
  {base = ARGV[1], given = ARGV[2], retry = ARGV[10] == '1', suffix = ARGV[3], worker = ARGV[4],
   pid = tonumber(ARGV[5]), lock_ttl = tonumber(ARGV[6]), retention = ARGV[7], max_waits = tonumber(ARGV[8]),
   busy_ttl = tonumber(ARGV[9]), limits = cjson.decode(ARGV[11]), min_lease = tonumber(ARGV[12]), now = now_ms()})
