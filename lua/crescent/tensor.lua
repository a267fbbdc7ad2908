-- crescent.tensor — the Tensor metatype: properties (shape, dtype, grad…), operators,
-- construction from Lua values, conversion back (item, totable) and the methods every
-- op family installs (see crescent/ops/*.lua).
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local util = require 'crescent.util'

local box, own, check, retry = util.box, util.own, util.check, util.retry

local Tensor = {}          -- methods
local props = {}           -- read-only properties: t.shape, t.dtype, ...
local setters = {}         -- t.grad = g, t.requires_grad = true
local mt = {}

local tensor_ct = ffi.typeof('cr_tensor')
-- C types are made once here, never given as strings to ffi functions in code that can be
-- JIT-compiled: recording a string C type parses it with a stale lua_State when the last
-- FFI call ran in a coroutine that is gone, and this LuaJIT (Debian 12) then crashes.
local tensor_ptr_ct, double_vla_ct = ffi.typeof('cr_tensor*'), ffi.typeof('double[?]')
local is_tensor = function(x) return type(x) == 'cdata' and ffi.istype(tensor_ptr_ct, x) end

mt.__index = function(t, k)
  local m = Tensor[k]
  if m ~= nil then return m end
  local p = props[k]
  if p then
    if not C.cr_tensor_is_live(t) then error("tensor." .. k .. ': not a live tensor (it was freed)', 2) end
    return p(t)
  end
  return nil
end
mt.__newindex = function(t, k, v)
  local s = setters[k]
  if not s then error("tensor has no settable field '" .. tostring(k) .. "'", 2) end
  s(t, v)
end

-- ---- scalars: a Lua number next to a tensor becomes a 0-dim tensor of a dtype that does
-- not widen it (x_f16 * 2 stays f16), following PyTorch's promotion of python scalars.
local DT_F32, DT_F64, DT_I64, DT_BOOL = C.CR_DT_F32, C.CR_DT_F64, C.CR_DT_I64, C.CR_DT_BOOL
local function scalar_for(v, like)
  local dt
  if type(v) == 'boolean' then
    v = v and 1 or 0
    dt = DT_BOOL
  else
    local ldt = like and C.cr_tensor_dtype(like) or DT_F32
    if C.cr_dtype_is_float(ldt) then dt = ldt
    elseif v == math.floor(v) and ldt ~= DT_BOOL then dt = ldt
    elseif v == math.floor(v) then dt = DT_I64
    else dt = DT_F64 end
  end
  local st = C.cr_tensor_scalar(box, v, dt)
  if st ~= 0 then util.raise(3) end
  return own(box[0])
end
Tensor._scalar_for = scalar_for

local function as_tensor(x, like, what)
  if is_tensor(x) then return x end
  local tx = type(x)
  if tx == 'number' or tx == 'boolean' then return scalar_for(x, like) end
  error((what or 'op') .. ': expected a tensor or a number, got ' .. tx, 3)
end

-- ---- the op helpers: what code that calls the C ops uses (the op families, nn, optim,
-- ssl, io, autograd): W.call(f, self, ...) runs a C op and owns its result (a C error
-- becomes a Lua error naming the op), W.check_tensor, W.is_tensor, W.as_tensor,
-- W.construct, W.unary, W.binary
local W = {}
Tensor.op_helpers = W
W.is_tensor = is_tensor
W.as_tensor = as_tensor

-- f(out, a, b) with numbers promoted
function W.binary(f, name)
  return function(a, b)
    if not is_tensor(a) then a = as_tensor(a, is_tensor(b) and b or nil, name) end
    if not is_tensor(b) then b = as_tensor(b, a, name) end
    local st = f(box, a, b)
    if st ~= 0 then retry(st, f, box, a, b) end
    return own(box[0])
  end
end

function W.unary(f, name)
  return function(a)
    if not is_tensor(a) then error(name .. ': expected a tensor, got ' .. type(a), 2) end
    local st = f(box, a)
    if st ~= 0 then retry(st, f, box, a) end
    return own(box[0])
  end
end

pcall(ffi.cdef, 'typedef struct { const char *dli_fname; void *dli_fbase; const char *dli_sname; void *dli_saddr; } ' ..
  'cr_dl_info; int dladdr(const void *addr, cr_dl_info *info);')
local dl_info_ct, void_ptr_ct = ffi.typeof('cr_dl_info'), ffi.typeof('const void *')
-- The op a C entry point implements, from its symbol (cr_op_select -> select).
local function op_name(f)
  local info = dl_info_ct()
  local ok, found = pcall(ffi.C.dladdr, ffi.cast(void_ptr_ct, f), info)
  if not ok or found == 0 or info.dli_sname == nil then return 'op' end
  return (ffi.string(info.dli_sname):gsub('^cr_op_', ''):gsub('^cr_', ''))
end
-- A self that is not a tensor: a userdata or another cdata would reach C as a pointer to
-- its payload (the FFI converts both) and be read as a tensor; anything else would fail
-- in the FFI in Lua's own words. nil goes on: C names the missing tensor.
local function refuse_self(f, x)
  error(string.format("%s: argument 'self' must be a tensor, got %s", op_name(f), type(x)), util.user_level())
end

-- f(out, ...) for constructors, whose C arguments are numbers and options (arange, eye...)
local function construct(f, ...)
  local st = f(box, ...)
  if st ~= 0 then retry(st, f, box, ...) end
  return own(box[0])
end
W.construct = construct

-- f(out, self, ...) with any further C arguments; self is a tensor
function W.call(f, self, ...)
  if self ~= nil and not is_tensor(self) then refuse_self(f, self) end
  return construct(f, self, ...)
end

-- f(out1, out2, self, ...) returning two tensors
local box2 = ffi.new('cr_tensor*[2]')
function W.call2(f, self, ...)
  if self ~= nil and not is_tensor(self) then refuse_self(f, self) end
  local st = f(box2, box2 + 1, self, ...)
  if st ~= 0 then retry(st, f, box2, box2 + 1, self, ...) end
  return own(box2[0]), own(box2[1])
end

function W.check_tensor(x, what, argname)
  if not is_tensor(x) then
    error(string.format("%s: argument '%s' must be a tensor, got %s", what, argname or 'self', type(x)), 3)
  end
  return x
end

-- ---- properties ---------------------------------------------------------------------
-- t.ndim: the number of dims (0 for a scalar tensor).
function props.ndim(t) return C.cr_tensor_ndim(t) end
-- t.shape: the sizes as a Lua list, {} for a 0-dim tensor (t:size(d) for one dim).
function props.shape(t)
  local n, s = C.cr_tensor_ndim(t), {}
  for i = 0, n - 1 do s[i + 1] = tonumber(C.cr_tensor_size(t, i)) end
  return s
end
-- t.dtype: 'f32', 'f64', 'f16', 'bf16', 'i64', 'i32', 'u8' or 'bool' (t:to(dtype) converts).
function props.dtype(t) return util.dtype_name(C.cr_tensor_dtype(t)) end
-- t.device: 'cpu' or 'cuda:N' (t:to(device) moves).
function props.device(t) return C.cr_tensor_device(t) == C.CR_DEV_CPU and 'cpu' or ('cuda:' .. C.cr_tensor_device_index(t)) end
-- t.requires_grad: whether autograd records ops on t (settable on leaves:
-- t.requires_grad = true).
function props.requires_grad(t) return C.cr_tensor_requires_grad(t) end
-- t.is_leaf: true for a tensor no recorded op made (parameters, inputs).
function props.is_leaf(t) return C.cr_tensor_is_leaf(t) end
-- t.grad: the gradient backward() accumulated into a leaf that requires grad, nil before
-- the first backward (settable: t.grad = g, or nil to clear it).
function props.grad(t)
  local g = C.cr_tensor_grad(t)
  if g == nil then return nil end
  return own(g)
end
-- t.grad_fn: the name of the recorded op that made t ('mm backward', ...), nil on leaves.
function props.grad_fn(t)
  local s = ffi.string(C.cr_tensor_grad_fn_name(t))
  return s ~= '' and s or nil
end
-- t.version: counts the in-place writes to t's storage (a saved tensor changed in place
-- makes backward fail with a message naming the op).
function props.version(t) return tonumber(C.cr_tensor_version(t)) end

function setters.grad(t, g)
  if g ~= nil then W.check_tensor(g, 'set grad', 'grad') end
  check(C.cr_tensor_set_grad(t, g))
end
function setters.requires_grad(t, flag) check(C.cr_tensor_set_requires_grad(t, flag and true or false)) end

-- ---- metadata methods -------------------------------------------------------------------
local function check_live(t, what)
  W.check_tensor(t, what)
  if not C.cr_tensor_is_live(t) then error(what .. ': not a live tensor (it was freed)', 3) end
end
function Tensor.size(t, d)
  check_live(t, 'size')
  if d == nil then return props.shape(t) end
  if type(d) ~= 'number' then error('size: dim must be a number, got ' .. type(d), 2) end
  local n = C.cr_tensor_ndim(t)
  local dd = d < 0 and d + n or d
  if dd < 0 or dd >= n then error(string.format('size: dim %d out of range for a %d-dim tensor', d, n), 2) end
  return tonumber(C.cr_tensor_size(t, dd))
end
function Tensor.dim(t) check_live(t, 'dim'); return C.cr_tensor_ndim(t) end
function Tensor.numel(t) check_live(t, 'numel'); return tonumber(C.cr_tensor_numel(t)) end
function Tensor.stride(t, d)
  check_live(t, 'stride')
  if d ~= nil and type(d) ~= 'number' then error('stride: dim must be a number, got ' .. type(d), 2) end
  if d ~= nil then return tonumber(C.cr_tensor_stride(t, d < 0 and d + C.cr_tensor_ndim(t) or d)) end
  local s = {}
  for i = 0, C.cr_tensor_ndim(t) - 1 do s[i + 1] = tonumber(C.cr_tensor_stride(t, i)) end
  return s
end
-- t.is_cuda: whether t lives on a GPU.
function props.is_cuda(t) return C.cr_tensor_device(t) == C.CR_DEV_CUDA end
function Tensor.is_contiguous(t) check_live(t, 'is_contiguous'); return C.cr_tensor_is_contiguous(t) end
-- conv2d's f32 output on the oneDNN path is channels-last ([N, C, H, W] stored as NHWC)
function Tensor.is_channels_last(t) check_live(t, 'is_channels_last'); return C.cr_tensor_is_channels_last(t) end
function Tensor.is_floating_point(t) check_live(t, 'is_floating_point'); return C.cr_dtype_is_float(C.cr_tensor_dtype(t)) end
function Tensor.data_ptr(t) check_live(t, 'data_ptr'); return C.cr_tensor_data(t) end
function Tensor.same_storage(a, b)
  W.check_tensor(a, 'same_storage')
  W.check_tensor(b, 'same_storage', 'other')
  return C.cr_tensor_same_storage(a, b)
end

-- Releases the tensor's memory now instead of waiting for the GC, and returns true; any
-- later use of t is refused ("not a live tensor"). When a view's base or a graph shares
-- the tensor there is nothing to release yet: free returns false and t stays usable (its
-- memory goes with the last holder).
function Tensor.free(t)
  W.check_tensor(t, 'free')
  return C.cr_tensor_release(t)
end

function Tensor.item(t)
  check_live(t, 'item')
  if C.cr_tensor_numel(t) ~= 1 then
    error(string.format('item: the tensor has %d elements; item() needs exactly one', tonumber(C.cr_tensor_numel(t))), 2)
  end
  if C.cr_tensor_device(t) ~= C.CR_DEV_CPU then t = t:cpu() end
  local v = C.cr_tensor_get_flat(t, 0)
  local dt = C.cr_tensor_dtype(t)
  if dt == DT_BOOL then return v ~= 0 end
  return v
end

-- Nested Lua tables, row-major; 0-dim tensors give a number.
function Tensor.totable(t)
  check_live(t, 'totable')
  if C.cr_tensor_device(t) ~= C.CR_DEV_CPU then t = t:cpu() end
  local n = tonumber(C.cr_tensor_numel(t))
  local buf = ffi.new(double_vla_ct, math.max(n, 1))
  check(C.cr_tensor_read_f64(t, buf))
  local shape = props.shape(t)
  local isbool = C.cr_tensor_dtype(t) == DT_BOOL
  local function conv(v) if isbool then return v ~= 0 end return v end
  if #shape == 0 then return conv(buf[0]) end
  local pos = 0
  local function build(d)
    local out = {}
    if d == #shape then
      for i = 1, shape[d] do out[i] = conv(buf[pos]); pos = pos + 1 end
    else
      for i = 1, shape[d] do out[i] = build(d + 1) end
    end
    return out
  end
  return build(1)
end

-- ---- autograd basics ------------------------------------------------------------------
function Tensor.requires_grad_(t, flag)
  W.check_tensor(t, 'requires_grad_')
  if flag == nil then flag = true end
  check(C.cr_tensor_set_requires_grad(t, flag and true or false))
  return t
end
function Tensor.detach(t)
  W.check_tensor(t, 'detach')
  check(C.cr_tensor_detach(box, t))
  return own(box[0])
end
function Tensor.retain_grad(t) W.check_tensor(t, 'retain_grad'); check(C.cr_tensor_retain_grad(t)); return t end
function Tensor.zero_grad(t) W.check_tensor(t, 'zero_grad'); check(C.cr_tensor_set_grad(t, nil)) end

-- ---- operators ----------------------------------------------------------------------------
-- `tensor + number` and `tensor - number` go through every cdata's shared base metatable,
-- whose __add/__sub try pointer arithmetic before our metatype. For a pointer to an
-- incomplete struct (cr_tensor*) the interpreter refuses the pointer arithmetic and calls
-- the metatype's method, but the trace recorder of Debian 12's LuaJIT (2.1.0-beta3) records
-- pointer arithmetic regardless; it then records the method's bytecode as if it were the
-- caller's and crashes now and then (tools/jit_crash_repro.lua, plain FFI). So the base
-- __add/__sub send tensors straight to crescent and every other cdata to the FFI's own
-- (install_cdata_arith below); the recorder then sees a plain Lua call.
local function tensor_add(a, b) return Tensor.add(a, b) end
local function tensor_sub(a, b) return Tensor.sub(a, b) end
mt.__add, mt.__sub = tensor_add, tensor_sub
local function install_cdata_arith()
  local base = debug.getmetatable(ffi.new('int'))
  if type(base) ~= 'table' or base.__crescent_arith then return end
  local ffi_add, ffi_sub = base.__add, base.__sub
  base.__add = function(a, b)
    if is_tensor(a) or is_tensor(b) then return tensor_add(a, b) end
    return ffi_add(a, b)
  end
  base.__sub = function(a, b)
    if is_tensor(a) or is_tensor(b) then return tensor_sub(a, b) end
    return ffi_sub(a, b)
  end
  base.__crescent_arith = true
  jit.flush() -- the recorder treats this table as constant: no trace may hold the old ones
end
install_cdata_arith()
mt.__mul = function(a, b) return Tensor.mul(a, b) end
mt.__div = function(a, b) return Tensor.div(a, b) end
mt.__unm = function(a) return Tensor.neg(a) end
mt.__pow = function(a, b)
  if type(b) == 'number' and is_tensor(a) then return Tensor.pow_scalar(a, b) end
  return Tensor.pow(a, b)
end
mt.__len = function(t)
  check_live(t, '#')
  return C.cr_tensor_ndim(t) > 0 and tonumber(C.cr_tensor_size(t, 0)) or 0
end
mt.__tostring = function(t)
  if not C.cr_tensor_is_live(t) then return '[freed tensor]' end
  return require('crescent.format').tensor(t)
end
mt.__eq = nil -- cdata equality stays pointer identity; use t:eq(u) for elementwise

Tensor._mt = mt
Tensor.properties = props
Tensor._setters = setters
ffi.metatype(tensor_ct, mt)

return Tensor
