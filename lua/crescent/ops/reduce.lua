-- crescent.ops.reduce — reductions over dims (nil = all; a dim or a table of dims) with
-- keepdim: sum, mean, max/min (values and indices along a dim), amax/amin, argmax/argmin,
-- var/std, norm and logsumexp. Dims are 0-based; negative dims count from the end.
local C = require('crescent.ffi').C
local util = require 'crescent.util'
local Tensor = require 'crescent.tensor'
local W = Tensor.op_helpers

local M = {}   -- what this family adds to cr: cr.<name> is M.<name>

local function ndim(t) return C.cr_tensor_ndim(t) end
local function mask(name, t, dims) return util.dims_mask(name, dims, ndim(t)) end
local function flag(v) return v and true or false end
local function check_dim(name, dim)
  if type(dim) ~= 'number' or dim ~= math.floor(dim) then
    error(string.format('%s: dim must be an integer, got %s', name, tostring(dim)), 3)
  end
  return dim
end

local function reducer(name)
  local f = C['cr_op_' .. name]
  return function(t, dims, keepdim)
    W.check_tensor(t, name)
    return W.call(f, t, mask(name, t, dims), flag(keepdim))
  end
end
-- t:sum(dims, keepdim), t:mean, t:amax, t:amin, t:logsumexp: over dims (nil: all of
-- them; a dim or a list of dims, 0-based, negative from the end), the reduced dims kept
-- as size 1 when keepdim is true. Half inputs sum in f32 under cr.autocast.
Tensor.sum = reducer('sum')
Tensor.mean = reducer('mean')
Tensor.amax = reducer('amax')
Tensor.amin = reducer('amin')
Tensor.logsumexp = reducer('logsumexp')

-- t:max() -> the max of all elements (0-dim); t:max(dim, keepdim) -> values, indices.
local function minmax(name, whole)
  local f = C['cr_op_' .. name .. '_dim']
  return function(t, dim, keepdim)
    W.check_tensor(t, name)
    if dim == nil then return W.call(whole, t, 0, false) end
    if W.is_tensor(dim) then -- torch.max(a, b): the elementwise maximum
      local ew = Tensor[name .. 'imum']
      if not ew then error(name .. ': elementwise ' .. name .. 'imum is not available', 2) end
      return ew(t, dim)
    end
    return W.call2(f, t, check_dim(name, dim), flag(keepdim))
  end
end
Tensor.max = minmax('max', C.cr_op_amax)
Tensor.min = minmax('min', C.cr_op_amin)

-- t:argmax() over the flattened tensor; t:argmax(dim, keepdim) along dim.
local FLAT = -1000
local function arg(name)
  local f = C['cr_op_' .. name]
  return function(t, dim, keepdim)
    W.check_tensor(t, name)
    if dim == nil then return W.call(f, t, FLAT, flag(keepdim)) end
    return W.call(f, t, check_dim(name, dim), flag(keepdim))
  end
end
Tensor.argmax = arg('argmax')
Tensor.argmin = arg('argmin')

-- t:var(dims, {correction = 1, keepdim = false}) or t:var(dims, unbiased, keepdim).
local function var_args(name, t, dims, opts, keepdim)
  local correction = 1
  if type(opts) == 'table' then
    if opts.unbiased ~= nil then correction = opts.unbiased and 1 or 0 end
    if opts.correction ~= nil then correction = opts.correction end
    keepdim = opts.keepdim
  elseif type(opts) == 'boolean' then
    correction = opts and 1 or 0
  elseif opts ~= nil then
    error(name .. ': third argument must be an options table or the unbiased flag, got ' .. type(opts), 3)
  end
  if type(correction) ~= 'number' or correction ~= math.floor(correction) then
    error(name .. ': correction must be an integer, got ' .. tostring(correction), 3)
  end
  return mask(name, t, dims), correction, flag(keepdim)
end
function Tensor.var(t, dims, opts, keepdim)
  W.check_tensor(t, 'var')
  local m, corr, kd = var_args('var', t, dims, opts, keepdim)
  return W.call(C.cr_op_var, t, m, corr, kd)
end
function Tensor.std(t, dims, opts, keepdim)
  W.check_tensor(t, 'std')
  local m, corr, kd = var_args('std', t, dims, opts, keepdim)
  return W.call(C.cr_op_var, t, m, corr, kd):sqrt()
end

-- t:norm(p, dims, keepdim); p = 2 by default, math.huge or 'inf' for max-abs.
function Tensor.norm(t, p, dims, keepdim)
  W.check_tensor(t, 'norm')
  if p == nil or p == 'fro' then p = 2
  elseif p == 'inf' then p = math.huge
  elseif p == '-inf' then p = -math.huge end
  if type(p) ~= 'number' then error('norm: p must be a number, got ' .. type(p), 2) end
  return W.call(C.cr_op_norm, t, p, mask('norm', t, dims), flag(keepdim))
end

for _, name in ipairs { 'sum', 'mean', 'max', 'min', 'amax', 'amin', 'argmax', 'argmin',
                        'var', 'std', 'norm', 'logsumexp' } do
  M[name] = Tensor[name]
end

return M
