-- Count jobs parked behind dependencies, and drop ids whose dependents are gone, in one step (a
-- dependent parking between a separate LLEN and SREM would otherwise be lost from the index).
-- KEYS[1] depwaits  KEYS[2..n] deps:<id> for each id in ARGV, in the same order
-- ARGV: the ids (members of depwaits the caller just read)
-- Returns the number of parked dependents.
local total = 0
for i = 1, #ARGV do
  local n = redis.call('LLEN', KEYS[i + 1])
  if n == 0 then redis.call('SREM', KEYS[1], ARGV[i]) end
  total = total + n
end
return total
