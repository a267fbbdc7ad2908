-- crescent.ops.creation — tensors from Lua values and from nothing: tensor, zeros, ones,
-- full, empty, *_like; ranges and random draws come from the Philox generator in C.
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local util = require 'crescent.util'

local double_vla_ct = ffi.typeof('double[?]') -- made once: see tensor.lua on C type strings

local Tensor = require 'crescent.tensor'
local W = Tensor.op_helpers

local M = {}   -- what this family adds to cr: cr.<name> is M.<name>

local box, own, check = util.box, util.own, util.check

local function opts_dtype(opts, default)
  return util.dtype(opts and opts.dtype, default)
end
-- opts.device ('cpu', 'cuda', 'cuda:N'): where the C entries make the tensor
local function opts_device(opts)
  return util.device(opts and opts.device or 'cpu', 3)
end
-- opts.requires_grad; a tensor made from Lua values is moved to opts.device here
local function finish(t, opts)
  if opts and opts.device and util.device(opts.device, 3) ~= C.cr_tensor_device(t) then t = t:to(opts.device) end
  if opts and opts.requires_grad then check(C.cr_tensor_set_requires_grad(t, true)) end
  return t
end

-- cr.full(shape, value, opts) / cr.zeros(2, 3, opts) / cr.ones({2, 3})
function M.full(shape, value, opts)
  if type(value) ~= 'number' and type(value) ~= 'boolean' then
    error('full: value must be a number, got ' .. type(value), 2)
  end
  if type(value) == 'boolean' then value = value and 1 or 0 end
  local n, s = util.shape_arg('full', shape)
  local dev, index = opts_device(opts)
  local st = C.cr_op_full(box, n, s, value, opts_dtype(opts), dev, index)
  if st ~= 0 then util.retry(st, C.cr_op_full, box, n, s, value, opts_dtype(opts), dev, index) end
  return finish(own(box[0]), opts)
end
local function constant(name, value)
  return function(...)
    local opts, n = util.split_opts(...)
    if n == 0 then error(name .. ': give a shape, e.g. cr.' .. name .. '(2, 3) or cr.' .. name .. '({2, 3})', 2) end
    local first = ...
    local shape = type(first) == 'table' and first or { ... }
    if type(first) ~= 'table' then shape[n + 1] = nil end
    return M.full(shape, value, opts)
  end
end
M.zeros = constant('zeros', 0)
M.ones = constant('ones', 1)
function M.empty(...)
  local opts, n = util.split_opts(...)
  local first = ...
  local shape = type(first) == 'table' and first or { ... }
  if type(first) ~= 'table' then shape[n + 1] = nil end
  local nd, s = util.shape_arg('empty', shape)
  local dev, index = opts_device(opts)
  local st = C.cr_tensor_empty(box, nd, s, opts_dtype(opts), dev, index)
  if st ~= 0 then util.retry(st, C.cr_tensor_empty, box, nd, s, opts_dtype(opts), dev, index) end
  return finish(own(box[0]), { requires_grad = opts and opts.requires_grad })
end
local function like_opts(t, opts, what)
  if not W.is_tensor(t) then error(what .. ': expected a tensor to take the shape of, got ' .. type(t), 3) end
  if opts ~= nil and type(opts) ~= 'table' then error(what .. ': options must be a table, got ' .. type(opts), 3) end
  return { dtype = (opts and opts.dtype) or t.dtype, requires_grad = opts and opts.requires_grad,
           device = (opts and opts.device) or t.device }
end
function M.zeros_like(t, opts)
  local o = like_opts(t, opts, 'zeros_like')
  return M.full(t.shape, 0, o)
end
function M.ones_like(t, opts)
  local o = like_opts(t, opts, 'ones_like')
  return M.full(t.shape, 1, o)
end
function M.full_like(t, v, opts)
  local o = like_opts(t, opts, 'full_like')
  return M.full(t.shape, v, o)
end

-- cr.tensor(nested table | number | boolean, opts). Without a dtype: booleans give bool,
-- integers give i64, anything else f32 (PyTorch's rule).
function M.tensor(data, opts)
  local shape, flat = {}, {}
  local kind = 'int'
  local function note(v)
    if type(v) == 'boolean' then
      if kind == 'int' and #flat == 0 then kind = 'bool' end
      v = v and 1 or 0
    elseif type(v) == 'number' then
      if kind == 'bool' then kind = 'int' end
      if v ~= math.floor(v) or v ~= v or v == math.huge or v == -math.huge then kind = 'float' end
    else
      error('tensor: elements must be numbers or booleans, got ' .. type(v), 4)
    end
    flat[#flat + 1] = v
  end
  if W.is_tensor(data) then return data:clone() end
  if type(data) ~= 'table' then
    note(data)
  else
    local d = data
    while type(d) == 'table' do
      shape[#shape + 1] = #d
      if #d == 0 then break end
      d = d[1]
    end
    local function walk(x, depth)
      if depth > #shape then note(x); return end
      if type(x) ~= 'table' or #x ~= shape[depth] then
        error(string.format('tensor: ragged nested table: dim %d should have %d entries', depth, shape[depth]), 4)
      end
      for i = 1, #x do walk(x[i], depth + 1) end
    end
    walk(data, 1)
  end
  local default = kind == 'bool' and C.CR_DT_BOOL or kind == 'int' and C.CR_DT_I64 or C.CR_DT_F32
  if #flat == 0 then default = C.CR_DT_F32 end
  local dt = opts_dtype(opts, default)
  if not C.cr_dtype_is_float(dt) then   -- PyTorch's rule: a value the dtype cannot hold is an error
    for i, v in ipairs(flat) do
      if not C.cr_dtype_holds(dt, v) then
        error(string.format('tensor: element %d (%s) does not fit %s; give values in range, or a float dtype', i,
          tostring(v), util.dtype_name(dt)), 3)
      end
    end
  end
  local buf = ffi.new(double_vla_ct, math.max(#flat, 1), flat)
  local n, s = util.shape_arg('tensor', shape)
  check(C.cr_tensor_from_data(box, buf, n, s, C.CR_DT_F64))
  local t = own(box[0])
  if dt ~= C.CR_DT_F64 then t = W.call(C.cr_op_to, t, dt) end
  return finish(t, opts)
end

-- ---- ranges ------------------------------------------------------------------------------
-- cr.arange(end) / cr.arange(start, end) / cr.arange(start, end, step), each optionally
-- followed by {dtype=}. Without a dtype: i64 when every argument is an integer, else f32.
function M.arange(...)
  local nums, opts = {}, nil
  for i = 1, select('#', ...) do
    local v = select(i, ...)
    if type(v) == 'table' and i == select('#', ...) then opts = v
    elseif type(v) == 'number' then nums[#nums + 1] = v
    else error('arange: argument ' .. i .. ' is ' .. tostring(v) .. '; give numbers (end) or (start, end, step)', 2) end
  end
  if #nums < 1 or #nums > 3 then error('arange: give end, or start and end, or start, end and step', 2) end
  local start, stop, step = 0, nums[1], 1
  if #nums >= 2 then start, stop = nums[1], nums[2] end
  if #nums == 3 then step = nums[3] end
  local int = start == math.floor(start) and stop == math.floor(stop) and step == math.floor(step)
  local dt = opts_dtype(opts, int and C.CR_DT_I64 or C.CR_DT_F32)
  return finish(W.construct(C.cr_op_arange, start, stop, step, dt, opts_device(opts)), opts)
end
function M.eye(n, m, opts)
  if type(m) == 'table' then m, opts = nil, m end
  if type(n) ~= 'number' or (m ~= nil and type(m) ~= 'number') then
    error('eye: give the number of rows (and optionally columns) as numbers', 2)
  end
  return finish(W.construct(C.cr_op_eye, n, m or n, opts_dtype(opts), opts_device(opts)), opts)
end

-- ---- random draws (Philox; see csrc/core/rng.h for which words each op uses) ------------
-- shape as numbers or one table, then an optional opts table: rand(2, 3), rand({2, 3}, opts)
local function shape_opts(what, ...)
  local nargs = select('#', ...)
  if nargs == 0 then error(what .. ': give a shape, e.g. cr.' .. what .. '(2, 3) or cr.' .. what .. '({2, 3})', 3) end
  local opts, n = util.split_opts(...)
  local first = ...
  local shape = type(first) == 'table' and first or { ... }
  if type(first) ~= 'table' then shape[n + 1] = nil end
  local nd, s = util.shape_arg(what, shape)
  return nd, s, opts
end
local function drawer(what, f)
  return function(...)
    local nd, s, opts = shape_opts(what, ...)
    return finish(W.construct(f, nd, s, opts_dtype(opts), opts_device(opts)), opts)
  end
end
M.rand = drawer('rand', C.cr_op_rand)
M.randn = drawer('randn', C.cr_op_randn)
local function like(f)
  return function(t, opts)
    W.check_tensor(t, 'rand_like', 't')
    local nd, s = util.shape_arg('rand_like', t.shape)
    local dev, index = util.device(opts and opts.device or t.device, 2)
    return finish(W.construct(f, nd, s, opts_dtype(opts, C.cr_tensor_dtype(t)), dev, index), opts)
  end
end
M.rand_like = like(C.cr_op_rand)
M.randn_like = like(C.cr_op_randn)

-- cr.randint(low, high, shape, opts) or cr.randint(high, shape, opts), high exclusive.
function M.randint(low, high, shape, opts)
  if type(high) == 'table' then low, high, shape, opts = 0, low, high, shape end
  if type(low) ~= 'number' or type(high) ~= 'number' then
    error('randint: give low and high as numbers: cr.randint(low, high, {shape})', 2)
  end
  if low ~= math.floor(low) or high ~= math.floor(high) then
    error('randint: low and high must be integers, got ' .. low .. ' and ' .. high, 2)
  end
  if type(shape) == 'number' then shape = { shape } end
  if type(shape) ~= 'table' then error('randint: give a shape table, e.g. cr.randint(0, 10, {3})', 2) end
  local nd, s = util.shape_arg('randint', shape)
  return finish(W.construct(C.cr_op_randint, low, high, nd, s, opts_dtype(opts, C.CR_DT_I64), opts_device(opts)), opts)
end
function M.randperm(n, opts)
  if type(n) ~= 'number' or n ~= math.floor(n) then
    error('randperm: n must be an integer, got ' .. tostring(n), 2)
  end
  return finish(W.construct(C.cr_op_randperm, n, opts_dtype(opts, C.CR_DT_I64), opts_device(opts)), opts)
end
-- cr.bernoulli(p_tensor) or cr.bernoulli(p, shape, opts): 1 with probability p, else 0.
function M.bernoulli(p, shape, opts)
  if W.is_tensor(p) then return W.call(C.cr_op_bernoulli, p) end
  if type(p) ~= 'number' then
    error('bernoulli: give a tensor of probabilities, or a number and a shape', 2)
  end
  if type(shape) == 'number' then shape = { shape } end
  if type(shape) ~= 'table' then error('bernoulli: with a number p, give a shape: cr.bernoulli(0.5, {3, 4})', 2) end
  local nd, s = util.shape_arg('bernoulli', shape)
  return finish(W.construct(C.cr_op_bernoulli_scalar, p, nd, s, opts_dtype(opts), opts_device(opts)), opts)
end
function Tensor.bernoulli(t) return M.bernoulli(t) end

function Tensor.fill_(t, v)
  W.check_tensor(t, 'fill_')
  if type(v) ~= 'number' and type(v) ~= 'boolean' then error('fill_: the value must be a number, got ' .. type(v), 2) end
  if type(v) == 'boolean' then v = v and 1 or 0 end
  check(C.cr_op_fill_(t, v))
  return t
end
function Tensor.zero_(t)
  W.check_tensor(t, 'zero_')
  check(C.cr_op_zero_(t))
  return t
end

return M
