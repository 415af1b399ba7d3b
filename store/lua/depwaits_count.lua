-- Count jobs parked behind dependencies, and drop ids whose dependents are all gone from the index.
-- What is atomic: this script's LLEN and SREM of an id (nothing parks between them). What is not:
-- take.lua parks a dependent (RPUSH deps:<id>) and the slot indexes <id> in depwaits in a later,
-- separate call (busy.py note_parked), and the caller reads SMEMBERS depwaits before calling this.
-- So a dependent is counted from its slot's SADD on (one read late at worst; never if that slot
-- died in between, until another dependent of the same id parks), and an SREM here never loses a
-- dependent that parks afterwards (its SADD adds the id back). A status figure, not a guarantee.
-- KEYS[1] depwaits  KEYS[2..n] deps:<id> for each id in ARGV, in the same order
-- ARGV: the ids (members of depwaits the caller just read)
-- Returns the number of parked dependents.
-- needs: (no lib part)
local total = 0
for i = 1, #ARGV do
  local n = redis.call('LLEN', KEYS[i + 1])
  if n == 0 then redis.call('SREM', KEYS[1], ARGV[i]) end
  total = total + n
end
return total
