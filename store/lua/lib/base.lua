-- lib/base: Redis time, the terminal states, an error's JSON.
-- Every lib part defines no keys of its own: each function takes the keys its caller received in
-- KEYS. store/scripts.py joins the parts a script names on its `needs:` line (and what those parts
-- need, in dependency order) before the script's own text: Redis has no include.
-- needs:

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local TERMINAL = {completed = true, failed = true, cancelled = true, skipped = true, dead = true}

local function err_json(kind, message)
  return cjson.encode({kind = kind, message = message})
end
