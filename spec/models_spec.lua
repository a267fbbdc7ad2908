-- models_spec — nn.models.resnet18/34/50 (torchvision's parameter counts and names, the
-- CIFAR stem, width multiplier, num_classes = 0, zero_init_residual, a training
-- forward/backward) and nn.MLP projection heads.
local cr = H.cr
local nn = cr.nn or require 'crescent.nn'
local models = nn.models

local function names_of(list)
  local out = {}
  for i, p in ipairs(list) do out[i] = p[1] end
  return out
end

local function count_keys(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

-- Parameter count of a BasicBlock ResNet by formula: stem conv + BN, each block's two
-- 3x3 convs and BNs, a 1x1 conv + BN shortcut where the shape changes, and the fc.
local function basic_count(layers, width, in_ch, stem_k, classes)
  local n = in_ch * width * stem_k * stem_k + 2 * width
  local inp = width
  for i = 1, 4 do
    local planes = width * 2 ^ (i - 1)
    for b = 1, layers[i] do
      n = n + inp * planes * 9 + 2 * planes + planes * planes * 9 + 2 * planes
      if b == 1 and (i > 1 or inp ~= planes) then n = n + inp * planes + 2 * planes end
      inp = planes
    end
  end
  if classes > 0 then n = n + inp * classes + classes end
  return n
end

-- The same for Bottleneck ResNets (1x1 -> 3x3 -> 1x1 x4).
local function bottleneck_count(layers, width, in_ch, stem_k, classes)
  local n = in_ch * width * stem_k * stem_k + 2 * width
  local inp = width
  for i = 1, 4 do
    local planes = width * 2 ^ (i - 1)
    for b = 1, layers[i] do
      n = n + inp * planes + 2 * planes + planes * planes * 9 + 2 * planes + planes * 4 * planes + 8 * planes
      if b == 1 then n = n + inp * planes * 4 + 8 * planes end
      inp = planes * 4
    end
  end
  if classes > 0 then n = n + inp * classes + classes end
  return n
end

describe('nn.models.resnet', function()
  it('has torchvision\'s parameter counts and state_dict names (ImageNet stem, 1000 classes)', function()
    local r18 = models.resnet18()
    assert.equal(11689512, r18:num_parameters())
    assert.equal(11689512, basic_count({ 2, 2, 2, 2 }, 64, 3, 7, 1000))
    local sd = r18:state_dict()
    assert.equal(122, count_keys(sd)) -- 62 parameters + 20 BatchNorms x 3 buffers, as torchvision
    for _, k in ipairs { 'conv1.weight', 'bn1.weight', 'bn1.bias', 'bn1.running_mean', 'bn1.running_var',
                         'bn1.num_batches_tracked', 'layer1.0.conv1.weight', 'layer1.1.bn2.running_var',
                         'layer2.0.downsample.0.weight', 'layer2.0.downsample.1.num_batches_tracked',
                         'layer4.1.conv2.weight', 'fc.weight', 'fc.bias' } do
      assert.is_not_nil(sd[k], k)
    end
    assert.same({ 64, 3, 7, 7 }, sd['conv1.weight'].shape)
    assert.same({ 128, 64, 1, 1 }, sd['layer2.0.downsample.0.weight'].shape)
    assert.same({ 1000, 512 }, sd['fc.weight'].shape)
    local names = names_of(r18:named_parameters())
    assert.same({ 'conv1.weight', 'bn1.weight', 'bn1.bias', 'layer1.0.conv1.weight', 'layer1.0.bn1.weight' },
      { unpack(names, 1, 5) })
    assert.same({ 'layer4.1.bn2.weight', 'layer4.1.bn2.bias', 'fc.weight', 'fc.bias' }, { unpack(names, #names - 3) })
    -- torchvision's conv init: kaiming_normal_(fan_out, relu) -> std sqrt(2 / (512 * 9))
    local w = r18.layer4['1'].conv2.weight
    local std = math.sqrt((w * w):mean():item())
    assert.truthy(math.abs(std - math.sqrt(2 / 4608)) < 0.01 * math.sqrt(2 / 4608), 'std ' .. std)
    H.assert_close(r18.layer1['0'].bn1.weight, cr.ones({ 64 }), 0, 0)

    local r50 = models.resnet50()
    assert.equal(25557032, r50:num_parameters())
    assert.equal(25557032, bottleneck_count({ 3, 4, 6, 3 }, 64, 3, 7, 1000))
    assert.equal(320, count_keys(r50:state_dict()))
    assert.same({ 2048, 512, 1, 1 }, r50.layer4['2'].conv3.weight.shape)
    assert.is_not_nil(r50:state_dict()['layer3.5.bn3.running_mean'])
  end)

  it('counts CIFAR-stem and width variants by formula', function()
    local r18 = models.resnet18 { stem = 'cifar', width = 8, in_channels = 1, num_classes = 10 }
    assert.equal(basic_count({ 2, 2, 2, 2 }, 8, 1, 3, 10), r18:num_parameters())
    assert.equal('Identity', r18.maxpool.__name)
    local r34 = models.resnet34 { stem = 'cifar', width = 4, num_classes = 0 }
    assert.equal(basic_count({ 3, 4, 6, 3 }, 4, 3, 3, 0), r34:num_parameters())
    assert.is_nil(r34.fc)
    local r50 = models.resnet50 { width = 8, in_channels = 2, num_classes = 7 }
    assert.equal(bottleneck_count({ 3, 4, 6, 3 }, 8, 2, 7, 7), r50:num_parameters())
    assert.equal(8 * 8 * 4, r50.num_features)
  end)

  it('trains a tiny CIFAR-stem resnet18 on [2, 1, 28, 28]: forward, backward, BN stats', function()
    cr.manual_seed(0)
    local m = models.resnet18 { stem = 'cifar', width = 8, in_channels = 1, num_classes = 10 }
    local x = cr.randn({ 2, 1, 28, 28 })
    local y = m(x)
    assert.same({ 2, 10 }, y.shape)
    local loss = cr.cross_entropy(y, cr.tensor({ 3, 7 }))
    local l = loss:item()
    assert.truthy(l > 0 and l < 20, 'loss ' .. l)
    loss:backward()
    for _, p in ipairs(m:named_parameters()) do
      local g = p[2].grad
      assert.is_not_nil(g, p[1] .. ' has no grad')
      assert.same(p[2].shape, g.shape)
      local n = g:norm():item()
      assert.truthy(n == n and n < math.huge, p[1] .. ' grad is not finite')
    end
    assert.truthy(m.conv1.weight.grad:norm():item() > 0)
    assert.equal(1, m.bn1.num_batches_tracked:item())
    assert.equal(1, m.layer4['1'].bn2.num_batches_tracked:item())
    assert.truthy(m.bn1.running_mean:abs():sum():item() > 0)
    -- eval: running statistics, so a sample's output does not depend on its batch
    m:eval()
    local both = m(x)
    local alone = m(x:narrow(0, 1, 1))
    H.assert_close(alone, both:narrow(0, 1, 1), 1e-4, 1e-4)
    assert.equal(1, m.bn1.num_batches_tracked:item())
  end)

  it('returns pooled features without fc, and follows the ImageNet stem shapes', function()
    cr.manual_seed(0)
    local feat = models.resnet18 { stem = 'cifar', width = 4, in_channels = 1, num_classes = 0 }
    assert.same({ 3, 32 }, feat(cr.randn({ 3, 1, 16, 16 })).shape)
    local img = models.resnet50 { width = 4, num_classes = 5 }
    assert.same({ 1, 5 }, img(cr.randn({ 1, 3, 64, 64 })).shape)
    -- 64 -> conv1/2 -> 32 -> maxpool/2 -> 16 -> layer2 8 -> layer3 4 -> layer4 2
    local s = img.maxpool(img.relu(img.bn1(img.conv1(cr.randn({ 1, 3, 64, 64 })))))
    assert.same({ 1, 4, 16, 16 }, s.shape)
  end)

  it('zero_init_residual zeroes the last BN gamma of every block', function()
    local m = models.resnet18 { stem = 'cifar', width = 4, in_channels = 1, num_classes = 2, zero_init_residual = true }
    for i = 1, 4 do
      for b = 0, 1 do
        local blk = m['layer' .. i][tostring(b)]
        H.assert_close(blk.bn2.weight, cr.zeros({ 4 * 2 ^ (i - 1) }), 0, 0)
        H.assert_close(blk.bn1.weight, cr.ones({ 4 * 2 ^ (i - 1) }), 0, 0)
      end
    end
    -- so a block without a shortcut conv is the identity on non-negative input
    local blk = m.layer1['1']
    local x = cr.rand({ 2, 4, 5, 5 })
    H.assert_close(blk(x), x, 0, 0)
    local b50 = models.resnet50 { stem = 'cifar', width = 4, num_classes = 0, zero_init_residual = true }
    H.assert_close(b50.layer2['0'].bn3.weight, cr.zeros({ 32 }), 0, 0)
  end)

  it('builds the same weights for the same seed and loads its own state dict', function()
    cr.manual_seed(5)
    local a = models.resnet18 { stem = 'cifar', width = 4, in_channels = 1, num_classes = 3 }
    cr.manual_seed(5)
    local b = models.resnet18 { stem = 'cifar', width = 4, in_channels = 1, num_classes = 3 }
    H.assert_close(a.layer3['0'].downsample['0'].weight, b.layer3['0'].downsample['0'].weight, 0, 0)
    local c = models.resnet18 { stem = 'cifar', width = 4, in_channels = 1, num_classes = 3 }
    a(cr.randn({ 4, 1, 8, 8 })) -- training step: running stats move
    c:load_state_dict(a:state_dict())
    a:eval(); c:eval()
    local x = cr.randn({ 2, 1, 8, 8 })
    H.assert_close(c(x), a(x), 0, 0)
    local other = models.resnet18 { stem = 'cifar', width = 4, in_channels = 1, num_classes = 5 }
    H.assert_error(function() other:load_state_dict(a:state_dict()) end,
      'shape mismatch for fc.weight: the model has [5, 32], the state dict [3, 32]')
  end)

  it('explains bad options', function()
    H.assert_error(function() models.resnet18 { stem = 'tiny' } end, "resnet18: stem must be 'imagenet' or 'cifar'")
    H.assert_error(function() models.resnet18 { widht = 8 } end, "resnet18: unknown option 'widht'", 'width')
    H.assert_error(function() models.resnet50 { num_classes = -1 } end, "resnet50: 'num_classes' must be an integer >= 0")
    H.assert_error(function() models.resnet18(10) end, 'give an options table')
  end)

  it('prints the torchvision tree', function()
    local s = tostring(models.resnet18 { stem = 'cifar', width = 2, in_channels = 1, num_classes = 10 })
    assert.truthy(s:find('^ResNet%(\n  %(conv1%): Conv2d%(1, 2, kernel_size=3, stride=1, padding=1, bias=false%)\n'))
    assert.truthy(s:find('\n  (layer2): Sequential(\n    (0): BasicBlock(\n      (conv1): Conv2d(2, 4, kernel_size=3, '
      .. 'stride=2, padding=1, bias=false)', 1, true))
    assert.truthy(s:find('      (downsample): Sequential(\n        (0): Conv2d(2, 4, kernel_size=1, stride=2, bias=false)',
      1, true))
    local tail = '\n  (fc): Linear(in_features=16, out_features=10, bias=true)\n)'
    assert.equal(tail, s:sub(-#tail))
  end)
end)

describe('nn.MLP', function()
  it('stacks Linear, BatchNorm1d and ReLU with Sequential names (SwAV head)', function()
    local m = nn.MLP { dims = { 8, 16, 4 } }
    assert.equal([[
MLP(
  (0): Linear(in_features=8, out_features=16, bias=true)
  (1): BatchNorm1d(16, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)
  (2): ReLU()
  (3): Linear(in_features=16, out_features=4, bias=true)
)]], tostring(m))
    assert.same({ '0.weight', '0.bias', '1.weight', '1.bias', '3.weight', '3.bias' }, names_of(m:named_parameters()))
    local x = cr.randn({ 5, 8 }, { requires_grad = true })
    local y = m(x)
    assert.same({ 5, 4 }, y.shape)
    y:sum():backward()
    assert.same({ 5, 8 }, x.grad.shape)
    assert.same({ 16, 8 }, m['0'].weight.grad.shape)
  end)

  it('follows its options: no bn, last_bn (affine or not), relu_last, bias', function()
    local plain = nn.MLP { dims = { 4, 6, 6, 2 }, bn = false, bias = false }
    assert.same({ 'Linear', 'ReLU', 'Linear', 'ReLU', 'Linear' }, (function()
      local out = {}
      for i, c in ipairs(plain:children()) do out[i] = c.__name end
      return out
    end)())
    assert.equal(4 * 6 + 6 * 6 + 6 * 2, plain:num_parameters())
    local simclr = nn.MLP { dims = { 4, 8, 3 }, last_bn = true, last_bn_affine = false, relu_last = true }
    local kinds = {}
    for i, c in ipairs(simclr:children()) do kinds[i] = c.__name end
    assert.same({ 'Linear', 'BatchNorm1d', 'ReLU', 'Linear', 'BatchNorm1d', 'ReLU' }, kinds)
    assert.is_nil(simclr['4'].weight)
    assert.is_not_nil(simclr['4'].running_mean)
    -- values: a 2-layer head with hand-set weights and no BN
    local h = nn.MLP { dims = { 2, 2, 1 }, bn = false }
    cr.no_grad(function()
      h['0'].weight:copy_(cr.tensor({ { 1, -1 }, { 2, 0 } }, { dtype = 'f32' }))
      h['0'].bias:copy_(cr.tensor({ 0, -5 }, { dtype = 'f32' }))
      h['2'].weight:copy_(cr.tensor({ { 1, 3 } }, { dtype = 'f32' }))
      h['2'].bias:copy_(cr.tensor({ 0.5 }, { dtype = 'f32' }))
    end)
    -- x = [3, 1]: hidden relu([2, 1]) = [2, 1]; out = 2 + 3 + 0.5
    local x = cr.tensor({ { 3, 1 } }, { dtype = 'f32', requires_grad = true })
    local y = h(x)
    H.assert_close(y, { { 5.5 } })
    -- both hidden units active: dy/dx = W1^T w2 = [1 + 6, -1 + 0]; dy/dW2 = hidden
    y:sum():backward()
    H.assert_close(x.grad, { { 7, -1 } })
    H.assert_close(h['2'].weight.grad, { { 2, 1 } })
    H.assert_close(h['0'].weight.grad, { { 3, 1 }, { 9, 3 } }) -- w2_i * x
  end)

  it('explains bad dims', function()
    H.assert_error(function() nn.MLP { dims = { 8 } } end, 'MLP: dims must list at least an input and an output size')
    H.assert_error(function() nn.MLP { dims = { 8, 0 } } end, "'dims[2]' must be an integer >= 1")
    H.assert_error(function() nn.MLP { dims = { 8, 4 }, lastbn = true } end, "MLP: unknown option 'lastbn'")
  end)
end)
