-- crescent.nn.layers — the stateless and weight-holding layers: Linear, Conv2d, pooling,
-- activations, Dropout, Flatten, Identity, L2Normalize. Each forward is one C op call
-- with arguments (and parameter structs) prepared in init.
local checks = require 'crescent.checks'
local ffi = require 'ffi'
local C = require('crescent.ffi').C

local cr = require 'crescent'
local Module = require 'crescent.nn.module'
local init = require 'crescent.nn.initializers'
local common = require 'crescent.nn.common'

local M = {}   -- the classes and functions of this file, which crescent.nn carries

local call = cr.Tensor.op_helpers.call
local check_input = common.check_input
local pair, int, pair_str, options = checks.pair, checks.int, common.pair_str, checks.options

local conv_op, linear_op = C.cr_op_conv2d, C.cr_op_linear
local relu_op, dropout_op = C.cr_op_relu, C.cr_op_dropout
local gelu_ops = { none = C.cr_op_gelu, tanh = C.cr_op_gelu_tanh }
local maxpool_op, avgpool_op, adaptive_op = C.cr_op_max_pool2d, C.cr_op_avg_pool2d, C.cr_op_adaptive_avg_pool2d
local flatten_op, normalize_op = C.cr_op_flatten, C.cr_op_normalize

-- ---- Linear ------------------------------------------------------------------------------------
-- nn.Linear(in_features, out_features, {bias = true}) (or a boolean third argument):
-- y = x W^T + b, W [out, in], PyTorch's default init.
local Linear = Module:extend('Linear')
local linear_known = { bias = true }
function Linear:init(in_features, out_features, opts)
  if type(opts) == 'boolean' then opts = { bias = opts } end
  opts = options('Linear', opts, linear_known)
  self.in_features = int('Linear', 'in_features', in_features, 0)
  self.out_features = int('Linear', 'out_features', out_features, 0)
  self:register_parameter('weight', cr.empty({ out_features, in_features }))
  if opts.bias ~= false then self:register_parameter('bias', cr.empty({ out_features })) end
  if not common.defer_init then init.default_linear_(self.weight, self.bias) end
end
function Linear:forward(x)
  check_input(self, x)
  return call(linear_op, x, self.weight, self.bias)
end
function Linear:extra_repr()
  return string.format('in_features=%d, out_features=%d, bias=%s', self.in_features, self.out_features,
    tostring(self.bias ~= nil))
end
M.Linear = Linear

-- ---- Conv2d ---------------------------------------------------------------------------------------
-- nn.Conv2d(in, out, kernel_size, {stride = 1, padding = 0, dilation = 1, groups = 1,
-- bias = true}); sizes are numbers or {h, w}; padding may be 'same' (stride 1) or 'valid'.
local Conv2d = Module:extend('Conv2d')
local conv_known = { stride = true, padding = true, dilation = true, groups = true, bias = true }
function Conv2d:init(in_channels, out_channels, kernel_size, opts)
  opts = options('Conv2d', opts, conv_known)
  int('Conv2d', 'in_channels', in_channels, 1)
  int('Conv2d', 'out_channels', out_channels, 1)
  if kernel_size == nil then checks.fail('Conv2d: give a kernel_size, e.g. nn.Conv2d(3, 16, 3)') end
  local kh, kw = pair('Conv2d', 'kernel_size', kernel_size, 1)
  local sh, sw = pair('Conv2d', 'stride', opts.stride or 1, 1)
  local dh, dw = pair('Conv2d', 'dilation', opts.dilation or 1, 1)
  local groups = int('Conv2d', 'groups', opts.groups or 1, 1)
  if in_channels % groups ~= 0 or out_channels % groups ~= 0 then
    checks.fail(string.format('Conv2d: in_channels (%d) and out_channels (%d) must both be divisible by groups (%d)',
      in_channels, out_channels, groups))
  end
  local ph, pw
  local padding = opts.padding or 0
  if padding == 'valid' then
    ph, pw = 0, 0
  elseif padding == 'same' then
    if sh ~= 1 or sw ~= 1 then checks.fail("Conv2d: padding = 'same' needs stride 1") end
    if (dh * (kh - 1)) % 2 ~= 0 or (dw * (kw - 1)) % 2 ~= 0 then
      checks.fail("Conv2d: padding = 'same' with an even kernel needs uneven padding, which is not supported; "
        .. 'give the padding as numbers')
    end
    ph, pw = dh * (kh - 1) / 2, dw * (kw - 1) / 2
  else
    ph, pw = pair('Conv2d', 'padding', padding, 0)
  end
  self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
  self.kernel_size, self.stride, self.padding, self.dilation = { kh, kw }, { sh, sw }, { ph, pw }, { dh, dw }
  local p = ffi.new('cr_conv2d_params')
  p.stride[0], p.stride[1] = sh, sw
  p.padding[0], p.padding[1] = ph, pw
  p.dilation[0], p.dilation[1] = dh, dw
  p.groups = groups
  self._p = p
  self:register_parameter('weight', cr.empty({ out_channels, in_channels / groups, kh, kw }))
  if opts.bias ~= false then self:register_parameter('bias', cr.empty({ out_channels })) end
  if not common.defer_init then init.default_linear_(self.weight, self.bias) end
end
function Conv2d:forward(x)
  check_input(self, x)
  return call(conv_op, x, self.weight, self.bias, self._p)
end
function Conv2d:extra_repr()
  local k, s, p, d = self.kernel_size, self.stride, self.padding, self.dilation
  local out = string.format('%d, %d, kernel_size=%s, stride=%s', self.in_channels, self.out_channels,
    pair_str(k[1], k[2]), pair_str(s[1], s[2]))
  if p[1] ~= 0 or p[2] ~= 0 then out = out .. ', padding=' .. pair_str(p[1], p[2]) end
  if d[1] ~= 1 or d[2] ~= 1 then out = out .. ', dilation=' .. pair_str(d[1], d[2]) end
  if self.groups ~= 1 then out = out .. ', groups=' .. self.groups end
  if self.bias == nil then out = out .. ', bias=false' end
  return out
end
M.Conv2d = Conv2d

-- ---- pooling ----------------------------------------------------------------------------------------
local function pool_params(what, kernel, opts)
  if kernel == nil then checks.fail(what .. ': give a kernel_size, e.g. nn.' .. what .. '(2)') end
  local kh, kw = pair(what, 'kernel_size', kernel, 1)
  local sh, sw = kh, kw
  if opts.stride ~= nil then sh, sw = pair(what, 'stride', opts.stride, 1) end
  local ph, pw = pair(what, 'padding', opts.padding or 0, 0)
  if 2 * ph > kh or 2 * pw > kw then
    checks.fail(string.format('%s: padding {%d, %d} must be at most half the kernel size {%d, %d}', what, ph, pw, kh, kw))
  end
  local dh, dw = pair(what, 'dilation', opts.dilation or 1, 1)
  local p = ffi.new('cr_pool2d_params')
  p.kernel[0], p.kernel[1] = kh, kw
  p.stride[0], p.stride[1] = sh, sw
  p.padding[0], p.padding[1] = ph, pw
  p.dilation[0], p.dilation[1] = dh, dw
  p.ceil_mode = opts.ceil_mode and true or false
  p.count_include_pad = opts.count_include_pad ~= false
  return p, { kh, kw }, { sh, sw }, { ph, pw }, { dh, dw }
end

-- nn.MaxPool2d(kernel_size, {stride = kernel_size, padding = 0, dilation = 1, ceil_mode = false})
local MaxPool2d = Module:extend('MaxPool2d')
local max_known = { stride = true, padding = true, dilation = true, ceil_mode = true }
function MaxPool2d:init(kernel_size, opts)
  opts = options('MaxPool2d', opts, max_known)
  self._p, self.kernel_size, self.stride, self.padding, self.dilation = pool_params('MaxPool2d', kernel_size, opts)
  self.ceil_mode = opts.ceil_mode and true or false
end
function MaxPool2d:forward(x)
  check_input(self, x)
  return call(maxpool_op, nil, x, self._p) -- nil: no indices wanted (autograd keeps its own)
end
function MaxPool2d:extra_repr()
  local k, s, p, d = self.kernel_size, self.stride, self.padding, self.dilation
  return string.format('kernel_size=%s, stride=%s, padding=%s, dilation=%s, ceil_mode=%s', pair_str(k[1], k[2]),
    pair_str(s[1], s[2]), pair_str(p[1], p[2]), pair_str(d[1], d[2]), tostring(self.ceil_mode))
end
M.MaxPool2d = MaxPool2d

-- nn.AvgPool2d(kernel_size, {stride = kernel_size, padding = 0, ceil_mode = false,
-- count_include_pad = true})
local AvgPool2d = Module:extend('AvgPool2d')
local avg_known = { stride = true, padding = true, ceil_mode = true, count_include_pad = true }
function AvgPool2d:init(kernel_size, opts)
  opts = options('AvgPool2d', opts, avg_known)
  self._p, self.kernel_size, self.stride, self.padding = pool_params('AvgPool2d', kernel_size, opts)
  self.ceil_mode = opts.ceil_mode and true or false
  self.count_include_pad = opts.count_include_pad ~= false
end
function AvgPool2d:forward(x)
  check_input(self, x)
  return call(avgpool_op, x, self._p)
end
function AvgPool2d:extra_repr()
  local k, s, p = self.kernel_size, self.stride, self.padding
  return string.format('kernel_size=%s, stride=%s, padding=%s', pair_str(k[1], k[2]), pair_str(s[1], s[2]),
    pair_str(p[1], p[2]))
end
M.AvgPool2d = AvgPool2d

-- nn.AdaptiveAvgPool2d(output_size): a number or {h, w}
local AdaptiveAvgPool2d = Module:extend('AdaptiveAvgPool2d')
function AdaptiveAvgPool2d:init(output_size)
  if output_size == nil then checks.fail('AdaptiveAvgPool2d: give an output size, e.g. nn.AdaptiveAvgPool2d(1)') end
  self.output_size = { pair('AdaptiveAvgPool2d', 'output_size', output_size, 1) }
  self._h, self._w = self.output_size[1], self.output_size[2]
end
function AdaptiveAvgPool2d:forward(x)
  check_input(self, x)
  return call(adaptive_op, x, self._h, self._w)
end
function AdaptiveAvgPool2d:extra_repr()
  return 'output_size=' .. pair_str(self._h, self._w)
end
M.AdaptiveAvgPool2d = AdaptiveAvgPool2d

-- ---- shape -------------------------------------------------------------------------------------------
-- nn.Flatten(start_dim = 1, end_dim = -1)
local Flatten = Module:extend('Flatten')
function Flatten:init(start_dim, end_dim)
  self.start_dim, self.end_dim = start_dim or 1, end_dim or -1
  if type(self.start_dim) ~= 'number' or type(self.end_dim) ~= 'number' then
    checks.fail('Flatten: start_dim and end_dim must be numbers (dims, 0-based)')
  end
end
function Flatten:forward(x)
  check_input(self, x)
  return call(flatten_op, x, self.start_dim, self.end_dim)
end
function Flatten:extra_repr() return string.format('start_dim=%d, end_dim=%d', self.start_dim, self.end_dim) end
M.Flatten = Flatten

-- nn.Identity(): returns its input (arguments are ignored, as in PyTorch).
local Identity = Module:extend('Identity')
function Identity.forward(_, x) return x end
M.Identity = Identity

-- ---- activations and dropout -------------------------------------------------------------------------
-- nn.ReLU() (an {inplace = true} option is accepted for ported code and ignored: the
-- result is always a new tensor).
local ReLU = Module:extend('ReLU')
function ReLU.init(_, opts) options('ReLU', type(opts) == 'boolean' and {} or opts, { inplace = true }) end
function ReLU:forward(x)
  check_input(self, x)
  return call(relu_op, x)
end
M.ReLU = ReLU

-- nn.GELU(): the exact form, x * Phi(x); nn.GELU{approximate = 'tanh'}: the tanh
-- approximation x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
local GELU = Module:extend('GELU')
function GELU:init(opts)
  opts = options('GELU', opts, { approximate = true })
  self.approximate = opts.approximate or 'none'
  if not gelu_ops[self.approximate] then
    checks.fail(string.format("GELU: approximate must be 'none' or 'tanh', got '%s'", tostring(opts.approximate)))
  end
end
function GELU:forward(x)
  check_input(self, x)
  return call(gelu_ops[self.approximate], x)
end
function GELU:extra_repr() return string.format("approximate='%s'", self.approximate) end
M.GELU = GELU

-- nn.Dropout(p = 0.5): zeroes elements with probability p and scales the rest by
-- 1/(1-p) in training mode; the identity in eval mode.
local Dropout = Module:extend('Dropout')
function Dropout:init(p)
  if type(p) == 'table' then p = p.p end
  p = p or 0.5
  if type(p) ~= 'number' or p < 0 or p > 1 then
    checks.fail('Dropout: p must be a probability in [0, 1], got ' .. tostring(p))
  end
  self.p = p
end
function Dropout:forward(x)
  check_input(self, x)
  return call(dropout_op, x, self.p, self.training)
end
function Dropout:extra_repr() return string.format('p=%g', self.p) end
M.Dropout = Dropout

-- nn.L2Normalize{dim = 1, eps = 1e-12} (or nn.L2Normalize(dim)): x / max(||x||_2, eps)
-- along dim, as the SSL heads normalise embeddings before prototypes or a contrast.
local L2Normalize = Module:extend('L2Normalize')
function L2Normalize:init(opts)
  if type(opts) == 'number' then opts = { dim = opts } end
  opts = options('L2Normalize', opts, { dim = true, eps = true })
  self.dim = opts.dim or 1
  self.eps = opts.eps or 1e-12
  if type(self.dim) ~= 'number' or self.dim ~= math.floor(self.dim) then
    checks.fail('L2Normalize: dim must be an integer (0-based), got ' .. tostring(self.dim))
  end
  if type(self.eps) ~= 'number' or self.eps < 0 then
    checks.fail('L2Normalize: eps must be a non-negative number, got ' .. tostring(self.eps))
  end
end
function L2Normalize:forward(x)
  check_input(self, x)
  return call(normalize_op, x, self.dim, self.eps)
end
function L2Normalize:extra_repr() return string.format('dim=%d, eps=%g', self.dim, self.eps) end
M.L2Normalize = L2Normalize

return M
