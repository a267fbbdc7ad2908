-- crescent.ops.index — gathers, scatters, embedding, sorting and one-hot along one dim
-- (0-based, negative from the end). Indices are i64 tensors (i32 accepted; a Lua table
-- of integers is turned into one); out-of-range values are errors naming the value.
local C = require('crescent.ffi').C
local Tensor = require 'crescent.tensor'
local W = Tensor.op_helpers
local creation = require 'crescent.ops.creation'

local M = {}   -- what this family adds to cr: cr.<name> is M.<name>

local call, call2 = W.call, W.call2

-- a Lua table of indices becomes an i64 tensor on the device of `like` (the data)
local function as_index(x, like)
  if type(x) == 'table' then return creation.tensor(x, { dtype = 'i64', device = W.is_tensor(like) and like.device or nil }) end
  if x ~= nil and not W.is_tensor(x) then
    error('index must be an integer tensor or a list of integers, got ' .. type(x), 3)
  end
  return x -- nil reaches C, which names the missing argument
end
local function check_dim(what, dim)
  if type(dim) ~= 'number' then error(what .. ': dim must be a number, got ' .. tostring(dim), 3) end
end

function Tensor.index_select(t, dim, index)
  W.check_tensor(t, 'index_select')
  check_dim('index_select', dim)
  return call(C.cr_op_index_select, t, dim, as_index(index, t))
end
function Tensor.gather(t, dim, index)
  W.check_tensor(t, 'gather')
  check_dim('gather', dim)
  return call(C.cr_op_gather, t, dim, as_index(index, t))
end
-- out of place: t plus src added at index along dim
function Tensor.scatter_add(t, dim, index, src)
  W.check_tensor(t, 'scatter_add')
  check_dim('scatter_add', dim)
  return call(C.cr_op_scatter_add, t, dim, as_index(index, t), src)
end
function Tensor.index_add(t, dim, index, src)
  W.check_tensor(t, 'index_add')
  check_dim('index_add', dim)
  return call(C.cr_op_index_add, t, dim, as_index(index, t), src)
end

-- F.embedding's order: indices first, then the [num_embeddings, dim] weight.
function M.embedding(index, weight)
  W.check_tensor(weight, 'embedding', 'weight')
  return call(C.cr_op_embedding, weight, as_index(index, weight))
end

-- t:topk(k, dim=-1, largest=true, sorted=true) -> values, indices; the trailing
-- arguments may also come as {dim=, largest=, sorted=}.
function Tensor.topk(t, k, dim, largest, sorted)
  W.check_tensor(t, 'topk')
  if type(k) ~= 'number' or k ~= math.floor(k) then error('topk: k must be an integer, got ' .. tostring(k), 2) end
  if type(dim) == 'table' then dim, largest, sorted = dim.dim, dim.largest, dim.sorted end
  if dim == nil then dim = -1 end
  check_dim('topk', dim)
  if largest == nil then largest = true end
  if sorted == nil then sorted = true end
  return call2(C.cr_op_topk, t, k, dim, largest and true or false, sorted and true or false)
end
-- t:sort(dim=-1, descending=false) -> values, indices (stable); or t:sort{dim=, descending=}
function Tensor.sort(t, dim, descending)
  W.check_tensor(t, 'sort')
  if type(dim) == 'table' then dim, descending = dim.dim, dim.descending end
  if dim == nil then dim = -1 end
  check_dim('sort', dim)
  return call2(C.cr_op_sort, t, dim, descending and true or false)
end
function Tensor.argsort(t, dim, descending)
  local _, idx = Tensor.sort(t, dim, descending)
  return idx
end

-- cr.one_hot(index, num_classes = -1): i64 [..., num_classes]; -1 infers max + 1.
function M.one_hot(index, num_classes)
  if num_classes ~= nil and type(num_classes) ~= 'number' then
    error('one_hot: num_classes must be a number, got ' .. type(num_classes), 2)
  end
  return call(C.cr_op_one_hot, as_index(index), num_classes or -1)
end

for _, name in ipairs { 'index_select', 'gather', 'scatter_add', 'index_add', 'topk', 'sort', 'argsort' } do
  M[name] = Tensor[name]
end

return M
