-- Put an entry of a dead (or stuck) owner's processing list back at the front of ready, in one step
-- that re-checks what the caller decided on: the entry is still there and, for a remote owner, the
-- owner's host is still dead. Never LREM-then-LPUSH from Python (kombu#1405).
-- KEYS[1] processing list  KEYS[2] job:<entry>  KEYS[3] started  KEYS[4] lock:<user>  KEYS[5] wait:<user>
-- KEYS[6] waitusers  KEYS[7] ready:lo  KEYS[8] finished  KEYS[9] deps:<entry>  KEYS[10] proclists
-- KEYS[11] host:<owner host>
-- ARGV: 1 entry, 2 reason crash|drain|deadline|unclaim, 3 owner incarnation that must be gone ('' =
--       the caller saw the death itself), 4 crash cap, 5 lock TTL ms, 6 retention s, 7 user,
--       8 '1' if the list is dead (drop it from proclists once empty)
-- Returns {'alive'} | {'gone'} | {'requeued'} | {'failed'} (crash cap reached) | {'raw'}
local entry, reason = ARGV[1], ARGV[2]
if ARGV[3] ~= '' and redis.call('GET', KEYS[11]) == ARGV[3] then return {'alive'} end

local function tidy()
  if ARGV[8] == '1' and redis.call('LLEN', KEYS[1]) == 0 then redis.call('HDEL', KEYS[10], KEYS[1]) end
end

if not redis.call('LPOS', KEYS[1], entry) then tidy() return {'gone'} end
redis.call('LREM', KEYS[1], 1, entry)
redis.call('HDEL', KEYS[3], entry)
if redis.call('EXISTS', KEYS[2]) == 0 then
  -- A raw producer entry or an expired job: the next claim decodes or dead-letters it.
  redis.call('RPUSH', KEYS[7], entry)
  tidy()
  return {'raw'}
end
local state = redis.call('HGET', KEYS[2], 'state')
if TERMINAL[state] then tidy() return {'gone'} end
if state == 'running' then
  local now = now_ms()
  release_lock(KEYS[4], KEYS[5], KEYS[6], KEYS[7], ARGV[7], redis.call('HGET', KEYS[2], 'token'), tonumber(ARGV[5]))
  redis.call('HINCRBY', KEYS[2], 'interruptions', 1)
  if reason ~= 'drain' and reason ~= 'unclaim' then
    local crashes = redis.call('HINCRBY', KEYS[2], 'crashes', 1)
    if crashes >= tonumber(ARGV[4]) then
      redis.call('HSET', KEYS[2], 'state', 'failed', 'finished_at', now, 'token', '',
        'error', err_json('crash_cap', 'interrupted ' .. crashes .. ' times (' .. reason .. '); pool.crash_cap is ' .. ARGV[4]))
      on_terminal(KEYS[2], KEYS[9], KEYS[7], KEYS[8], entry, now, ARGV[6])
      tidy()
      return {'failed'}
    end
  end
  redis.call('HSET', KEYS[2], 'state', 'queued', 'token', '')
end
redis.call('RPUSH', KEYS[7], entry)
tidy()
return {'requeued'}
