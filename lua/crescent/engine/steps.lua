-- crescent.engine.steps — the standard train step (forward, loss, backward, optimizer
-- step, with gradient accumulation and clipping) and the eval step. Any Lua function
-- f(task, batch) can replace them: task.train_step = f.
--
-- A step announces after_forward and after_backward with task:fire(...) so that hooks
-- run there and the loop can split the step's time into forward+backward and optimizer.
local cr = require 'crescent'
local loop = require 'crescent.engine.loop'
local profiler = require 'crescent.profiler'
local util = require 'crescent.util'

local M = {}
local fire = loop.fire
local AFTER_FORWARD, AFTER_BACKWARD = loop.after_forward, loop.after_backward

-- Reads batch.input and batch.target; task.loss(output, batch) -> scalar tensor.
-- Sets task.output, task.loss_tensor and task.loss_value (a number), and stores 'loss'.
-- With task.accum_steps = k the loss is divided by k and the optimizer steps (then
-- zeroes the grads) on every k-th step only, so k batches of b equal one batch of k*b
-- for a mean-reduced loss; with task.ddp (a DDP) the first k-1 backwards run under its
-- no_sync, so the ranks all-reduce once per optimizer step. task.clip_norm /
-- task.clip_value clip before the step. With task.amp = 'bf16' | 'f16' forward and loss run under cr.autocast; with a task.scaler
-- (f16) the loss is scaled, and a step whose grads overflow is skipped.
local function forward(task, batch)
  local out = task.model(batch.input)
  return out, task.loss(out, batch)
end

function M.standard(task, batch)
  local out, loss
  local region = profiler.begin('forward') -- nil unless cr.profiler is on
  if task.amp and task.amp ~= 'off' then
    out, loss = cr.autocast(task.amp, forward, task, batch)
  else
    out, loss = forward(task, batch)
  end
  profiler.finish(region)
  task.output = out
  task.loss_tensor = loss
  local ctx = task._loop
  if ctx then fire(ctx, AFTER_FORWARD) end
  local k = task.accum_steps
  if k > 1 then loss = loss / k end
  local scaler = task.scaler
  if scaler then loss = scaler:scale(loss) end
  local steps_now = k == 1 or (task.iteration + 1) % k == 0
  region = profiler.begin('backward')
  if task.ddp and not steps_now then
    task.ddp:no_sync(loss.backward, loss) -- accumulate on this rank; the k-th backward all-reduces
  else
    loss:backward()
  end
  profiler.finish(region)
  local v = task.loss_tensor:item()
  task.loss_value = v
  task.storage:put_scalar('loss', v)
  if ctx then fire(ctx, AFTER_BACKWARD) end
  if steps_now then
    local opt = task.optimizer
    if scaler and not scaler:unscale(task:trainable_parameters()) then
      -- f16 grads overflowed: no step; the scale halves and the skip is logged
      local before, after = scaler:update()
      task.storage:put_scalar('amp_skipped_steps', scaler.skipped_steps)
      util.end_live_line()
      io.stderr:write(string.format('step %d: f16 grads hold inf/nan; step skipped, loss scale %g -> %g\n',
        task.iteration, before, after))
      return -- unscale has zeroed the grads
    end
    if scaler then
      scaler:update()
      task.storage:put_scalar('loss_scale', scaler.scale_value)
    end
    if task.clip_norm then
      local norm = cr.optim.clip_grad_norm(task:trainable_parameters(), task.clip_norm)
      task.storage:put_scalar('grad_norm', norm)
    end
    if task.clip_value then cr.optim.clip_grad_value(task:trainable_parameters(), task.clip_value) end
    region = profiler.begin('optimizer')
    opt:step()
    opt:zero_grad()
    profiler.finish(region)
  end
end

-- Forward and loss with recording off; the eval hook reads task.output and the batch.
-- (If the forward fails, cr.train restores the grad mode on its way out.)
function M.eval(task, batch)
  local prev = cr.set_grad_enabled(false)
  local out = task.model(batch.input)
  task.output = out
  if task.loss then
    local loss = task.loss(out, batch)
    task.loss_tensor = loss
    task.loss_value = loss:item()
  end
  cr.set_grad_enabled(prev)
end

return M
