-- crescent.optim.clip — whole-model gradient operations, each one C call over every grad
-- (csrc/optim/clip.c): the total norm, clipping by norm (PyTorch's clip_grad_norm_) or by
-- value, scaling and zeroing in place. Params without a grad are skipped.
--
-- `params` is an optimizer, a module, a list of tensors or a list of {name, tensor} pairs.
--   cr.optim.clip_grad_norm(params, max_norm, {norm_type = 2}) -> total norm before clipping
--   cr.optim.clip_grad_value(params, v)        clamps every grad to [-v, v]
--   cr.optim.grad_norm(params, {norm_type = 2}) -> total norm, grads untouched
--   cr.optim.scale_grads(params, s), cr.optim.zero_grads(params)   (in place)
-- norm_type may be any p > 0, or math.huge for the max-abs norm. The norm accumulates in
-- f64 over fixed chunks, so it is the same number on any thread count.
local ffi = require 'ffi'
local tensor_vla_ct = ffi.typeof('cr_tensor*[?]') -- made once: see tensor.lua on C type strings
local C = require('crescent.ffi').C
local Tensor = require 'crescent.tensor'
local util = require 'crescent.util'

local is_tensor = Tensor.op_helpers.is_tensor
local M = {}

local function fail(msg) error(msg, util.user_level()) end

-- C array of handles, count, names (index -> name, 0-based) for messages.
local function param_array(what, params)
  if type(params) == 'table' and type(params._param_array) == 'function' then
    return params:_param_array()
  end
  if type(params) == 'table' and type(params.parameters) == 'function' and type(params.named_parameters) == 'function' then
    params = params:named_parameters()
  end
  if is_tensor(params) then params = { params } end
  if type(params) ~= 'table' then
    fail(what .. ': expected an optimizer, a module, or a list of tensors, got ' .. type(params))
  end
  local n = #params
  local arr, names = ffi.new(tensor_vla_ct, math.max(n, 1)), {}
  for i, p in ipairs(params) do
    if is_tensor(p) then
      arr[i - 1], names[i - 1] = p, tostring(i)
    elseif type(p) == 'table' and is_tensor(p[2]) then
      arr[i - 1], names[i - 1] = p[2], tostring(p[1])
    else
      fail(string.format('%s: entry %d is not a tensor or a {name, tensor} pair', what, i))
    end
  end
  -- raw pointers: the tensors stay alive through the caller's `params` argument, which
  -- its frame holds until the C call returns
  return arr, n, names
end

local function raise(names)
  local msg = ffi.string(C.cr_last_error()):gsub('parameter (%d+)', function(i)
    local nm = names[tonumber(i)]
    return nm and ("parameter '" .. nm .. "'") or ('parameter ' .. i)
  end)
  fail(msg)
end

local function norm_type_of(what, opts)
  if opts ~= nil and type(opts) ~= 'table' then fail(what .. ': options must be a table, e.g. {norm_type = 2}') end
  local p = opts and opts.norm_type or 2
  if p == 'inf' then p = math.huge end
  if type(p) ~= 'number' or p ~= p or p <= 0 then
    fail(what .. ': norm_type must be a number > 0 (2, 1, or math.huge), got ' .. tostring(p))
  end
  return p
end

local out = ffi.new('double[1]')

function M.grad_norm(params, opts)
  local p = norm_type_of('grad_norm', opts)
  local arr, n, names = param_array('grad_norm', params)
  if C.cr_optim_grad_norm(out, arr, n, p, 1) ~= 0 then raise(names) end
  return out[0]
end

function M.clip_grad_norm(params, max_norm, opts)
  if type(max_norm) ~= 'number' or max_norm ~= max_norm or max_norm < 0 then
    fail('clip_grad_norm: max_norm must be a number >= 0, got ' .. tostring(max_norm))
  end
  local p = norm_type_of('clip_grad_norm', opts)
  local arr, n, names = param_array('clip_grad_norm', params)
  if C.cr_optim_clip_grad_norm(out, arr, n, max_norm, p, 1) ~= 0 then raise(names) end
  return out[0]
end

function M.clip_grad_value(params, v)
  if type(v) ~= 'number' or v ~= v or v < 0 then
    fail('clip_grad_value: the clip value must be a number >= 0, got ' .. tostring(v))
  end
  local arr, n, names = param_array('clip_grad_value', params)
  if C.cr_optim_clip_grad_value(arr, n, v) ~= 0 then raise(names) end
end

function M.scale_grads(params, s)
  if type(s) ~= 'number' then fail('scale_grads: the scale must be a number, got ' .. type(s)) end
  local arr, n, names = param_array('scale_grads', params)
  if C.cr_optim_scale_grads(arr, n, s) ~= 0 then raise(names) end
end

function M.zero_grads(params)
  local arr, n, names = param_array('zero_grads', params)
  if C.cr_optim_zero_grads(arr, n) ~= 0 then raise(names) end
end

return M
