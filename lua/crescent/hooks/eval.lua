-- crescent.hooks.eval — top-k accuracy and mean loss over each test phase, from the
-- eval step's task.output and the batch's targets; reported into the storage
-- (test/top1, test/top5, test/loss, not smoothed) and task.metrics (test_top1, ...).
local meters = require 'crescent.engine.meters'

local Eval = {}
Eval.__index = Eval

function Eval:before_train(task)
  task.meters.test_accuracy = self.accuracy
  task.meters.test_loss = self.loss
end

function Eval:before_phase(task)
  if task.phase_name ~= 'test' then return end
  self.accuracy:reset()
  self.loss:reset()
end

function Eval:after_step(task)
  if task.phase_name ~= 'test' then return end
  local target = task.batch.target
  self.accuracy:update(task.output, target)
  if task.loss_value then self.loss:update(task.loss_value, #target) end
end

function Eval:after_phase(task)
  if task.phase_name ~= 'test' then return end
  local acc = self.accuracy:value()
  if not acc then return end
  local opts = { smoothing_hint = false }
  for name, v in pairs(acc) do
    task.storage:put_scalar('test/' .. name, v, opts)
    task.metrics['test_' .. name] = v
  end
  local l = self.loss:value()
  if l then
    task.storage:put_scalar('test/loss', l, opts)
    task.metrics.test_loss = l
  end
end

-- cr.hooks.eval{topk = {1, 5}}
return function(opts)
  opts = opts or {}
  return setmetatable({ name = 'eval', priority = opts.priority or 40,
                        accuracy = meters.AccuracyMeter { topk = opts.topk or { 1, 5 } },
                        loss = meters.AverageMeter('test_loss') }, Eval)
end
