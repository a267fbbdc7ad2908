-- crescent.ops.elementwise — arithmetic, comparisons, logical ops, unary math and
-- selection (where, masked_fill) as cr functions and Tensor methods; numbers mix with
-- tensors (x * 2, 1 - x, x:lt(0), cr.where(m, x, 0)).
local C = require('crescent.ffi').C
local util = require 'crescent.util'
local Tensor = require 'crescent.tensor'
local W = Tensor.op_helpers
local creation = require 'crescent.ops.creation'

local M = {}   -- what this family adds to cr: cr.<name> is M.<name>

local binary = { 'add', 'sub', 'mul', 'div', 'maximum', 'minimum', 'eq', 'ne', 'lt', 'le', 'gt',
                 'ge', 'logical_and', 'logical_or', 'add_relu' }
for _, name in ipairs(binary) do
  Tensor[name] = W.binary(C['cr_op_' .. name], name)
end
local unary = { 'neg', 'logical_not', 'abs', 'sign', 'exp', 'log', 'sqrt', 'rsqrt', 'sigmoid',
                'tanh', 'relu', 'gelu', 'gelu_tanh' }
for _, name in ipairs(unary) do
  Tensor[name] = W.unary(C['cr_op_' .. name], name)
end
-- t:gelu() is the exact form, x Phi(x); t:gelu{approximate = 'tanh'} (PyTorch's
-- argument) or t:gelu_tanh() the tanh approximation.
local gelu_exact, gelu_tanh = Tensor.gelu, Tensor.gelu_tanh
function Tensor.gelu(t, opts)
  local a = opts ~= nil and (type(opts) == 'table' and opts.approximate or opts) or 'none'
  if a == 'tanh' then return gelu_tanh(t) end
  if a ~= 'none' then error("gelu: approximate must be 'none' or 'tanh', got " .. tostring(a), 2) end
  return gelu_exact(t)
end

-- t:pow(2) and t ^ 2 take the scalar kernel; t:pow(u) and 2 ^ t the tensor one.
local pow_tensor = W.binary(C.cr_op_pow, 'pow')
function Tensor.pow_scalar(t, exponent)
  W.check_tensor(t, 'pow')
  if type(exponent) ~= 'number' then
    error('pow: exponent must be a number, got ' .. type(exponent), 2)
  end
  return W.call(C.cr_op_pow_scalar, t, exponent)
end
function Tensor.pow(a, b)
  if W.is_tensor(a) and type(b) == 'number' then return Tensor.pow_scalar(a, b) end
  if not W.is_tensor(a) and not W.is_tensor(b) then
    error('pow: expected a tensor and a tensor or number, got ' .. type(a) .. ' and ' .. type(b), 2)
  end
  return pow_tensor(a, b)
end

-- t:clamp(lo, hi): either bound may be nil (not both); numbers or tensors (tensor
-- bounds broadcast, through maximum/minimum).
local function bound(v, what)
  if v == nil or type(v) == 'number' or W.is_tensor(v) then return v end
  error('clamp: ' .. what .. ' must be a number, a tensor or nil, got ' .. type(v), 3)
end
function Tensor.clamp(t, lo, hi)
  W.check_tensor(t, 'clamp')
  lo, hi = bound(lo, 'lo'), bound(hi, 'hi')
  if W.is_tensor(lo) or W.is_tensor(hi) then
    if lo == nil and hi == nil then error('clamp: neither lo nor hi was given', 2) end
    local out = t
    if lo ~= nil then out = Tensor.maximum(out, lo) end
    if hi ~= nil then out = Tensor.minimum(out, hi) end
    return out
  end
  return W.call(C.cr_op_clamp, t, lo ~= nil, lo or 0, hi ~= nil, hi or 0)
end
function Tensor.clamp_min(t, lo) return Tensor.clamp(t, lo, nil) end
function Tensor.clamp_max(t, hi) return Tensor.clamp(t, nil, hi) end

-- cr.where(cond, a, b): a and b may be numbers (that do not widen the other operand).
function M.where(cond, a, b)
  W.check_tensor(cond, 'where', 'condition')
  if not W.is_tensor(a) and not W.is_tensor(b) then
    -- two plain values: i64 for integers, bool for booleans, else f32 (as PyTorch)
    local ta, tb = type(a), type(b)
    if (ta ~= 'number' and ta ~= 'boolean') or (tb ~= 'number' and tb ~= 'boolean') then
      error('where: a and b must be tensors or numbers, got ' .. ta .. ' and ' .. tb, 2)
    end
    local dt = 'f32'
    if ta == 'boolean' and tb == 'boolean' then dt = 'bool'
    elseif ta == 'number' and tb == 'number' and a == math.floor(a) and b == math.floor(b) then dt = 'i64' end
    a = creation.full({}, a, { dtype = dt })
  end
  if not W.is_tensor(a) then a = W.as_tensor(a, b, 'where') end
  if not W.is_tensor(b) then b = W.as_tensor(b, a, 'where') end
  return W.call(C.cr_op_where, cond, a, b)
end
function Tensor.where(t, cond, other) return M.where(cond, t, other) end

-- t:masked_fill(mask, value): value a number, a boolean or a one-element tensor.
function Tensor.masked_fill(t, mask, value)
  W.check_tensor(t, 'masked_fill')
  W.check_tensor(mask, 'masked_fill', 'mask')
  if W.is_tensor(value) then value = value:item() end
  if type(value) == 'boolean' then value = value and 1 or 0 end
  if type(value) ~= 'number' then
    error('masked_fill: value must be a number, got ' .. type(value), 2)
  end
  return W.call(C.cr_op_masked_fill, t, mask, value)
end

-- t:to(dtype) converts; t:to('cuda:1') / t:to('cpu') moves (opts.non_blocking: a copy
-- from pinned memory to a GPU returns at once); t:float(), t:double(), t:long(), ...
function Tensor.to(t, what, opts)
  W.check_tensor(t, 'to')
  local dev, index = util.parse_device(what)
  if dev then return W.call(C.cr_op_to_device, t, dev, index, opts and opts.non_blocking or false) end
  if type(what) ~= 'number' and not util.dtypes[what] then
    error(string.format("to: unknown dtype '%s'; use f32, f64, f16, bf16, i64, i32, u8 or bool, or a "
                        .. "device: 'cpu', 'cuda' or 'cuda:N'", tostring(what)), 2)
  end
  return W.call(C.cr_op_to, t, util.dtype(what))
end
function Tensor.cuda(t, index, opts)
  W.check_tensor(t, 'cuda')
  return W.call(C.cr_op_to_device, t, C.CR_DEV_CUDA, index or 0, opts and opts.non_blocking or false)
end
function Tensor.cpu(t) W.check_tensor(t, 'cpu'); return W.call(C.cr_op_to_device, t, C.CR_DEV_CPU, 0, false) end
function Tensor.pin_memory(t) W.check_tensor(t, 'pin_memory'); return W.call(C.cr_op_pin_memory, t) end
function Tensor.is_pinned(t) W.check_tensor(t, 'is_pinned'); return C.cr_tensor_is_pinned(t) end
function Tensor.float(t) W.check_tensor(t, 'float'); return W.call(C.cr_op_to, t, C.CR_DT_F32) end
function Tensor.double(t) W.check_tensor(t, 'double'); return W.call(C.cr_op_to, t, C.CR_DT_F64) end
function Tensor.half(t) W.check_tensor(t, 'half'); return W.call(C.cr_op_to, t, C.CR_DT_F16) end
function Tensor.bfloat16(t) W.check_tensor(t, 'bfloat16'); return W.call(C.cr_op_to, t, C.CR_DT_BF16) end
function Tensor.long(t) W.check_tensor(t, 'long'); return W.call(C.cr_op_to, t, C.CR_DT_I64) end
function Tensor.int(t) W.check_tensor(t, 'int'); return W.call(C.cr_op_to, t, C.CR_DT_I32) end
function Tensor.byte(t) W.check_tensor(t, 'byte'); return W.call(C.cr_op_to, t, C.CR_DT_U8) end
function Tensor.bool(t) W.check_tensor(t, 'bool'); return W.call(C.cr_op_to, t, C.CR_DT_BOOL) end

-- in place (no graph recording on tensors that require grad: see cr_check_inplace)
function Tensor.copy_(t, src)
  W.check_tensor(t, 'copy_')
  src = W.as_tensor(src, t, 'copy_')
  util.check(C.cr_op_copy_(t, src))
  return t
end
function Tensor.add_(t, src, alpha)
  W.check_tensor(t, 'add_')
  src = W.as_tensor(src, t, 'add_')
  util.check(C.cr_op_add_(t, src, alpha or 1))
  return t
end
function Tensor.mul_(t, src)
  W.check_tensor(t, 'mul_')
  src = W.as_tensor(src, t, 'mul_')
  util.check(C.cr_op_mul_(t, src))
  return t
end

for _, name in ipairs(binary) do M[name] = Tensor[name] end
for _, name in ipairs(unary) do M[name] = Tensor[name] end
for _, name in ipairs { 'pow', 'pow_scalar', 'clamp', 'clamp_min', 'clamp_max', 'masked_fill' } do
  M[name] = Tensor[name]
end

return M
