-- crescent.ops.conv — conv2d and 2-D pooling (max, average, adaptive average) on NCHW
-- tensors, as cr functions and Tensor methods with PyTorch's arguments; sizes are
-- numbers or {h, w} pairs, keyword arguments come in an options table.
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local util = require 'crescent.util'
local Tensor = require 'crescent.tensor'
local W = Tensor.op_helpers

local M = {}   -- what this family adds to cr: cr.<name> is M.<name>

local conv_p = ffi.new('cr_conv2d_params')
local pool_p = ffi.new('cr_pool2d_params')

local INT_MAX = 2 ^ 31 - 1   -- beyond any image: refused as given, not wrapped in C
local function int(what, name, v)
  if type(v) ~= 'number' or v ~= math.floor(v) or v ~= v or math.abs(v) > INT_MAX then
    error(string.format("%s: '%s' must be an integer in [-2^31, 2^31), got %s", what, name, tostring(v)), 4)
  end
  return v
end

-- a number or a {h, w} pair, as two integers
local function pair(what, name, v, default)
  if v == nil then v = default end
  if type(v) == 'number' then
    int(what, name, v)
    return v, v
  end
  if type(v) == 'table' and #v == 2 then
    return int(what, name, v[1]), int(what, name, v[2])
  end
  error(string.format("%s: '%s' must be a number or a {h, w} pair, got %s", what, name,
    type(v) == 'table' and ('a table of ' .. #v) or type(v)), 4)
end

local function options(what, opts, known)
  if opts == nil then return {} end
  if type(opts) ~= 'table' then
    error(string.format('%s: options must be a table, got %s', what, type(opts)), 4)
  end
  for k in pairs(opts) do
    if not known[k] then
      error(string.format("%s: unknown option '%s'; known: %s", what, tostring(k),
        table.concat(util.sorted_keys(known), ', ')), 4)
    end
  end
  return opts
end

local conv_known = { stride = true, padding = true, dilation = true, groups = true }

-- padding = 'valid' is 0; 'same' keeps H x W at stride 1 (symmetric padding only).
local function conv_padding(opts, w)
  local p = opts.padding
  if p == 'valid' then return 0, 0 end
  if p ~= 'same' then return pair('conv2d', 'padding', p, 0) end
  local sh, sw = pair('conv2d', 'stride', opts.stride, 1)
  if sh ~= 1 or sw ~= 1 then error("conv2d: padding='same' needs stride 1", 4) end
  local dh, dw = pair('conv2d', 'dilation', opts.dilation, 1)
  local ws = w.shape
  local th, tw = dh * (ws[3] - 1), dw * (ws[4] - 1)
  if th % 2 ~= 0 or tw % 2 ~= 0 then
    error(string.format("conv2d: padding='same' with kernel %dx%d and dilation {%d, %d} needs uneven " ..
      'padding, which is not supported; pad the input explicitly', ws[3], ws[4], dh, dw), 4)
  end
  return th / 2, tw / 2
end

-- cr.conv2d(x, w, bias, {stride = 1, padding = 0, dilation = 1, groups = 1})
function Tensor.conv2d(x, w, bias, opts)
  W.check_tensor(x, 'conv2d', 'input')
  W.check_tensor(w, 'conv2d', 'weight')
  if bias == false then bias = nil end
  if bias ~= nil and not W.is_tensor(bias) then
    error(string.format('conv2d: bias must be a tensor or nil, got %s; options go in the 4th ' ..
      'argument: cr.conv2d(x, w, nil, {padding = 1})', type(bias)), 2)
  end
  opts = options('conv2d', opts, conv_known)
  conv_p.stride[0], conv_p.stride[1] = pair('conv2d', 'stride', opts.stride, 1)
  conv_p.padding[0], conv_p.padding[1] = conv_padding(opts, w)
  conv_p.dilation[0], conv_p.dilation[1] = pair('conv2d', 'dilation', opts.dilation, 1)
  conv_p.groups = int('conv2d', 'groups', opts.groups or 1)
  return W.call(C.cr_op_conv2d, x, w, bias, conv_p)
end

local function pool_params(what, kernel, opts, known)
  opts = options(what, opts, known)
  if kernel == nil then error(what .. ': give a kernel size (a number or a {h, w} pair)', 3) end
  pool_p.kernel[0], pool_p.kernel[1] = pair(what, 'kernel_size', kernel)
  if opts.stride == nil then
    pool_p.stride[0], pool_p.stride[1] = 0, 0 -- C reads 0 as "the kernel size"
  else
    pool_p.stride[0], pool_p.stride[1] = pair(what, 'stride', opts.stride)
    if pool_p.stride[0] < 1 or pool_p.stride[1] < 1 then
      error(string.format('%s: stride must be >= 1, got {%d, %d}', what,
        tonumber(pool_p.stride[0]), tonumber(pool_p.stride[1])), 3)
    end
  end
  pool_p.padding[0], pool_p.padding[1] = pair(what, 'padding', opts.padding, 0)
  pool_p.dilation[0], pool_p.dilation[1] = pair(what, 'dilation', opts.dilation, 1)
  if pool_p.dilation[0] < 1 or pool_p.dilation[1] < 1 then -- C reads 0 as 1
    error(string.format('%s: dilation must be >= 1, got {%d, %d}', what,
      tonumber(pool_p.dilation[0]), tonumber(pool_p.dilation[1])), 3)
  end
  pool_p.ceil_mode = opts.ceil_mode and true or false
  pool_p.count_include_pad = opts.count_include_pad ~= false
  return opts
end

local max_known = { stride = true, padding = true, dilation = true, ceil_mode = true,
                    return_indices = true }
-- cr.max_pool2d(x, kernel, {stride = kernel, padding = 0, dilation = 1,
--   ceil_mode = false, return_indices = false}) -> values[, indices (i64, h*W+w)]
function Tensor.max_pool2d(x, kernel, opts)
  W.check_tensor(x, 'max_pool2d', 'input')
  opts = pool_params('max_pool2d', kernel, opts, max_known)
  local y, ind = W.call2(C.cr_op_max_pool2d, x, pool_p)
  if opts.return_indices then return y, ind end
  return y
end

local avg_known = { stride = true, padding = true, ceil_mode = true, count_include_pad = true }
-- cr.avg_pool2d(x, kernel, {stride = kernel, padding = 0, ceil_mode = false,
--   count_include_pad = true})
function Tensor.avg_pool2d(x, kernel, opts)
  W.check_tensor(x, 'avg_pool2d', 'input')
  pool_params('avg_pool2d', kernel, opts, avg_known)
  return W.call(C.cr_op_avg_pool2d, x, pool_p)
end

-- cr.adaptive_avg_pool2d(x, size): size is a number or an {h, w} pair
function Tensor.adaptive_avg_pool2d(x, size)
  W.check_tensor(x, 'adaptive_avg_pool2d', 'input')
  if size == nil then error('adaptive_avg_pool2d: give an output size (a number or a {h, w} pair)', 2) end
  local h, w = pair('adaptive_avg_pool2d', 'output_size', size)
  return W.call(C.cr_op_adaptive_avg_pool2d, x, h, w)
end

for _, name in ipairs { 'conv2d', 'max_pool2d', 'avg_pool2d', 'adaptive_avg_pool2d' } do
  M[name] = Tensor[name]
end

return M
