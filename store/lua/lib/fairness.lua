-- lib/fairness: one "fair" entry per user and class in its ready list, the rest in its backlog.
-- bulk: ready:lo, inready, backlog:<user>; interactive: ready:hi, inready:hi, hibacklog:<user>.
-- needs: classes

local function fair_keys(ctx, hi)
  if hi then return ctx.ready_hi, ctx.inready_hi, ctx.backlog_hi end
  return ctx.ready_lo, ctx.inready, ctx.backlog
end

-- A user with nothing running goes to the pop end (the front): it starts on the next free slot
-- even behind another user's long run; else to the back, behind every other user's turn.
local function push_fair(ctx, hi, id)
  local ready = fair_keys(ctx, hi)
  -- set_state remembers the count its HINCRBY returned: no second read of the same field.
  local n = ctx.n_active or tonumber(redis.call('HGET', ctx.active, ctx.user) or '0')
  if n <= 0 then redis.call('RPUSH', ready, id) else redis.call('LPUSH', ready, id) end
  if hi then wake(ctx.ready_lo) end
end

-- Queue a new (or retried) job of its class (hi: interactive, which needs with_hi): the user's
-- fair entry of that class when it has none, else the back of its backlog.
local function queue_job(ctx, id, hi)
  local _, inready, backlog = fair_keys(ctx, hi)
  if redis.call('HSETNX', inready, ctx.user, id) == 1 then
    push_fair(ctx, hi, id)
  else
    redis.call('RPUSH', backlog, id)
  end
end

local function queue_bulk(ctx, id)
  queue_job(ctx, id, false)
end

-- The user's fair entry of a class was consumed (started, ended, or parked behind a dependency):
-- the next of that class's backlog takes its place.
local function topup(ctx, hi)
  local ready, inready, backlog = fair_keys(ctx, hi)
  local nxt
  if ctx.n_active then
    -- The user's running count is known (set_state's HINCRBY): one LMOVE pops and places it.
    nxt = redis.call('LMOVE', backlog, ready, 'LEFT', ctx.n_active <= 0 and 'RIGHT' or 'LEFT')
    if nxt then
      redis.call('HSET', inready, ctx.user, nxt)
      if hi then wake(ctx.ready_lo) end
    end
  else
    nxt = redis.call('LPOP', backlog)
    if nxt then
      redis.call('HSET', inready, ctx.user, nxt)
      push_fair(ctx, hi, nxt)
    end
  end
  if not nxt then redis.call('HDEL', inready, ctx.user) end
end

-- The job leaves its user's turn: whichever class's fair entry it is passes to that class's next.
-- ctx.interactive (true / false; nil: unknown) spares the start path the other class's HGET.
local function drop_fair(ctx)
  if ctx.inready_hi and ctx.interactive ~= false and redis.call('HGET', ctx.inready_hi, ctx.user) == ctx.id then
    topup(ctx, true)
  elseif ctx.interactive ~= true and redis.call('HGET', ctx.inready, ctx.user) == ctx.id then
    topup(ctx, false)
  end
end
