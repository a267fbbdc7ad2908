-- crescent.nn.initializers — nn.init: in-place weight initialisation with PyTorch's
-- formulas (kaiming, xavier, uniform, normal, constants) and the layers' default init.
-- Every draw comes from the Philox stream (cr.rand / cr.randn), so a model built after
-- cr.manual_seed(s) has the same weights every time. All writes run under no_grad.
local cr = require 'crescent'
local util = require 'crescent.util'

local init = {}

local function check(t, what)
  if not cr.is_tensor(t) then error(string.format('nn.init.%s: expected a tensor, got %s', what, type(t)), 3) end
  if not t:is_floating_point() then
    error(string.format('nn.init.%s: expected a floating-point tensor, got %s', what, t.dtype), 3)
  end
end

-- fan_in = size(1) * receptive field, fan_out = size(0) * receptive field
function init.calculate_fan_in_and_fan_out(t)
  local nd = t:dim()
  if nd < 2 then
    error(string.format('nn.init: fan in and fan out need a tensor with at least 2 dims, got %d; '
      .. 'use uniform_/normal_/constant_ for biases', nd), 3)
  end
  local receptive = 1
  for d = 2, nd - 1 do receptive = receptive * t:size(d) end
  return t:size(1) * receptive, t:size(0) * receptive
end

local gains = {
  linear = 1, conv1d = 1, conv2d = 1, conv3d = 1, conv_transpose1d = 1, conv_transpose2d = 1,
  conv_transpose3d = 1, sigmoid = 1, tanh = 5 / 3, relu = math.sqrt(2), selu = 3 / 4,
}
-- init.calculate_gain('relu') = sqrt(2); ('leaky_relu', slope) = sqrt(2 / (1 + slope^2))
function init.calculate_gain(nonlinearity, param)
  if nonlinearity == 'leaky_relu' then
    local slope = param or 0.01
    if type(slope) ~= 'number' then error('calculate_gain: the leaky_relu slope must be a number', 2) end
    return math.sqrt(2 / (1 + slope * slope))
  end
  local g = gains[nonlinearity]
  if not g then
    error(string.format("calculate_gain: unknown nonlinearity '%s'; known: leaky_relu, %s",
      tostring(nonlinearity), table.concat(util.sorted_keys(gains), ', ')), 2)
  end
  return g
end

-- src is a fresh draw: scale and shift it in place (no temporaries the size of a
-- resnet50 layer), then copy into t.
local function write(t, src, scale, shift)
  cr.no_grad(function()
    if scale ~= 1 then src:mul_(scale) end
    if shift ~= 0 then src:add_(shift) end
    t:copy_(src)
  end)
  return t
end

-- uniform_(t, a = 0, b = 1)
function init.uniform_(t, a, b)
  check(t, 'uniform_')
  if type(a) == 'table' then a, b = a.a, a.b end
  a, b = a or 0, b or 1
  return write(t, cr.rand(t.shape, { dtype = t.dtype }), b - a, a)
end

-- normal_(t, mean = 0, std = 1)
function init.normal_(t, mean, std)
  check(t, 'normal_')
  if type(mean) == 'table' then mean, std = mean.mean, mean.std end
  mean, std = mean or 0, std or 1
  return write(t, cr.randn(t.shape, { dtype = t.dtype }), std, mean)
end

function init.constant_(t, v)
  check(t, 'constant_')
  if type(v) ~= 'number' then error('nn.init.constant_: value must be a number, got ' .. type(v), 2) end
  cr.no_grad(function() t:fill_(v) end)
  return t
end
function init.zeros_(t) check(t, 'zeros_'); return init.constant_(t, 0) end
function init.ones_(t) check(t, 'ones_'); return init.constant_(t, 1) end

local function kaiming_std(t, opts, what)
  opts = opts or {}
  if type(opts) ~= 'table' then
    error(string.format("nn.init.%s: options must be a table {a, mode, nonlinearity}, got %s", what, type(opts)), 3)
  end
  local mode = opts.mode or 'fan_in'
  if mode ~= 'fan_in' and mode ~= 'fan_out' then
    error(string.format("nn.init.%s: mode must be 'fan_in' or 'fan_out', got '%s'", what, tostring(mode)), 3)
  end
  local fan_in, fan_out = init.calculate_fan_in_and_fan_out(t)
  local fan = mode == 'fan_in' and fan_in or fan_out
  local gain = init.calculate_gain(opts.nonlinearity or 'leaky_relu', opts.a or 0)
  return gain / math.sqrt(fan)
end

-- kaiming_uniform_(t, {a = 0, mode = 'fan_in', nonlinearity = 'leaky_relu'})
function init.kaiming_uniform_(t, opts)
  check(t, 'kaiming_uniform_')
  local bound = math.sqrt(3) * kaiming_std(t, opts, 'kaiming_uniform_')
  return init.uniform_(t, -bound, bound)
end

-- kaiming_normal_(t, {a = 0, mode = 'fan_in', nonlinearity = 'leaky_relu'})
function init.kaiming_normal_(t, opts)
  check(t, 'kaiming_normal_')
  return init.normal_(t, 0, kaiming_std(t, opts, 'kaiming_normal_'))
end

local function gain_of(opts)
  if type(opts) == 'number' then return opts end
  return opts and opts.gain or 1
end
-- xavier_uniform_(t, {gain = 1}) (or a number gain)
function init.xavier_uniform_(t, opts)
  check(t, 'xavier_uniform_')
  local fan_in, fan_out = init.calculate_fan_in_and_fan_out(t)
  local bound = math.sqrt(3) * gain_of(opts) * math.sqrt(2 / (fan_in + fan_out))
  return init.uniform_(t, -bound, bound)
end
function init.xavier_normal_(t, opts)
  check(t, 'xavier_normal_')
  local fan_in, fan_out = init.calculate_fan_in_and_fan_out(t)
  return init.normal_(t, 0, gain_of(opts) * math.sqrt(2 / (fan_in + fan_out)))
end

-- PyTorch's reset_parameters for Linear and Conv2d: kaiming_uniform_(a = sqrt(5)) for the
-- weight (a uniform bound of 1/sqrt(fan_in)) and uniform(+-1/sqrt(fan_in)) for the bias.
-- timm's ViT init of a Linear: trunc_normal(std = 0.02) on the weight (here a normal
-- clipped to 2 std), a zero bias (ViTs and DINO's head use it).
function init.vit_linear_(lin)
  cr.no_grad(function()
    lin.weight:copy_(cr.randn(lin.weight.shape):clamp(-2, 2) * 0.02)
    if lin.bias then init.zeros_(lin.bias) end
  end)
end

function init.default_linear_(weight, bias)
  init.kaiming_uniform_(weight, { a = math.sqrt(5) })
  if bias ~= nil then
    local fan_in = init.calculate_fan_in_and_fan_out(weight)
    local bound = fan_in > 0 and 1 / math.sqrt(fan_in) or 0
    init.uniform_(bias, -bound, bound)
  end
end

return init
