-- crescent.ops.elementwise — arithmetic, comparisons and unary math as cr functions and
-- Tensor methods; numbers mix with tensors (x * 2, 1 - x).
local C = require('crescent.ffi').C
local util = require 'crescent.util'

return function(cr, Tensor, W)
  for _, name in ipairs { 'add', 'sub', 'mul', 'div' } do
    Tensor[name] = W.binary(C['cr_op_' .. name], name)
  end
  for _, name in ipairs { 'neg' } do
    Tensor[name] = W.unary(C['cr_op_' .. name], name)
  end

  -- t:to(dtype) converts; t:float(), t:double(), t:long(), ...
  function Tensor.to(t, dtype) return W.call(C.cr_op_to, t, util.dtype(dtype)) end
  function Tensor.float(t) return W.call(C.cr_op_to, t, C.CR_DT_F32) end
  function Tensor.double(t) return W.call(C.cr_op_to, t, C.CR_DT_F64) end
  function Tensor.half(t) return W.call(C.cr_op_to, t, C.CR_DT_F16) end
  function Tensor.bfloat16(t) return W.call(C.cr_op_to, t, C.CR_DT_BF16) end
  function Tensor.long(t) return W.call(C.cr_op_to, t, C.CR_DT_I64) end
  function Tensor.int(t) return W.call(C.cr_op_to, t, C.CR_DT_I32) end
  function Tensor.byte(t) return W.call(C.cr_op_to, t, C.CR_DT_U8) end
  function Tensor.bool(t) return W.call(C.cr_op_to, t, C.CR_DT_BOOL) end

  -- in place (no graph recording on tensors that require grad: see cr_check_inplace)
  function Tensor.copy_(t, src)
    src = W.as_tensor(src, t, 'copy_')
    util.check(C.cr_op_copy_(t, src))
    return t
  end
  function Tensor.add_(t, src, alpha)
    src = W.as_tensor(src, t, 'add_')
    util.check(C.cr_op_add_(t, src, alpha or 1))
    return t
  end
  function Tensor.mul_(t, src)
    src = W.as_tensor(src, t, 'mul_')
    util.check(C.cr_op_mul_(t, src))
    return t
  end

  for _, name in ipairs { 'add', 'sub', 'mul', 'div', 'neg' } do cr[name] = Tensor[name] end
end
