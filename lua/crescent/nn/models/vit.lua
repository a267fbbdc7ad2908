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
-- Images of another size than img_size are refused for now (position-embedding
-- interpolation is issue 25's next step).
return function(cr, nn)
  local Module = nn.Module
  local int, options = nn._int, nn._options

  local SIZES = { vit_tiny = { 192, 12, 3 }, vit_small = { 384, 12, 6 }, vit_base = { 768, 12, 12 } }

  local VisionTransformer = Module:extend('VisionTransformer')
  function VisionTransformer:init(dim, depth, heads, opts)
    opts = options('VisionTransformer', opts, { img_size = true, patch = true, in_channels = true, num_classes = true,
                                                drop_path = true, mlp_ratio = true, qkv_bias = true })
    local img, patch = int('VisionTransformer', 'img_size', opts.img_size or 224, 1),
      int('VisionTransformer', 'patch', opts.patch or 16, 1)
    if img % patch ~= 0 then
      nn._error(string.format('VisionTransformer: img_size %d is not a multiple of patch %d', img, patch))
    end
    local cin = int('VisionTransformer', 'in_channels', opts.in_channels or 3, 1)
    local classes = int('VisionTransformer', 'num_classes', opts.num_classes == nil and 1000 or opts.num_classes, 0)
    self.dim, self.img_size, self.patch, self.grid = dim, img, patch, img / patch
    self.num_features = dim
    self.patch_embed = Module:extend('PatchEmbed')()
    self.patch_embed.proj = nn.Conv2d(cin, dim, patch, { stride = patch })
    local tokens = self.grid * self.grid + 1
    self:register_parameter('cls_token', cr.randn({ 1, 1, dim }) * 1e-6)
    self:register_parameter('pos_embed', cr.randn({ 1, tokens, dim }):clamp(-2, 2) * 0.02)
    self.blocks = nn.ModuleList()
    local dp = opts.drop_path or 0
    for i = 1, depth do
      self.blocks:add(nn.TransformerBlock(dim, { num_heads = heads, mlp_ratio = opts.mlp_ratio or 4,
        qkv_bias = opts.qkv_bias ~= false, drop_path = depth > 1 and dp * (i - 1) / (depth - 1) or dp }))
    end
    self.norm = nn.LayerNorm(dim)
    if classes > 0 then self.head = nn.Linear(dim, classes) end
    -- timm's init: trunc_normal(0.02) Linear weights with zero biases
    self:apply(function(m) if m.__name == 'Linear' then nn._vit_init_linear_(m) end end)
  end

  -- The tokens after the blocks and the final norm, [B, 1 + grid^2, dim].
  function VisionTransformer:tokens(x)
    nn._check_input(self, x)
    if x.ndim ~= 4 or x.shape[3] ~= self.img_size or x.shape[4] ~= self.img_size then
      nn._error(string.format('VisionTransformer: expected images [B, C, %d, %d], got [%s]; other sizes need the ' ..
        'position embeddings interpolated, which is not built yet', self.img_size, self.img_size,
        table.concat(x.shape, ', ')))
    end
    local B = x.shape[1]
    local p = self.patch_embed.proj(x)                                     -- [B, dim, g, g]
    local t = p:reshape({ B, self.dim, -1 }):transpose(1, 2)               -- [B, g^2, dim]
    t = cr.cat({ self.cls_token:expand({ B, 1, self.dim }), t }, 1) + self.pos_embed
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
  nn.VisionTransformer = VisionTransformer

  for name, s in pairs(SIZES) do
    nn.models[name] = function(opts) return VisionTransformer(s[1], s[2], s[3], opts) end
  end
end
