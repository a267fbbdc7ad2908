-- cuda_loss_spec — nll_loss and cross_entropy on a CUDA GPU against the cpu: values and
-- grads for every float dtype and target dtype, every reduction, ignore_index, label
-- smoothing, probability targets, [N, C, d...] and [C] inputs, non-contiguous inputs,
-- NaN, huge logits, empty batches, and the cpu's errors; and SwAV's Sinkhorn codes,
-- computed by ops on the device. Without a usable GPU this is one pending line.
local cr = H.cr

H.describe_gpu('cuda losses', function()
  local device = 'cuda'

  local tol = { f32 = { 1e-5, 1e-5 }, f64 = { 1e-12, 1e-12 }, f16 = { 2e-3, 2e-3 }, bf16 = { 1e-2, 1e-2 } }
  -- f(dev) returns a list of tensors; the device's must match the cpu's.
  local function same_on_both(f, t, what) H.same_on_devices(device, what, f, t) end
  -- class targets in [0, C) with every `every`-th one set to ignore_index (-100)
  local function classes(shape, C, seed, every)
    local t = ((H.park_miller(shape, seed) + 2) * C / 4):long():clamp(0, C - 1)
    if every then
      local flat = t:view(-1)
      for i = 0, flat:numel() - 1, every do flat:select(0, i):fill_(-100) end
    end
    return t
  end
  local reductions = { 'none', 'mean', 'sum' }

  -- loss, then the grad of sum(loss * w) (w the same fixed weights for 'none')
  local function loss_and_grads(dev, fn, x0, t0, opts, dt, soft)
    local x = x0:clone():to(dt):to(dev):requires_grad_()
    local t = t0:to(dev)
    if soft then t = t0:clone():to(dt):to(dev):requires_grad_() end
    local l = cr[fn](x, t, opts)
    local w = H.park_miller(l.shape, 5):to(l.dtype):to(dev)
    local total = (l * w):sum()
    total:backward()
    local out = { l, (assert(x.grad, 'a grad for the input')) }
    if soft then out[3] = assert(t.grad, 'a grad for the probabilities') end
    return out
  end

  it('computes nll_loss and its grad as the cpu does: dtypes, target dtypes, reductions, ignore_index', function()
    local x0 = H.park_miller({ 37, 11 }, 1):log_softmax(1)
    local t0 = classes({ 37 }, 11, 2, 5)
    for _, dt in ipairs({ 'f32', 'f64', 'f16', 'bf16' }) do
      for _, tdt in ipairs({ 'i64', 'i32' }) do
        for _, red in ipairs(reductions) do
          same_on_both(function(dev)
            return loss_and_grads(dev, 'nll_loss', x0, t0:to(tdt), { reduction = red }, dt)
          end, tol[dt], 'nll_loss ' .. dt .. ' ' .. tdt .. ' ' .. red)
        end
      end
    end
    local u8 = classes({ 37 }, 11, 3)
    same_on_both(function(dev)
      return loss_and_grads(dev, 'nll_loss', x0, u8:to('u8'), { ignore_index = 4 }, 'f32')
    end, tol.f32, 'nll_loss u8 targets, ignore_index 4')
  end)

  it('computes cross_entropy and its grad as the cpu does: label smoothing, ignore_index, every dtype', function()
    local x0 = H.park_miller({ 45, 13 }, 4) * 3
    local t0 = classes({ 45 }, 13, 5, 4)
    for _, dt in ipairs({ 'f32', 'f64', 'f16', 'bf16' }) do
      for _, eps in ipairs({ 0, 0.1 }) do
        for _, red in ipairs(reductions) do
          same_on_both(function(dev)
            return loss_and_grads(dev, 'cross_entropy', x0, t0, { reduction = red, label_smoothing = eps }, dt)
          end, tol[dt], 'cross_entropy ' .. dt .. ' eps ' .. eps .. ' ' .. red)
        end
      end
    end
    same_on_both(function(dev)
      return loss_and_grads(dev, 'cross_entropy', x0, classes({ 45 }, 13, 6):to('i32'),
                            { ignore_index = 3, label_smoothing = 0.2 }, 'f32')
    end, tol.f32, 'cross_entropy i32 targets, ignore_index 3')
  end)

  it('takes probability targets, with grads for both logits and probabilities', function()
    local x0 = H.park_miller({ 9, 7 }, 6) * 2
    local p0 = H.park_miller({ 9, 7 }, 7):softmax(1)
    local p4 = H.park_miller({ 3, 7, 4, 2 }, 9):softmax(1)
    for _, dt in ipairs({ 'f32', 'f64', 'bf16' }) do
      for _, red in ipairs(reductions) do
        for _, eps in ipairs({ 0, 0.3 }) do
          same_on_both(function(dev)
            return loss_and_grads(dev, 'cross_entropy', x0, p0, { reduction = red, label_smoothing = eps }, dt, true)
          end, tol[dt], 'soft cross_entropy ' .. dt .. ' ' .. red .. ' eps ' .. eps)
        end
      end
      same_on_both(function(dev)
        return loss_and_grads(dev, 'cross_entropy', H.park_miller({ 3, 7, 4, 2 }, 8), p4, { reduction = 'none' }, dt, true)
      end, tol[dt], 'soft cross_entropy [N, C, d1, d2] ' .. dt)
    end
  end)

  it('handles [N, C, d...] inputs, a [C] input with a 0-dim target, and many classes', function()
    local cases = {
      { x = { 4, 6, 5, 3 }, t = { 4, 5, 3 } },  -- one thread per position
      { x = { 2, 40, 33 }, t = { 2, 33 } },
      { x = { 6, 1000 }, t = { 6 } },           -- a warp per row, many classes
      { x = { 3, 70 }, t = { 3 } },
      { x = { 5, 1 }, t = { 5 } },              -- one class
    }
    for k, cs in ipairs(cases) do
      local C = cs.x[2]
      local x0, t0 = H.park_miller(cs.x, 10 + k) * 4, classes(cs.t, C, 20 + k, 3)
      for _, fn in ipairs({ 'cross_entropy', 'nll_loss' }) do
        local eps = fn == 'cross_entropy' and 0.05 or nil
        for _, red in ipairs(reductions) do
          for _, dt in ipairs({ 'f32', 'f64' }) do
            same_on_both(function(dev)
              return loss_and_grads(dev, fn, x0, t0, { reduction = red, label_smoothing = eps }, dt)
            end, tol[dt], fn .. ' case ' .. k .. ' ' .. red .. ' ' .. dt)
          end
        end
      end
    end
    local x1 = H.park_miller({ 9 }, 30)
    for _, fn in ipairs({ 'cross_entropy', 'nll_loss' }) do
      for _, red in ipairs(reductions) do
        same_on_both(function(dev)
          return loss_and_grads(dev, fn, x1, cr.tensor(4), { reduction = red }, 'f64')
        end, tol.f64, fn .. ' [C] ' .. red)
      end
    end
  end)

  it('reads non-contiguous logits and targets', function()
    local x0 = H.park_miller({ 8, 12 }, 40) * 3
    local t0 = classes({ 2, 12 }, 8, 41, 7)
    for _, fn in ipairs({ 'cross_entropy', 'nll_loss' }) do
      same_on_both(function(dev)
        local x = x0:clone():to(dev):requires_grad_()
        local t = t0:to(dev):select(0, 1)                 -- a strided view of the targets
        local l = cr[fn](x:t(), t, { reduction = 'none' }) -- [12, 8] logits, transposed
        local total = (l * H.park_miller({ 12 }, 42):to(dev)):sum()
        total:backward()
        return { l, assert(x.grad) }
      end, tol.f64, fn .. ' of a transpose')
    end
  end)

  it('is stable for huge logits and keeps NaN to its own row', function()
    local x0 = H.park_miller({ 4, 50 }, 50) * 1000
    x0:select(0, 1):fill_(-1e30)
    local t0 = classes({ 4 }, 50, 51)
    for _, dt in ipairs({ 'f32', 'f64' }) do
      same_on_both(function(dev)
        return loss_and_grads(dev, 'cross_entropy', x0, t0, { reduction = 'none', label_smoothing = 0.1 }, dt)
      end, tol[dt], 'huge logits ' .. dt)
    end
    local xn = H.park_miller({ 3, 40 }, 52)
    xn:select(0, 2):select(0, 7):fill_(0 / 0)
    local tn = classes({ 3 }, 40, 53)
    for _, fn in ipairs({ 'cross_entropy', 'nll_loss' }) do
      same_on_both(function(dev)
        local l = cr[fn](xn:float():to(dev), tn:to(dev), { reduction = 'none' })
        local m = cr[fn](xn:float():to(dev), tn:to(dev))
        return { l, m }
      end, tol.f32, fn .. ' with a NaN')
    end
    local got = cr.cross_entropy(xn:to(device), tn:to(device), { reduction = 'none' }):cpu()
    local nan_row, other = got:select(0, 2):item(), got:select(0, 0):item()
    assert.is_true(nan_row ~= nan_row, 'the NaN row is NaN')
    assert.is_true(other == other, 'the other rows are not')
  end)

  it('divides the mean by the non-ignored count: all ignored gives NaN, an empty batch too', function()
    local x0 = H.park_miller({ 5, 4 }, 60)
    local all = cr.full({ 5 }, -100, { dtype = 'i64' })
    for _, fn in ipairs({ 'cross_entropy', 'nll_loss' }) do
      for _, red in ipairs(reductions) do
        same_on_both(function(dev)
          return loss_and_grads(dev, fn, x0, all, { reduction = red }, 'f32')
        end, tol.f32, fn .. ' all ignored ' .. red)
        same_on_both(function(dev)
          local x = cr.zeros({ 0, 4 }, { device = dev }):requires_grad_()
          local l = cr[fn](x, cr.zeros({ 0 }, { dtype = 'i64', device = dev }), { reduction = red })
          l:sum():backward()
          return { l, assert(x.grad) }
        end, tol.f32, fn .. ' empty batch ' .. red)
      end
    end
    local m = cr.cross_entropy(x0:to(device), all:to(device)):item()
    assert.is_true(m ~= m, 'mean over no targets is NaN')
  end)

  it('gives the same sum on every run', function()
    local x = (H.park_miller({ 4000, 33 }, 70) * 5):float():to(device)
    local t = classes({ 4000 }, 33, 71, 9):to(device)
    local a = cr.cross_entropy(x, t, { reduction = 'sum' }):item()
    for _ = 1, 3 do assert.are.equal(a, cr.cross_entropy(x, t, { reduction = 'sum' }):item()) end
  end)

  it("computes SwAV's Sinkhorn codes on the device as the cpu does: f32, f64, bf16 scores, 0 and 3 iterations", function()
    for _, dt in ipairs({ 'f32', 'f64', 'bf16' }) do
      for _, iterations in ipairs({ 0, 3 }) do
        same_on_both(function(dev)
          local scores = H.park_miller({ 37, 23 }, 7):to(dt)
          scores:select(1, 5):fill_(-40) -- a prototype far below the others (exp underflows without its own max)
          local codes = cr.ssl.sinkhorn(scores:to(dev), { epsilon = 0.05, iterations = iterations })
          assert.is_false(codes.requires_grad)
          return { codes, codes:sum(1):double(), codes:sum(0):double() }
        end, tol[dt], string.format('sinkhorn %s, %d iterations', dt, iterations))
      end
    end
    local ok, err = pcall(cr.ssl.sinkhorn, cr.ones(4, 3):to(device), { epsilon = 0 })
    assert.is_false(ok)
    assert.matches('epsilon must be a finite number > 0', tostring(err))
  end)

  it('reports a target out of range with the cpu\'s words, and targets on another device', function()
    local x0 = H.park_miller({ 4, 5 }, 80)
    for _, fn in ipairs({ 'cross_entropy', 'nll_loss' }) do
      for _, bad in ipairs({ { t = { 1, 0, 7, 9 }, first = 7 }, { t = { 1, -3, 2, -100 }, first = -3 } }) do
        local t0 = cr.tensor(bad.t)
        local want = H.error_of(function() return cr[fn](x0, t0) end)
        local got = H.error_of(function() return cr[fn](x0:to(device), t0:to(device)) end)
        assert.are.equal(want:match(fn .. ': .*'), got:match(fn .. ': .*'))
        H.assert_error(function() return cr[fn](x0:to(device), t0:to(device)) end, fn, 'target value ' .. bad.first)
      end
    end
    H.assert_error(function() return cr.nll_loss(x0:to(device), cr.tensor({ 1, 0, 4, 5 }):to(device)) end,
                   'nll_loss', 'target value 5 (at flat position 3)', 'for 5 classes')
    if device ~= 'cpu' then
      H.assert_error(function() return cr.cross_entropy(x0:to(device), cr.tensor({ 1, 0, 4, 2 })) end,
                     'cross_entropy', 'cuda:0', 'cpu')
      H.assert_error(function() return cr.nll_loss(x0, cr.tensor({ 1, 0, 4, 2 }):to(device)) end,
                     'nll_loss', 'cuda:0', 'cpu')
      H.assert_error(function() return cr.cross_entropy(H.park_miller({ 5 }, 81):to(device), cr.tensor(2)) end,
                     'cross_entropy', 'cuda:0', 'cpu')
    end
  end)
end)
