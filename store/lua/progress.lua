-- A running attempt's progress (the handler's fd-3 lines, coalesced by the slot): one job_progress
-- event, fenced by the attempt token (a fenced or finished attempt writes nothing). To the run's
-- stream for a run job; to the queue's `events` stream for a plain job (its only stream).
-- KEYS[1] job:<id>  KEYS[2] run:<run> (run:- for a plain job)  KEYS[3] events:run:<run> (or
-- events:run:-)  KEYS[4] events
-- ARGV: 1 job id, 2 attempt token, 3 JSON object {progress, message, chunk} (each optional; absent
--       fields are written as null)
-- Returns 1 when written, 0 when fenced.
-- needs: events
local v = redis.call('HMGET', KEYS[1], 'token', 'run', 'key', 'state')
if v[1] ~= ARGV[2] or v[4] ~= 'running' then return 0 end
local p = cjson.decode(ARGV[3])
local ctx = {id = ARGV[1], run_id = v[2] or '', item = v[3] or '', run = KEYS[2], runev = KEYS[3],
  events = KEYS[4]}
local rstate, counts = nil, nil
if ctx.run_id ~= '' then
  local _
  rstate, _, _, counts = run_view(ctx)
end
emit(ctx, 'job_progress', rstate, counts, 'running', {progress = p.progress == nil and cjson.null or p.progress,
  message = p.message == nil and cjson.null or p.message, chunk = p.chunk == nil and cjson.null or p.chunk})
return 1
