-- lib/runs: a run's final state and its end.
-- needs: events

local FINAL_RUN = {completed = true, partial_success = true, failed = true, cancelled = true}

-- CONTRACT: cancelled if `runs cancel` came while jobs remained; else completed if none failed or
-- was cancelled; failed if none completed or was skipped; else partial_success.
local function final_state(cancel, c)
  if cancel then return 'cancelled' end
  if c.failed == 0 and c.cancelled == 0 then return 'completed' end
  if c.completed + c.skipped == 0 then return 'failed' end
  return 'partial_success'
end

local function finish_run(ctx, state, counts, now)
  redis.call('HSET', ctx.run, 'state', state, 'finished_at', now)
  for _, k in ipairs({ctx.run, ctx.runjobs, ctx.runwait}) do redis.call('EXPIRE', k, ctx.retention) end
  emit(ctx, 'run_finished', state, counts, nil)
  redis.call('EXPIRE', ctx.runev, ctx.retention)
end
