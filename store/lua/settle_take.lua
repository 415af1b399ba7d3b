-- Settle one attempt and start the slot's next job in the same step: settle.lua's work (lib/attempt.lua
-- settle_job), then take.lua's (lib/attempt.lua take_job) from what is already queued. The steady state of a
-- busy slot is one round trip per job. Takes only what is there (LMOVE; never blocks); with nothing
-- queued the busy state is cleared (while it names the settled job) and the slot goes back to its
-- blocking BLMOVE.
-- KEYS[1..22] as settle.lua  KEYS[23] ready:hi  KEYS[24] host:<our host> (the lease, as take.lua's)
-- KEYS[25] inready:hi  KEYS[26] the queue's base '<prefix>:{<queue>}' (as take.lua's)
-- KEYS[27] md:<id>:<attempt> (the attempt's Markdown, as in settle.lua)
-- ARGV[1..11] as settle.lua; then 12 token suffix for the next attempt
--       (the same on a retry), 13 worker id, 14 slot pid, 15 max waits, 16 busy-state TTL ms,
--       17 '1' on a retry after a lost reply, 18 kind limits JSON (as take.lua's ARGV), 19 ms our
--       lease must have left (0: no fence), 20 settle.lua's ARGV[12] (the attempt's input hash),
--       21 settle.lua's ARGV[13] ('1' to keep the Markdown), 22 settle.lua's ARGV[14] (the Markdown text)
-- Returns {'ok' | 'fenced', promoted waiter id or '', take.lua's answer}. On a retry whose first
-- call landed, the settle answers 'fenced' (the caller checks what landed, as for settle.lua) and
-- the take answers the job the first call started ('run' with the same token); when that job is the
-- settled one itself (requeued, then taken again at once), the settle answers 'ok' (promoted '').
-- needs: base, attempt
local block = {}
for i = 10, 17 do block[#block + 1] = KEYS[i] end
local now = now_ms()
local retry = ARGV[17] == '1'
local skip, s = ARGV[1], nil
if retry then
  -- Our first call landed whole and its take started this very job again (its token carries this
  -- call's next suffix): it is settled; the take adopts that attempt (settling again would be
  -- fenced and remove the new attempt's entry from our list).
  local cur = redis.call('HGET', KEYS[2], 'token')
  if cur and string.sub(cur, -#ARGV[12] - 1) == '.' .. ARGV[12] then s, skip = {'ok', ''}, '' end
end
s = s or settle_job({proc = KEYS[1], job = KEYS[2], started = KEYS[3], lock = KEYS[4], wait = KEYS[5],
  waitusers = KEYS[6], ready_lo = KEYS[7], finished = KEYS[8], deps = KEYS[9], block = block,
  sem = KEYS[18], semwait = KEYS[19], delayed = KEYS[20], busy = KEYS[21], done = KEYS[22],
  ready_hi = KEYS[23],
  id = ARGV[1], token = ARGV[2], outcome = ARGV[3], result = ARGV[4], error = ARGV[5],
  lock_ttl = tonumber(ARGV[6]), retention = ARGV[7], backoff = tonumber(ARGV[8]), user = ARGV[9],
  counts_try = ARGV[10] == '1', launched = ARGV[11] ~= '0', input_hash = ARGV[20], now = now,
  keep_busy = true, markdown = ARGV[21] == '1' and ARGV[22] or nil, markdown_key = KEYS[27]})
local t = take_job(
  {proc = KEYS[1], hi = KEYS[23], lo = KEYS[7], started = KEYS[3], waitusers = KEYS[6], finished = KEYS[8],
   events = KEYS[10], active = KEYS[11], inready = KEYS[12], busy = KEYS[21], host = KEYS[24],
   inready_hi = KEYS[25]},
  {base = KEYS[26], given = '', skip = skip, retry = retry, suffix = ARGV[12], worker = ARGV[13],
   pid = tonumber(ARGV[14]), lock_ttl = tonumber(ARGV[6]), retention = ARGV[7], max_waits = tonumber(ARGV[15]),
   busy_ttl = tonumber(ARGV[16]), limits = cjson.decode(ARGV[18]), min_lease = tonumber(ARGV[19]), now = now})
if not (t[1] == 'job' and t[4][1] == 'run') then clear_busy(KEYS[21], ARGV[1]) end
return {s[1], s[2] or '', t}
