-- crescent.ssl.momentum — momentum (EMA) updates of one model's tensors from another's,
-- exact copies, and the cosine momentum schedule and its hook (MoCo's key encoder, BYOL's
-- target, the EMA hook). The updates are one fused C call (csrc/ssl/).
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local Tensor = require 'crescent.tensor'
local parts = require 'crescent.ssl.method_parts'

local is_tensor = Tensor.op_helpers.is_tensor
local tensor_vla_ct = ffi.typeof('cr_tensor*[?]') -- made once: see tensor.lua on C type strings
local fail, opts_table = parts.fail, parts.opts_table

local M = {}

-- ---- momentum (EMA) update -------------------------------------------------------------
-- A list of tensors, a list of {name, tensor} pairs, or a module (its named_parameters;
-- `buffers = true` picks its named_buffers). Returns a C array, the count and the names.
local function tensor_list(what, side, xs, buffers)
  if type(xs) == 'table' and type(xs.named_parameters) == 'function' then
    xs = buffers and xs:named_buffers() or xs:named_parameters()
  end
  if is_tensor(xs) then xs = { xs } end
  if type(xs) ~= 'table' then
    fail(string.format('%s: the %s must be a module, a list of tensors or a list of {name, tensor} pairs, got %s',
                       what, side, type(xs)))
  end
  local n = #xs
  local arr, names = ffi.new(tensor_vla_ct, math.max(n, 1)), {}
  for i, x in ipairs(xs) do
    if is_tensor(x) then
      arr[i - 1], names[i] = x, nil
    elseif type(x) == 'table' and is_tensor(x[2]) then
      arr[i - 1], names[i] = x[2], tostring(x[1])
    else
      fail(string.format('%s: entry %d of the %s is not a tensor or a {name, tensor} pair', what, i, side))
    end
  end
  return arr, n, names
end

local function pairs_of(what, target, source, buffers)
  -- raw pointers: the tensors stay alive through the caller's arguments until C returns
  local ta, tn, tnames = tensor_list(what, 'target', target, buffers)
  local sa, sn, snames = tensor_list(what, 'source', source, buffers)
  if tn ~= sn then
    fail(string.format('%s: the target has %d tensors but the source has %d; the two models must have the same architecture',
                       what, tn, sn))
  end
  for i = 1, tn do
    if tnames[i] and snames[i] and tnames[i] ~= snames[i] then
      fail(string.format("%s: entry %d is '%s' in the target but '%s' in the source; give the tensors in the same order",
                         what, i, tnames[i], snames[i]))
    end
  end
  return ta, sa, tn, function()
    local msg = ffi.string(C.cr_last_error()):gsub('pair (%d+)', function(i)
      local nm = tnames[tonumber(i) + 1] or snames[tonumber(i) + 1]
      return nm and ("'" .. nm .. "'") or ('pair ' .. (tonumber(i) + 1))
    end)
    fail(msg)
  end
end

-- ssl.ema_update(target, source, m): target = m * target + (1 - m) * source for every pair,
-- in place, one fused C call (MoCo's key encoder: m = 0.999). Targets' versions bump.
function M.ema_update(target, source, m)
  if type(m) ~= 'number' or m ~= m or m < 0 or m > 1 then
    fail('ema_update: the momentum must be a number in [0, 1] (MoCo: 0.999), got ' .. tostring(m))
  end
  local ta, sa, n, raise = pairs_of('ema_update', target, source, false)
  if C.cr_ssl_ema_update(ta, sa, n, m) ~= 0 then raise() end
  return target
end

-- ssl.copy_tensors(target, source, {buffers = true}): exact copies, any dtype. With two
-- modules and buffers = true, copies their named_buffers (BN running statistics).
function M.copy_tensors(target, source, opts)
  opts = opts_table('copy_tensors', opts)
  local ta, sa, n, raise = pairs_of('copy_tensors', target, source, opts.buffers)
  if C.cr_ssl_copy_tensors(ta, sa, n) ~= 0 then raise() end
  return target
end

-- BYOL / MoCo cosine momentum schedule over training progress t in [0, 1]:
-- m(t) = 1 - (1 - m0) * (cos(pi * t) + 1) / 2, from m0 at t = 0 up to 1 at t = 1.
function M.cosine_momentum(m0, t)
  if type(m0) ~= 'number' or m0 < 0 or m0 > 1 then
    fail('cosine_momentum: the base momentum must be in [0, 1], got ' .. tostring(m0))
  end
  if type(t) ~= 'number' or t ~= t then fail('cosine_momentum: progress must be a number in [0, 1], got ' .. tostring(t)) end
  t = math.min(math.max(t, 0), 1)
  return 1 - (1 - m0) * (math.cos(math.pi * t) + 1) / 2
end

-- The {name, tensor} pairs of the modules' parameters, module after module: the two sides
-- of an EMA listed the same way (MoCo's query and key encoders, BYOL's online and target).
function M.named_parameters_of(...)
  local out = {}
  for _, m in ipairs { ... } do
    for _, np in ipairs(m:named_parameters()) do out[#out + 1] = np end
  end
  return out
end

-- The hook of a method with an EMA target (fields momentum, base_momentum and
-- cosine_momentum): before each train step, with cosine_momentum, momentum follows
-- cosine_momentum(base_momentum, iteration / max_iterations); the value goes into the
-- storage as 'momentum'. Priority 45, after the lr schedule.
function M.schedule_hook(name, method)
  return { name = name, priority = 45,
    before_step = function(_, task)
      if task.phase_name ~= 'train' then return end
      if method.cosine_momentum and task.max_iterations > 0 then
        method.momentum = M.cosine_momentum(method.base_momentum, task.iteration / task.max_iterations)
      end
      task.storage:put_scalar('momentum', method.momentum)
    end }
end

return M
