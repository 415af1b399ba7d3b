-- The reaper's first look at a processing list: stamp every entry that has no claim time yet (a slot
-- died between BLMOVE and take.lua), so no entry is ever skipped for lack of a timestamp.
-- KEYS[1] processing list  KEYS[2] started
-- Returns {now, entry1, stamp1, entry2, stamp2, …}
-- needs: base
local now = now_ms()
local out = {now}
for _, e in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  redis.call('HSETNX', KEYS[2], e, now)
  table.insert(out, e)
  table.insert(out, redis.call('HGET', KEYS[2], e))
end
return out
