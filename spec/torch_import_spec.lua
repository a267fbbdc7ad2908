-- torch_import_spec — weights exported from PyTorch load into crescent's models by name:
-- the PyTorch twin of our CIFAR ResNet-18 (spec/fixtures/export_torch_resnet.py) writes its
-- state_dict as safetensors with DistributedDataParallel's 'module.' prefix; every name and
-- shape (OIHW convs, [out, in] Linear, 0-dim i64 num_batches_tracked) agrees with ours,
-- cr.io.load_into takes it strictly, and our eval-mode output equals PyTorch's within 1e-4.
-- A file without the BatchNorm step counters (PyTorch before 0.4.1) loads too, listing them
-- as ignored. Without /usr/bin/python3 and torch the PyTorch part is pending (one line);
-- the step-counter rules are also checked on hand-made tensors.
local cr = H.cr
local nn = cr.nn

local PYTHON = os.getenv('CRESCENT_TORCH_PYTHON') or '/usr/bin/python3'
local WIDTH = 8
local N_BN = 20        -- stem + 8 blocks x 2 + 3 downsamples
local N_TENSORS = 122  -- 20 convs, 20 BNs x 5, fc weight and bias

local tmpdir = H.tmpdir('torch_import')
teardown(tmpdir.remove)

local sorted_keys = require('crescent.util').sorted_keys

local function our_resnet()
  return nn.models.resnet18 { stem = 'cifar', width = WIDTH, in_channels = 1, num_classes = 10 }
end

-- Runs the exporter once; returns true, or false and why (torch absent).
local export = H.python_fixture(PYTHON, 'torch', 'spec/fixtures/export_torch_resnet.py', tmpdir.dir .. ' ' .. WIDTH,
  'PyTorch absent: ' .. PYTHON .. ' cannot import torch (apt-get install python3-torch, or CRESCENT_TORCH_PYTHON ' ..
  'picks the python)')

local function eval_output(model, x)
  model:eval()
  return cr.no_grad(function() return model:forward(x) end)
end

describe('PyTorch ResNet-18 weights', function()
  it('have our names, shapes and dtypes (OIHW convs, [out, in] Linear)', function()
    local ok, why = export()
    if not ok then pending(why); return end
    local file = cr.load(tmpdir.path('ddp.safetensors'))
    local theirs = {}
    for name, t in pairs(file) do
      assert.equal('module.', name:sub(1, 7), name)
      theirs[name:sub(8)] = t
    end
    local ours = our_resnet():state_dict()
    assert.same(sorted_keys(ours), sorted_keys(theirs))
    assert.equal(N_TENSORS, #sorted_keys(ours))
    for name, t in pairs(ours) do
      assert.same(t.shape, theirs[name].shape, name)
      assert.equal(t.dtype, theirs[name].dtype, name)
    end
    assert.same({ WIDTH, 1, 3, 3 }, theirs['conv1.weight'].shape)                 -- O, I, H, W
    assert.same({ 2 * WIDTH, WIDTH, 1, 1 }, theirs['layer2.0.downsample.0.weight'].shape)
    assert.same({ 10, 8 * WIDTH }, theirs['fc.weight'].shape)                     -- out, in
    assert.same({}, theirs['bn1.num_batches_tracked'].shape)
  end)

  it("load with remove_prefix = 'module.' and compute PyTorch's eval output", function()
    local ok, why = export()
    if not ok then pending(why); return end
    local model = our_resnet()
    local report = cr.io.load_into(model, tmpdir.path('ddp.safetensors'), { remove_prefix = 'module.' })
    assert.equal(N_TENSORS, report.loaded)
    assert.same({}, report.missing)
    assert.same({}, report.unexpected)
    assert.same({}, report.mismatched)
    assert.same({}, report.ignored)   -- our BatchNorm has num_batches_tracked: it loads
    assert.equal('loaded 122 tensors', cr.io.format_report(report))
    assert.equal(3, model.bn1.num_batches_tracked:item())
    assert.equal(3, model.layer4['1'].bn2.num_batches_tracked:item())
    local io = cr.load(tmpdir.path('io.safetensors'))
    local y = eval_output(model, io.input)
    assert.same({ 4, 10 }, y.shape)
    assert(io.output:abs():max():item() > 0.01, 'the reference output is degenerate')
    H.assert_close(y, io.output, 1e-4, 0, 'crescent vs PyTorch logits')
    -- and fails to match without the weights (the comparison can fail)
    assert(H.max_diff(eval_output(our_resnet(), io.input), io.output) > 1e-3)
  end)

  it('load from a file without num_batches_tracked, listing the counters as ignored', function()
    local ok, why = export()
    if not ok then pending(why); return end
    local model = our_resnet()
    local report = cr.io.load_into(model, tmpdir.path('legacy.safetensors'))
    assert.equal(N_TENSORS - N_BN, report.loaded)
    assert.same({}, report.missing)
    assert.same({}, report.unexpected)
    assert.equal(N_BN, #report.ignored)
    for _, name in ipairs(report.ignored) do assert(name:match('%.num_batches_tracked$'), name) end
    assert.equal('bn1.num_batches_tracked', report.ignored[1])
    assert.equal('loaded 102 tensors; 20 ignored (bn1.num_batches_tracked, layer1.0.bn1.num_batches_tracked, '
      .. 'layer1.0.bn2.num_batches_tracked, ... (20 in all))', cr.io.format_report(report))
    assert.equal(0, model.bn1.num_batches_tracked:item())   -- the model's own value stays
    local io = cr.load(tmpdir.path('io.safetensors'))
    H.assert_close(eval_output(model, io.input), io.output, 1e-4, 0, 'crescent vs PyTorch logits')
  end)
end)

describe('load_into and BatchNorm step counters', function()
  local function bn_model(track)
    return nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3, { track_running_stats = track }))
  end
  local function tensors_of(model)
    local t = {}
    for name, x in pairs(model:state_dict()) do t[name] = x:clone() end
    return t
  end

  it('drops a counter the model does not have, unless a skip pattern takes it', function()
    local t = tensors_of(bn_model(false))
    t['1.num_batches_tracked'] = cr.tensor(7, { dtype = 'i64' })
    local report = cr.io.load_into(bn_model(false), t)
    assert.equal(4, report.loaded)
    assert.same({ '1.num_batches_tracked' }, report.ignored)
    assert.same({}, report.unexpected)
    assert.equal('loaded 4 tensors; 1 ignored (1.num_batches_tracked)', cr.io.format_report(report))
    local r2 = cr.io.load_into(bn_model(false), t, { skip = 'num_batches' })
    assert.same({}, r2.ignored)
    assert.same({}, r2.unexpected)
  end)

  it("keeps the model's counter only when the file has that layer's running stats", function()
    local t = tensors_of(bn_model(true))
    t['1.num_batches_tracked'] = nil
    local model = bn_model(true)
    cr.no_grad(function() model['1'].num_batches_tracked:fill_(5) end)
    local report = cr.io.load_into(model, t)
    assert.same({ '1.num_batches_tracked' }, report.ignored)
    assert.equal(5, model['1'].num_batches_tracked:item())
    -- a layer missing from the file altogether is missing, counter included
    t['1.running_mean'] = nil
    H.assert_error(function() cr.io.load_into(bn_model(true), t) end, 'missing keys: 1.running_mean, 1.num_batches_tracked')
    -- a counter of another name is an ordinary tensor: unexpected
    local u = tensors_of(bn_model(true))
    u['1.num_batches_tracked_x'] = cr.tensor(1, { dtype = 'i64' })
    H.assert_error(function() cr.io.load_into(bn_model(true), u) end, 'unexpected keys: 1.num_batches_tracked_x')
  end)
end)
