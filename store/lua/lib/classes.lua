-- lib/classes: interactive before bulk, each in its order (wake tokens, the '!' marking of
-- interactive entries in wait lists, the front of a class's ready list).
-- needs:

-- A slot idles blocked on ready:lo; a wake token at its pop end makes one look at ready:hi. Every
-- push onto ready:hi leaves one (never two in a row).
local function wake(ready_lo)
  if redis.call('LINDEX', ready_lo, -1) ~= '~wake' then redis.call('RPUSH', ready_lo, '~wake') end
end

-- An entry parked in a wait list (wait:<user>, semwait:<kind>:<user>, runwait:<run>) carries its
-- class: '!' .. id for an interactive job, the id for a bulk one (job ids never hold '!'; the
-- `delayed` zset's convention). unmark: the id and whether it is interactive.
local function unmark(e)
  if string.sub(e, 1, 1) == '!' then return string.sub(e, 2), true end
  return e, false
end

-- Insert e behind a wait list's interactive entries, before its first bulk one (the lists hold a
-- few entries: a user's parked turns, not its backlog).
local function insert_before_bulk(list, e)
  local last = redis.call('LINDEX', list, -1)
  if not last or string.sub(last, 1, 1) == '!' then redis.call('RPUSH', list, e) return end
  for _, x in ipairs(redis.call('LRANGE', list, 0, -1)) do
    if string.sub(x, 1, 1) ~= '!' then
      redis.call('LINSERT', list, 'BEFORE', x, e)
      return
    end
  end
end

-- Park in a wait list in promotion order: the list's interactive entries first, each class FIFO.
local function park_entry(list, id, interactive)
  if interactive then insert_before_bulk(list, '!' .. id) else redis.call('RPUSH', list, id) end
end

-- LREM an id from a wait list in either class's spelling; returns how many went.
local function unpark(list, id)
  return redis.call('LREM', list, 0, id) + redis.call('LREM', list, 0, '!' .. id)
end

-- Put a promoted or released entry (marked as park_entry marks it) at the front (pop end) of its
-- class's ready list: ready is {lo = ready:lo, hi = ready:hi} (hi nil: a caller without ready:hi
-- puts every entry on ready:lo). Returns the id.
local function push_front(ready, e)
  local id, hi = unmark(e)
  if hi and ready.hi then
    redis.call('RPUSH', ready.hi, id)
    wake(ready.lo)
  else
    redis.call('RPUSH', ready.lo, id)
  end
  return id
end
