-- crescent.nn.models.vit — Vision Transformers as timm builds them (vit_tiny, vit_small,
-- vit_base), with timm's parameter names (patch_embed.proj.weight, cls_token, pos_embed,
-- blocks.<i>.norm1.weight, blocks.<i>.attn.qkv.weight, blocks.<i>.mlp.fc1.weight,
-- norm.weight, head.weight), so a timm or DINO state dict loads by name. The image is cut
-- into patch x patch squares by a strided convolution, a learned class token is put in
-- front, learned position embeddings are added, `depth` pre-norm blocks run, and the
-- class token after the final LayerNorm is the feature (num_classes = 0) or goes through
-- the head. Options: img_size (224; 28 for Fashion-MNIST), patch (16), in_channels (3),
-- num_classes (1000; 0: the features), drop_path (the last block's rate; linear from 0).
--   local m = cr.nn.models.vit_tiny{img_size = 28, patch = 4, in_channels = 1, num_classes = 0}
--   local f = m(x)                    -- [B, 192]
-- Images of another size (DINO's 96 px local crops beside 224 px global ones) get the
-- position embeddings of their patch grid resampled bicubically from the trained grid
-- (PyTorch's F.interpolate(mode = 'bicubic', align_corners = False), border clamped, as
-- timm's resample_abs_pos_embed), made of two matrix products so gradients reach
-- pos_embed; the class token's embedding is kept as it is.
local checks = require 'crescent.checks'
local cr = require 'crescent'
local Module = require 'crescent.nn.module'
local init = require 'crescent.nn.initializers'
local common = require 'crescent.nn.common'
local container = require 'crescent.nn.container'
local layers = require 'crescent.nn.layers'
local transformer = require 'crescent.nn.transformer'

local M = {}   -- the classes and functions of this file, which crescent.nn carries

local int, options = checks.int, checks.options

local SIZES = { vit_tiny = { 192, 12, 3 }, vit_small = { 384, 12, 6 }, vit_base = { 768, 12, 12 } }

-- Keys' cubic convolution (A = -0.75, PyTorch's) for a distance t in [0, 2).
local function cubic(t)
  local A = -0.75
  t = math.abs(t)
  if t <= 1 then return ((A + 2) * t - (A + 3)) * t * t + 1 end
  if t < 2 then return ((A * t - 5 * A) * t + 8 * A) * t - 4 * A end
  return 0
end
-- The [n_out, n_in] matrix of a 1-D bicubic resize (align_corners = False; source
-- indices clamped to the border).
local function bicubic_matrix(n_in, n_out, dtype)
  local rows = {}
  for i = 0, n_out - 1 do
    local row = {}
    for j = 1, n_in do row[j] = 0 end
    local src = (i + 0.5) * n_in / n_out - 0.5
    local x0 = math.floor(src)
    local t = src - x0
    for k = -1, 2 do
      local j = math.min(math.max(x0 + k, 0), n_in - 1)
      row[j + 1] = row[j + 1] + cubic(k - t)
    end
    rows[i + 1] = row
  end
  return cr.tensor(rows, { dtype = dtype or 'f32' })
end

local VisionTransformer = Module:extend('VisionTransformer')
function VisionTransformer:init(dim, depth, heads, opts)
  opts = options('VisionTransformer', opts, { img_size = true, patch = true, in_channels = true, num_classes = true,
                                              drop_path = true, mlp_ratio = true, qkv_bias = true })
  local img, patch = int('VisionTransformer', 'img_size', opts.img_size or 224, 1),
    int('VisionTransformer', 'patch', opts.patch or 16, 1)
  if img % patch ~= 0 then
    checks.fail(string.format('VisionTransformer: img_size %d is not a multiple of patch %d', img, patch))
  end
  local cin = int('VisionTransformer', 'in_channels', opts.in_channels or 3, 1)
  local classes = int('VisionTransformer', 'num_classes', opts.num_classes == nil and 1000 or opts.num_classes, 0)
  self.dim, self.img_size, self.patch, self.grid = dim, img, patch, img / patch
  self.num_features = dim
  self.patch_embed = Module:extend('PatchEmbed')()
  self.patch_embed.proj = layers.Conv2d(cin, dim, patch, { stride = patch })
  local tokens = self.grid * self.grid + 1
  self:register_parameter('cls_token', cr.randn({ 1, 1, dim }) * 1e-6)
  self:register_parameter('pos_embed', cr.randn({ 1, tokens, dim }):clamp(-2, 2) * 0.02)
  self.blocks = container.ModuleList()
  local dp = opts.drop_path or 0
  for i = 1, depth do
    self.blocks:add(transformer.TransformerBlock(dim, { num_heads = heads, mlp_ratio = opts.mlp_ratio or 4,
      qkv_bias = opts.qkv_bias ~= false, drop_path = depth > 1 and dp * (i - 1) / (depth - 1) or dp }))
  end
  self.norm = transformer.LayerNorm(dim)
  if classes > 0 then self.head = layers.Linear(dim, classes) end
  -- timm's init: trunc_normal(0.02) Linear weights with zero biases
  self:apply(function(m) if m.__name == 'Linear' then init.vit_linear_(m) end end)
end

-- The position embeddings for a gh x gw patch grid: the trained ones, or resampled.
function VisionTransformer:pos_embed_for(gh, gw)
  local g = self.grid
  if gh == g and gw == g then return self.pos_embed end
  local D = self.dim
  local cls = self.pos_embed:narrow(1, 0, 1)                             -- [1, 1, D]
  local grid = self.pos_embed:narrow(1, 1, g * g):reshape({ g, g * D })  -- rows of the grid
  local ah, aw = bicubic_matrix(g, gh, grid.dtype), bicubic_matrix(g, gw, grid.dtype)
  local rows = ah:mm(grid):reshape({ gh, g, D })                         -- [gh, g, D]
  local both = aw:mm(rows:transpose(0, 1):reshape({ g, gh * D }))       -- [gw, gh D]
  local patches = both:reshape({ gw, gh, D }):transpose(0, 1):reshape({ 1, gh * gw, D })
  return cr.cat({ cls, patches }, 1)
end

-- The tokens after the blocks and the final norm, [B, 1 + patches, dim].
function VisionTransformer:tokens(x)
  common.check_input(self, x)
  local p = self.patch
  if x.ndim ~= 4 or x.shape[3] % p ~= 0 or x.shape[4] % p ~= 0 then
    checks.fail(string.format('VisionTransformer: expected images [B, C, H, W] with H and W multiples of the patch ' ..
      'size %d, got [%s]', p, table.concat(x.shape, ', ')))
  end
  local B = x.shape[1]
  local pe = self.patch_embed.proj(x)                                    -- [B, dim, gh, gw]
  local t = pe:reshape({ B, self.dim, -1 }):transpose(1, 2)              -- [B, gh gw, dim]
  local pos = self:pos_embed_for(x.shape[3] / p, x.shape[4] / p)
  t = cr.cat({ self.cls_token:expand({ B, 1, self.dim }), t }, 1) + pos
  for i = 0, self.blocks:len() - 1 do t = self.blocks:get(i)(t) end
  return self.norm(t)
end

function VisionTransformer:forward(x)
  local cls = self:tokens(x):select(1, 0)                                -- [B, dim]
  if self.head then return self.head(cls) end
  return cls
end

function VisionTransformer:extra_repr()
  return string.format('dim=%d, depth=%d, img_size=%d, patch=%d', self.dim, self.blocks:len(), self.img_size,
    self.patch)
end
M.VisionTransformer = VisionTransformer
-- the position embeddings' resampling matrix, for its spec
VisionTransformer.bicubic_matrix = bicubic_matrix

for name, s in pairs(SIZES) do
  M[name] = function(opts) return VisionTransformer(s[1], s[2], s[3], opts) end
end

return M
