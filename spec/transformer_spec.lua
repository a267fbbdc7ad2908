-- transformer_spec — the ViT building blocks (crescent.nn.transformer) and models
-- (crescent.nn.models.vit): attention against a hand-computed softmax(q k^T / sqrt(d)) v
-- in plain Lua, finite-difference gradients of a whole block (input and every parameter,
-- f64), DropPath's train/eval rules, LayerNorm, and the models' timm parameter names and
-- counts (vit_tiny/16 at 224 px with 1000 classes: timm's 5,717,416).
local cr = H.cr
local nn = cr.nn

describe('nn.Attention', function()
  it('computes softmax(q k^T / sqrt(head_dim)) v per head, as a plain-Lua reference does', function()
    cr.manual_seed(3)
    local dim, heads, B, T = 4, 2, 2, 3
    local attn = nn.Attention(dim, { num_heads = heads }):to('f64')
    local x = cr.randn(B, T, dim):double()
    local got = attn(x):totable()
    -- the reference: the same weights, loops over batch, head and tokens
    local qkv = attn.qkv(x):totable()               -- [B][T][3 dim]
    local dh = dim / heads
    local proj_w, proj_b = attn.proj.weight:totable(), attn.proj.bias:totable()
    for b = 1, B do
      local concat = {}
      for t = 1, T do concat[t] = {} end
      for h = 0, heads - 1 do
        for i = 1, T do
          local scores, mx = {}, -math.huge
          for j = 1, T do
            local s = 0
            for d = 1, dh do s = s + qkv[b][i][h * dh + d] * qkv[b][j][dim + h * dh + d] end
            scores[j] = s / math.sqrt(dh)
            mx = math.max(mx, scores[j])
          end
          local z = 0
          for j = 1, T do scores[j] = math.exp(scores[j] - mx); z = z + scores[j] end
          for d = 1, dh do
            local acc = 0
            for j = 1, T do acc = acc + scores[j] / z * qkv[b][j][2 * dim + h * dh + d] end
            concat[i][h * dh + d] = acc
          end
        end
      end
      for t = 1, T do
        for o = 1, dim do
          local y = proj_b[o]
          for d = 1, dim do y = y + proj_w[o][d] * concat[t][d] end
          assert.is_true(math.abs(y - got[b][t][o]) < 1e-12, string.format('b %d t %d o %d: %g vs %g', b, t, o, y,
            got[b][t][o]))
        end
      end
    end
  end)

  it('refuses a dim that the heads do not divide, and tokens of another width', function()
    H.assert_error(function() nn.Attention(10, { num_heads = 3 }) end, 'dim 10 is not divisible by num_heads 3')
    H.assert_error(function() nn.Attention(8, { num_heads = 2 })(cr.randn(2, 3, 4)) end, 'expected tokens [B, T, 8]')
  end)
end)

describe('nn.TransformerBlock', function()
  it('has finite-difference gradients for its input and every parameter (f64)', function()
    cr.manual_seed(5)
    local block = nn.TransformerBlock(4, { num_heads = 2, mlp_ratio = 2 }):to('f64')
    local params = block:named_parameters()
    local inputs, names = { cr.randn(2, 3, 4) }, { 'x' }
    for _, np in ipairs(params) do
      inputs[#inputs + 1] = np[2]:detach()
      names[#names + 1] = np[1]
    end
    H.gradcheck(function(x, ...)
      local vals = { ... }
      -- functional: the block's forward with the given tensors in place of its parameters
      local saved = {}
      for i, np in ipairs(params) do
        local path, owner = np[1], block
        local parts = {}
        for p in path:gmatch('[^.]+') do parts[#parts + 1] = p end
        for k = 1, #parts - 1 do owner = owner[parts[k]] end
        saved[i] = { owner, parts[#parts], owner[parts[#parts]] }
        rawset(owner, parts[#parts], vals[i])
      end
      local y = block(x)
      for _, s in ipairs(saved) do rawset(s[1], s[2], s[3]) end
      return y
    end, inputs, { atol = 1e-6, rtol = 1e-4 })
    assert.is_true(#names > 10)
  end)
end)

describe('position embeddings for another image size', function()
  it("resample as PyTorch's bicubic interpolate does (values from torch 2.15)", function()
    -- F.interpolate(x [1, 1, 2, 4], size = (3, 6), mode = 'bicubic', align_corners = False)
    local bicubic_matrix = nn.VisionTransformer.bicubic_matrix
    local x = cr.tensor({ { 1, 2, 3, 4 }, { 0, -1, 5, 2 } }):double()
    local y = bicubic_matrix(2, 3, 'f64'):mm(x):mm(bicubic_matrix(4, 6, 'f64'):t()):totable()
    local want = { { 0.98492998, 1.62055147, 2.42013121, 2.64859080, 3.55306053, 4.29055834 },
                   { 0.50000012, 0.171875, 1.01967573, 3.58449078, 3.828125, 2.91319513 },
                   { 0.01507061, -1.27680075, -0.38077870, 4.52039146, 4.10319042, 1.53583300 } }
    for i = 1, 3 do for j = 1, 6 do assert.is_true(math.abs(y[i][j] - want[i][j]) < 1e-5, i .. ',' .. j) end end   -- torch's f32
    -- downsampling 4 x 4 to 2 x 2
    local z = cr.arange(16):double():view({ 4, 4 })
    local d = bicubic_matrix(4, 2, 'f64'):mm(z):mm(bicubic_matrix(4, 2, 'f64'):t()):totable()
    assert.are.same({ { 2.03125, 4.21875 }, { 10.78125, 12.96875 } }, d)
    -- the same size is the identity
    assert.are.same(cr.eye(5):totable(), bicubic_matrix(5, 5):totable())
  end)

  it('let a ViT trained at 28 px take 12 px crops, with gradients for pos_embed', function()
    cr.manual_seed(2)
    local m = nn.models.vit_tiny { img_size = 28, patch = 4, in_channels = 1, num_classes = 0 }
    local f = m(cr.randn(3, 1, 12, 12))     -- a 3 x 3 grid from the trained 7 x 7
    assert.are.same({ 3, 192 }, f.shape)
    f:sum():backward()
    assert.is_true(m.pos_embed.grad:abs():sum():item() > 0)
    local pos = m:pos_embed_for(7, 7)
    assert.is_true(pos == m.pos_embed)      -- the trained grid needs no resampling
    assert.are.same({ 1, 10, 192 }, m:pos_embed_for(3, 3).shape)
  end)
end)

describe('nn.DropPath and nn.LayerNorm', function()
  it('drops whole samples in training, scaled by 1 / (1 - p), and is the identity in eval', function()
    cr.manual_seed(1)
    local dp = nn.DropPath(0.5)
    local x = cr.ones(64, 3, 5)
    local y = dp(x)
    local per = y:sum({ 1, 2 }):totable()   -- each sample: 0 or 2 * 15
    local kept = 0
    for _, v in ipairs(per) do
      assert.is_true(v == 0 or math.abs(v - 30) < 1e-5, tostring(v))
      if v > 0 then kept = kept + 1 end
    end
    assert.is_true(kept > 16 and kept < 48, tostring(kept))
    dp:eval()
    assert.is_true(dp(x) == x)
    H.assert_error(function() nn.DropPath(1) end, 'DropPath: p must be in [0, 1)')
  end)

  it('normalises the last dim with eps 1e-6 and affine parameters', function()
    local ln = nn.LayerNorm(4)
    local x = cr.tensor({ { 1, 2, 3, 4 } }):float()
    local y = ln(x):totable()[1]
    local m, v = 2.5, 1.25
    for i = 1, 4 do assert.is_true(math.abs(y[i] - (i - m) / math.sqrt(v + 1e-6)) < 1e-5) end
    assert.are.same({ 'weight', 'bias' }, { ln:named_parameters()[1][1], ln:named_parameters()[2][1] })
  end)
end)

describe('nn.models.vit_*', function()
  it("have timm's parameter names and counts", function()
    local m = nn.models.vit_tiny()
    assert.are.equal(5717416, m:num_parameters())
    local names = {}
    for _, np in ipairs(m:named_parameters()) do names[np[1]] = np[2].shape end
    local want = {
      cls_token = { 1, 1, 192 }, pos_embed = { 1, 197, 192 }, ['patch_embed.proj.weight'] = { 192, 3, 16, 16 },
      ['blocks.0.norm1.weight'] = { 192 }, ['blocks.0.attn.qkv.weight'] = { 576, 192 },
      ['blocks.0.attn.qkv.bias'] = { 576 }, ['blocks.0.attn.proj.weight'] = { 192, 192 },
      ['blocks.11.mlp.fc1.weight'] = { 768, 192 }, ['blocks.11.mlp.fc2.weight'] = { 192, 768 },
      ['norm.weight'] = { 192 }, ['head.weight'] = { 1000, 192 }, ['head.bias'] = { 1000 },
    }
    for k, shape in pairs(want) do assert.are.same(shape, names[k], k) end
    assert.are.equal(12 * 12 + 4 + 2 + 2, #m:named_parameters())   -- blocks, tokens and patch, norm, head
    assert.are.equal(21665664, nn.models.vit_small { num_classes = 0 }:num_parameters())   -- timm's, no head
  end)

  it('gives the class token features of small images, trains, and names a wrong image size', function()
    cr.manual_seed(0)
    local m = nn.models.vit_tiny { img_size = 28, patch = 4, in_channels = 1, num_classes = 0, drop_path = 0.1 }
    local x = cr.randn(2, 1, 28, 28)
    local f = m(x)
    assert.are.same({ 2, 192 }, f.shape)
    f:pow(2):sum():backward()
    assert.is_true(m.pos_embed.grad:abs():sum():item() > 0)
    assert.is_true(m.blocks:get(11).drop_path.p > 0.099)   -- the last block's rate
    H.assert_error(function() m(cr.randn(2, 1, 30, 28)) end, 'H and W multiples of the patch size 4')
    H.assert_error(function() nn.models.vit_tiny { img_size = 30, patch = 4 } end, 'img_size 30 is not a multiple of patch 4')
  end)
end)
