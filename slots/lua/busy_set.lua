-- Record what a slot is running, once it holds the user's lock (start.lua returned 'run'). The
-- start time is the job's own Redis-TIME ``started_at`` (set by start.lua), so every host agrees.
-- KEYS[1] busy:<worker id>  KEYS[2] job:<id>
-- ARGV: 1 the state as JSON (types.BusyState without started_at), 2 TTL ms (longest timeout + 120 s)
-- Returns {started_at ms, created_at ms or -1}
local st = cjson.decode(ARGV[1])
local started = tonumber(redis.call('HGET', KEYS[2], 'started_at') or '') or now_ms()
local created = tonumber(redis.call('HGET', KEYS[2], 'created_at') or '') or -1
st.started_at = started
redis.call('SET', KEYS[1], cjson.encode(st), 'PX', tonumber(ARGV[2]))
return {started, created}
