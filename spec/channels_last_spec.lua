-- channels_last_spec — conv2d's channels-last activations on the oneDNN path: the layout
-- conv2d writes, elementwise ops and batch norm keep it, values and grads agree with the
-- row-major reference path (fast paths off), and row-major views still work where they
-- should; plus the host allocator's cache of large blocks.
local cr = H.cr

local function onednn() return cr.features():find('onednn=1', 1, true) ~= nil end

-- Deterministic f32 inputs: element i (row-major) is sin(i*a) + (i % b) / b.
local function seq(shape, a, b)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local vals = {}
  for i = 0, n - 1 do vals[i + 1] = math.sin(i * a) + (i % b) / b end
  return cr.tensor(vals, { dtype = 'f32' }):view(shape)
end

-- x stored channels-last: [N, C, H, W] as NHWC
local function to_channels_last(x) return x:permute(0, 2, 3, 1):contiguous():permute(0, 3, 1, 2) end

describe('channels-last activations', function()
  it('conv2d writes channels-last on the oneDNN path and row-major on the reference path', function()
    if not onednn() then return pending('built without oneDNN: conv2d has no channels-last path') end
    local x, w = seq({ 2, 3, 6, 5 }, 0.3, 7), seq({ 8, 3, 3, 3 }, 0.7, 5)
    local fast, ref = H.both_paths(function() return cr.conv2d(x, w, nil, { padding = 1 }) end)
    assert.is_true(fast:is_channels_last())
    assert.are.same({ 30 * 8, 1, 5 * 8, 8 }, fast:stride())
    assert.is_true(ref:is_contiguous())
    H.assert_close(fast, ref, 1e-4, 1e-4)
    -- contiguous() is row-major again; view needs it, reshape copies by itself
    assert.is_true(fast:contiguous():is_contiguous())
    assert.has_error(function() fast:view(2, -1) end)
    H.assert_close(fast:reshape(2, -1), ref:reshape(2, -1), 1e-4, 1e-4)
  end)

  it('reads channels-last, row-major and strided inputs alike', function()
    local x, w, b = seq({ 3, 4, 7, 7 }, 0.21, 9), seq({ 5, 4, 3, 3 }, 0.5, 4), seq({ 5 }, 1.3, 3)
    local expect = H.both_paths(function() return cr.conv2d(x, w, b, { stride = 2, padding = 1 }) end)
    local inputs = { to_channels_last(x), x:transpose(2, 3):contiguous():transpose(2, 3) }
    for i, xi in ipairs(inputs) do
      local fast, ref = H.both_paths(function() return cr.conv2d(xi, w, b, { stride = 2, padding = 1 }) end)
      H.assert_close(fast, expect, 1e-4, 1e-4, 'input ' .. i .. ' fast')
      H.assert_close(ref, expect, 1e-4, 1e-4, 'input ' .. i .. ' reference')
    end
  end)

  it('keeps the layout through relu, add, add_relu, batch norm and their grads', function()
    if not onednn() then return pending('built without oneDNN: conv2d has no channels-last path') end
    local y = cr.conv2d(seq({ 2, 3, 5, 5 }, 0.3, 7), seq({ 16, 3, 3, 3 }, 0.7, 5), nil, { padding = 1 })
    assert.is_true(y:is_channels_last())
    assert.is_true(y:relu():is_channels_last())
    assert.is_true((y + y):is_channels_last())
    assert.is_true((y * 2):is_channels_last())
    assert.is_true(cr.add_relu(y, y):is_channels_last())
    assert.is_true(cr.batch_norm(y, nil, nil, { training = true }):is_channels_last())
    -- cat of channels-last parts (a split BatchNorm's groups) stays channels-last
    local joined = cr.cat({ y:narrow(0, 1, 1), y:narrow(0, 0, 1) }, 0)
    assert.is_true(joined:is_channels_last())
    H.assert_close(joined, cr.cat({ y:contiguous():narrow(0, 1, 1), y:contiguous():narrow(0, 0, 1) }, 0), 0, 0)
    assert.is_false(cr.cat({ y, y:contiguous() }, 0):is_channels_last())
    -- a row-major operand of the same shape: the result follows the first channels-last one
    local r = y:contiguous()
    H.assert_close(y + r, r * 2, 1e-6, 1e-6)
    H.assert_close(r - y, r * 0, 0, 0)
    -- broadcasting a per-channel vector keeps the layout
    local bias = seq({ 1, 16, 1, 1 }, 0.9, 3)
    assert.is_true((y + bias):is_channels_last())
    H.assert_close(y + bias, r + bias, 1e-6, 1e-6)
  end)

  it('batch norm on a large channels-last input (threaded sums) matches the row-major path', function()
    local x = seq({ 16, 32, 16, 16 }, 0.011, 17)
    local g = seq({ 16, 32, 16, 16 }, 0.029, 5)
    local function run(input)
      local xi = input:detach():requires_grad_()
      local y = cr.batch_norm(xi, nil, nil, { training = true, relu = true })
      ;(y * g):sum():backward()
      return y, xi.grad
    end
    local y_cl, gx_cl = run(to_channels_last(x))
    assert.is_true(y_cl:is_channels_last())
    local y_ref, gx_ref = run(x)
    H.assert_close(y_cl, y_ref, 1e-5, 1e-5)
    H.assert_close(gx_cl, gx_ref, 1e-5, 1e-4)
  end)

  -- The ResNet pattern through both paths: conv -> BN+relu -> conv -> BN -> add_relu, a
  -- strided downsample conv, global average pooling; values and every grad must agree.
  it('gives the reference values and grads through a residual block, training and eval', function()
    for _, training in ipairs { true, false } do
      local function run()
        local x = seq({ 4, 8, 9, 9 }, 0.13, 11):requires_grad_()
        local w1 = (seq({ 16, 8, 3, 3 }, 0.71, 5) * 0.2):detach():requires_grad_()
        local w2 = (seq({ 16, 16, 3, 3 }, 0.37, 7) * 0.1):detach():requires_grad_()
        local wd = (seq({ 16, 8, 1, 1 }, 0.93, 3) * 0.3):detach():requires_grad_()
        local g1, b1 = (seq({ 16 }, 1.1, 2) + 0.5):detach():requires_grad_(), seq({ 16 }, 0.4, 2):requires_grad_()
        local g2, b2 = (seq({ 16 }, 0.8, 3) + 0.5):detach():requires_grad_(), seq({ 16 }, 0.6, 2):requires_grad_()
        local rm1, rv1 = seq({ 16 }, 0.3, 2) * 0.1, seq({ 16 }, 0.2, 2) * 0.1 + 1.5
        local rm2, rv2 = seq({ 16 }, 0.5, 2) * 0.1, seq({ 16 }, 0.7, 2) * 0.1 + 1.2
        local h = cr.conv2d(x, w1, nil, { stride = 2, padding = 1 })
        h = cr.batch_norm(h, rm1, rv1, { weight = g1, bias = b1, training = training, relu = true })
        h = cr.conv2d(h, w2, nil, { padding = 1 })
        h = cr.batch_norm(h, rm2, rv2, { weight = g2, bias = b2, training = training })
        local out = cr.add_relu(h, cr.conv2d(x, wd, nil, { stride = 2 }))
        local pooled = out:mean({ 2, 3 })
        ;(pooled * seq({ 4, 16 }, 1.7, 5)):sum():backward()
        return out, x.grad, w1.grad, w2.grad, wd.grad, g1.grad, b1.grad, g2.grad, b2.grad, rm1, rv2
      end
      local fast, ref = H.both_paths(function() return { run() } end)
      if onednn() then assert.is_true(fast[1]:is_channels_last()) end
      for k = 1, #ref do
        local scale = math.max(1, H.max_diff(ref[k], ref[k] * 0))
        H.assert_close(fast[k], ref[k], 2e-4 * scale, 1e-4, (training and 'train' or 'eval') .. ' output ' .. k)
      end
    end
  end)

  it('trains a ResNet the same on both paths (three SGD steps)', function()
    local function run()
      cr.manual_seed(3)
      local model = cr.nn.models.resnet18 { stem = 'cifar', width = 8, in_channels = 1, num_classes = 4 }
      local opt = cr.optim.SGD(model:named_parameters(), { lr = 0.05, momentum = 0.9 })
      local x, target = seq({ 8, 1, 12, 12 }, 0.19, 13), cr.tensor({ 0, 1, 2, 3, 0, 1, 2, 3 }, { dtype = 'i64' })
      local losses = {}
      for i = 1, 3 do
        opt:zero_grad()
        local loss = cr.cross_entropy(model(x), target)
        loss:backward()
        opt:step()
        losses[i] = loss:item()
      end
      return losses, model:state_dict()
    end
    local fast, ref = H.both_paths(function() return { run() } end)
    for i = 1, 3 do assert.is_near(ref[1][i], fast[1][i], 1e-4 * math.max(1, math.abs(ref[1][i]))) end
    for name, t in pairs(ref[2]) do
      if t:is_floating_point() then
        local scale = math.max(1, H.max_diff(t, t * 0))
        H.assert_close(fast[2][name], t, 1e-3 * scale, 1e-3, name)
      end
    end
  end)
end)

describe('host allocator cache', function()
  it('reuses freed large blocks and gives them back on request', function()
    cr.memory_cache_limit(nil)
    collectgarbage('collect')
    cr.memory_empty_cache()   -- a 4 MiB block cached by an earlier spec would serve the first empty
    local before = cr.memory_stats()
    cr.empty({ 1024, 1024 }) -- 4 MiB, garbage at once
    collectgarbage('collect')
    local mid = cr.memory_stats()
    assert.is_true(mid.cached_bytes >= before.cached_bytes + 4 * 2 ^ 20)
    local b = cr.empty({ 1024, 1024 })
    local after = cr.memory_stats()
    assert.are.equal(mid.cache_hits + 1, after.cache_hits)
    assert.is_true(after.cached_bytes < mid.cached_bytes)
    assert.are.same({ 1024, 1024 }, b.shape)
    cr.memory_empty_cache()
    assert.are.equal(0, cr.memory_stats().cached_bytes)
  end)

  it('caches nothing with a limit of 0, and rejects a bad limit', function()
    cr.memory_cache_limit(0)
    cr.empty({ 1024, 1024 })
    collectgarbage('collect')
    assert.are.equal(0, cr.memory_stats().cached_bytes)
    cr.memory_cache_limit(nil)
    assert.has_error(function() cr.memory_cache_limit(-5) end,
      'memory_cache_limit: expected a number of bytes >= 0, or nil for the default')
  end)
end)
