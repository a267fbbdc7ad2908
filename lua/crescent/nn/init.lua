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
function nn._error(msg) error(msg, user_level()) end

-- opts must be nil or a table whose keys are all in `known`; returns a table.
function nn._options(what, opts, known)
  if opts == nil then return {} end
  if type(opts) ~= 'table' then
    error(string.format('%s: options must be a table, got %s', what, type(opts)), user_level())
  end
  for k in pairs(opts) do
    if not known[k] then
      error(string.format("%s: unknown option '%s'; known: %s", what, tostring(k),
                          table.concat(util.sorted_keys(known), ', ')),
        user_level())
    end
  end
  return opts
end

function nn._int(what, name, v, min)
  if type(v) ~= 'number' or v ~= math.floor(v) or v < (min or 0) then
    error(string.format("%s: '%s' must be an integer >= %d, got %s", what, name, min or 0, tostring(v)), user_level())
  end
  return v
end

-- A number or an {h, w} pair, as two integers.
function nn._pair(what, name, v, min)
  if type(v) == 'number' then
    nn._int(what, name, v, min)
    return v, v
  end
  if type(v) == 'table' and #v == 2 then
    return nn._int(what, name, v[1], min), nn._int(what, name, v[2], min)
  end
  error(string.format("%s: '%s' must be a number or an {h, w} pair, got %s", what, name, tostring(v)), user_level())
end

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
