-- cpu_bf16_spec — native bf16 on the cpu (oneDNN on a CPU with AVX512-BF16): convolutions
-- (forward, grads of input and weight, the small-image weight grad as one matrix product),
-- matrix products and channels-last batch norm in bf16 against the same ops in f32 on the
-- same bf16-rounded values, within bf16's rounding; the f32 <-> bf16 casts bit for bit;
-- and a 200-step SwAV run in train.amp=bf16 whose loss curve follows the f32 run's. Pending where the CPU has no
-- AVX512-BF16 (there bf16 runs on f32 copies, which autocast_spec covers).
local cr = H.cr

-- The activations' layout on the fast path: the same values, channels-last strides.
local function channels_last(t) return t:permute(0, 2, 3, 1):contiguous():permute(0, 3, 1, 2) end

local function max_abs(t) return t:float():abs():max():item() end

-- got (bf16) against want (f32), within a few bf16 roundings of want's largest value.
local function assert_bf16_close(got, want, what)
  assert.are.equal('bf16', got.dtype, what)
  local scale = math.max(max_abs(want), 1e-3)
  H.assert_close(got:float(), want, 2e-2 * scale, 2e-2, what)
end

describe('native bf16 on the cpu', function()
  if not cr.cpu_bf16_native() then
    it('runs where the CPU has AVX512-BF16', function()
      pending('skipped: this CPU has no AVX512-BF16 (or fast paths are off), so bf16 runs on f32 copies')
    end)
    return
  end

  it('casts f32 to bf16 by round-to-nearest-even, dense and strided alike, and back exactly', function()
    local v = { 1, 1 + 2 ^ -8, 1 + 3 * 2 ^ -8, -(1 + 2 ^ -8 + 2 ^ -12), 3.4e38, 1 / 0, -1 / 0, 0 / 0 }
    local want = { 1, 1, 1 + 2 ^ -6, -(1 + 2 ^ -7), 1 / 0, 1 / 0, -1 / 0, 0 / 0 }
    local x = cr.tensor(v, { dtype = 'f32' })
    local dense = x:bfloat16()
    local strided = cr.stack({ x, x }, 1):select(1, 0):bfloat16()   -- stride 2
    H.assert_close(dense:float(), cr.tensor(want, { dtype = 'f32' }), 0, 0, 'dense')
    H.assert_close(strided:float(), dense:float(), 0, 0, 'strided')
    H.assert_close(dense:float():bfloat16():float(), dense:float(), 0, 0, 'round trip')
  end)

  -- {x shape, w shape, options, bias, channels-last x}
  local shapes = {
    { { 4, 8, 10, 10 }, { 16, 8, 3, 3 }, { padding = 1 }, false, false },
    { { 4, 8, 10, 10 }, { 16, 8, 3, 3 }, { padding = 1, stride = 2 }, true, true },
    { { 4, 16, 7, 7 }, { 32, 16, 1, 1 }, { stride = 2 }, false, true },
    { { 4, 8, 9, 9 }, { 8, 4, 3, 3 }, { padding = 1, groups = 2 }, false, true },
    { { 8, 32, 2, 2 }, { 32, 32, 3, 3 }, { padding = 1 }, false, true },   -- the weight grad as a product
    { { 8, 32, 4, 4 }, { 48, 32, 3, 3 }, { padding = 1, stride = 2 }, false, true },
  }
  for i, s in ipairs(shapes) do
    it(string.format('convolves %s with %s (%s) as f32 does, forward and grads', table.concat(s[1], 'x'),
      table.concat(s[2], 'x'), i), function()
      local x = H.park_miller(s[1], 10 + i, 'f32'):bfloat16()
      local w = (H.park_miller(s[2], 20 + i, 'f32') * 0.2):bfloat16()
      local b = s[4] and H.park_miller({ s[2][1] }, 30 + i, 'f32'):bfloat16() or nil
      if s[5] then x = channels_last(x) end
      local function run(dtype)
        local xl = x:to(dtype):detach():requires_grad_()
        local wl = w:to(dtype):detach():requires_grad_()
        local bl = b and b:to(dtype):detach():requires_grad_() or nil
        local y = xl:conv2d(wl, bl, s[3])
        local m = H.park_miller(y.shape, 40 + i, 'f32')
        y:float():mul(m):sum():backward()
        return y, xl.grad, wl.grad, bl and bl.grad
      end
      local y, gx, gw, gb = run('bf16')
      local y32, gx32, gw32, gb32 = run('f32')
      assert_bf16_close(y, y32, 'output')
      assert_bf16_close(gx, gx32, 'input grad')
      assert_bf16_close(gw, gw32, 'weight grad')
      if b then assert_bf16_close(gb, gb32, 'bias grad') end
    end)
  end

  it('takes the weight grad of small images through the product and agrees with oneDNN\'s kernel', function()
    -- the product's result against the convolution kernel's, both bf16: switched by the
    -- environment only, so compare against f32 instead and check the path ran in bf16
    local x = channels_last(H.park_miller({ 16, 64, 2, 2 }, 5, 'f32'):bfloat16()):requires_grad_()
    local w = (H.park_miller({ 64, 64, 3, 3 }, 6, 'f32') * 0.1):bfloat16():requires_grad_()
    local y = x:conv2d(w, nil, { padding = 1 })
    assert.is_true(y:is_channels_last())
    local m = H.park_miller(y.shape, 7, 'f32')
    y:float():mul(m):sum():backward()
    local x32, w32 = x:float():detach():requires_grad_(), w:float():detach():requires_grad_()
    x32:conv2d(w32, nil, { padding = 1 }):mul(m):sum():backward()
    assert_bf16_close(w.grad, w32.grad, 'weight grad')
  end)

  it('multiplies matrices (mm, bmm, addmm, linear) as f32 does', function()
    local a = H.park_miller({ 33, 70 }, 1, 'f32'):bfloat16()
    local b = H.park_miller({ 70, 17 }, 2, 'f32'):bfloat16()
    local bias = H.park_miller({ 17 }, 3, 'f32'):bfloat16()
    assert_bf16_close(a:mm(b), a:float():mm(b:float()), 'mm')
    assert_bf16_close(a:mm(b:t():contiguous():t()), a:float():mm(b:float()), 'mm, transposed operand')
    local ba, bb = H.park_miller({ 3, 9, 20 }, 4, 'f32'):bfloat16(), H.park_miller({ 3, 20, 5 }, 5, 'f32'):bfloat16()
    assert_bf16_close(ba:bmm(bb), ba:float():bmm(bb:float()), 'bmm')
    assert_bf16_close(cr.addmm(bias, a, b), cr.addmm(bias:float(), a:float(), b:float()), 'addmm')
    -- a bias oneDNN does not fuse (beta 2) goes through f32 copies, with the same result
    assert_bf16_close(cr.addmm(bias, a, b, { beta = 2 }), cr.addmm(bias:float(), a:float(), b:float(), { beta = 2 }),
      'addmm beta 2')
    assert_bf16_close(cr.linear(a, b:t(), bias), cr.linear(a:float(), b:float():t(), bias:float()), 'linear')
  end)

  it('trains 200 SwAV steps in train.amp=bf16 along the f32 run\'s loss curve', function()
    local tmp = H.tmpdir('cpu_bf16')
    local function losses_of(amp, steps)
      local cfg = cr.config.check({
        data = { name = 'synthetic', size = 16, limit = 50 * 16, batch_size = 16 },
        train = { epochs = math.ceil(steps / 50), log_every = 1000, amp = amp },
        model = { width = 8, hidden_dim = 32, out_dim = 16 }, knn = { k = 10 },
        crops = { size = { 16, 8 }, num = { 2, 2 } },
        run = { dir = tmp.path(''), name = 'swav_' .. amp }, checkpoint = { save = false },
      }, cr.recipe.ssl.schema('swav'))
      local task = cr.recipe.ssl.task('swav', cfg)
      local losses = {}
      task:add_hook { name = 'record', after_step = function(_, t)
        if t.phase_name == 'train' then losses[#losses + 1] = t.loss_value end
      end }
      cr.train(task)
      return losses
    end
    local f32, bf16 = losses_of('off', 200), losses_of('bf16', 200)
    tmp.remove()
    assert.are.equal(200, #bf16)
    -- the same weights and crops: the first step agrees to bf16 rounding; later steps
    -- drift as rounding compounds, so each 20-step mean is held within 10% (a wrong grad
    -- or kernel leaves far more), as the GPU's curve is held to the cpu's
    assert.is_true(math.abs(bf16[1] - f32[1]) <= 1e-2 * math.abs(f32[1]), bf16[1] .. ' vs ' .. f32[1])
    for w = 0, 9 do
      local a, b = 0, 0
      for i = 20 * w + 1, 20 * w + 20 do a, b = a + bf16[i] / 20, b + f32[i] / 20 end
      assert.is_true(math.abs(a - b) <= 0.10 * math.abs(b), string.format('steps %d-%d: %g vs %g', 20 * w + 1,
        20 * w + 20, a, b))
    end
  end)

  for _, case in ipairs { { false, { 6, 24, 5, 5 } }, { true, { 6, 24, 5, 5 } }, { true, { 40, 24 } },
                          { true, { 8, 24, 5, 5 }, 4 }, { false, { 40, 24 }, 8 } } do
    local relu, shape, splits = case[1], case[2], case[3] or 1
    it(string.format('normalises %s bf16 batches%s%s in bf16, with f32 statistics', #shape == 4 and 'channels-last' or
      '[N, C]', relu and ' (+ relu)' or '', splits > 1 and (' in ' .. splits .. ' splits') or ''), function()
        local x = H.park_miller(shape, 8, 'f32'):bfloat16()
        if #shape == 4 then x = channels_last(x) end
        local w, b = H.park_miller({ 24 }, 9, 'f32'), H.park_miller({ 24 }, 10, 'f32')
        local function run(dtype)
          local xl = x:to(dtype):detach():requires_grad_()
          local wl, bl = w:clone():requires_grad_(), b:clone():requires_grad_()
          local rm, rv = cr.zeros(24), cr.ones(24)
          local y = cr.batch_norm(xl, rm, rv, { weight = wl, bias = bl, training = true, relu = relu, splits = splits })
          local m = H.park_miller(y.shape, 11, 'f32')
          y:float():mul(m):sum():backward()
          return y, xl.grad, wl.grad, bl.grad, rm, rv
        end
        local y, gx, gw, gb, rm, rv = run('bf16')
        local y32, gx32, gw32, gb32, rm32, rv32 = run('f32')
        assert.are.equal(#shape == 4, y:is_channels_last())
        assert_bf16_close(y, y32, 'output')
        assert_bf16_close(gx, gx32, 'input grad')
        -- the statistics and the parameters' grads are f32 sums of the same bf16 values
        H.assert_close(gw, gw32, 1e-3 * math.max(max_abs(gw32), 1), 1e-2, 'weight grad')
        H.assert_close(gb, gb32, 1e-3 * math.max(max_abs(gb32), 1), 1e-2, 'bias grad')
        H.assert_close(rm, rm32, 1e-5, 1e-5, 'running mean')
        H.assert_close(rv, rv32, 1e-5, 1e-5, 'running var')
      end)
  end
end)
