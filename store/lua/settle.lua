-- Settle one attempt (lib/attempt.lua settle_job) and release what it held (the user's lock or its semaphore place), fenced by
-- the attempt token; the state change goes through lib/state.lua set_state (counts, events, max_parallel).
-- KEYS[1] processing list  KEYS[2] job:<id>  KEYS[3] started  KEYS[4] lock:<user>  KEYS[5] wait:<user>
-- KEYS[6] waitusers  KEYS[7] ready:lo  KEYS[8] finished  KEYS[9] deps:<id>
-- KEYS[10..17] the state block of the job's user and run (Keys.state_keys(user, run))
-- KEYS[18] sem:<kind>:<user>  KEYS[19] semwait:<kind>:<user>  KEYS[20] delayed
-- KEYS[21] busy:<worker id> (cleared while it still names this job, fenced or not)
-- KEYS[22] done:<kind>:<user>:<ARGV[12]> (done:- when there is no such hash)
-- KEYS[23] ready:hi (a promoted waiter, a released run waiter, a dependent or a requeue of an
--          interactive job goes back there)
-- KEYS[24] md:<id>:<attempt> (this attempt's Markdown, kept with a completed settle when ARGV[13] is '1')
-- ARGV: 1 id, 2 token, 3 outcome completed|failed|cancelled|retry|requeue, 4 result JSON ('' none),
--       5 error JSON ('' none), 6 lock TTL ms, 7 retention s, 8 retry backoff ms, 9 user,
--       10 '1' if a failure counts as a business try, 11 '0' if no handler process was started (a
--       rejected input): this start is taken back out of 'attempts', which counts handler starts,
--       12 the input hash this attempt recorded of what it read ('' none): a completed run item
--       stores it as its input_hash (in place of the submit-time one) and under KEYS[22],
--       13 '1' to keep the Markdown (the inline copy of a parse_markdown result) under KEYS[24],
--       14 the Markdown text ('' with 13 '0')
-- A retry waits in `delayed` as its id, or '!' .. id for an interactive job (promote_due.lua).
-- Returns {'ok', promoted waiter id or ''} | {'fenced'} when this attempt no longer owns the job.
-- needs: base, attempt
local block = {}
for i = 10, 17 do block[#block + 1] = KEYS[i] end
return settle_job({proc = KEYS[1], job = KEYS[2], started = KEYS[3], lock = KEYS[4], wait = KEYS[5],
  waitusers = KEYS[6], ready_lo = KEYS[7], finished = KEYS[8], deps = KEYS[9], block = block,
  sem = KEYS[18], semwait = KEYS[19], delayed = KEYS[20], busy = KEYS[21], done = KEYS[22], ready_hi = KEYS[23],
  id = ARGV[1], token = ARGV[2], outcome = ARGV[3], result = ARGV[4], error = ARGV[5],
  lock_ttl = tonumber(ARGV[6]), retention = ARGV[7], backoff = tonumber(ARGV[8]), user = ARGV[9],
  counts_try = ARGV[10] == '1', launched = ARGV[11] ~= '0', input_hash = ARGV[12], now = now_ms(),
  markdown = ARGV[13] == '1' and ARGV[14] or nil, markdown_key = KEYS[24]})
