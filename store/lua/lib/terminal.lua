-- lib/terminal: what every terminal path does after set_state (dependents, history indexes).
-- needs: classes, keys

-- Every terminal path (success, failure, cancel, dead-letter, crash cap) goes through here, so no
-- path can forget the dependents (rq#2006) or the history indexes. Beside `finished` (id -> finish
-- ms), the same id and score go to `finished:state:<state>`, `finished:user:<user>` and
-- `finished:kind:<kind>` (names built on `finished`'s by lib/keys, so the same hash tag;
-- client/history.py reads them), so a filtered history page or the failed count is a range read, not a walk
-- of the job hashes. `finished:trim` keeps per index ('state:<s>', 'user:<u>', 'kind:<k>') a score
-- at or below its oldest entry (ZADD LT), so the housekeeper's trim (history_index.trim) visits only the
-- indexes holding something past the retention. A hash without user or kind (a dead-lettered bad
-- record) is in `finished` only: history cannot decode it anyway.
-- The dependents go back to the front of their class's ready list: `ready` is ready:lo's name or
-- {lo, hi} (push_front). `known`: {state, user, kind} when the caller knows what the hash holds
-- now (it wrote the state and read the rest in this step): no read-back.
local function on_terminal(job_key, deps_key, ready, finished_key, id, now, retention_s, known)
  if type(ready) ~= 'table' then ready = {lo = ready} end
  local deps = redis.call('LRANGE', deps_key, 0, -1)
  if #deps > 0 then
    for i = 1, #deps do push_front(ready, deps[i]) end
    redis.call('DEL', deps_key)
  end
  redis.call('ZADD', finished_key, now, id)
  redis.call('EXPIRE', job_key, retention_s)
  local j = known or redis.call('HMGET', job_key, 'state', 'user', 'kind')
  local state, user, kind = j[1], j[2], j[3]
  if not (state and user and kind) then return end
  -- (a run job reopened by run_retry.lua left every index then: nothing of its old end is here)
  local s, u, k = 'state:' .. state, 'user:' .. user, 'kind:' .. kind
  redis.call('ZADD', finished_index(finished_key, s), now, id)
  redis.call('ZADD', finished_index(finished_key, u), now, id)
  redis.call('ZADD', finished_index(finished_key, k), now, id)
  redis.call('ZADD', finished_index(finished_key, 'trim'), 'LT', now, s, now, u, now, k)
end
