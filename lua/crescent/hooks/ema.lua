-- crescent.hooks.ema — an exponential moving average of the model's weights (mmengine's
-- EMAHook, timm's ModelEmaV2): after every optimizer step, ema = m * ema + (1 - m) * w
-- for each floating parameter (the fused C EMA, cr.ssl.ema_update); buffers are not
-- averaged: evaluation uses the model's own (BatchNorm's running statistics), as
-- mmengine's default copies them. With evaluate = true the test phases and the kNN monitor
-- run on the averaged weights (swapped in, then back). The average travels in checkpoints
-- (hook_state.ema.<name>), so a resumed run goes on with it; model.init_prefix=
-- hook_state.ema. loads it as the weights of another run.
--
--   task:add_hook(cr.hooks.ema{model = task.model, momentum = 0.9999, evaluate = true, start = 0})
--   luajit recipes/supervised.lua model.ema=0.999
local cr = require 'crescent'
local momentum = require 'crescent.ssl.momentum'

local Ema = {}
Ema.__index = Ema

local function floating(named)
  local out = {}
  for _, np in ipairs(named) do
    if np[2]:is_floating_point() then out[#out + 1] = np end
  end
  return out
end

function Ema:setup(task)
  self.params = floating(task.model:named_parameters())
  self.sources = {}
  for i, np in ipairs(self.params) do self.sources[i] = np[2] end
  if self.shadow then return end -- restored from a checkpoint (load_tensor_state)
  self.shadow = {}
  cr.no_grad(function()
    for i, np in ipairs(self.params) do self.shadow[i] = np[2]:detach():clone() end
  end)
end

-- After a step that moved the weights (not the first k-1 batches of an accumulation).
function Ema:after_step(task)
  if task.phase_name ~= 'train' then return end
  local k = task.accum_steps or 1
  if task.iteration % k ~= 0 then return end
  local m = task.iteration <= self.start and 0 or self.momentum -- before `start`: follow the weights
  cr.no_grad(function() momentum.ema_update(self.shadow, self.sources, m) end)
end

-- Exchanges the model's weights with the average (twice: back again).
function Ema:swap()
  cr.no_grad(function()
    for i, np in ipairs(self.params) do
      local w, s = np[2], self.shadow[i]
      local keep = w:detach():clone()
      w:detach():copy_(s)
      s:copy_(keep)
    end
  end)
  self.swapped = not self.swapped
end

function Ema:before_phase(task)
  if self.evaluate and task.phase_name == 'test' and not self.swapped then self:swap() end
end

function Ema:after_phase(task)
  if self.swapped and task.phase_name == 'test' then self:swap() end
end

-- An error inside a test phase: the weights go back before anything saves them.
function Ema:on_exception(_)
  if self.swapped then self:swap() end
end

-- fn(...) with the averaged weights in the model (evaluate = true), the trained ones after.
function Ema:with_weights(fn, ...)
  if not self.evaluate or self.swapped then return fn(...) end
  self:swap()
  local res = { pcall(fn, ...) }
  self:swap()
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2)
end

function Ema:tensor_state()
  local out = {}
  for i, np in ipairs(self.params or {}) do out[np[1]] = self.shadow[i] end
  return out
end

function Ema:load_tensor_state(ts)
  local params = floating(self.model_for_load:named_parameters())
  local shadow = {}
  for i, np in ipairs(params) do
    local t = ts[np[1]]
    if not t then error("ema: the checkpoint's average has no '" .. np[1] .. "'", 0) end
    if table.concat(t.shape, 'x') ~= table.concat(np[2].shape, 'x') then
      error(string.format("ema: '%s' is %s in the checkpoint's average but %s in the model", np[1],
        table.concat(t.shape, 'x'), table.concat(np[2].shape, 'x')), 0)
    end
    shadow[i] = t:to(np[2].device):to(np[2].dtype):contiguous():clone()
  end
  self.params, self.shadow = params, shadow
end

-- cr.hooks.ema{model =, momentum = 0.9999, evaluate = true, start = 0, priority = 3}
-- model: the task's model (the average's names and the checkpoint's come from it).
-- start: the first `start` steps copy the weights (m = 0), as timm's warm-up does.
return function(opts)
  opts = opts or {}
  local m = opts.momentum or 0.9999
  if type(m) ~= 'number' or m ~= m or m < 0 or m >= 1 then
    error('ema: momentum must be a number in [0, 1) such as 0.9999, got ' .. tostring(m), 2)
  end
  if not cr.nn.is_module(opts.model) then error('ema: give the model whose weights it averages: {model = task.model}', 2) end
  return setmetatable({ name = 'ema', priority = opts.priority or 3, momentum = m, evaluate = opts.evaluate ~= false,
                        start = opts.start or 0, model_for_load = opts.model }, Ema)
end
