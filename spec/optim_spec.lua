-- spec/optim_spec.lua — the optimizers against their closed-form updates: SGD (momentum,
-- dampening, Nesterov, weight decay), LARS/LARC (trust ratio, clip mode, exclusion of
-- biases and norm weights), AdamW (bias correction, decoupled decay); parameter groups,
-- lr multipliers and no-decay; clipping; state_dict round trips; bad input.
--
-- The updates (per parameter p with grad g; see csrc/include/crescent_optim.h):
--   SGD    d = g + wd*p; momentum m: buf = d (first step) | m*buf + (1 - dampening)*d;
--          d = nesterov and d + m*buf or buf; p = p - lr*d
--   LARS   (apex LARC, SwAV/VISSL) adapted tensors, ||.|| in f64:
--          ratio = tc*||p|| / (||g|| + wd*||p|| + eps); clip: ratio = min(ratio/lr, 1);
--          d = ratio*(g + wd*p) (d = g when ||p|| or ||g|| is 0), then SGD momentum with
--          wd 0. Excluded tensors (ndim <= 1 with exclude_bias_norm): plain SGD, d = g + wd*p
--   AdamW  p = p*(1 - lr*wd); m = m + (1 - b1)*(g - m); v = b2*v + (1 - b2)*g^2;
--          p = p - lr/(1 - b1^t) * m / (sqrt(v)/sqrt(1 - b2^t) + eps)
--
-- Reference numbers: hand-derived where short (shown), the rest computed once with
-- torch 1.13 (/usr/bin/python3; torch.optim.SGD/AdamW in f64, and apex's LARC arithmetic
-- written out around torch.optim.SGD) and pasted in. Grads are set by hand each step, so
-- every number follows from the update rule alone.
local cr = H.cr
local optim = require 'crescent.optim'

-- the grads fed at steps 1, 2, 3 to a 2-element parameter starting at {1, -2}
local G = { { 0.5, -1.0 }, { -1.0, 0.25 }, { 2.0, 3.0 } }

local function param(values, dtype)
  return cr.tensor(values, { dtype = dtype or 'f64' }):requires_grad_(true)
end

-- Runs `steps` steps of opt on p with grads G (cycled); returns p's values after each.
local function run(make_opt, dtype, steps)
  local p = param({ 1, -2 }, dtype)
  local opt = make_opt({ { 'p', p } })
  local out = {}
  for s = 1, steps or 3 do
    p.grad = cr.tensor(G[(s - 1) % 3 + 1], { dtype = dtype or 'f64' })
    opt:step()
    out[s] = p:totable()
  end
  return out, p, opt
end

local function assert_rows(got, want, tol)
  for s = 1, #want do
    for j = 1, #want[s] do
      local d = math.abs(got[s][j] - want[s][j])
      assert(d <= tol * math.max(1, math.abs(want[s][j])),
        string.format('step %d element %d: %.15g vs %.15g', s, j, got[s][j], want[s][j]))
    end
  end
end

describe('SGD', function()
  it('plain SGD with weight decay: p -= lr * (g + wd * p)', function()
    -- step 1, element 1: 1 - 0.1 * (0.5 + 0.1 * 1) = 0.94
    local got = run(function(ps) return optim.SGD(ps, { lr = 0.1, weight_decay = 0.1 }) end)
    assert_rows(got, { { 0.94, -1.88 }, { 1.0306, -1.8862 }, { 0.820294, -2.167338 } }, 1e-12)
  end)

  it('momentum: buffer = first grad, then m * buf + (1 - dampening) * d', function()
    -- element 1: d1 = 0.6, buf = 0.6, p = 0.94; d2 = -1 + 0.094 = -0.906,
    -- buf = 0.9 * 0.6 + 0.9 * (-0.906) = -0.2754, p = 0.94 + 0.02754 = 0.96754
    local got = run(function(ps)
      return optim.SGD(ps, { lr = 0.1, momentum = 0.9, dampening = 0.1, weight_decay = 0.1 })
    end)
    assert_rows(got, { { 0.94, -1.88 }, { 0.96754, -1.77758 }, { 0.80361814, -1.93940378 } }, 1e-12)
  end)

  it('nesterov: d + m * buf', function()
    -- step 1: d = 0.6, buf = 0.6, p = 1 - 0.1 * (0.6 + 0.54) = 0.886
    local got = run(function(ps)
      return optim.SGD(ps, { lr = 0.1, momentum = 0.9, nesterov = true, weight_decay = 0.1 })
    end)
    assert_rows(got, { { 0.886, -1.772 }, { 1.010566, -1.688632 }, { 0.641448646, -2.144964792 } }, 1e-12)
  end)

  it('f32 parameters follow the same numbers to f32 precision', function()
    local got = run(function(ps)
      return optim.SGD(ps, { lr = 0.1, momentum = 0.9, nesterov = true, weight_decay = 0.1 })
    end, 'f32')
    assert_rows(got, { { 0.886, -1.772 }, { 1.010566, -1.688632 }, { 0.641448646, -2.144964792 } }, 1e-6)
  end)

  it('keeps state by name, bumps the version and skips params without a grad', function()
    local a, b = param({ 1, 2 }), param({ 3 })
    local opt = optim.SGD({ { 'a', a }, { 'b', b } }, { lr = 0.5, momentum = 0.9 })
    local va = a.version
    a.grad = cr.tensor({ 1, 1 }, { dtype = 'f64' })
    assert.are.equal(1, opt:step())
    assert.is_true(a.version > va)
    H.assert_close(a, { 0.5, 1.5 }, 1e-15)
    H.assert_close(b, { 3 }, 0)
    assert.are.equal(1, opt.state.a.step)
    assert.is_nil(opt.state.b)
    H.assert_close(opt.state.a.momentum_buffer, { 1, 1 }, 0)
  end)

  it('matches a reference update on a tensor of many chunks (threads share the chunks)', function()
    cr.manual_seed(1)
    local n = 100000 -- > 3 chunks of 32768
    local p = cr.randn({ n }):requires_grad_(true)
    local p0 = p:detach():clone()
    local g1, g2 = cr.randn({ n }), cr.randn({ n })
    local opt = optim.SGD({ { 'w', p } }, { lr = 0.01, momentum = 0.9, weight_decay = 1e-4 })
    p.grad = g1
    opt:step()
    p.grad = g2
    opt:step()
    -- the same two steps with tensor ops, f64
    local q, gg1, gg2 = p0:double(), g1:double(), g2:double()
    local d1 = gg1 + q * 1e-4
    local buf = d1
    q = q - d1 * 0.01
    local d2 = gg2 + q * 1e-4
    buf = buf * 0.9 + d2
    q = q - buf * 0.01
    assert(H.max_diff(p, q) < 1e-5)
  end)

  it('zero_grad sets grads to nil, or zeroes them in place', function()
    local p = param({ 1, 2 })
    local opt = optim.SGD({ { 'p', p } }, { lr = 0.1 })
    p.grad = cr.tensor({ 3, 4 }, { dtype = 'f64' })
    local g = p.grad
    opt:zero_grad({ set_to_none = false })
    H.assert_close(g, { 0, 0 }, 0)
    assert.is_not_nil(p.grad)
    opt:zero_grad()
    assert.is_nil(p.grad)
  end)

  it('grad_scale multiplies the grads as they are read (accumulated micro-batches)', function()
    local p = param({ 1, -2 })
    local opt = optim.SGD({ { 'p', p } }, { lr = 0.1, weight_decay = 0.1 })
    p.grad = cr.tensor({ 1.0, -2.0 }, { dtype = 'f64' }) -- the sum of two micro-batch grads
    opt:step({ grad_scale = 0.5 })
    H.assert_close(p, { 0.94, -1.88 }, 1e-12)  -- as plain SGD with grad {0.5, -1}
    H.assert_close(p.grad, { 1.0, -2.0 }, 0)   -- grads untouched
  end)
end)

describe('LARS', function()
  -- W (2x2) is adapted, the bias b (1-dim) excluded: plain SGD with momentum and weight decay.
  local GW = { { { 0.5, -1.0 }, { 0.25, 2.0 } }, { { -1.0, 0.5 }, { 1.0, -0.5 } }, { { 2.0, 1.0 }, { -3.0, 0.5 } } }
  local Gb = { { 0.1, -0.2 }, { 0.3, 0.4 }, { -0.5, 0.6 } }
  local function lars_run(opts)
    local W = param({ { 1.0, -2.0 }, { 0.5, 3.0 } })
    local b = param({ 0.5, -0.5 })
    local opt = optim.LARS({ { 'fc.weight', W }, { 'fc.bias', b } }, opts)
    local Ws, bs, ratios = {}, {}, {}
    for s = 1, 3 do
      W.grad = cr.tensor(GW[s], { dtype = 'f64' })
      b.grad = cr.tensor(Gb[s], { dtype = 'f64' })
      opt:step()
      Ws[s] = H.flat(W)
      bs[s] = b:totable()
      ratios[s] = opt.last_trust_ratio['fc.weight']
      assert.are.equal(1, opt.last_trust_ratio['fc.bias'])
    end
    return Ws, bs, ratios
  end
  local b_want = { { 0.485, -0.475 }, { 0.43665, -0.48775 }, { 0.4387685, -0.5543475 } }

  it('scales (g + wd p) by tc * ||p|| / (||g|| + wd ||p|| + eps), biases excluded', function()
    -- step 1: ||p|| = sqrt(14.25), ||g|| = sqrt(5.3125):
    -- ratio = 0.01 * 3.774917 / (2.304886 + 0.3774917 + 1e-8) = 0.0140730256...
    local Ws, bs, ratios = lars_run({ lr = 0.1, momentum = 0.9, weight_decay = 0.1, trust_coefficient = 0.01 })
    assert_rows({ ratios }, { { 0.014073025629638601, 0.01925780268274016, 0.009077085029961362 } }, 1e-12)
    assert_rows(Ws, { { 0.9991556184622217, -1.9983112369244433, 0.49957780923111084, 2.996763204105183 },
                      { 1.0001290399289982, -1.9973694094555854, 0.4971758495620881, 2.9942358671892695 },
                      { 0.9990989196797411, -1.9972481703169507, 0.49769208229434286, 2.9912356203777866 } }, 1e-12)
    -- the bias: d = g + 0.1 b, SGD momentum: 0.5 - 0.1 * (0.1 + 0.05) = 0.485
    assert_rows(bs, b_want, 1e-12)
  end)

  it('clip mode: min(ratio / lr, 1)', function()
    local Ws, bs, ratios = lars_run({ lr = 0.1, momentum = 0.9, weight_decay = 0.1, trust_coefficient = 0.01, clip = true })
    assert_rows({ ratios }, { { 0.140730256296386, 0.19118539267719206, 0.08952710341609656 } }, 1e-12)
    assert_rows(Ws, { { 0.9915561846222168, -1.9831123692444337, 0.4957780923111084, 2.9676320410518313 },
                      { 1.0011795794647462, -1.9736813500279136, 0.47191198083079433, 2.94238646866144 },
                      { 0.9910388870623151, -1.9723791633313115, 0.4768681223962293, 2.912554864962583 } }, 1e-12)
    assert_rows(bs, b_want, 1e-12)
  end)

  it('clip mode caps the ratio at 1: plain SGD with weight decay', function()
    local Ws, _, ratios = lars_run({ lr = 0.01, momentum = 0.9, weight_decay = 0.1, trust_coefficient = 0.1, clip = true })
    assert_rows({ ratios }, { { 1, 1, 1 } }, 0)
    -- step 1: 1 - 0.01 * (0.5 + 0.1) = 0.994
    assert_rows(Ws, { { 0.994, -1.988, 0.497, 2.977 }, { 0.997606, -1.980212, 0.483803, 2.958323 },
                      { 0.979853794, -1.981222588, 0.501441897, 2.933555377 } }, 1e-12)
  end)

  it('exclude_bias_norm = false adapts 1-dim tensors too', function()
    local b = param({ 3, 4 })
    local opt = optim.LARS({ { 'bn.weight', b } }, { lr = 1, momentum = 0, trust_coefficient = 0.5,
                                                    exclude_bias_norm = false })
    b.grad = cr.tensor({ 0.6, 0.8 }, { dtype = 'f64' })
    opt:step()
    -- ratio = 0.5 * 5 / (1 + 1e-8); p = p - ratio * g
    local r = 2.5 / (1 + 1e-8)
    H.assert_close(b, { 3 - r * 0.6, 4 - r * 0.8 }, 1e-12)
  end)

  it('a zero grad gets no ratio and no weight decay (apex)', function()
    local W = param({ { 1, 2 }, { 3, 4 } })
    local opt = optim.LARS({ { 'w', W } }, { lr = 0.1, weight_decay = 0.5, momentum = 0 })
    W.grad = cr.zeros({ 2, 2 }, { dtype = 'f64' })
    opt:step()
    H.assert_close(W, { { 1, 2 }, { 3, 4 } }, 0)
    assert.are.equal(1, opt.last_trust_ratio.w)
  end)
end)

describe('AdamW', function()
  it('bias-corrected moments and decoupled weight decay', function()
    -- step 1, element 1: p = 1 * (1 - 0.1 * 0.1) = 0.99; m = 0.05, v = 0.0025;
    -- m_hat = 0.5, sqrt(v_hat) = 0.5; p = 0.99 - 0.1 * 0.5 / (0.5 + 1e-8) = 0.890000002
    local got = run(function(ps)
      return optim.AdamW(ps, { lr = 0.1, betas = { 0.9, 0.99 }, eps = 1e-8, weight_decay = 0.1 })
    end)
    assert_rows(got, { { 0.890000002, -1.880000001 }, { 0.917660772851723, -1.814159142856691 },
                       { 0.866653635655729, -1.844482059604212 } }, 1e-12)
  end)

  it('f32 follows to f32 precision; the state holds step, exp_avg, exp_avg_sq', function()
    local got, _, opt = run(function(ps)
      return optim.AdamW(ps, { lr = 0.1, betas = { 0.9, 0.99 }, weight_decay = 0.1 })
    end, 'f32')
    assert_rows(got, { { 0.890000002, -1.880000001 }, { 0.917660772851723, -1.814159142856691 },
                       { 0.866653635655729, -1.844482059604212 } }, 2e-6)
    assert.are.equal(3, opt.state.p.step)
    assert.is_not_nil(opt.state.p.exp_avg)
    assert.is_not_nil(opt.state.p.exp_avg_sq)
  end)
end)

describe('param groups', function()
  local function model()
    return {
      { 'conv.weight', param({ { 1, 2 }, { 3, 4 } }) },
      { 'bn.weight', param({ 1, 1 }) },
      { 'fc.weight', param({ { 1, -1 } }) },
      { 'fc.bias', param({ 0.5 }) },
    }
  end

  it('splits by lr multiplier and no-decay, in order of appearance', function()
    local opt = optim.SGD(model(), { lr = 0.1, weight_decay = 0.01, no_decay_bias_norm = true,
                                     lr_mult = { ['^fc%.'] = 10 } })
    local gs = opt.param_groups
    assert.are.equal(4, #gs)
    assert.are.same({ 'conv.weight' }, gs[1].names)
    assert.are.same({ 'bn.weight' }, gs[2].names)
    assert.are.same({ 'fc.weight' }, gs[3].names)
    assert.are.same({ 'fc.bias' }, gs[4].names)
    assert.are.same({ 0.1, 0.1, 1.0, 1.0 }, { gs[1].lr, gs[2].lr, gs[3].lr, gs[4].lr })
    assert.are.same({ 0.01, 0, 0.01, 0 }, { gs[1].weight_decay, gs[2].weight_decay, gs[3].weight_decay, gs[4].weight_decay })
    assert.are.same({ 1, 1, 10, 10 }, { gs[1].lr_mult, gs[2].lr_mult, gs[3].lr_mult, gs[4].lr_mult })
    assert.are.same({ 1, 0, 1, 0 }, { gs[1].weight_decay_mult, gs[2].weight_decay_mult, gs[3].weight_decay_mult,
                                      gs[4].weight_decay_mult })
  end)

  it('each group steps with its own lr and weight decay', function()
    local ps = model()
    local opt = optim.SGD(ps, { lr = 0.1, weight_decay = 0.5, no_decay_bias_norm = true, lr_mult = { ['^fc%.'] = 10 } })
    for _, nt in ipairs(ps) do nt[2].grad = cr.ones(nt[2].shape, { dtype = 'f64' }) end
    opt:step()
    -- conv: 1 - 0.1 * (1 + 0.5 * 1) = 0.85; bn: 1 - 0.1 * 1 = 0.9;
    -- fc.weight: 1 - 1.0 * (1 + 0.5) = -0.5, -1 - 1.0 * (1 - 0.5) = -1.5; fc.bias: 0.5 - 1.0 = -0.5
    H.assert_close(ps[1][2], { { 0.85, 2 - 0.1 * 2 }, { 3 - 0.1 * 2.5, 4 - 0.1 * 3 } }, 1e-12)
    H.assert_close(ps[2][2], { 0.9, 0.9 }, 1e-12)
    H.assert_close(ps[3][2], { { -0.5, -1.5 } }, 1e-12)
    H.assert_close(ps[4][2], { -0.5 }, 1e-12)
  end)

  it('an ordered lr_mult list takes the first match; overlapping map patterns are an error', function()
    local opt = optim.SGD(model(), { lr = 1, lr_mult = { { 'bias$', 2 }, { '^fc', 5 } } })
    local by = {}
    for _, g in ipairs(opt.param_groups) do for _, n in ipairs(g.names) do by[n] = g.lr end end
    assert.are.same({ ['conv.weight'] = 1, ['bn.weight'] = 1, ['fc.weight'] = 5, ['fc.bias'] = 2 }, by)
    H.assert_error(function() optim.SGD(model(), { lr = 1, lr_mult = { ['bias$'] = 2, ['^fc'] = 5 } }) end,
      "matches lr_mult patterns")
  end)

  it('takes a list of group tables; a group lr becomes an lr_mult relative to the base', function()
    local ps = model()
    local opt = optim.SGD({ { params = { ps[1], ps[2] }, lr = 0.01 }, { params = { ps[3], ps[4] }, momentum = 0.9 } },
      { lr = 0.1 })
    assert.are.equal(2, #opt.param_groups)
    assert.are.equal(0.01, opt.param_groups[1].lr)
    assert.is_true(math.abs(opt.param_groups[1].lr_mult - 0.1) < 1e-15)
    assert.are.equal(0, opt.param_groups[1].momentum)
    assert.are.equal(0.9, opt.param_groups[2].momentum)
    assert.are.equal(0.1, opt.param_groups[2].lr)
  end)
end)

describe('clipping', function()
  local function grads()
    local a, b, c = param({ 1, 1 }), param({ 1 }), param({ 1 })
    a.grad = cr.tensor({ 3, 4 }, { dtype = 'f64' })
    b.grad = cr.tensor({ 12 }, { dtype = 'f64' })
    return { a, b, c } -- c has no grad: skipped
  end

  it('clip_grad_norm returns the total norm and scales by max / (total + 1e-6)', function()
    local ps = grads()
    local total = optim.clip_grad_norm(ps, 6.5)
    assert.are.equal(13, total) -- sqrt(9 + 16 + 144)
    local k = 6.5 / (13 + 1e-6)
    H.assert_close(ps[1].grad, { 3 * k, 4 * k }, 1e-15)
    H.assert_close(ps[2].grad, { 12 * k }, 1e-15)
    assert.is_nil(ps[3].grad)
  end)

  it('leaves grads alone under the limit; other norms; the max norm', function()
    local ps = grads()
    assert.are.equal(13, optim.clip_grad_norm(ps, 100))
    H.assert_close(ps[2].grad, { 12 }, 0)
    assert.are.equal(19, optim.grad_norm(ps, { norm_type = 1 }))
    assert.are.equal(12, optim.grad_norm(ps, { norm_type = math.huge }))
    local named = { { 'a', ps[1] }, { 'b', ps[2] } }
    assert.are.equal(13, optim.grad_norm(named))
  end)

  it('clip_grad_value clamps to [-v, v]', function()
    local ps = grads()
    ps[1].grad = cr.tensor({ -5, 0.5 }, { dtype = 'f64' })
    optim.clip_grad_value(ps, 1)
    H.assert_close(ps[1].grad, { -1, 0.5 }, 0)
    H.assert_close(ps[2].grad, { 1 }, 0)
  end)

  it('the total norm of f32 grads is the same on 1 and 2 threads', function()
    cr.manual_seed(3)
    local p = cr.randn({ 200000 }):requires_grad_(true)
    p.grad = cr.randn({ 200000 })
    local nt = cr.get_num_threads()
    cr.set_num_threads(1)
    local n1 = optim.grad_norm({ p })
    cr.set_num_threads(2)
    local n2 = optim.grad_norm({ p })
    cr.set_num_threads(nt)
    assert.are.equal(n1, n2)
    local ref = math.sqrt((p.grad:double() * p.grad:double()):sum():item())
    assert(math.abs(n1 - ref) < 1e-9 * ref)
  end)
end)

describe('state_dict', function()
  local function continue_equal(make, steps_before, steps_after)
    local grads = {}
    for s = 1, steps_before + steps_after do grads[s] = G[(s - 1) % 3 + 1] end
    -- A runs straight through; B is rebuilt from A's state_dict after `steps_before`
    local pa = param({ 1, -2 })
    local a = make({ { 'w', pa } })
    for s = 1, steps_before do
      pa.grad = cr.tensor(grads[s], { dtype = 'f64' })
      a:step()
    end
    local pb = pa:detach():clone():requires_grad_(true)
    local b = make({ { 'w', pb } })
    b:load_state_dict(a:state_dict())
    for s = steps_before + 1, steps_before + steps_after do
      pa.grad = cr.tensor(grads[s], { dtype = 'f64' })
      pb.grad = cr.tensor(grads[s], { dtype = 'f64' })
      a:step()
      b:step()
    end
    assert.are.same(pa:totable(), pb:totable()) -- bit for bit
    return pa
  end

  it('SGD: continuing after load equals continuing without', function()
    local p = continue_equal(function(ps) return optim.SGD(ps, { lr = 0.1, momentum = 0.9, weight_decay = 0.1 }) end, 2, 3)
    H.assert_close(p, { 0.4813795054, -2.0721069358 }, 1e-10) -- torch, 5 steps
  end)

  it('AdamW: step counts and both moments carry over', function()
    local p = continue_equal(function(ps)
      return optim.AdamW(ps, { lr = 0.1, betas = { 0.9, 0.99 }, weight_decay = 0.1 })
    end, 3, 2)
    H.assert_close(p, { 0.789619275031512, -1.849442436807853 }, 1e-12) -- torch, 5 steps
  end)

  it('LARS round trip', function()
    continue_equal(function(ps) return optim.LARS(ps, { lr = 0.1, exclude_bias_norm = false }) end, 2, 2)
  end)

  it('restores group hyper-parameters and copies the buffers', function()
    local p = param({ 1, 2 })
    local a = optim.SGD({ { 'w', p } }, { lr = 0.1, momentum = 0.9 })
    p.grad = cr.tensor({ 1, 1 }, { dtype = 'f64' })
    a:step()
    a.param_groups[1].lr = 0.05
    local b = optim.SGD({ { 'w', param({ 1, 2 }) } }, { lr = 0.1, momentum = 0.9 })
    local sd = a:state_dict()
    b:load_state_dict(sd)
    assert.are.equal(0.05, b.param_groups[1].lr)
    assert.are.equal(1, b.state.w.step)
    assert.is_false(b.state.w.momentum_buffer:same_storage(a.state.w.momentum_buffer))
  end)

  it('a state for another model is a clear error', function()
    local a = optim.SGD({ { 'w', param({ 1, 2 }) } }, { lr = 0.1, momentum = 0.9 })
    a.param_groups[1].params[1].grad = cr.tensor({ 1, 1 }, { dtype = 'f64' })
    a:step()
    local other = optim.SGD({ { 'v', param({ 1, 2 }) } }, { lr = 0.1, momentum = 0.9 })
    H.assert_error(function() other:load_state_dict(a:state_dict()) end, "does not know: 'w'")
    local wrong = optim.SGD({ { 'w', param({ 1, 2, 3 }) } }, { lr = 0.1, momentum = 0.9 })
    H.assert_error(function() wrong:load_state_dict(a:state_dict()) end, 'has shape [2] but the parameter has shape [3]')
    local adam = optim.AdamW({ { 'w', param({ 1, 2 }) } })
    H.assert_error(function() adam:load_state_dict(a:state_dict()) end, "state 'momentum_buffer'")
  end)
end)

describe('bad input', function()
  it('names the parameter that is not a leaf or does not require grad', function()
    local p = param({ 1, 2 })
    H.assert_error(function() optim.SGD({ { 'x2', p * 2 } }, { lr = 0.1 }) end, "'x2' is not a leaf")
    local frozen = cr.tensor({ 1.0 })
    H.assert_error(function() optim.SGD({ { 'frozen', frozen } }, { lr = 0.1 }) end, "'frozen' does not require grad")
  end)

  it('unknown options suggest the right one; lr is required', function()
    H.assert_error(function() optim.SGD({ { 'p', param({ 1 }) } }, { lr = 0.1, momentun = 0.9 }) end,
      "did you mean 'momentum'")
    H.assert_error(function() optim.SGD({ { 'p', param({ 1 }) } }, {}) end, 'lr is required')
    H.assert_error(function() optim.SGD({ { 'p', param({ 1 }) } }, { lr = 0.1, nesterov = true }) end,
      'nesterov = true needs momentum > 0')
  end)

  it('a parameter listed twice is an error', function()
    local p = param({ 1 })
    H.assert_error(function() optim.SGD({ { 'a', p }, { 'b', p } }, { lr = 0.1 }) end, 'share storage')
  end)

  it('a grad of the wrong layout names the parameter', function()
    local p = param({ { 1, 2 }, { 3, 4 } })
    local opt = optim.SGD({ { 'fc.weight', p } }, { lr = 0.1 })
    p.grad = cr.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = 'f64' }):t()
    H.assert_error(function() opt:step() end, "grad of parameter 'fc.weight' is not contiguous")
  end)
end)
