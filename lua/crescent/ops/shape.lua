-- crescent.ops.shape — views and joins: view/reshape, permute/transpose, expand,
-- squeeze/unsqueeze, flatten, slice/narrow/select, clone/contiguous, cat/stack and the
-- Lua-side split/chunk (narrows). Dims are 0-based; negative dims count from the end.
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local util = require 'crescent.util'
local Tensor = require 'crescent.tensor'
local W = Tensor.op_helpers

local M = {}   -- what this family adds to cr: cr.<name> is M.<name>

local call, check_tensor = W.call, W.check_tensor

local function shape_from(what, ...)
  local first = ...
  if type(first) == 'table' then return util.shape_arg(what, first) end
  return util.shape_arg(what, ...)
end

-- W.call refuses a self that is not a tensor, naming the op: these functions check
-- only what they read themselves
function Tensor.view(t, ...) return call(C.cr_op_view, t, shape_from('view', ...)) end
function Tensor.reshape(t, ...) return call(C.cr_op_reshape, t, shape_from('reshape', ...)) end
function Tensor.expand(t, ...) return call(C.cr_op_expand, t, shape_from('expand', ...)) end
-- the shape of `other`, the tensor an *_as op copies it from
local function shape_of(o, what)
  check_tensor(o, what, 'other')
  return util.shape_arg(what, o.shape)
end
function Tensor.expand_as(t, o) return call(C.cr_op_expand, t, shape_of(o, 'expand_as')) end
function Tensor.view_as(t, o) return call(C.cr_op_view, t, shape_of(o, 'view_as')) end
function Tensor.permute(t, ...) return call(C.cr_op_permute, t, shape_from('permute', ...)) end
function Tensor.transpose(t, d0, d1)
  if type(d0) ~= 'number' or type(d1) ~= 'number' then error('transpose: give two dims', 2) end
  return call(C.cr_op_transpose, t, d0, d1)
end
-- t:t() for 2-D matrices
function Tensor.t(t)
  check_tensor(t, 't')
  if t:dim() > 2 then error('t: expects a tensor with at most 2 dims; use transpose', 2) end
  if t:dim() < 2 then return t end
  return call(C.cr_op_transpose, t, 0, 1)
end
Tensor.properties.T = function(t) return Tensor.t(t) end
function Tensor.squeeze(t, dim)
  if dim ~= nil and type(dim) ~= 'number' then error('squeeze: dim must be a number, got ' .. type(dim), 2) end
  return call(C.cr_op_squeeze, t, dim == nil and -1000 or dim)
end
function Tensor.unsqueeze(t, dim)
  if type(dim) ~= 'number' then error('unsqueeze: give a dim', 2) end
  return call(C.cr_op_unsqueeze, t, dim)
end
function Tensor.flatten(t, s, e)
  if (s ~= nil and type(s) ~= 'number') or (e ~= nil and type(e) ~= 'number') then
    error('flatten: start and end dims must be numbers', 2)
  end
  return call(C.cr_op_flatten, t, s or 0, e or -1)
end
function Tensor.slice(t, dim, start, stop, step)
  if type(dim) ~= 'number' then error('slice: give a dim', 2) end
  return call(C.cr_op_slice, t, dim, start or 0, stop or math.huge, step or 1)
end
function Tensor.narrow(t, dim, start, length)
  if type(dim) ~= 'number' or type(start) ~= 'number' or type(length) ~= 'number' then
    error('narrow: give dim, start and length', 2)
  end
  return call(C.cr_op_narrow, t, dim, start, length)
end
function Tensor.select(t, dim, index)
  if type(dim) ~= 'number' or type(index) ~= 'number' then error('select: give dim and index', 2) end
  return call(C.cr_op_select, t, dim, index)
end
function Tensor.clone(t) return call(C.cr_op_clone, t) end
function Tensor.contiguous(t) return call(C.cr_op_contiguous, t) end

-- t:split(size_or_sizes, dim): pieces of `size` (the last may be smaller), or of the
-- given sizes. t:chunk(n, dim): n pieces as equal as possible.
function Tensor.split(t, sizes, dim)
  check_tensor(t, 'split')
  dim = dim or 0
  if type(dim) ~= 'number' then error('split: dim must be a number, got ' .. type(dim), 2) end
  local len = t:size(dim)
  local out, pos = {}, 0
  if type(sizes) == 'number' then
    if sizes <= 0 then error('split: size must be positive', 2) end
    while pos < len do
      local l = math.min(sizes, len - pos)
      out[#out + 1] = t:narrow(dim, pos, l)
      pos = pos + l
    end
    if len == 0 then out[1] = t:narrow(dim, 0, 0) end
  elseif type(sizes) == 'table' then
    local total = 0
    for _, s in ipairs(sizes) do total = total + s end
    if total ~= len then
      error(string.format('split: sizes sum to %d but dim %d has size %d', total, dim, len), 2)
    end
    for _, s in ipairs(sizes) do
      out[#out + 1] = t:narrow(dim, pos, s)
      pos = pos + s
    end
  else
    error('split: give a size or a table of sizes', 2)
  end
  return out
end
function Tensor.chunk(t, n, dim)
  check_tensor(t, 'chunk')
  if type(n) ~= 'number' or n < 1 then error('chunk: give a positive number of chunks', 2) end
  local len = t:size(dim or 0)
  return Tensor.split(t, math.max(1, math.ceil(len / n)), dim)
end

local list_buf = ffi.new('cr_tensor*[1024]')
local function join(f, what, ts, dim)
  if type(ts) ~= 'table' then error(what .. ': expected a table of tensors', 3) end
  if #ts > 1024 then error(what .. ': at most 1024 tensors', 3) end
  for i = 1, #ts do
    if not W.is_tensor(ts[i]) then error(string.format('%s: element %d is a %s, not a tensor', what, i, type(ts[i])), 3) end
    list_buf[i - 1] = ts[i]
  end
  local st = f(util.box, list_buf, #ts, dim or 0)
  if st ~= 0 then util.retry(st, f, util.box, list_buf, #ts, dim or 0) end
  return util.own(util.box[0])
end
function M.cat(ts, dim) return join(C.cr_op_cat, 'cat', ts, dim) end
function M.stack(ts, dim) return join(C.cr_op_stack, 'stack', ts, dim) end

for _, name in ipairs { 'view', 'reshape', 'expand', 'permute', 'transpose', 'squeeze', 'unsqueeze',
                        'flatten', 'slice', 'narrow', 'select', 'clone', 'contiguous', 'split', 'chunk' } do
  M[name] = Tensor[name]
end

return M
