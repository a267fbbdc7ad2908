-- crescent.nn — neural-network modules: the Module base class, layers, weight init
-- (nn.init) and models (nn.models.resnet18/34/50, vit_*); nn.MLP for projection heads.
-- Layers call the C ops directly with parameter structs built once in their init, so a
-- forward allocates nothing in Lua beyond the result handles. Each file below is an
-- ordinary module returning its classes; this one gathers them.
local nn = {}
nn.Module = require 'crescent.nn.module'
nn.is_module = nn.Module.is_module
nn.init = require 'crescent.nn.initializers'

for _, part in ipairs { require 'crescent.nn.container', require 'crescent.nn.layers', require 'crescent.nn.norm',
                        require 'crescent.nn.mlp', require 'crescent.nn.transformer',
                        require 'crescent.nn.multihead_attention' } do
  for name, v in pairs(part) do nn[name] = v end
end

-- the ResNet classes and builders, and the ViT builders, are nn.models'; the ViT class is
-- nn's, as its blocks are
local vit = require 'crescent.nn.models.vit'
nn.models = {}
for name, v in pairs(require 'crescent.nn.models.resnet') do nn.models[name] = v end
for name, v in pairs(vit) do
  if name ~= 'VisionTransformer' then nn.models[name] = v end
end
nn.VisionTransformer = vit.VisionTransformer

return nn
