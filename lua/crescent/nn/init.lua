-- crescent.nn — neural-network modules: the Module base class, layers, weight init
-- (nn.init) and models (nn.models.resnet18/34/50); nn.MLP for projection heads.
-- Layers call the C ops directly with parameter structs built once in their init, so a
-- forward allocates nothing in Lua beyond the result handles.
local cr = require 'crescent'

local nn = {}
nn.Module = require 'crescent.nn.module'
nn.is_module = nn.Module.is_module
nn.init = require('crescent.nn.initializers')(cr)

-- ---- argument checks shared by the layer files -------------------------------------------------
-- Errors point at the user's line (the first caller outside lua/crescent/), also when a
-- layer is built inside a model.
local is_tensor = cr.Tensor._wrap.is_tensor
local util = require 'crescent.util'
local user_level = util.user_level
-- Models that re-initialise every layer (ResNet) build inside nn._deferring_init(fn):
-- Linear and Conv2d then skip their default init (the weights hold garbage until the
-- model writes them), which halves the build time of a resnet50.
nn._defer_init = false
function nn._deferring_init(fn, ...)
  local prev = nn._defer_init
  nn._defer_init = true
  local ok, err = pcall(fn, ...)
  nn._defer_init = prev
  if not ok then error(err, 0) end
end

-- How a pair prints in a repr: 3 when square, {3, 5} otherwise.
function nn._pair_str(a, b)
  if a == b then return tostring(a) end
  return '{' .. a .. ', ' .. b .. '}'
end

-- Rejects a non-tensor input with a message naming the layer (the C call would only say
-- "cannot convert").
function nn._check_input(m, x)
  if not is_tensor(x) then
    error(string.format('%s: the input must be a tensor, got %s', m.__name, type(x)), user_level())
  end
end

for _, file in ipairs { 'container', 'layers', 'norm', 'mlp', 'transformer', 'multihead_attention' } do
  require('crescent.nn.' .. file)(cr, nn)
end

nn.models = {}
require('crescent.nn.models.resnet')(cr, nn)
require('crescent.nn.models.vit')(cr, nn)

return nn
