-- crescent.ops.reduce — reductions over dims (nil = all; a dim or a table of dims) with
-- keepdim: sum, mean, ...
local C = require('crescent.ffi').C
local util = require 'crescent.util'

return function(cr, Tensor, W)
  local function reducer(name)
    local f = C['cr_op_' .. name]
    return function(t, dims, keepdim)
      W.check_tensor(t, name)
      return W.call(f, t, util.dims_mask(name, dims, C.cr_tensor_ndim(t)), keepdim and true or false)
    end
  end
  Tensor.sum = reducer('sum')
  Tensor.mean = reducer('mean')
  for _, name in ipairs { 'sum', 'mean' } do cr[name] = Tensor[name] end
end
