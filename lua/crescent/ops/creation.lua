-- crescent.ops.creation — tensors from Lua values and from nothing: tensor, zeros, ones,
-- full, empty, *_like; ranges and random draws come from the Philox generator in C.
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local util = require 'crescent.util'

return function(cr, Tensor, W)
  local box, own, check = util.box, util.own, util.check

  local function opts_dtype(opts, default)
    return util.dtype(opts and opts.dtype, default)
  end
  local function finish(t, opts)
    if opts and opts.requires_grad then check(C.cr_tensor_set_requires_grad(t, true)) end
    return t
  end

  -- cr.full(shape, value, opts) / cr.zeros(2, 3, opts) / cr.ones({2, 3})
  function cr.full(shape, value, opts)
    if type(value) ~= 'number' and type(value) ~= 'boolean' then
      error('full: value must be a number, got ' .. type(value), 2)
    end
    if type(value) == 'boolean' then value = value and 1 or 0 end
    local n, s = util.shape_arg('full', shape)
    local st = C.cr_op_full(box, n, s, value, opts_dtype(opts))
    if st ~= 0 then util.retry(st, C.cr_op_full, box, n, s, value, opts_dtype(opts)) end
    return finish(own(box[0]), opts)
  end
  local function constant(name, value)
    return function(...)
      local opts, n = util.split_opts(...)
      if n == 0 then error(name .. ': give a shape, e.g. cr.' .. name .. '(2, 3) or cr.' .. name .. '({2, 3})', 2) end
      local first = ...
      local shape = type(first) == 'table' and first or { ... }
      if type(first) ~= 'table' then shape[n + 1] = nil end
      return cr.full(shape, value, opts)
    end
  end
  cr.zeros = constant('zeros', 0)
  cr.ones = constant('ones', 1)
  function cr.empty(...)
    local opts, n = util.split_opts(...)
    local first = ...
    local shape = type(first) == 'table' and first or { ... }
    if type(first) ~= 'table' then shape[n + 1] = nil end
    local nd, s = util.shape_arg('empty', shape)
    local st = C.cr_tensor_empty(box, nd, s, opts_dtype(opts), C.CR_DEV_CPU)
    if st ~= 0 then util.retry(st, C.cr_tensor_empty, box, nd, s, opts_dtype(opts), C.CR_DEV_CPU) end
    return finish(own(box[0]), opts)
  end
  function cr.zeros_like(t, opts) return cr.full(t.shape, 0, { dtype = (opts and opts.dtype) or t.dtype, requires_grad = opts and opts.requires_grad }) end
  function cr.ones_like(t, opts) return cr.full(t.shape, 1, { dtype = (opts and opts.dtype) or t.dtype, requires_grad = opts and opts.requires_grad }) end
  function cr.full_like(t, v, opts) return cr.full(t.shape, v, { dtype = (opts and opts.dtype) or t.dtype, requires_grad = opts and opts.requires_grad }) end

  -- cr.tensor(nested table | number | boolean, opts). Without a dtype: booleans give bool,
  -- integers give i64, anything else f32 (PyTorch's rule).
  function cr.tensor(data, opts)
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
    local buf = ffi.new('double[?]', math.max(#flat, 1), flat)
    local n, s = util.shape_arg('tensor', shape)
    check(C.cr_tensor_from_data(box, buf, n, s, C.CR_DT_F64))
    local t = own(box[0])
    if dt ~= C.CR_DT_F64 then t = W.call(C.cr_op_to, t, dt) end
    return finish(t, opts)
  end

  function Tensor.fill_(t, v) check(C.cr_op_fill_(t, v)); return t end
  function Tensor.zero_(t) check(C.cr_op_zero_(t)); return t end
end
