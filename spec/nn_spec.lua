-- nn_spec — the Module base (registration, names, train/eval, state_dict, freeze, apply,
-- repr, subclassing), each layer's forward and backward against values worked out by
-- hand in the comments, and nn.init against PyTorch's formulas.
local cr = H.cr
local nn = cr.nn or require 'crescent.nn'

-- Writes values (a flat table) into a parameter, in place.
local function set(t, values)
  cr.no_grad(function() t:copy_(cr.tensor(values, { dtype = t.dtype }):view(t.shape)) end)
  return t
end

local function names_of(pairs_list)
  local out = {}
  for i, p in ipairs(pairs_list) do out[i] = p[1] end
  return out
end

-- Float tensors from Lua numbers (cr.tensor gives i64 for integers, as PyTorch does).
local function T(values, opts)
  opts = opts or {}
  opts.dtype = opts.dtype or 'f32'
  return cr.tensor(values, opts)
end

local keys = require('crescent.util').sorted_keys

-- A small custom module with its own parameter, a buffer, children and a nested Sequential.
local Block = nn.Module:extend('Block')
function Block:init(c)
  self.conv = nn.Conv2d(c, c, 3, { padding = 1, bias = false })
  self.bn = nn.BatchNorm2d(c)
  self.scale = cr.ones({ c }, { requires_grad = true }) -- a tensor that requires grad: a parameter
  self:register_buffer('count', cr.zeros({ 1 }))
  self.head = nn.Sequential(nn.ReLU(), nn.Identity())
  self.note = 'plain attribute'
end
function Block:forward(x)
  return self.head(self.bn(self.conv(x))) * self.scale:view(1, -1, 1, 1)
end

describe('nn.Module', function()
  it('names parameters with dotted PyTorch names in registration order', function()
    local m = nn.Sequential(nn.Conv2d(1, 4, 3, { stride = 1, padding = 1, bias = false }), nn.BatchNorm2d(4),
      nn.ReLU(), nn.Flatten(), nn.Linear(4 * 16, 10))
    assert.same({ '0.weight', '1.weight', '1.bias', '4.weight', '4.bias' }, names_of(m:named_parameters()))
    assert.same({ '1.running_mean', '1.running_var', '1.num_batches_tracked' }, names_of(m:named_buffers()))
    assert.equal(5, #m:parameters())
    assert.equal(3, #m:buffers())
    assert.equal(5, #m:children())
    assert.equal(6, #m:modules())
    assert.same({ '', '0', '1', '2', '3', '4' }, names_of(m:named_modules()))
    assert.equal(5, m:len())
    assert.equal(m:get(4), m['4'])
    assert.equal(m:get(-1), m['4'])
    assert.equal(10, m(cr.randn({ 2, 1, 4, 4 })):size(1))
  end)

  it('registers children, parameters and buffers of a subclass by assignment', function()
    local b = Block(2)
    assert.same({ 'scale', 'conv.weight', 'bn.weight', 'bn.bias' }, names_of(b:named_parameters()))
    assert.same({ 'count', 'bn.running_mean', 'bn.running_var', 'bn.num_batches_tracked' }, names_of(b:named_buffers()))
    assert.same({ 'conv', 'bn', 'head' }, names_of(b:named_children()))
    assert.same({ '', 'conv', 'bn', 'head', 'head.0', 'head.1' }, names_of(b:named_modules()))
    assert.same({ 'scale' }, names_of(b:named_parameters({ recurse = false })))
    assert.equal('plain attribute', b.note)
    local y = b(cr.randn({ 1, 2, 3, 3 }))
    assert.same({ 1, 2, 3, 3 }, y.shape)
    -- reassigning a child replaces what the enumerations see
    b.conv = nn.Conv2d(2, 2, 1)
    assert.same({ 'scale', 'conv.weight', 'conv.bias', 'bn.weight', 'bn.bias' }, names_of(b:named_parameters()))
    b.head = nil
    assert.same({ 'conv', 'bn' }, names_of(b:named_children()))
  end)

  it('lists a shared parameter once, but keeps every name in state_dict', function()
    local a = nn.Linear(3, 3)
    local m = nn.Sequential(a, nn.ReLU(), a)
    assert.same({ '0.weight', '0.bias' }, names_of(m:named_parameters()))
    assert.equal(12, m:num_parameters())
    assert.same({ '0.bias', '0.weight', '2.bias', '2.weight' }, keys(m:state_dict()))
  end)

  it('keeps non-persistent buffers out of state_dict', function()
    local m = nn.Module()
    m:register_buffer('a', cr.zeros({ 2 }))
    m:register_buffer('b', cr.zeros({ 2 }), { persistent = false })
    assert.same({ 'a', 'b' }, names_of(m:named_buffers()))
    assert.same({ 'a' }, keys(m:state_dict()))
  end)

  it('switches train and eval recursively', function()
    local b = Block(2)
    assert.is_true(b.training and b.bn.training and b.head['0'].training)
    assert.equal(b, b:eval())
    assert.is_false(b.training or b.bn.training or b.head['0'].training)
    b:train()
    assert.is_true(b.training and b.bn.training and b.head['1'].training)
    b:train(false)
    assert.is_false(b.conv.training)
  end)

  it('applies a function to children before their parent', function()
    local m = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU()))
    local seen = {}
    m:apply(function(x) seen[#seen + 1] = x.__name end)
    assert.same({ 'Linear', 'ReLU', 'Sequential', 'Sequential' }, seen)
  end)

  it('freezes and unfreezes parameters, all or by name pattern', function()
    local m = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 4))
    assert.equal(9 + 16, m:num_parameters())
    m:freeze()
    for _, p in ipairs(m:parameters()) do assert.is_false(p.requires_grad) end
    assert.equal(0, m:num_parameters({ trainable = true }))
    m:unfreeze('^1%.')
    assert.equal(16, m:num_parameters({ trainable = true }))
    assert.is_false(m['0'].weight.requires_grad)
    assert.is_true(m['1'].bias.requires_grad)
    -- a frozen layer gets no grad; the trainable one does
    m(cr.randn({ 5, 2 })):sum():backward()
    assert.is_nil(m['0'].weight.grad)
    assert.is_not_nil(m['1'].weight.grad)
    m:zero_grad()
    assert.is_nil(m['1'].weight.grad)
    H.assert_error(function() m:freeze('^nothing') end, "no parameter name matches '^nothing'")
  end)

  it('keeps what :freeze() fixed in eval mode through :train(), and lets :unfreeze() train it again', function()
    local m = nn.Sequential(nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU()), nn.BatchNorm2d(2))
    m:freeze('^0%.')            -- the first block, its BatchNorm and its parameter-free ReLU
    m:train()
    assert.is_true(m.training and m['1'].training)
    assert.is_false(m['0'].training or m['0']['1'].training or m['0']['2'].training)
    m:unfreeze('^0%.0%.')      -- the conv trains again, so its block does; the BatchNorm stays
    m:train()
    assert.is_true(m['0'].training and m['0']['0'].training)
    assert.is_false(m['0']['1'].training)
    m:unfreeze()
    m:freeze('^0%.1%.weight$') -- part of a module: only modules all of whose parameters are frozen
    m:train()
    assert.is_true(m['0'].training and m['0']['0'].training and m['0']['1'].training)
    m:freeze('^0%.1%.bias$')   -- now all of the BatchNorm's: it stays in eval
    assert.is_false(m['0']['1'].training)
    assert.is_true(m['0'].training)
    m:eval()
    assert.is_false(m.training or m['1'].training)
    m:unfreeze()
    m:train()
    for _, sub in ipairs(m:modules()) do assert.is_true(sub.training) end
    -- requires_grad turned off by hand (MoCo's key encoder) does not change the mode
    local k = nn.BatchNorm2d(2)
    for _, p in ipairs(k:parameters()) do p.requires_grad = false end
    k:train()
    assert.is_true(k.training)
  end)

  it("leaves a frozen BatchNorm's running statistics alone through cr.train", function()
    cr.manual_seed(3)
    local model = nn.Sequential(nn.BatchNorm2d(1), nn.Flatten(), nn.Linear(4, 2))
    model:freeze('^0%.')
    local mean, var = model['0'].running_mean:clone(), model['0'].running_var:clone()
    local x, y = cr.randn({ 8, 1, 2, 2 }) * 3 + 5, cr.tensor({ 0, 1, 0, 1, 0, 1, 0, 1 }, { dtype = 'i64' })
    local trainable = {}
    for _, np in ipairs(model:named_parameters()) do
      if np[2].requires_grad then trainable[#trainable + 1] = np end
    end
    local task = cr.engine.Task {
      model = model, optimizer = cr.optim.SGD(trainable, { lr = 0.1 }), epochs = 2, test_every = 0,
      train_loader = H.list_loader({ { input = x, target = y }, { input = x, target = y } }),
      loss = function(out, batch) return cr.cross_entropy(out, batch.target) end,
    }
    cr.train(task)
    assert.are.equal(0, H.max_diff(model['0'].running_mean, mean))
    assert.are.equal(0, H.max_diff(model['0'].running_var, var))
    assert.is_true(model['2'].training)
  end)

  it('round-trips state_dict into a fresh module, copying in place', function()
    cr.manual_seed(1)
    local a = Block(2)
    a:train()
    a(cr.randn({ 2, 2, 3, 3 })) -- moves the running stats away from their init
    cr.manual_seed(2)
    local b = Block(2)
    local w = b.conv.weight
    local sd = a:state_dict()
    assert.same({ 'bn.bias', 'bn.num_batches_tracked', 'bn.running_mean', 'bn.running_var', 'bn.weight',
      'conv.weight', 'count', 'scale' }, keys(sd))
    assert.is_false(sd['conv.weight'].requires_grad) -- detached, sharing storage
    assert.is_true(sd['conv.weight']:same_storage(a.conv.weight))
    local report = b:load_state_dict(sd)
    assert.same({ missing = {}, unexpected = {}, mismatched = {} }, report)
    assert.equal(w, b.conv.weight) -- the same tensor, now holding a's values
    for name, t in pairs(b:state_dict()) do H.assert_close(t, sd[name], 0, 0, name) end
    assert.equal(1, b.bn.num_batches_tracked:item())
    a:eval(); b:eval()
    local x = cr.randn({ 1, 2, 3, 3 })
    H.assert_close(b(x), a(x), 0, 0)
  end)

  it('refuses a state dict that does not match, naming the keys, unless not strict', function()
    local m = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    local sd = m:state_dict()
    sd['1.running_var'] = nil
    sd['2.weight'] = cr.zeros({ 3 })
    sd['0.weight'] = cr.zeros({ 3, 5 })
    local before = m['0'].bias:clone()
    sd['0.bias'] = cr.full({ 3 }, 7)
    H.assert_error(function() m:load_state_dict(sd) end, 'missing keys: 1.running_var', 'unexpected keys: 2.weight',
      'shape mismatch for 0.weight: the model has [3, 2], the state dict [3, 5]', 'strict = false')
    H.assert_close(m['0'].bias, before, 0, 0) -- strict: nothing copied
    local report = m:load_state_dict(sd, { strict = false })
    assert.same({ '1.running_var' }, report.missing)
    assert.same({ '2.weight' }, report.unexpected)
    assert.same({ { '0.weight', '[3, 2]', '[3, 5]' } }, report.mismatched)
    H.assert_close(m['0'].bias, { 7, 7, 7 }, 0, 0) -- non-strict: what fits is copied
    H.assert_error(function() m:load_state_dict(m) end, 'pass m:state_dict()')
    H.assert_error(function() m:load_state_dict({ ['0.bias'] = 3 }, { strict = false }) end,
      "entry '0.bias' is a number, expected a tensor")
  end)

  it('loads a state dict of another float dtype by converting', function()
    local m = nn.Linear(2, 1)
    m:load_state_dict({ weight = cr.tensor({ { 1, 2 } }, { dtype = 'f64' }), bias = cr.tensor({ 3 }, { dtype = 'f64' }) })
    assert.equal('f32', m.weight.dtype)
    H.assert_close(m(T({ { 1, 1 } })), { { 6 } })
  end)

  it('converts to f64 for gradcheck, keeping integer buffers', function()
    local m = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)):double()
    assert.equal('f64', m['0'].weight.dtype)
    assert.is_true(m['0'].weight.requires_grad)
    assert.equal('f64', m['1'].running_mean.dtype)
    assert.equal('i64', m['1'].num_batches_tracked.dtype)
  end)

  it('prints as an indented tree like PyTorch', function()
    local m = nn.Sequential(nn.Conv2d(1, 16, 3, { stride = 1, padding = 1, bias = false }), Block(16),
      nn.MaxPool2d(2), nn.Dropout(0.25), nn.Linear(16, 10, false))
    assert.equal([[
Sequential(
  (0): Conv2d(1, 16, kernel_size=3, stride=1, padding=1, bias=false)
  (1): Block(
    (conv): Conv2d(16, 16, kernel_size=3, stride=1, padding=1, bias=false)
    (bn): BatchNorm2d(16, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)
    (head): Sequential(
      (0): ReLU()
      (1): Identity()
    )
  )
  (2): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=false)
  (3): Dropout(p=0.25)
  (4): Linear(in_features=16, out_features=10, bias=false)
)]], tostring(m))
    assert.equal('Conv2d(2, 4, kernel_size={3, 1}, stride=2, padding={1, 0}, dilation=2, groups=2)',
      tostring(nn.Conv2d(2, 4, { 3, 1 }, { stride = 2, padding = { 1, 0 }, dilation = 2, groups = 2 })))
    assert.equal('GELU(approximate=\'none\')', tostring(nn.GELU()))
    assert.equal('GELU(approximate=\'tanh\')', tostring(nn.GELU({ approximate = 'tanh' })))
    assert.equal('L2Normalize(dim=1, eps=1e-12)', tostring(nn.L2Normalize()))
    assert.equal('AvgPool2d(kernel_size=2, stride=1, padding=0)', tostring(nn.AvgPool2d(2, { stride = 1 })))
  end)

  it('supports subclasses of subclasses, and calls forward through __call', function()
    local Scaled = nn.Linear:extend('Scaled')
    function Scaled:init(i, o, k)
      nn.Linear.init(self, i, o)
      self.k = k
    end
    function Scaled:forward(x) return nn.Linear.forward(self, x) * self.k end
    local s = Scaled(2, 1, 10)
    set(s.weight, { 1, 1 }); set(s.bias, { 0 })
    H.assert_close(s(T({ { 1, 2 } })), { { 30 } })
    assert.same({ 'weight', 'bias' }, names_of(s:named_parameters()))
    assert.equal('Scaled(in_features=2, out_features=1, bias=true)', tostring(s))
  end)

  it('explains bad arguments', function()
    H.assert_error(function() nn.Conv2d(1, 2, 3, { strid = 2 }) end, "Conv2d: unknown option 'strid'", 'stride')
    H.assert_error(function() nn.Conv2d(1, 2) end, 'Conv2d: give a kernel_size')
    H.assert_error(function() nn.Conv2d(3, 4, 3, { groups = 2 }) end, 'divisible by groups')
    H.assert_error(function() nn.Linear(2.5, 3) end, "Linear: 'in_features' must be an integer")
    H.assert_error(function() nn.Linear(2, 3)('x') end, 'Linear: the input must be a tensor, got string')
    H.assert_error(function() nn.BatchNorm2d(3)(cr.randn({ 2, 3 })) end, 'BatchNorm2d: expected a 4-D')
    H.assert_error(function() nn.Dropout(1.5) end, 'Dropout: p must be a probability')
    H.assert_error(function() nn.Module()(cr.randn({ 1 })) end, 'forward is not implemented')
    H.assert_error(function() nn.Module():register_parameter('a.b', cr.zeros({ 1 })) end, "without '.'")
    local err = H.assert_error(function() nn.Linear(2, 3)(cr.randn({ 4, 5 })) end, 'linear')
    assert.truthy(err:find('nn_spec.lua', 1, true), 'the error should point at the spec line: ' .. err)
  end)
end)

describe('nn layers', function()
  it('Linear: y = x W^T + b and its grads', function()
    local m = nn.Linear(2, 3)
    set(m.weight, { 1, 2, 3, 4, 5, 6 })
    set(m.bias, { 0.5, -1, 2 })
    local x = T({ { 1, -1 }, { 2, 0 } }, { requires_grad = true })
    local y = m(x)
    -- row 1: [1-2, 3-4, 5-6] + b; row 2: [2, 6, 10] + b
    H.assert_close(y, { { -0.5, -2, 1 }, { 2.5, 5, 12 } })
    y:sum():backward()
    H.assert_close(m.weight.grad, { { 3, -1 }, { 3, -1 }, { 3, -1 } }) -- column sums of x
    H.assert_close(m.bias.grad, { 2, 2, 2 })
    H.assert_close(x.grad, { { 9, 12 }, { 9, 12 } })                    -- column sums of W
    assert.is_nil(nn.Linear(2, 3, { bias = false }).bias)
  end)

  it('Conv2d: stride 2, padding 1 on a 3x3 ramp, and its grads', function()
    local m = nn.Conv2d(1, 1, 2, { stride = 2, padding = 1 })
    set(m.weight, { 1, 0, 0, -1 })
    set(m.bias, { 0.5 })
    local x = cr.tensor({ 1, 2, 3, 4, 5, 6, 7, 8, 9 }, { dtype = 'f32' }):view(1, 1, 3, 3):requires_grad_(true)
    local y = m(x)
    -- out(i, j) = x(2i-1, 2j-1) - x(2i, 2j) + 0.5 with zeros outside
    H.assert_close(y, { { { { -0.5, -2.5 }, { -6.5, -3.5 } } } })
    y:sum():backward()
    H.assert_close(m.bias.grad, { 4 })
    H.assert_close(m.weight.grad, { { { { 5, 10 }, { 10, 20 } } } })
    H.assert_close(x.grad, { { { { -1, 0, -1 }, { 0, 1, 0 }, { -1, 0, -1 } } } })
  end)

  it('Conv2d passes stride, padding, dilation and groups through (against cr.conv2d, gradcheck in f64)', function()
    cr.manual_seed(3)
    local m = nn.Conv2d(4, 6, { 3, 2 }, { stride = { 2, 1 }, padding = { 1, 0 }, dilation = 2, groups = 2 })
    local x = cr.randn({ 2, 4, 7, 6 })
    local ref = cr.conv2d(x, m.weight, m.bias, { stride = { 2, 1 }, padding = { 1, 0 }, dilation = 2, groups = 2 })
    H.assert_close(m(x), ref, 1e-5, 1e-5)
    assert.same({ 6, 2, 3, 2 }, m.weight.shape)
    local same = nn.Conv2d(2, 2, 3, { padding = 'same', dilation = 2 })
    assert.same({ 1, 2, 5, 5 }, same(cr.randn({ 1, 2, 5, 5 })).shape)
    m:double()
    H.gradcheck(function(xx, w, b)
      m.weight, m.bias = w, b
      return m(xx)
    end, { cr.randn({ 1, 4, 5, 4 }), m.weight, m.bias })
  end)

  it('BatchNorm2d: batch statistics and running stats in training', function()
    local bn = nn.BatchNorm2d(2)
    -- channel 0 holds 1, 3, 5, 7 (mean 4, biased var 5, unbiased 20/3); channel 1 is all 2
    local x = T({ { { { 1, 3 } }, { { 2, 2 } } }, { { { 5, 7 } }, { { 2, 2 } } } }):requires_grad_(true)
    local y = bn(x)
    local s = math.sqrt(5 + 1e-5)
    H.assert_close(y, { { { { -3 / s, -1 / s } }, { { 0, 0 } } }, { { { 1 / s, 3 / s } }, { { 0, 0 } } } })
    H.assert_close(bn.running_mean, { 0.1 * 4, 0.1 * 2 })
    H.assert_close(bn.running_var, { 0.9 + 0.1 * 20 / 3, 0.9 })
    assert.equal(1, bn.num_batches_tracked:item())
    -- loss = y[0, 0, 0, 0]: dx = (c - mean(c) - xhat * mean(c * xhat)) / s with c = one-hot
    --   = [0.3, -0.4, -0.1, 0.2] / s on channel 0; dgamma = xhat_0 = -3/s; dbeta = 1
    y:select(0, 0):select(0, 0):select(0, 0):select(0, 0):backward()
    H.assert_close(x.grad, { { { { 0.3 / s, -0.4 / s } }, { { 0, 0 } } }, { { { -0.1 / s, 0.2 / s } }, { { 0, 0 } } } }, 1e-6)
    H.assert_close(bn.weight.grad, { -3 / s, 0 }, 1e-6)
    H.assert_close(bn.bias.grad, { 1, 0 })
  end)

  it('BatchNorm2d: running statistics in eval, nothing updated', function()
    local bn = nn.BatchNorm2d(2)
    set(bn.running_mean, { 1, -1 })
    set(bn.running_var, { 4, 0.25 })
    set(bn.weight, { 2, 1 })
    set(bn.bias, { 0, 10 })
    bn:eval()
    local x = cr.tensor({ 3, 5, 0, 1 }, { dtype = 'f32' }):view(1, 2, 1, 2)
    local y = bn(x)
    -- channel 0: 2 * (x - 1) / 2; channel 1: (x + 1) / 0.5 + 10
    H.assert_close(y, { { { { 2, 4 } }, { { 12, 14 } } } }, 1e-4)
    H.assert_close(bn.running_mean, { 1, -1 })
    assert.equal(0, bn.num_batches_tracked:item())
    bn:train()
    bn(x)
    assert.equal(1, bn.num_batches_tracked:item())
  end)

  it('BatchNorm: momentum false averages all batches; no tracking uses batch stats in eval too', function()
    local bn = nn.BatchNorm1d(1, { momentum = false })
    bn(T({ { 1 }, { 3 } }))          -- mean 2: factor 1/1
    bn(T({ { 5 }, { 7 } }))          -- mean 6: factor 1/2 -> (2 + 6) / 2
    H.assert_close(bn.running_mean, { 4 })
    local free = nn.BatchNorm1d(2, { track_running_stats = false, affine = false })
    assert.equal(0, #free:parameters())
    assert.equal(0, #free:buffers())
    free:eval()
    H.assert_close(free(T({ { 1, 10 }, { 3, 10 } })), { { -1, 0 }, { 1, 0 } }, 1e-4)
    -- BatchNorm1d takes [N, C, L] as well
    assert.same({ 2, 2, 3 }, nn.BatchNorm1d(2)(cr.randn({ 2, 2, 3 })).shape)
  end)

  it('split BatchNorm: per-group statistics in training, the groups\' average in the running stats', function()
    cr.manual_seed(12)
    local x = cr.randn({ 8, 3, 4, 4 }) * 2 + 1
    local bn = nn.split_batchnorm(nn.BatchNorm2d(3), 4)
    cr.no_grad(function() bn.weight:copy_(cr.randn({ 3 })) bn.bias:copy_(cr.randn({ 3 })) end)
    local y = bn(x)
    local means, vars = cr.zeros({ 3 }), cr.zeros({ 3 })
    for s = 0, 3 do
      local part = x:narrow(0, 2 * s, 2)
      local mu = part:mean({ 0, 2, 3 })
      local var = part:var({ 0, 2, 3 }, { correction = 0 })
      local expect = (part - mu:view(1, 3, 1, 1)) / (var + 1e-5):sqrt():view(1, 3, 1, 1) * bn.weight:view(1, 3, 1, 1)
        + bn.bias:view(1, 3, 1, 1)
      H.assert_close(y:narrow(0, 2 * s, 2), expect, 1e-5, 1e-5, 'group ' .. s)
      means = means + mu
      vars = vars + part:var({ 0, 2, 3 })           -- the running variance takes the unbiased one
    end
    H.assert_close(bn.running_mean, means / 4 * 0.1, 1e-6)
    H.assert_close(bn.running_var, cr.ones({ 3 }) * 0.9 + vars / 4 * 0.1, 1e-5)
    assert.equal(1, bn.num_batches_tracked:item())
    -- fused relu, BatchNorm1d, eval unchanged, splits = 1 off again
    H.assert_close(bn:forward(x, true), y:relu(), 1e-6)
    local b1 = nn.split_batchnorm(nn.BatchNorm1d(5), 2)
    local z = cr.randn({ 6, 5 })
    H.assert_close(b1(z):narrow(0, 3, 3), nn.BatchNorm1d(5)(z:narrow(0, 3, 3)), 1e-5)
    bn:eval()
    H.assert_close(bn(x), cr.batch_norm(x, bn.running_mean, bn.running_var, { weight = bn.weight, bias = bn.bias }),
      1e-5)
    assert.equal(1, nn.split_batchnorm(bn, 1).splits)
    H.assert_error(function() nn.split_batchnorm(nn.BatchNorm2d(3), 3):train()(x) end,
      'the batch of 8 does not divide into splits = 3 groups')
    H.assert_error(function() nn.split_batchnorm(nn.BatchNorm2d(3), 0) end, "'splits' must be an integer >= 1")
  end)

  it('split BatchNorm passes a gradcheck in f64 and keeps channels-last activations so', function()
    local bn = nn.split_batchnorm(nn.BatchNorm2d(2):double(), 2)
    H.gradcheck(function(xx) return bn(xx) end, { cr.randn({ 4, 2, 3, 3 }) })
    local conv = nn.Conv2d(2, 4, 3, { padding = 1 })
    local h = conv(cr.randn({ 4, 2, 6, 6 }))
    if h:is_channels_last() then
      assert.is_true(nn.split_batchnorm(nn.BatchNorm2d(4), 2)(h):is_channels_last())
    end
  end)

  it('ReLU and GELU values and grads', function()
    local x = T({ -1, 0.5, 1, 2 }, { requires_grad = true })
    local y = nn.ReLU()(x)
    H.assert_close(y, { 0, 0.5, 1, 2 })
    y:sum():backward()
    H.assert_close(x.grad, { 0, 1, 1, 1 })
    local z = T({ -1, 0, 1 }, { requires_grad = true })
    local g = nn.GELU()(z)
    -- x * Phi(x): Phi(1) = 0.8413447461; grad Phi(x) + x * phi(x), phi(1) = 0.2419707245
    H.assert_close(g, { -0.1586552539, 0, 0.8413447461 }, 1e-6)
    g:sum():backward()
    H.assert_close(z.grad, { 0.1586552539 - 0.2419707245, 0.5, 0.8413447461 + 0.2419707245 }, 1e-6)
  end)

  it('Dropout zeroes and rescales in training, passes through in eval', function()
    cr.manual_seed(7)
    local d = nn.Dropout(0.5)
    local x = cr.ones({ 4000 }, { requires_grad = true })
    local y = d(x)
    local vals = H.flat(y)
    local zeros = 0
    for _, v in ipairs(vals) do
      assert.truthy(v == 0 or v == 2, 'kept values are scaled by 1/(1-p)')
      if v == 0 then zeros = zeros + 1 end
    end
    assert.truthy(math.abs(zeros / 4000 - 0.5) < 0.04, 'about half dropped: ' .. zeros)
    y:sum():backward()
    H.assert_close(x.grad, y:detach()) -- the grad goes through the same mask
    d:eval()
    local x2 = cr.randn({ 5 })
    H.assert_close(d(x2), x2, 0, 0)
    d:train()
    H.assert_close(nn.Dropout(0)(x2), x2, 0, 0)
  end)

  it('MaxPool2d, AvgPool2d and AdaptiveAvgPool2d values and grads', function()
    local x = cr.tensor({ 1, 5, 2, 0, 3, 4, 8, 1, 0, 2, 6, 7, 9, 1, 3, 2 }, { dtype = 'f32' })
      :view(1, 1, 4, 4):requires_grad_(true)
    -- 2x2 blocks: {1 5 3 4} {2 0 8 1} {0 2 9 1} {6 7 3 2}
    local mp = nn.MaxPool2d(2)(x)
    H.assert_close(mp, { { { { 5, 8 }, { 9, 7 } } } })
    mp:sum():backward()
    H.assert_close(x.grad, { { { { 0, 1, 0, 0 }, { 0, 0, 1, 0 }, { 0, 0, 0, 1 }, { 1, 0, 0, 0 } } } })
    x.grad = nil
    local ap = nn.AvgPool2d(2)(x)
    H.assert_close(ap, { { { { 13 / 4, 11 / 4 }, { 12 / 4, 18 / 4 } } } })
    ap:sum():backward()
    H.assert_close(x.grad, cr.full({ 1, 1, 4, 4 }, 0.25))
    x.grad = nil
    local aap = nn.AdaptiveAvgPool2d(1)(x)
    H.assert_close(aap, { { { { 54 / 16 } } } })
    aap:sum():backward()
    H.assert_close(x.grad, cr.full({ 1, 1, 4, 4 }, 1 / 16))
    -- 3x3/2 with padding 1 (the ResNet stem's pool): 4x4 -> 2x2
    H.assert_close(nn.MaxPool2d(3, { stride = 2, padding = 1 })(x), { { { { 5, 8 }, { 9, 8 } } } })
    assert.same({ 1, 1, 2, 3 }, nn.AdaptiveAvgPool2d({ 2, 3 })(x).shape)
  end)

  it('Flatten, Identity and L2Normalize', function()
    local x = cr.randn({ 2, 3, 2, 2 }, { requires_grad = true })
    local f = nn.Flatten()(x)
    assert.same({ 2, 12 }, f.shape)
    f:sum():backward()
    H.assert_close(x.grad, cr.ones({ 2, 3, 2, 2 }))
    assert.same({ 6, 2, 2 }, nn.Flatten(0, 1)(x).shape)
    assert.equal(x, nn.Identity(5, 'ignored')(x))
    local v = T({ { 3, 4 }, { 0, 0 } }, { requires_grad = true })
    local n = nn.L2Normalize()(v)
    H.assert_close(n, { { 0.6, 0.8 }, { 0, 0 } })
    -- d/dx of (x/|x|) . [1, 0] = (e1 - y * y_1) / |x| = ([1, 0] - 0.6 * [0.6, 0.8]) / 5
    n:select(1, 0):sum():backward()
    H.assert_close(v.grad:select(0, 0), { 0.128, -0.096 }, 1e-6)
    H.assert_close(nn.L2Normalize(0)(T({ { 3 }, { 4 } })), { { 0.6 }, { 0.8 } })
  end)
end)

describe('nn.init', function()
  it('gives Linear and Conv2d PyTorch\'s default init: U(+-1/sqrt(fan_in)) for weight and bias', function()
    cr.manual_seed(0)
    local m = nn.Conv2d(16, 64, 3) -- fan_in 144: bound 1/12
    local bound = 1 / 12
    local w = H.flat(m.weight)
    local mx, ss = 0, 0
    for _, v in ipairs(w) do
      mx = math.max(mx, math.abs(v))
      ss = ss + v * v
    end
    assert.truthy(mx <= bound and mx > 0.99 * bound, 'max |w| ' .. mx)
    local std = math.sqrt(ss / #w)
    assert.truthy(math.abs(std - bound / math.sqrt(3)) < 0.02 * bound, 'std ' .. std)
    assert.truthy(m.bias:abs():max():item() <= bound)
    local l = nn.Linear(400, 10)
    assert.truthy(l.weight:abs():max():item() <= 0.05 and l.bias:abs():max():item() <= 0.05)
    assert.is_true(l.weight.requires_grad)
  end)

  it('is deterministic per manual_seed', function()
    cr.manual_seed(42)
    local a = nn.Linear(5, 5)
    cr.manual_seed(42)
    local b = nn.Linear(5, 5)
    H.assert_close(a.weight, b.weight, 0, 0)
    H.assert_close(a.bias, b.bias, 0, 0)
    local c = nn.Linear(5, 5)
    assert.truthy(H.max_diff(a.weight, c.weight) > 0)
  end)

  it('kaiming, xavier, normal, uniform and constants follow their formulas', function()
    cr.manual_seed(0)
    local t = cr.empty({ 256, 128, 3, 3 })
    local function std(x) return math.sqrt((x * x):mean():item()) end
    nn.init.kaiming_normal_(t, { mode = 'fan_out', nonlinearity = 'relu' })
    assert.truthy(math.abs(std(t) - math.sqrt(2 / (256 * 9))) < 0.01 * math.sqrt(2 / (256 * 9)))
    assert.truthy(math.abs(t:mean():item()) < 1e-3)
    nn.init.kaiming_normal_(t) -- fan_in, leaky_relu with slope 0: sqrt(2 / fan_in)
    assert.truthy(math.abs(std(t) - math.sqrt(2 / (128 * 9))) < 0.01 * math.sqrt(2 / (128 * 9)))
    nn.init.kaiming_uniform_(t, { nonlinearity = 'relu' })
    local b = math.sqrt(6 / (128 * 9))
    assert.truthy(t:abs():max():item() <= b and t:abs():max():item() > 0.99 * b)
    local u = cr.empty({ 300, 200 })
    nn.init.xavier_uniform_(u, { gain = 2 })
    b = 2 * math.sqrt(6 / 500)
    assert.truthy(u:abs():max():item() <= b and u:abs():max():item() > 0.99 * b)
    nn.init.xavier_normal_(u)
    assert.truthy(math.abs(std(u) - math.sqrt(2 / 500)) < 0.02 * math.sqrt(2 / 500))
    nn.init.normal_(u, 3, 0.5)
    assert.truthy(math.abs(u:mean():item() - 3) < 0.01)
    nn.init.uniform_(u, -2, -1)
    assert.truthy(u:max():item() <= -1 and u:min():item() >= -2)
    H.assert_close(nn.init.zeros_(cr.empty({ 2 })), { 0, 0 })
    H.assert_close(nn.init.ones_(cr.empty({ 2 })), { 1, 1 })
    H.assert_close(nn.init.constant_(cr.empty({ 2 }), 0.5), { 0.5, 0.5 })
    -- in place on a parameter, under no_grad
    local p = cr.zeros({ 2 }, { requires_grad = true })
    nn.init.ones_(p)
    H.assert_close(p, { 1, 1 })
    assert.is_true(p.requires_grad)
  end)

  it('computes gains and fans as PyTorch does, and explains misuse', function()
    assert.equal(math.sqrt(2), nn.init.calculate_gain('relu'))
    assert.equal(5 / 3, nn.init.calculate_gain('tanh'))
    assert.equal(math.sqrt(2 / (1 + 0.2 ^ 2)), nn.init.calculate_gain('leaky_relu', 0.2))
    local fi, fo = nn.init.calculate_fan_in_and_fan_out(cr.empty({ 8, 4, 3, 3 }))
    assert.equal(36, fi)
    assert.equal(72, fo)
    H.assert_error(function() nn.init.kaiming_normal_(cr.empty({ 5 })) end, 'at least 2 dims')
    H.assert_error(function() nn.init.kaiming_normal_(cr.empty({ 5, 5 }), { mode = 'fan' }) end,
      "mode must be 'fan_in' or 'fan_out'")
    H.assert_error(function() nn.init.calculate_gain('swish') end, "unknown nonlinearity 'swish'")
    H.assert_error(function() nn.init.zeros_(cr.zeros({ 2 }, { dtype = 'i64' })) end, 'floating-point')
  end)
end)
