-- crescent.optim.GradScaler — dynamic loss scaling for f16 mixed precision (PyTorch's
-- GradScaler rules). f16 grads underflow below 6e-8; the loss is multiplied by `scale`
-- before backward so they do not, and the grads are divided by it before the step. A
-- step whose grads hold inf or NaN is skipped and the scale halves; after
-- `growth_interval` good steps in a row it doubles.
--   local scaler = cr.optim.GradScaler()
--   scaler:scale(loss):backward()
--   if scaler:unscale(params) then opt:step() end   -- false: skipped (grads zeroed)
--   scaler:update()
local clip = require 'crescent.optim.clip'

local GradScaler = {}
GradScaler.__index = GradScaler

local KNOWN = { init_scale = true, growth_factor = true, backoff_factor = true, growth_interval = true }

local function new(_, opts)
  opts = opts or {}
  if type(opts) ~= 'table' then error('GradScaler: options must be a table, e.g. {init_scale = 65536}', 2) end
  for k in pairs(opts) do
    if not KNOWN[k] then
      error(string.format("GradScaler: unknown option '%s' (known: init_scale, growth_factor, backoff_factor, " ..
        'growth_interval)', tostring(k)), 2)
    end
  end
  local function positive(name, v, default)
    v = v == nil and default or v
    if type(v) ~= 'number' or v ~= v or v <= 0 or v == math.huge then
      error(string.format('GradScaler: %s must be a finite number > 0, got %s', name, tostring(v)), 3)
    end
    return v
  end
  local self = setmetatable({}, GradScaler)
  self.scale_value = positive('init_scale', opts.init_scale, 2 ^ 16)
  self.growth_factor = positive('growth_factor', opts.growth_factor, 2)
  self.backoff_factor = positive('backoff_factor', opts.backoff_factor, 0.5)
  self.growth_interval = math.floor(positive('growth_interval', opts.growth_interval, 2000))
  self.good_steps = 0    -- good steps in a row since the last change of scale
  self.skipped_steps = 0 -- over the run
  self.found_inf = false -- of the last unscale
  return self
end
setmetatable(GradScaler, { __call = new })

-- The loss times the scale (a new tensor; backward from it).
function GradScaler:scale(loss) return loss * self.scale_value end

-- Divides every grad by the scale and checks them. Returns true when they are all
-- finite (step), false otherwise: the grads are then zeroed so the step can be skipped.
function GradScaler:unscale(params)
  clip.scale_grads(params, 1 / self.scale_value)
  local norm = clip.grad_norm(params, { norm_type = math.huge })
  self.found_inf = norm ~= norm or norm == math.huge
  if self.found_inf then clip.zero_grads(params) end
  return not self.found_inf
end

-- After the (possibly skipped) step: halves the scale after a skipped step, doubles it
-- after growth_interval good ones. Returns the scale before and after.
function GradScaler:update()
  local before = self.scale_value
  if self.found_inf then
    self.skipped_steps = self.skipped_steps + 1
    self.scale_value = self.scale_value * self.backoff_factor
    self.good_steps = 0
  else
    self.good_steps = self.good_steps + 1
    if self.good_steps >= self.growth_interval then
      self.scale_value = self.scale_value * self.growth_factor
      self.good_steps = 0
    end
  end
  self.found_inf = false
  return before, self.scale_value
end

-- For checkpoints: the scale and the counters.
function GradScaler:state_dict()
  return { scale = self.scale_value, good_steps = self.good_steps, skipped_steps = self.skipped_steps }
end

function GradScaler:load_state_dict(s)
  if type(s) ~= 'table' or type(s.scale) ~= 'number' then
    error('GradScaler:load_state_dict: expected {scale = , good_steps = , skipped_steps = }', 2)
  end
  self.scale_value, self.good_steps, self.skipped_steps = s.scale, s.good_steps or 0, s.skipped_steps or 0
end

return GradScaler
