-- crescent.nn.common — what the layer files share beyond crescent.checks: the deferred
-- init of models that re-initialise every layer, the check that an input is a tensor,
-- and how a pair prints in a repr.
local Tensor = require 'crescent.tensor'
local util = require 'crescent.util'

local M = {}
local is_tensor = Tensor.op_helpers.is_tensor

-- Models that re-initialise every layer (ResNet) build inside deferring_init(fn): Linear
-- and Conv2d then skip their default init (the weights hold garbage until the model
-- writes them), which halves the build time of a resnet50. The layers read defer_init.
M.defer_init = false
function M.deferring_init(fn, ...)
  local prev = M.defer_init
  M.defer_init = true
  local ok, err = pcall(fn, ...)
  M.defer_init = prev
  if not ok then error(err, 0) end
end

-- How a pair prints in a repr: 3 when square, {3, 5} otherwise.
function M.pair_str(a, b)
  if a == b then return tostring(a) end
  return '{' .. a .. ', ' .. b .. '}'
end

-- Rejects a non-tensor input with a message naming the layer (the C call would only say
-- "cannot convert"), at the user's line.
function M.check_input(m, x)
  if not is_tensor(x) then
    error(string.format('%s: the input must be a tensor, got %s', m.__name, type(x)), util.user_level())
  end
end

return M
