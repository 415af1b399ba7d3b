-- lib/keys: the one place Lua spells a key name, for a script that learns the name's parts only
-- from data (a job's user, kind or run read in the same step, an entry of a list). Each name is
-- built as store/keys.py's Keys builds it (tests/store/test_key_names.py runs these in a real
-- redis-server and compares with Keys), on the queue's base '<prefix>:{<queue>}' that the script
-- received in KEYS, so every name keeps the base's hash tag (one cluster slot). Every other name a
-- script touches comes in KEYS.
-- needs:

-- Keys' method → the word after the base (names with no argument: keyname(base, 'events')).
local KEY_WORD = {job = 'job', lock = 'lock', wait = 'wait', deps = 'deps', busy = 'busy', host = 'host',
  backlog = 'backlog', hibacklog = 'hibacklog', sem = 'sem', semwait = 'semwait', run = 'run',
  runjobs = 'runjobs', run_events = 'events:run', runwait = 'runwait', done = 'done', proc = 'proc',
  events = 'events', active = 'active', inready = 'inready', finished = 'finished'}

-- keyname(base, 'job', id) is Keys.job(id); keyname(base, 'sem', kind, user) Keys.sem(kind, user);
-- keyname(base, 'done', kind, user, hash) Keys.done(kind, user, hash); keyname(base, 'events') Keys.events.
local function keyname(base, name, a, b, c)
  local word = KEY_WORD[name]
  if not word then error('lib/keys: no key named ' .. tostring(name)) end
  local k = base .. ':' .. word
  for _, part in ipairs({a, b, c}) do k = k .. ':' .. part end
  return k
end

-- Keys.state_keys(user, run): events, active, inready, backlog:<user>, then run:<run>,
-- events:run:<run>, runwait:<run>, runjobs:<run> (run '-' for a plain job).
local function state_keys(base, user, run)
  local r = (run and run ~= '') and run or '-'
  return {keyname(base, 'events'), keyname(base, 'active'), keyname(base, 'inready'), keyname(base, 'backlog', user),
    keyname(base, 'run', r), keyname(base, 'run_events', r), keyname(base, 'runwait', r), keyname(base, 'runjobs', r)}
end

-- Keys.finished_index(member) on the `finished` key the script received ('state:<s>', 'user:<u>',
-- 'kind:<k>', or 'trim': Keys.finished_trim).
local function finished_index(finished, member)
  return finished .. ':' .. member
end

-- A processing list's name as Keys.proc(host, incarnation, slot, seq) spells it on this base →
-- host, incarnation, slot, seq; nil for a name that is not one (a list name read from data is used
-- only when it is one of ours).
local function proc_parts(base, name)
  local head = keyname(base, 'proc') .. ':'
  if string.sub(name, 1, #head) ~= head then return nil end
  local host, inc, slot, seq = string.match(string.sub(name, #head + 1), '^([^:]+):([^:]+):(%d+)%.(%d+)$')
  if not host then return nil end
  return host, inc, tonumber(slot), tonumber(seq)
end
