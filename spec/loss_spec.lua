-- loss_spec — softmax/log_softmax (any dim, stable, fast path against the reference),
-- nll_loss and cross_entropy (class and soft targets, label smoothing, ignore_index,
-- reductions): values against PyTorch, gradchecks, non-contiguous inputs, bad input.
local cr = H.cr

-- Deterministic inputs (H.park_miller): the PyTorch numbers below come from the same generator.
local rnd = H.park_miller
local function flat(t) return cr.tensor(H.flat(t), { dtype = 'f64' }) end
local both = H.both_paths

describe('softmax and log_softmax', function()
  local x = rnd({ 3, 4, 5 }, 7)

  it('match PyTorch along every dim', function()
    -- torch: x.softmax(d)[0, :2, :] for d = 0, 1, 2 and x.log_softmax(1)[1]
    local want = {
      { 0.01680568031, 0.4035962506, 0.5231481913, 0.1773102325, 0.2717257887, 0.2650010488, 0.1676963756,
        0.6233709604, 0.2116852967, 0.18327409 },
      { 0.02389899687, 0.5481912506, 0.06247327127, 0.05679981557, 0.4837517427, 0.2012352386, 0.05146054562,
        0.3978208811, 0.5015126083, 0.2294052948 },
      { 0.01544396454, 0.6140382434, 0.0491043765, 0.03584495521, 0.2855684603, 0.1365572598, 0.06052981475,
        0.3283561583, 0.3323491785, 0.1422075886 },
    }
    for d = 0, 2 do
      H.assert_close(flat(x:softmax(d):select(0, 0):narrow(0, 0, 2)), want[d + 1], 1e-9)
      H.assert_close(flat(x:softmax(d - 3):select(0, 0):narrow(0, 0, 2)), want[d + 1], 1e-9)
      H.assert_close(flat(x:float():softmax(d):select(0, 0):narrow(0, 0, 2)), want[d + 1], 1e-6)
    end
    H.assert_close(flat(x:log_softmax(1):select(0, 1)), { -0.4607401864, -0.6369167571, -3.279670879,
      -2.474339447, -0.7973884418, -1.396341699, -1.291535762, -1.461285934, -0.8785793072, -0.8567247316,
      -2.661364217, -2.525007592, -0.422333056, -3.197554915, -3.879768608, -2.95978914, -2.152672802,
      -2.591523272, -0.7775145041, -2.260578596 }, 1e-9)
  end)

  it('are stable for large logits', function()
    local big = cr.tensor({ { 1000, 1001, 1002 } }, { dtype = 'f32' })
    H.assert_close(big:softmax(1), { { 0.09003057, 0.24472847, 0.66524096 } }, 1e-6)
    H.assert_close(big:log_softmax(1), { { -2.40760596, -1.40760596, -0.40760596 } }, 1e-5)
    H.assert_close((big * -1):log_softmax(1), { { -0.40760596, -1.40760596, -2.40760596 } }, 1e-5)
  end)

  it('fast path agrees with the reference (f32, rows and blocks)', function()
    for _, case in ipairs { { { 64, 1000 }, 1 }, { { 8, 10, 300 }, 1 }, { { 16, 7, 9 }, 0 }, { { 3, 5, 70, 2 }, 2 } } do
      local t = rnd(case[1], 17, 'f32') * 4
      for _, fn in ipairs { 'softmax', 'log_softmax' } do
        local f, r = both(function() return t[fn](t, case[2]) end)
        H.assert_close(f, r, 1e-6, 1e-5, fn)
        H.assert_close(f, t:double()[fn](t:double(), case[2]), 1e-6, 1e-5, fn .. ' vs f64')
      end
    end
  end)

  it('handle non-contiguous inputs, halves, 0-dim and sum to one', function()
    local t = x:transpose(0, 2)
    H.assert_close(t:softmax(1), x:softmax(1):transpose(0, 2), 1e-12)
    H.assert_close(t:log_softmax(0), x:log_softmax(2):transpose(0, 2), 1e-12)
    H.assert_close(x:softmax(1):sum(1), cr.ones(3, 5, { dtype = 'f64' }), 1e-12)
    local h = x:half():softmax(2)
    assert.equal('f16', h.dtype)
    H.assert_close(h:double(), x:softmax(2), 2e-3)
    assert.equal('bf16', x:bfloat16():log_softmax(0).dtype)
    assert.equal(1, cr.tensor(3.5):softmax(0):item())
    assert.equal(0, cr.tensor(3.5):log_softmax(-1):item())
  end)

  it('pass gradcheck along every dim', function()
    local a = rnd({ 2, 3, 4 }, 19)
    for d = 0, 2 do
      H.gradcheck(function(t) return t:softmax(d) end, { a })
      H.gradcheck(function(t) return t:log_softmax(d) end, { a })
    end
    H.gradcheck(function(t) return t:log_softmax(1) end, { a:transpose(0, 2) })
    H.gradcheck(function(t) return cr.softmax(t, -1) end, { a:select(0, 1) })
  end)

  it('reject bad input', function()
    H.assert_error(function() cr.softmax(nil, 0) end, 'softmax', 'self')
    H.assert_error(function() x:softmax() end, 'softmax', 'give the dim')
    H.assert_error(function() x:softmax(3) end, 'softmax', 'dim 3 out of range')
    H.assert_error(function() x:log_softmax(-4) end, 'log_softmax', 'out of range')
    H.assert_error(function() cr.ones(3, { dtype = 'i64' }):softmax(0) end, 'softmax', 'floating')
  end)
end)

describe('nll_loss and cross_entropy', function()
  local x = rnd({ 4, 5 }, 3)
  local t = cr.tensor({ 1, 0, 4, 2 })
  local ti = cr.tensor({ 1, -100, 4, 2 })

  it('match PyTorch for every reduction, with ignore_index and label smoothing', function()
    -- torch: F.cross_entropy(x, t, reduction=r), F.cross_entropy(x, ti, reduction=r,
    -- label_smoothing=0.2), F.nll_loss(x.log_softmax(1), ti, reduction=r)
    H.assert_close(cr.cross_entropy(x, t, { reduction = 'none' }),
      { 1.607992879, 1.130317516, 2.438037425, 2.726564157 }, 1e-9)
    H.assert_close(cr.cross_entropy(x, t), 1.975727994, 1e-9)
    H.assert_close(cr.cross_entropy(x, t, { reduction = 'sum' }), 7.902911978, 1e-9)
    local ls = { label_smoothing = 0.2 }
    H.assert_close(cr.cross_entropy(x, ti, { reduction = 'none', label_smoothing = 0.2 }),
      { 1.661970784, 0, 2.33182493, 2.588813091 }, 1e-9)
    H.assert_close(cr.cross_entropy(x, ti, ls), 2.194202935, 1e-9)
    H.assert_close(cr.cross_entropy(x, ti, { reduction = 'sum', label_smoothing = 0.2 }), 6.582608804, 1e-9)
    local lp = x:log_softmax(1)
    H.assert_close(cr.nll_loss(lp, ti, { reduction = 'none' }), { 1.607992879, 0, 2.438037425, 2.726564157 }, 1e-9)
    H.assert_close(cr.nll_loss(lp, ti), 2.257531487, 1e-9)
    H.assert_close(cr.nll_loss(lp, ti, { reduction = 'sum' }), 6.772594461, 1e-9)
    H.assert_close(cr.nll_loss(lp, cr.tensor({ 1, 0, 4, 2 }, { dtype = 'i32' })), cr.nll_loss(lp, t), 0)
    -- one sample: [C] with a 0-dim target
    H.assert_close(cr.cross_entropy(x:select(0, 0), cr.tensor(3)), 1.682644754, 1e-9)
    -- f32 agrees
    H.assert_close(cr.cross_entropy(x:float(), ti, ls), 2.194202935, 1e-6)
    -- every position ignored: mean is nan (0 / 0), like PyTorch
    local v = cr.cross_entropy(x, cr.full({ 4 }, -100, { dtype = 'i64' })):item()
    assert.is_true(v ~= v)
  end)

  it('handle [N, C, d] inputs and soft targets', function()
    local x3 = rnd({ 2, 3, 4 }, 5)
    local t3 = cr.tensor({ { 0, 2, 1, -100 }, { 2, 2, 0, 1 } })
    H.assert_close(cr.cross_entropy(x3, t3, { label_smoothing = 0.1 }), 2.009085355, 1e-9)
    H.assert_close(cr.cross_entropy(x3, t3, { reduction = 'none' }), { { 3.001253075, 0.7117951847, 3.222420409, 0 },
      { 1.655242142, 0.4432153599, 3.383886701, 2.089762101 } }, 1e-9)
    H.assert_close(cr.nll_loss(x3:log_softmax(1), t3), cr.cross_entropy(x3, t3), 1e-12)
    -- torch: p = rnd([4, 5], 9).softmax(1); F.cross_entropy(x, p);
    --        F.cross_entropy(x, p, reduction='sum', label_smoothing=0.3)
    local p = rnd({ 4, 5 }, 9):softmax(1)
    H.assert_close(cr.cross_entropy(x, p), 1.444612048, 1e-9)
    H.assert_close(cr.cross_entropy(x, p, { reduction = 'sum', label_smoothing = 0.3 }), 6.516684282, 1e-9)
    assert.same({ 4 }, cr.cross_entropy(x, p, { reduction = 'none' }).shape)
    -- non-contiguous logits and targets
    local xt = x:t():contiguous():t()
    assert.is_false(xt:is_contiguous())
    H.assert_close(cr.cross_entropy(xt, ti, { label_smoothing = 0.2 }), 2.194202935, 1e-9)
    H.assert_close(cr.cross_entropy(x:half(), t):double(), 1.975727994, 5e-3)
  end)

  it('has PyTorch\'s gradient (softmax - target) scaled by the reduction', function()
    local xg = x:clone():requires_grad_(true)
    cr.cross_entropy(xg, ti, { label_smoothing = 0.2 }):backward()
    -- torch: the same call's x.grad
    H.assert_close(xg.grad, { { 0.0004407742826, -0.2132369281, 0.02670993268, 0.04862723801, 0.1374589832 },
      { 0, 0, 0, 0, 0 }, { 0.01464949014, 0.1296263148, 0.09674036187, 0.009873140188, -0.250889307 },
      { 0.1965607249, 0.007655555773, -0.2581854139, 0.02294382904, 0.03102530423 } }, 1e-9)
  end)

  it('are exact for huge logits: only their differences count, as in log_softmax', function()
    local function near(got, want, tol, what)
      assert.is_true(math.abs(got - want) <= tol, string.format('%s: %.10g vs %.10g', what, got, want))
    end
    for _, dt in ipairs({ 'f64', 'f32' }) do
      -- a row of equal logits is log(C) whatever their size; a shifted row the same loss
      local same = cr.full({ 1, 50 }, -1e30, { dtype = dt })
      local target = cr.tensor({ 3 }, { dtype = 'i64' })
      local l = cr.cross_entropy(same, target, { label_smoothing = 0.1 }):item()
      near(l, math.log(50), 1e-6, dt .. ' equal logits')
      local row = cr.tensor({ { 0.5, -1.25, 2, 0 } }, { dtype = dt })
      local want = cr.cross_entropy(row, cr.tensor({ 2 }, { dtype = 'i64' }), { label_smoothing = 0.2 }):item()
      local shifted = (row:double() + 1e12):to(dt)
      local got = cr.cross_entropy(shifted, cr.tensor({ 2 }, { dtype = 'i64' }), { label_smoothing = 0.2 }):item()
      if dt == 'f64' then near(got, want, 1e-9, 'shifted row') end
      -- the grad of equal logits is the smoothed target's distance from uniform
      local xg = same:clone():requires_grad_()
      cr.cross_entropy(xg, target, { label_smoothing = 0.1 }):backward()
      near(xg.grad:select(0, 0):select(0, 0):item(), 1 / 50 - 0.1 / 50, 1e-6, dt .. ' grad, another class')
      near(xg.grad:select(0, 0):select(0, 3):item(), 1 / 50 - 0.9 - 0.1 / 50, 1e-6, dt .. ' grad, the target')
    end
  end)

  it('pass gradcheck', function()
    local a = rnd({ 4, 5 }, 23)
    for _, red in ipairs { 'none', 'mean', 'sum' } do
      for _, eps in ipairs { 0, 0.3 } do
        local o = { reduction = red, label_smoothing = eps }
        H.gradcheck(function(l) return cr.cross_entropy(l, ti, o) end, { a })
        H.gradcheck(function(l, p) return cr.cross_entropy(l, p, o) end, { a, rnd({ 4, 5 }, 29):softmax(1) })
      end
      H.gradcheck(function(l) return cr.nll_loss(l, ti, { reduction = red }) end, { a })
    end
    local x3 = rnd({ 2, 3, 4 }, 31)
    local t3 = cr.tensor({ { 0, 2, 1, -100 }, { 2, 2, 0, 1 } })
    H.gradcheck(function(l) return cr.cross_entropy(l, t3, { label_smoothing = 0.1 }) end, { x3 })
    H.gradcheck(function(l) return cr.nll_loss(l, t3, { reduction = 'none' }) end, { x3 })
    H.gradcheck(function(l) return cr.cross_entropy(l, cr.tensor(2)) end, { x3:select(0, 0):select(1, 0) })
    H.gradcheck(function(l) return cr.cross_entropy(l, t) end, { a:t():contiguous():t() })
  end)

  it('fast paths agree with the reference, forward and backward (f32)', function()
    local l = rnd({ 64, 1000 }, 41, 'f32') * 5
    local tv = {}
    for i = 1, 64 do tv[i] = i % 7 == 0 and -100 or (i * 131) % 1000 end
    local tg = cr.tensor(tv)
    local function run(f)
      local xg = l:clone():requires_grad_(true)
      local y = f(xg)
      ;(y * rnd(y.shape, 43, 'f32')):sum():backward()
      return y, xg.grad
    end
    local fns = {
      function(v) return v:softmax(1) end,
      function(v) return v:log_softmax(1) end,
      function(v) return v:view(8, 8, 1000):softmax(1) end,
      function(v) return cr.cross_entropy(v, tg, { label_smoothing = 0.1 }) end,
      function(v) return cr.cross_entropy(v, tg, { reduction = 'none' }) end,
      function(v) return cr.cross_entropy(v:view(16, 4, 1000):transpose(1, 2), tg:view(16, 4), { label_smoothing = 0.2 }) end,
      function(v) return cr.cross_entropy(v, v:detach():softmax(1), { label_smoothing = 0.1 }) end,
    }
    for k, f in ipairs(fns) do
      local prev = cr.set_fast_paths(true)
      local fy, fg = run(f)
      cr.set_fast_paths(false)
      local ry, rg = run(f)
      cr.set_fast_paths(prev)
      H.assert_close(fy, ry, 1e-6, 1e-5, 'value ' .. k)
      H.assert_close(fg, rg, 1e-6, 1e-5, 'grad ' .. k)
    end
  end)

  it('reject bad input with the bad value and the fix', function()
    H.assert_error(function() cr.cross_entropy(x, cr.tensor({ 1, 0, 5, 2 })) end,
      'cross_entropy', 'target value 5', '5 classes')
    H.assert_error(function() cr.nll_loss(x, cr.tensor({ 1, -1, 4, 2 })) end, 'nll_loss', 'target value -1')
    H.assert_error(function() cr.nll_loss(x, cr.tensor({ 1, 0, 4 })) end, 'nll_loss', 'does not match', '[4, 5]')
    H.assert_error(function() cr.nll_loss(x, x) end, 'nll_loss', 'long()')
    H.assert_error(function() cr.cross_entropy(x, x:narrow(1, 0, 4)) end, 'cross_entropy', 'soft', 'shape')
    H.assert_error(function() cr.cross_entropy(x, cr.tensor({ true, false, true, true })) end, 'cross_entropy', 'bool')
    H.assert_error(function() cr.cross_entropy(nil, t) end, 'cross_entropy', 'input')
    H.assert_error(function() cr.cross_entropy(x, nil) end, 'cross_entropy', 'target')
    H.assert_error(function() cr.cross_entropy(x, t, { reduction = 'avg' }) end, 'cross_entropy', 'reduction')
    H.assert_error(function() cr.cross_entropy(x, t, { label_smoothing = 1.5 }) end, 'label_smoothing', '[0, 1]')
    H.assert_error(function() cr.cross_entropy(x, t, { smoothing = 0.1 }) end, 'cross_entropy', 'unknown option')
    H.assert_error(function() cr.cross_entropy(x, t, 'mean') end, 'cross_entropy', 'options')
    H.assert_error(function() cr.cross_entropy(cr.tensor(1.5), cr.tensor(0)) end, 'cross_entropy', '0-dim')
    H.assert_error(function() cr.cross_entropy(t, t) end, 'cross_entropy', 'floating')
    H.assert_error(function() cr.nll_loss(x, t, { ignore_index = 0.5 }) end, 'nll_loss', 'ignore_index')
  end)
end)
