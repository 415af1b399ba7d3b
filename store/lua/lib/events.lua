-- lib/events: a job's or a run's event, to the run's stream and the queue's `events` stream.
-- needs:

-- The run stream carries the contract's types only; job_queued / job_waiting go to `events` alone.
local RUN_STREAM = {job_started = true, job_completed = true, job_failed = true, job_cancelled = true,
  job_skipped = true, job_progress = true, run_started = true, run_finished = true}
local COUNTS = {'total', 'queued', 'waiting', 'running', 'completed', 'failed', 'cancelled', 'skipped'}

-- The run streams are capped here; the queue-wide stream is trimmed by the housekeeper only
-- (supervisor/stream_trim.py), below what every consumer group has acknowledged.
local RUN_MAXLEN = '10000'
-- A queue-wide job event carries what a row of the platform's table needs (CONTRACT "Events consumers")
local ROW_FIELDS = {'attempts', 'tries', 'worker', 'error', 'created_at', 'started_at', 'finished_at', 'user', 'kind'}

local function run_view(ctx)
  local v = redis.call('HMGET', ctx.run, 'state', 'cancel', 'max_parallel', unpack(COUNTS))
  local counts = {}
  for i, name in ipairs(COUNTS) do counts[name] = tonumber(v[i + 3] or '0') or 0 end
  return v[1] or 'pending', v[2] == '1', tonumber(v[3] or '0') or 0, counts
end

-- A job event's row fields, as the hash has them after the change: read back (HMGET), or, when the
-- caller knows the hash (ctx.row: its fields by name, as read in the same step) and hands the change's
-- own field/value pairs (`write`), from those without a read (ctx.row is kept up to date with them).
local function row_values(ctx, write)
  if not write then return redis.call('HMGET', ctx.job, unpack(ROW_FIELDS)) end
  local row = ctx.row
  for i = 1, #write, 2 do row[write[i]] = write[i + 1] end
  local v = {}
  for i, name in ipairs(ROW_FIELDS) do v[i] = row[name] end
  return v
end

-- One event: {type, run_id, state, counts, job_id, key, job_state} (+ extra fields), field `e`.
-- Readers add `id` (the stream id). Plain jobs: run_id, state and counts are null. A job's state
-- change also carries the job's row fields (ROW_FIELDS, as the hash has them after the change:
-- times in ms), and its queue-wide stream id is kept in the job's `event_id` (the row's version).
-- `skipped_from` (job events only): ctx.skipped_from, set by the caller that skips a job, else null.
-- `write` (with ctx.row; set_state's): the change's field/value pairs, written to the job here in one
-- HSET with its `event_id` (no separate write of the change, no read-back of the row).
local function emit(ctx, etype, run_state, counts, job_state, extra, write)
  local ev = {type = etype, run_id = ctx.run_id ~= '' and ctx.run_id or cjson.null,
    state = run_state or cjson.null, counts = counts or cjson.null,
    job_id = job_state and ctx.id or cjson.null, key = (job_state and ctx.item ~= '') and ctx.item or cjson.null,
    job_state = job_state or cjson.null}
  if job_state then ev.skipped_from = ctx.skipped_from or cjson.null end
  local row = job_state and etype ~= 'job_progress'
  if row then
    local v = row_values(ctx, write)
    for i, name in ipairs(ROW_FIELDS) do
      local x = v[i]
      if name == 'error' then
        local ok, e = pcall(cjson.decode, x or 'null')
        ev[name] = (ok and type(e) == 'table') and e or cjson.null
      elseif name == 'worker' or name == 'user' or name == 'kind' then
        ev[name] = x or cjson.null
      elseif name == 'attempts' or name == 'tries' then
        ev[name] = tonumber(x or '0') or 0
      else
        ev[name] = x and tonumber(x) or cjson.null
      end
    end
  end
  if extra then for k, v in pairs(extra) do ev[k] = v end end
  local body = cjson.encode(ev)
  if ctx.run_id ~= '' and RUN_STREAM[etype] then
    redis.call('XADD', ctx.runev, 'MAXLEN', '~', RUN_MAXLEN, '*', 'e', body)
  end
  if etype ~= 'job_progress' or ctx.run_id == '' then
    local id = redis.call('XADD', ctx.events, '*', 'e', body)
    if write then
      write[#write + 1] = 'event_id'
      write[#write + 1] = id
    elseif row then
      redis.call('HSET', ctx.job, 'event_id', id)
    end
  end
  if write then redis.call('HSET', ctx.job, unpack(write)) end
end
