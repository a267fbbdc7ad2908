-- conv_spec — conv2d: values and grads against PyTorch, the oneDNN fast path against
-- the reference loops (f32), gradchecks in f64 (stride, padding, dilation, groups,
-- depthwise, 1x1, bias or not), strided views, half inputs and bad input.
local cr = H.cr
local C = cr.C

-- Deterministic inputs with exact binary values: v[i] = ((i*a) % m - off) / div, i from 0.
local function pat(shape, a, m, off, div, dtype)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local v = {}
  for i = 0, n - 1 do v[i + 1] = ((i * a) % m - off) / div end
  return cr.tensor(v, { dtype = dtype or 'f64' }):view(shape)
end

-- Smooth pseudo-random inputs for parity runs (no RNG needed).
local function wave(shape, seed, dtype)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local v = {}
  for i = 1, n do v[i] = math.sin(i * 0.7 + seed) * math.cos(i * 0.13 + 2 * seed) end
  return cr.tensor(v, { dtype = dtype or 'f32' }):view(shape)
end

local function flat(t) return t:contiguous():view(-1) end

-- Expected numbers produced once with /usr/bin/python3 (torch 1.13, f64):
--   x = pat(xs, 7, 11, 5, 4), w = pat(ws, 5, 7, 3, 4), b = pat({O}, 3, 5, 2, 2),
--   y = F.conv2d(x, w, b, **kw); m = pat(y.shape, 3, 5, 2, 2); (y * m).sum().backward()
local torch_ref = {
  -- strided: {'stride': 2, 'padding': 1}
  strided = {
    y = {
      -1.625, -1.5625, -2.125, -1.6875, -1.8125, 1.25, -0.875, -1.8125, -1.25, -1.1875, 1.4375, 0.3125, 3,
      2.25, -0.125, 0, -1.125, 1, -1.0625, -1.125, 1.125, -0.9375, -1.4375, -0.5, -0.75, -1.1875, -0.5625
    },
    gx = {
      -0.5, 0, -0.125, -0.75, -0.375, 1.625, 0.25, -0.875, 1.875, -0.25, 0.625, -1, 0.375, 1.375, -0.5,
      -0.875, 0.75, 0.375, -0.75, 1.625, -0.125, -0.75, -0.375, 0.375, 0.625, -0.5, 1.375, 0.375, -1,
      0.625, -0.25, 1.875, -0.875, 0.25, 1.625, -0.375, -0.75, -0.125, 0, -0.5, 0.375, 0.75, -0.875,
      -2.125, -0.25, 0.375, -1, 0.625, 0.375, -0.375
    },
    gw = {
      1.375, -2.875, 0.625, 0.75, -0.125, -1.5, 1, 1.625, -2.25, 1.5, -3.125, 0.375, 0.875, -4.25, 1.125,
      1.25, 1.875, -2.375, 0.625, 1.125, -0.75, -1.5, 0.125, -0.625, -2.25, 1.25, 1.375, 0.375, 1.25,
      -0.75, 1.125, 1.75, -1.75, -2.375, 1.25, 1.5, -0.75, -1.125, 1, -0.625, 0.375, -0.375, 1.375,
      -2.875, 0.625, -0.75, -1.25, 1.25, -1.75, 0.25, 1, 1.5, -3.125, 0.375
    },
    gb = {0, -1, 0.5},
  },
  -- grouped_dilated: {'groups': 2, 'dilation': 2, 'padding': 2}
  grouped_dilated = {
    y = {
      -0.5, 0.9375, 0.375, 1.8125, -0.6875, -0.1875, 1.9375, -0.6875, -1.0625, 1.25, -3.75, 0.375, 2.0625,
      -0.0625, 2.3125, -0.1875, -0.9375, 2.1875, -0.4375, -0.625, -0.5, -1.9375, 0, 1.375, 0.5, -0.9375,
      1.75, -1, -0.625, 1.25, -1.9375, 0.0625, 0.9375, 0.5, 1, -0.875, -0.6875, 3.25, -0.5625, -0.75,
      -1.1875, -1.6875, 0.1875, 0.9375, -0.375, 1.125, -0.75, -1.0625, 1.9375, -0.75
    },
    gx = {
      -0.625, -0.625, -0.875, 1.375, -0.125, -0.625, -0.625, -0.875, 1.375, -0.125, 0.25, -1.25, -1,
      0.875, -0.375, 0.375, -0.75, -0.75, 0.375, -0.375, 0.375, -0.75, -0.75, 0.375, -0.375, 0.625,
      -0.125, 0.375, -0.75, 0, 0.625, -0.125, 0.375, -0.75, 0, 0.375, 0.375, 0.875, -1, 0.25, -0.125,
      0.625, 1.375, -0.875, 0.625, -0.125, 0.625, 1.375, -0.875, 0.625, -0.75, 0.375, -0.125, 0.625,
      0.125, -0.75, 0.375, -0.125, 0.625, 0.125, -1.25, 0.25, -0.75, 1.5, 0, -0.625, -0.625, -0.875,
      1.375, -0.125, -0.625, -0.625, -0.875, 1.375, -0.125, 1.375, -0.875, -0.625, -0.625, -0.625, 1.375,
      -0.875, -0.625, -0.625, -0.625, 1.5, -0.75, 0.25, -1.25, -0.25, 0.625, -0.125, 0.375, -0.75, 0,
      0.625, -0.125, 0.375, -0.75, 0
    },
    gw = {
      1.375, 2.125, -1.25, -0.125, 1.25, 0, -2.625, -2, -0.125, 2.375, 0.75, -0.5, 0.625, -1.5, -1.5,
      -0.25, -2, -2.125, 2, 3.5, 1.625, 0, 1.25, -0.25, -0.625, -2, -2.75, 0.25, 0.75, 2.375, 0.75,
      -0.125, 1, 1.75, -0.625, -2
    },
  },
  -- depthwise: {'groups': 3, 'stride': (1, 2), 'padding': (1, 1)}
  depthwise = {
    y = {
      -1.8125, -1.3125, -1.4375, -1.9375, -2.375, -0.75, -1.875, -0.875, 1.3125, -1.125, 1.3125, -0.75,
      -0.875, 0.0625, -1.5, -0.0625, 1.5, 0.75, -0.625, 2.875, 0.75, 0.75, 0.6875, 0, 2.8125, -0.8125,
      -0.0625, 1.5, -0.375, -0.0625, 0, -0.875, -0.625, 0.5, -1.125, -0.125, -0.25, -1.5, 0.125, -1,
      -1.1875, 0.375, -0.5625, -1.1875, -0.25
    },
    gx = {
      -0.25, -0.5, 0.375, 1.125, -0.875, 1, 0.625, -0.25, -0.25, -0.25, 0.375, 1.125, -0.875, -1, 1,
      -0.25, -0.25, -0.25, -0.5, 0.375, -0.25, -0.25, -0.25, 0.625, 1, -0.875, 1.125, 0.375, -0.5, -0.25,
      -0.25, 0.625, 1, -1, -0.875, 0.375, -0.5, -0.25, -0.25, -0.25, -0.25, 0, 0, -0.75, 0.25, -0.125, -1,
      0.125, 0.125, -0.25, 0, -0.75, 0.25, 1.625, -0.125, 0.125, 0.125, -0.25, 0, 0
    },
    gw = {-2.5, -0.125, 2.375, 1.5, -1.25, 0.75, 0.25, 3.25, -0.75, -4.625, 0.5, 2.5, 1.625, 1.125, -1.125, 0.25, 3.625, -1.25},
    gb = {0, 0, 0},
  },
}

local function torch_case(ref, xs, ws, bias, opts, dtype, tol)
  local x = pat(xs, 7, 11, 5, 4, dtype):requires_grad_(true)
  local w = pat(ws, 5, 7, 3, 4, dtype):requires_grad_(true)
  local b = bias and pat({ ws[1] }, 3, 5, 2, 2, dtype):requires_grad_(true) or nil
  local y = cr.conv2d(x, w, b, opts)
  local m = pat(y.shape, 3, 5, 2, 2, dtype)
  ;(y * m):sum():backward()
  H.assert_close(flat(y), ref.y, tol, tol, 'y')
  H.assert_close(flat(x.grad), ref.gx, tol, tol, 'gx')
  H.assert_close(flat(w.grad), ref.gw, tol, tol, 'gw')
  if bias then H.assert_close(b.grad, ref.gb, tol, tol, 'gb') end
end

describe('conv2d', function()
  local cases = {
    { 'strided', { 1, 2, 5, 5 }, { 3, 2, 3, 3 }, true, { stride = 2, padding = 1 } },
    { 'grouped_dilated', { 1, 4, 5, 5 }, { 2, 2, 3, 3 }, false, { groups = 2, dilation = 2, padding = 2 } },
    { 'depthwise', { 1, 3, 4, 5 }, { 3, 1, 2, 3 }, true, { groups = 3, stride = { 1, 2 }, padding = { 1, 1 } } },
  }
  for _, c in ipairs(cases) do
    for _, fast in ipairs { true, false } do
      for _, dt in ipairs { 'f32', 'f64' } do
        it(string.format('matches PyTorch: %s, %s, fast paths %s', c[1], dt, tostring(fast)), function()
          local prev = cr.set_fast_paths(fast)
          local ok, err = pcall(torch_case, torch_ref[c[1]], c[2], c[3], c[4], c[5], dt, 1e-5)
          cr.set_fast_paths(prev)
          assert(ok, err)
        end)
      end
    end
  end

  it('runs the issue example and backpropagates into the weight', function()
    local x = cr.randn and cr.randn({ 64, 1, 28, 28 }) or wave({ 64, 1, 28, 28 }, 1)
    local w = wave({ 8, 1, 3, 3 }, 2):requires_grad_(true)
    local y = cr.conv2d(x, w, nil, { stride = 1, padding = 1 })
    assert.same({ 64, 8, 28, 28 }, y.shape)
    y = y.relu and y:relu() or y * y
    local loss = y:mean()
    assert.same({}, loss.shape)
    loss:backward()
    assert.same({ 8, 1, 3, 3 }, w.grad.shape)
    assert.is_true(H.max_diff(w.grad, cr.zeros({ 8, 1, 3, 3 })) > 0)
    -- the method form gives the same numbers
    H.assert_close(x:conv2d(w:detach(), nil, { padding = 1 }), cr.conv2d(x, w:detach(), nil, { padding = 1 }), 0, 0)
  end)
end)

describe('conv2d oneDNN fast path vs reference loops (f32)', function()
  local configs = {
    { x = { 2, 3, 9, 9 }, w = { 4, 3, 3, 3 }, bias = true, opts = { stride = 2, padding = 1 } },
    { x = { 2, 4, 11, 10 }, w = { 6, 4, 3, 3 }, opts = { dilation = 2, padding = 2 } },
    { x = { 2, 4, 8, 8 }, w = { 6, 2, 3, 3 }, bias = true, opts = { groups = 2, padding = 1 } },
    { x = { 2, 8, 8, 8 }, w = { 8, 1, 3, 3 }, opts = { groups = 8, padding = 1 } },
    { x = { 2, 16, 7, 7 }, w = { 32, 16, 1, 1 }, bias = true },
    { x = { 1, 3, 10, 10 }, w = { 5, 3, 3, 3 }, opts = { stride = 3 } }, -- the stride drops a row
    { x = { 2, 3, 9, 12 }, w = { 4, 3, 3, 5 }, bias = true, opts = { stride = { 2, 1 }, padding = { 1, 2 } } },
    { x = { 2, 32, 14, 14 }, w = { 64, 32, 3, 3 }, bias = true, opts = { padding = 1 } },
    { x = { 2, 32, 13, 13 }, w = { 32, 16, 3, 3 }, opts = { groups = 2, stride = 2, dilation = { 2, 1 }, padding = 2 } },
    { x = { 3, 64, 8, 8 }, w = { 64, 1, 5, 5 }, bias = true, opts = { groups = 64, padding = 2 } },
    -- a ResNet downsample of few channels, row-major and channels-last: oneDNN's AVX2
    -- strided 1x1 backward-weights kernel writes past a heap block for fewer than 8 input
    -- channels (valgrind), so the reference loops take those weight grads (dnnl_runs 2)
    { x = { 8, 4, 16, 16 }, w = { 8, 4, 1, 1 }, opts = { stride = 2 }, dnnl_runs = 2 },
    { x = { 8, 4, 16, 16 }, w = { 8, 4, 1, 1 }, opts = { stride = 2 }, dnnl_runs = 2, channels_last = true },
    { x = { 4, 3, 16, 16 }, w = { 16, 3, 1, 1 }, bias = true, opts = { stride = 2 }, dnnl_runs = 2 },
    { x = { 4, 16, 8, 8 }, w = { 8, 16, 1, 1 }, opts = { stride = 2 }, channels_last = true },
  }
  local function run(cfg)
    local x = wave(cfg.x, 1)
    if cfg.channels_last then x = x:permute(0, 2, 3, 1):contiguous():permute(0, 3, 1, 2) end
    x:requires_grad_(true)
    local w = wave(cfg.w, 2):requires_grad_(true)
    local b = cfg.bias and wave({ cfg.w[1] }, 3):requires_grad_(true) or nil
    local y = cr.conv2d(x, w, b, cfg.opts)
    ;(y * wave(y.shape, 4)):sum():backward()
    return y:detach(), x.grad, w.grad, b and b.grad
  end
  for k, cfg in ipairs(configs) do
    it(string.format('config %d: x %s w %s agrees forward and backward', k, table.concat(cfg.x, 'x'),
      table.concat(cfg.w, 'x')), function()
      local before = tonumber(C.cr_conv2d_dnnl_runs())
      local y1, gx1, gw1, gb1 = run(cfg)
      local runs = tonumber(C.cr_conv2d_dnnl_runs()) - before
      if cr.features():find('onednn=1', 1, true) then
        -- forward, backward data, backward weights: no silent fallback
        assert.are.equal(cfg.dnnl_runs or 3, runs)
      end
      local prev = cr.set_fast_paths(false)
      local y2, gx2, gw2, gb2 = run(cfg)
      cr.set_fast_paths(prev)
      assert.are.equal(0, tonumber(C.cr_conv2d_dnnl_runs()) - before - runs)
      H.assert_close(y1, y2, 1e-4, 1e-4, 'y')
      H.assert_close(gx1, gx2, 1e-4, 1e-4, 'gx')
      H.assert_close(gw1, gw2, 1e-3, 1e-4, 'gw')
      if gb1 then H.assert_close(gb1, gb2, 1e-3, 1e-4, 'gb') end
    end)
  end

  it('keeps giving right answers when the primitive cache evicts (30 shapes, twice)', function()
    for round = 1, 2 do
      for s = 5, 34 do
        local x, w = wave({ 1, 2, s, 6 }, s), wave({ 3, 2, 3, 3 }, round)
        local y1 = cr.conv2d(x, w, nil, { padding = 1 })
        local prev = cr.set_fast_paths(false)
        local y2 = cr.conv2d(x, w, nil, { padding = 1 })
        cr.set_fast_paths(prev)
        H.assert_close(y1, y2, 1e-5, 1e-5)
      end
    end
  end)

  it('computes only the grads that are needed', function()
    local x = wave({ 2, 3, 6, 6 }, 1)
    local w = wave({ 4, 3, 3, 3 }, 2):requires_grad_(true)
    local b = wave({ 4 }, 3)
    cr.conv2d(x, w, b, { padding = 1 }):sum():backward()
    assert.same({ 4, 3, 3, 3 }, w.grad.shape)
    assert.is_nil(x.grad)
    assert.is_nil(b.grad)
    local x2 = wave({ 2, 3, 6, 6 }, 1):requires_grad_(true)
    local b2 = wave({ 4 }, 3):requires_grad_(true)
    cr.conv2d(x2, wave({ 4, 3, 3, 3 }, 2), b2):sum():backward()
    -- each output channel's bias grad is the number of output positions (2 * 4 * 4)
    H.assert_close(b2.grad, { 32, 32, 32, 32 }, 1e-4, 0)
    assert.same({ 2, 3, 6, 6 }, x2.grad.shape)
  end)
end)

describe('conv2d gradcheck (f64)', function()
  local checks = {
    { 'plain', { 1, 2, 4, 4 }, { 2, 2, 3, 3 }, true, nil },
    { 'stride 2, padding 1', { 2, 2, 5, 5 }, { 3, 2, 3, 3 }, true, { stride = 2, padding = 1 } },
    { 'dilation 2', { 1, 2, 6, 6 }, { 2, 2, 2, 3 }, false, { dilation = 2, padding = { 1, 2 } } },
    { 'groups 2', { 1, 4, 4, 5 }, { 4, 2, 3, 3 }, true, { groups = 2, padding = 1 } },
    { 'depthwise', { 2, 3, 4, 4 }, { 3, 1, 3, 3 }, true, { groups = 3, padding = 1, stride = { 2, 1 } } },
    { '1x1', { 2, 3, 3, 3 }, { 4, 3, 1, 1 }, false, nil },
    { 'groups + dilation + stride', { 1, 4, 7, 7 }, { 2, 2, 3, 2 }, true,
      { groups = 2, dilation = { 2, 3 }, stride = 2, padding = 2 } },
  }
  for _, c in ipairs(checks) do
    it(c[1], function()
      local ins = { wave(c[2], 1, 'f64'), wave(c[3], 2, 'f64') }
      if c[4] then ins[3] = wave({ c[3][1] }, 3, 'f64') end
      H.gradcheck(function(x, w, b) return cr.conv2d(x, w, b, c[5]) end, ins)
    end)
  end

  it('unbatched [C, H, W] input', function()
    H.gradcheck(function(x, w, b) return cr.conv2d(x, w, b, { padding = 1 }) end,
      { wave({ 2, 4, 4 }, 1, 'f64'), wave({ 3, 2, 3, 3 }, 2, 'f64'), wave({ 3 }, 3, 'f64') })
    local y = cr.conv2d(wave({ 2, 4, 4 }, 1), wave({ 3, 2, 3, 3 }, 2), nil, { padding = 1 })
    assert.same({ 3, 4, 4 }, y.shape)
  end)
end)

describe('conv2d inputs', function()
  it('accepts non-contiguous views and gives the contiguous answer', function()
    local base = wave({ 2, 3, 7, 6 }, 1)
    local xt = base:transpose(2, 3) -- [2, 3, 6, 7], strided
    assert.is_false(xt:is_contiguous())
    local wt = wave({ 4, 3, 3, 3 }, 2):transpose(2, 3)
    for _, fast in ipairs { true, false } do
      local prev = cr.set_fast_paths(fast)
      local y1 = cr.conv2d(xt, wt, nil, { padding = 1 })
      local y2 = cr.conv2d(xt:contiguous(), wt:contiguous(), nil, { padding = 1 })
      cr.set_fast_paths(prev)
      H.assert_close(y1, y2, 0, 0)
    end
    -- and grads flow back through the view
    H.gradcheck(function(x, w) return cr.conv2d(x:transpose(2, 3), w, nil, { stride = 2 }) end,
      { wave({ 1, 2, 5, 4 }, 1, 'f64'), wave({ 2, 2, 2, 2 }, 2, 'f64') })
  end)

  it('computes half inputs in f32', function()
    local x, w = wave({ 1, 2, 5, 5 }, 1), wave({ 3, 2, 3, 3 }, 2)
    local y = cr.conv2d(x:half(), w:half(), nil, { padding = 1 })
    assert.are.equal('f16', y.dtype)
    H.assert_close(y:float(), cr.conv2d(x:half():float(), w:half():float(), nil, { padding = 1 }), 1e-2, 1e-2)
    local yb = cr.conv2d(x:bfloat16(), w:bfloat16())
    assert.are.equal('bf16', yb.dtype)
  end)

  it('takes padding = "same" and "valid"', function()
    local x, w = wave({ 1, 2, 6, 7 }, 1), wave({ 3, 2, 3, 5 }, 2)
    assert.same({ 1, 3, 6, 7 }, cr.conv2d(x, w, nil, { padding = 'same' }).shape)
    assert.same({ 1, 3, 4, 3 }, cr.conv2d(x, w, nil, { padding = 'valid' }).shape)
    H.assert_error(function() cr.conv2d(x, wave({ 3, 2, 2, 2 }, 2), nil, { padding = 'same' }) end,
      'conv2d', 'uneven')
    H.assert_error(function() cr.conv2d(x, w, nil, { padding = 'same', stride = 2 }) end, 'conv2d', 'stride 1')
  end)

  it('rejects bad input with a message naming the op and the fix', function()
    local x, w = wave({ 1, 4, 5, 5 }, 1), wave({ 2, 4, 3, 3 }, 2)
    H.assert_error(function() cr.conv2d(nil, w) end, 'conv2d', 'input')
    H.assert_error(function() cr.conv2d(x, nil) end, 'conv2d', 'weight')
    H.assert_error(function() cr.conv2d(x, 3) end, 'conv2d', 'weight')
    H.assert_error(function() cr.conv2d(wave({ 4, 5 }, 1), w) end, 'conv2d', 'input must be 4-D', '[4, 5]')
    H.assert_error(function() cr.conv2d(x, wave({ 2, 4, 3 }, 1)) end, 'conv2d', 'weight must be 4-D')
    H.assert_error(function() cr.conv2d(x:double(), w) end, 'conv2d', 'same float dtype', ':float()')
    H.assert_error(function() cr.conv2d(x:long(), w:long()) end, 'conv2d', 'float dtype')
    H.assert_error(function() cr.conv2d(x, wave({ 2, 3, 3, 3 }, 2)) end, 'conv2d', 'expects 3 input channels', '[1, 4, 5, 5]')
    H.assert_error(function() cr.conv2d(x, wave({ 2, 2, 3, 3 }, 2), nil, { groups = 3 }) end, 'conv2d', 'groups=3')
    H.assert_error(function() cr.conv2d(x, wave({ 3, 2, 3, 3 }, 2), nil, { groups = 2 }) end, 'conv2d', 'output channels')
    H.assert_error(function() cr.conv2d(x, w, nil, { groups = 0 }) end, 'conv2d', 'groups must be >= 1')
    H.assert_error(function() cr.conv2d(x, w, nil, { padding = -1 }) end, 'conv2d', 'padding must be >= 0')
    H.assert_error(function() cr.conv2d(x, w, nil, { stride = 0 }) end, 'conv2d', 'stride must be >= 1')
    H.assert_error(function() cr.conv2d(x, w, nil, { dilation = { 1, 0 } }) end, 'conv2d', 'dilation must be >= 1')
    H.assert_error(function() cr.conv2d(x, w, nil, { padding = 1e12 }) end, 'conv2d', "'padding' must be an integer in",
      'got 1000000000000')
    H.assert_error(function() cr.conv2d(x, w, nil, { padding = 1e9 }) end, 'conv2d', 'beyond any memory')
    H.assert_error(function() cr.conv2d(x, w, nil, { stride = 1.5 }) end, 'conv2d', 'stride', 'integer')
    H.assert_error(function() cr.conv2d(x, w, nil, { stride = { 1, 2, 3 } }) end, 'conv2d', '{h, w} pair')
    H.assert_error(function() cr.conv2d(x, w, nil, { strides = 2 }) end, 'conv2d', "unknown option 'strides'")
    H.assert_error(function() cr.conv2d(x, w, nil, 5) end, 'conv2d', 'options must be a table')
    H.assert_error(function() cr.conv2d(x, w, { padding = 1 }) end, 'conv2d', 'bias must be a tensor or nil', '4th')
    H.assert_error(function() cr.conv2d(wave({ 4, 5, 5 }, 1), wave({ 2, 4, 3 }, 1)) end, 'conv2d', 'weight must be 4-D')
    H.assert_error(function() cr.conv2d(x, wave({ 2, 4, 7, 7 }, 2)) end, 'conv2d', 'larger than the padded input')
    H.assert_error(function() cr.conv2d(x, w, wave({ 3 }, 1)) end, 'conv2d', 'bias must be 1-D with 2 entries')
    H.assert_error(function() cr.conv2d(x, w, wave({ 2 }, 1, 'f64')) end, 'conv2d', 'bias is f64')
    H.assert_error(function() cr.conv2d(wave({ 0, 4, 5, 5 }, 1), wave({ 2, 0, 3, 3 }, 1)) end, 'conv2d')
    -- an empty batch is fine
    assert.same({ 0, 2, 3, 3 }, cr.conv2d(cr.zeros({ 0, 4, 5, 5 }), w).shape)
  end)

  it('checks the conv2d_backward op arguments too', function()
    local ffi = require 'ffi'
    local x, w = wave({ 1, 4, 5, 5 }, 1), wave({ 2, 4, 3, 3 }, 2)
    local p = ffi.new('cr_conv2d_params', { { 1, 1 }, { 0, 0 }, { 1, 1 }, 1 })
    local gx = ffi.new('cr_tensor*[1]')
    assert.are_not.equal(0, C.cr_op_conv2d_backward(gx, nil, nil, wave({ 1, 2, 4, 4 }, 1), x, w, p))
    assert.truthy(ffi.string(C.cr_last_error()):find('grad_output must be f32 [1, 2, 3, 3]', 1, true))
    assert.are.equal(0, C.cr_op_conv2d_backward(gx, nil, nil, wave({ 1, 2, 3, 3 }, 1), x, w, p))
    assert.are.equal(0, C.cr_op_conv2d_backward(nil, nil, nil, wave({ 1, 2, 3, 3 }, 1), x, w, p))
    C.cr_tensor_free(gx[0])
  end)
end)
