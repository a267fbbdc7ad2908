-- cuda_layer_norm_spec — layer_norm on a CUDA GPU against the cpu: values and the grads
-- of x, weight and bias for every float dtype, short rows (a warp each) and long ones (a
-- block each), several normalised dims, without weight or bias, non-contiguous inputs,
-- NaN, empty rows and empty batches, and run-to-run identical weight grads. Without a
-- usable GPU this is one pending line.
local cr = H.cr

H.describe_gpu('cuda layer_norm', function()
  local device = 'cuda'

  local tol = { f32 = { 1e-5, 1e-5 }, f64 = { 1e-12, 1e-12 }, f16 = { 4e-3, 4e-3 }, bf16 = { 2e-2, 2e-2 } }
  -- f(dev) returns a list of tensors; the device's must match the cpu's.
  local function same_on_both(f, t, what) H.same_on_devices(device, what, f, t) end

  -- y and the grads of sum(y * r) for a fixed r; weight/bias as asked
  local function run(dev, x0, nd, dt, affine, seed, prepare)
    local x = x0:clone():to(dt):to(dev):requires_grad_()
    local input = prepare and prepare(x) or x
    local pshape = {}
    for i = #input.shape - nd + 1, #input.shape do pshape[#pshape + 1] = input.shape[i] end
    local w = affine.weight and (H.park_miller(pshape, seed + 1) + 1):to(dt):to(dev):requires_grad_() or nil
    local b = affine.bias and H.park_miller(pshape, seed + 2):to(dt):to(dev):requires_grad_() or nil
    local y = cr.layer_norm(input, nd == 1 and pshape[1] or pshape, { weight = w, bias = b, eps = 1e-5 })
    local r = H.park_miller(y.shape, seed + 3):to(dt):to(dev)
    local total = (y * r):sum()
    total:backward()
    local out = { y, (assert(x.grad, 'a grad for x')) }
    if w then out[#out + 1] = assert(w.grad, 'a grad for the weight') end
    if b then out[#out + 1] = assert(b.grad, 'a grad for the bias') end
    return out
  end

  local affines = { { weight = true, bias = true }, { weight = true }, { bias = true }, {} }

  it('normalises short and long rows as the cpu does, with every grad, in every float dtype', function()
    local cases = {
      { shape = { 6, 10 }, nd = 1 },
      { shape = { 5, 3, 1000 }, nd = 1 },  -- a warp per row, many elements per lane
      { shape = { 3, 2, 2500 }, nd = 1 },  -- a block per row
      { shape = { 2, 3, 4, 5 }, nd = 2 },
      { shape = { 3, 40, 50 }, nd = 2 },   -- 2000 per row: a block
      { shape = { 7, 1 }, nd = 1 },        -- one element: y = bias
    }
    for k, cs in ipairs(cases) do
      local x0 = H.park_miller(cs.shape, 10 + k) * 3 + 1
      for _, dt in ipairs({ 'f32', 'f64', 'f16', 'bf16' }) do
        for a, affine in ipairs(affines) do
          same_on_both(function(dev) return run(dev, x0, cs.nd, dt, affine, 20 * k) end, tol[dt],
                       'layer_norm case ' .. k .. ' ' .. dt .. ' affine ' .. a)
        end
      end
    end
  end)

  it('sums the weight and bias grads over many rows, the same on every run', function()
    local x0 = H.park_miller({ 3000, 64 }, 30) * 2
    same_on_both(function(dev) return run(dev, x0, 1, 'f32', affines[1], 31) end, { 1e-4, 1e-5 }, 'many rows f32')
    same_on_both(function(dev) return run(dev, x0, 1, 'f64', affines[1], 31) end, tol.f64, 'many rows f64')
    local first = run(device, x0, 1, 'f32', affines[1], 31)
    for _ = 1, 2 do
      local again = run(device, x0, 1, 'f32', affines[1], 31)
      for i = 3, 4 do assert.are.same(first[i]:cpu():totable(), again[i]:cpu():totable(), 'grad ' .. i) end
    end
  end)

  it('reads non-contiguous inputs and keeps NaN to its own row', function()
    local x0 = H.park_miller({ 12, 7 }, 40)
    same_on_both(function(dev)
      return run(dev, x0, 1, 'f32', affines[1], 41, function(x) return x:t() end) -- [7, 12] rows
    end, tol.f32, 'transposed input')
    local xn = H.park_miller({ 4, 9 }, 42)
    xn:select(0, 2):select(0, 3):fill_(0 / 0)
    same_on_both(function(dev) return run(dev, xn, 1, 'f64', affines[1], 43) end, tol.f64, 'NaN row')
    local y = cr.layer_norm(xn:to(device), 9):cpu()
    local nan_row, other = y:select(0, 2):select(0, 0):item(), y:select(0, 1):select(0, 0):item()
    assert.is_true(nan_row ~= nan_row, 'the NaN row is NaN')
    assert.is_true(other == other, 'the other rows are not')
  end)

  it('handles an empty batch and empty rows', function()
    for _, dt in ipairs({ 'f32', 'f64' }) do
      same_on_both(function(dev) return run(dev, cr.zeros(0, 8), 1, dt, affines[1], 50) end, tol[dt],
                   'empty batch ' .. dt)
      same_on_both(function(dev) return run(dev, cr.zeros(3, 0), 1, dt, affines[1], 51) end, tol[dt],
                   'empty rows ' .. dt)
    end
  end)

  it('keeps weight and bias on the input\'s device', function()
    if device == 'cpu' then return end
    local x = H.park_miller({ 2, 5 }, 60):to(device)
    H.assert_error(function() return cr.layer_norm(x, 5, { weight = cr.ones(5) }) end, 'layer_norm', 'cuda:0', 'cpu')
  end)
end)
