-- lib/ctx: the context of one job that set_state and the fairness helpers work on.
-- needs:

-- The context of one job for set_state: its key, id, user, run id ('' = plain job), item key, and
-- its state block: events, active, inready, backlog:<user>, run:<run>, events:run:<run>,
-- runwait:<run>, runjobs:<run> (b: a table of those eight names, in that order).
-- The interactive class's own fair keys (ready:hi, inready:hi, hibacklog:<user>) are set by
-- with_hi; a script without them can queue and consume bulk turns only.
local function new_ctx(job_key, id, user, run_id, item_key, b, ready_lo, retention_s)
  return {job = job_key, id = id, user = user or '', run_id = run_id or '', item = item_key or '',
    events = b[1], active = b[2], inready = b[3], backlog = b[4],
    run = b[5], runev = b[6], runwait = b[7], runjobs = b[8],
    ready_lo = ready_lo, retention = tonumber(retention_s) or 604800}
end

-- The same, with the state block at KEYS[i..i+7] (keys.py Keys.state_keys).
local function state_ctx(i, job_key, id, user, run_id, item_key, ready_lo, retention_s)
  return new_ctx(job_key, id, user, run_id, item_key,
    {KEYS[i], KEYS[i + 1], KEYS[i + 2], KEYS[i + 3], KEYS[i + 4], KEYS[i + 5], KEYS[i + 6], KEYS[i + 7]},
    ready_lo, retention_s)
end

-- Add the interactive class's keys to ctx: ready:hi, inready:hi, hibacklog:<user>, from KEYS[i..i+2]
-- (keys.py Keys.hi_keys) or, with i a table, from it.
local function with_hi(ctx, i)
  local t = type(i) == 'table' and i or {KEYS[i], KEYS[i + 1], KEYS[i + 2]}
  ctx.ready_hi, ctx.inready_hi, ctx.backlog_hi = t[1], t[2], t[3]
  return ctx
end
