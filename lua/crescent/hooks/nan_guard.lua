-- crescent.hooks.nan_guard — stops training when numbers go bad. The loss is checked
-- every step (after the forward, before its NaN reaches the grads); grads (after the
-- backward) and params (after the step) every `every` steps, since each check reads
-- every tensor. The error names the step range since the last good check and which of
-- loss / grads / params went bad (and the first bad parameter's name).
--
-- With an f16 loss scaler (train.amp=f16) the grads are the scaler's to check: a step
-- whose scaled grads overflow is skipped and the scale halves (the scaler counts them,
-- amp_skipped_steps), so the guard leaves grads alone and stops only on a non-finite
-- loss or parameter, or when the scale has fallen below f16's smallest normal number
-- (2^-14): grads that are non-finite at every scale are not an overflow.
local NanGuard = {}
NanGuard.__index = NanGuard

local function finite(v) return v == v and v ~= math.huge and v ~= -math.huge end

-- first non-finite tensor among named params (field = 'grad' or nil for the values)
local function first_bad(named, field)
  for _, np in ipairs(named) do
    local t = np[2]
    if field then t = t.grad end
    if t ~= nil and not finite(t:sum():item()) then return np[1] end
  end
  return nil
end

function NanGuard:before_train(task)
  self.last_good = task.iteration
  self.named = task.model and task.model.named_parameters and task.model:named_parameters() or {}
end

-- step: the step (counted from 1) at which the bad value was seen
function NanGuard:fail(task, what, detail, step)
  local range
  if self.last_good + 1 >= step then range = 'at step ' .. step
  else range = string.format('between steps %d and %d', self.last_good + 1, step) end
  error(string.format('NaN/Inf guard: %s went non-finite %s (epoch %d, last good check after step %d)%s; ' ..
    'lower optim.lr, set optim.clip_norm, or check the data', what, range, task.epoch + 1,
    self.last_good, detail or ''), 0)
end

function NanGuard:after_forward(task)
  if task.phase_name ~= 'train' then return end
  local l = task.loss_tensor
  if l == nil then return end
  local v = l:item()
  if not finite(v) then
    -- the loss is checked every step, so the range is this step alone
    self:fail(task, 'loss', ' (loss = ' .. tostring(v) .. ')', task.iteration + 1)
  end
end

local MIN_LOSS_SCALE = 2 ^ -14

function NanGuard:after_backward(task)
  if task.phase_name ~= 'train' or task.scaler or (task.iteration + 1) % self.every ~= 0 then return end
  local bad = first_bad(self.named, 'grad')
  if bad then self:fail(task, 'grads', ", first in '" .. bad .. "'", task.iteration + 1) end
end

function NanGuard:after_step(task)
  if task.phase_name ~= 'train' then return end
  local scaler = task.scaler
  if scaler and scaler.scale_value < MIN_LOSS_SCALE then
    self:fail(task, 'grads', string.format(' at every loss scale: the f16 loss scaler has skipped %d steps and its ' ..
      'scale fell to %g', scaler.skipped_steps, scaler.scale_value), task.iteration)
  end
  if task.iteration % self.every ~= 0 then return end
  local bad = first_bad(self.named, nil)
  -- the loop counted the step that just ran: it is step task.iteration
  if bad then self:fail(task, 'params', ", first in '" .. bad .. "'", task.iteration) end
  self.last_good = task.iteration
end

-- cr.hooks.nan_guard{every = 50}
return function(opts)
  opts = opts or {}
  local every = opts.every or 50
  if type(every) ~= 'number' or every < 1 then
    error('nan_guard: every must be a positive number of steps, got ' .. tostring(every), 2)
  end
  return setmetatable({ name = 'nan_guard', priority = opts.priority or 5, every = every, last_good = 0 }, NanGuard)
end
