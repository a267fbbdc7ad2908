-- norm_spec — batch_norm (training, eval, running statistics, oneDNN against the reference
-- loops), layer_norm, dropout (Philox mask, determinism) and normalize: values against
-- PyTorch, f64 gradchecks, non-contiguous inputs, halves, and errors on bad input.
--
-- Expected numbers were computed once with Debian's python3-torch (CPU, float64) from the
-- same formula inputs as `seq` below, e.g.
--   x = [sin(i*0.7)*2 + i%3 for i in range(24)] viewed as (2,3,2,2)
--   F.batch_norm(x*(s+1)+s, rm, rv, w, b, training=True) for s = 0, 1, 2
-- and pasted here; the spec itself never runs python.
local cr = H.cr
local ffi = require 'ffi'

-- Deterministic inputs: element i (row-major, from 0) is sin(i*a)*2 + i%b.
local function seq(shape, a, b, dtype)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local vals = {}
  for i = 0, n - 1 do vals[i + 1] = math.sin(i * a) * 2 + i % b end
  return cr.tensor(vals, { dtype = dtype or 'f64' }):view(shape)
end

local function ones(n, dtype) return cr.full({ n }, 1, { dtype = dtype or 'f64' }) end
local function zeros(n, dtype) return cr.full({ n }, 0, { dtype = dtype or 'f64' }) end

-- Runs f with fast paths off, restoring the previous setting.
local function reference(f)
  local prev = cr.set_fast_paths(false)
  local ok, a, b, c, d = pcall(f)
  cr.set_fast_paths(prev)
  if not ok then error(a, 2) end
  return a, b, c, d
end

local W3 = { 1.5, -0.5, 2.0 }
local B3 = { 0.1, 0.2, -0.3 }

describe('batch_norm', function()
  local torch_train_y = { -1.198577635, 0.9944055056, 2.606692841, 0.4558309702, -0.3027125002,
    -0.1654720077, 0.9580289334, 0.6705602462, -2.115629538, -3.172139103, 0.250812717,
    2.746131799, 0.4393283495, 0.371288763, 0.01561491285, -2.884583708, 0.6681408928,
    0.03203839035, 0.2893041101, -0.5498880649, 2.753454371, -0.6835709344, -0.811547349,
    -1.367511963 }
  local torch_rm = { 1.050210983, 0.4633566444, 1.382281477 }
  local torch_rv = { 4.483998478, 3.537106211, 3.449696752 }
  local torch_eval_y = { -0.6439343333, 0.9771167434, 2.168918027, 0.5790029529, -0.1207862434,
    -0.02200962868, 0.78661192, 0.579711003, -0.9943426959, -1.752243184, 0.7032545603,
    2.493303237, 0.5668042312, 0.5165094328, 0.2535956569, -1.890228439, 0.5779697126,
    0.1201452713, 0.3053080933, -0.2986868402, 2.498556177, 0.03296264021, -0.05884285809,
    -0.4576710995 }

  -- three training steps then one eval step, as in the torch script
  local function run_steps(dtype)
    local x = seq({ 2, 3, 2, 2 }, 0.7, 3, dtype)
    local w, b = cr.tensor(W3, { dtype = dtype }), cr.tensor(B3, { dtype = dtype })
    local rm, rv = zeros(3, dtype), ones(3, dtype)
    local v0 = rm.version
    local y
    for s = 0, 2 do
      y = cr.batch_norm(x * (s + 1) + s, rm, rv, { weight = w, bias = b, training = true, momentum = 0.1, eps = 1e-5 })
    end
    assert.is_true(rm.version > v0 and rv.version > v0)
    local ye = cr.batch_norm(x, rm, rv, { weight = w, bias = b })
    return y, rm, rv, ye
  end

  it('matches PyTorch in training and eval, including the running statistics (f64)', function()
    local y, rm, rv, ye = run_steps('f64')
    H.assert_close(y:view(-1), torch_train_y, 1e-8, 1e-8)
    H.assert_close(rm, torch_rm, 1e-8, 1e-8)
    H.assert_close(rv, torch_rv, 1e-8, 1e-8)
    H.assert_close(ye:view(-1), torch_eval_y, 1e-8, 1e-8)
  end)

  it('matches PyTorch in f32 on the oneDNN path and on the reference path', function()
    for _, fast in ipairs { true, false } do
      local prev = cr.set_fast_paths(fast)
      local y, rm, rv, ye = run_steps('f32')
      cr.set_fast_paths(prev)
      assert.equal('f32', y.dtype)
      H.assert_close(y:view(-1), torch_train_y, 1e-4, 1e-4)
      H.assert_close(rm, torch_rm, 1e-5, 1e-5)
      H.assert_close(rv, torch_rv, 1e-5, 1e-5)
      H.assert_close(ye:view(-1), torch_eval_y, 1e-4, 1e-4)
    end
  end)

  it('gives PyTorch grads of x, weight and bias in training', function()
    local gx_t = { -1.236313291, 0.6340803264, 0.04649399018, -0.3846970948, -0.1262706182,
      0.5648298675, -0.1773002772, -0.09744519573, -0.4854043829, 1.304538801, -1.446260457,
      1.540396187, 0.1887220639, -0.8112465836, 0.9201537441, 0.6428068445, -0.1789282997,
      0.1014656775, 0.4280956909, -0.5144468451, -0.6344169366, 1.357819229, -0.5743125949,
      -1.062359846 }
    local gw_t = { 5.336893812, -1.985649736, 0.9202284924 }
    local gb_t = { 14.94126017, 17.12637841, 14.17716061 }
    for _, case in ipairs { { 'f64', true, 1e-8 }, { 'f32', true, 1e-4 }, { 'f32', false, 1e-4 } } do
      local dtype, fast, tol = case[1], case[2], case[3]
      local prev = cr.set_fast_paths(fast)
      local x = seq({ 2, 3, 2, 2 }, 0.7, 3, dtype):requires_grad_()
      local w = cr.tensor(W3, { dtype = dtype, requires_grad = true })
      local b = cr.tensor(B3, { dtype = dtype, requires_grad = true })
      local gy = seq({ 2, 3, 2, 2 }, 1.3, 5, dtype)
      local y = cr.batch_norm(x, nil, nil, { weight = w, bias = b, training = true })
      assert.equal('batch_norm', y.grad_fn)
      ;(y * gy):sum():backward()
      cr.set_fast_paths(prev)
      H.assert_close(x.grad:view(-1), gx_t, tol, tol, dtype .. ' gx')
      H.assert_close(w.grad, gw_t, tol, tol, dtype .. ' gw')
      H.assert_close(b.grad, gb_t, tol, tol, dtype .. ' gb')
    end
  end)

  it('normalises [N, C] inputs (BatchNorm1d) without affine parameters', function()
    local y_t = { -0.04766617732, 0.3806195703, 0.7666410611, 1.088174439, 1.268157582,
      1.355188843, 1.3292665, 1.19803887, 0.9059317082, 0.5636836771, 0.1843304315,
      -0.2061073077, -0.6724027598, -0.984501664, -1.208047933, -1.33357825, -1.454020353,
      -1.314990426, -1.07219006, -0.7465277507 }
    local rm_t = { 0.01350537715, 0.2085451386, 0.4028215882, 0.5968459937 }
    local rv_t = { 1.301483157, 1.318571053, 1.328735135, 1.328424798 }
    for _, dtype in ipairs { 'f64', 'f32' } do
      local tol = dtype == 'f64' and 1e-8 or 1e-5
      local rm, rv = zeros(4, dtype), ones(4, dtype)
      local y = cr.batch_norm(seq({ 5, 4 }, 0.3, 4, dtype), rm, rv, { training = true, momentum = 0.2, eps = 1e-3 })
      H.assert_close(y:view(-1), y_t, tol, tol)
      H.assert_close(rm, rm_t, tol, tol)
      H.assert_close(rv, rv_t, tol, tol)
    end
  end)

  it('refuses eval mode without running statistics (as PyTorch does), and BatchNorm without them uses the batch', function()
    local x = seq({ 4, 3, 5 }, 0.9, 4)
    H.assert_error(function() cr.batch_norm(x, nil, nil, { training = false }) end,
      "batch_norm: eval mode (training = false) normalises with running_mean and running_var, and none were given")
    local bn = cr.nn.BatchNorm1d(3, { track_running_stats = false })
    bn:eval()
    H.assert_close(bn(x), cr.batch_norm(x, nil, nil, { weight = bn.weight, bias = bn.bias, training = true }), 1e-12, 0)
    -- and eval with running statistics leaves them alone
    local rm, rv = zeros(3), ones(3)
    local v = rm.version
    cr.batch_norm(x, rm, rv)
    assert.equal(v, rm.version)
    assert.same({ 0, 0, 0 }, rm:totable())
  end)

  it('splits: one op normalises each group of samples as its own batch norm call would', function()
    -- against one batch_norm per group: outputs, the grads of x, weight and bias, and the
    -- running stats (the mean of the groups' updates), f32 row-major and channels-last,
    -- [N, C], with and without the fused relu, fast paths on and off
    local function channels_last(t) return t:permute(0, 2, 3, 1):contiguous():permute(0, 3, 1, 2) end
    local cases = {
      { shape = { 8, 3, 4, 4 }, splits = 4 }, { shape = { 8, 3, 4, 4 }, splits = 2, relu = true, cl = true },
      { shape = { 12, 5 }, splits = 3, relu = true }, { shape = { 6, 2, 3 }, splits = 2 },
    }
    for _, fast in ipairs { true, false } do
      for i, case in ipairs(cases) do
        local what = string.format('case %d, fast paths %s', i, tostring(fast))
        local C = case.shape[2]
        local x = seq(case.shape, 0.37, 4, 'f32') * 1.5 + 0.5
        if case.cl then x = channels_last(x) end
        local w, b = seq({ C }, 0.9, 2, 'f32'), seq({ C }, 0.4, 3, 'f32')
        local m = seq(case.shape, 0.23, 5, 'f32')
        local function run(split)
          local xx, ww, bb = x:detach():requires_grad_(), w:detach():requires_grad_(), b:detach():requires_grad_()
          local rm, rv = cr.full({ C }, 0.25), cr.full({ C }, 2)
          local y
          if split then
            y = cr.batch_norm(xx, rm, rv, { weight = ww, bias = bb, training = true, momentum = 0.3, relu = case.relu,
                                            splits = case.splits })
          else
            local n, parts, rms, rvs = case.shape[1] / case.splits, {}, {}, {}
            for s = 1, case.splits do
              rms[s], rvs[s] = rm:clone(), rv:clone()
              parts[s] = cr.batch_norm(xx:narrow(0, (s - 1) * n, n), rms[s], rvs[s],
                { weight = ww, bias = bb, training = true, momentum = 0.3, relu = case.relu })
            end
            y = cr.cat(parts, 0)
            rm, rv = rms[1], rvs[1]
            for s = 2, case.splits do rm, rv = rm + rms[s], rv + rvs[s] end
            rm, rv = rm / case.splits, rv / case.splits
          end
          (y * m):sum():backward()
          return y, xx.grad, ww.grad, bb.grad, rm, rv
        end
        local got, want
        local function both() got, want = { run(true) }, { run(false) } end
        if fast then both() else reference(both) end
        local names = { 'output', 'x grad', 'weight grad', 'bias grad', 'running mean', 'running var' }
        for k = 1, 6 do H.assert_close(got[k], want[k], 1e-5, 1e-5, what .. ': ' .. names[k]) end
        if case.cl and fast then assert.is_true(got[1]:is_channels_last(), what) end
      end
    end
    -- f64 gradchecks through the split op: x, weight and bias, with and without relu
    local w, b = cr.tensor(W3, { dtype = 'f64' }), cr.tensor(B3, { dtype = 'f64' })
    for _, relu in ipairs { false, true } do
      H.gradcheck(function(xx, ww, bb)
        return cr.batch_norm(xx, nil, nil, { weight = ww, bias = bb, training = true, relu = relu, splits = 2 })
      end, { seq({ 4, 3, 2, 2 }, 0.77, 3), w, b })
    end
    -- eval ignores splits; bad splits are named
    local rm, rv = cr.tensor({ 0.3, -0.2, 0.5 }), cr.tensor({ 1.5, 0.7, 2.0 })
    local x = seq({ 4, 3, 2 }, 0.5, 3, 'f32')
    H.assert_close(cr.batch_norm(x, rm, rv, { splits = 4 }), cr.batch_norm(x, rm, rv), 0, 0)
    H.assert_error(function() cr.batch_norm(x, nil, nil, { training = true, splits = 3 }) end,
      'the batch of 4 samples does not divide into splits = 3 groups')
    H.assert_error(function() cr.batch_norm(x, nil, nil, { training = true, splits = 0 }) end, 'splits = 0')
    H.assert_error(function() cr.batch_norm(x, nil, nil, { training = true, splits = 1.5 }) end,
      "'splits' must be an integer >= 1")
    H.assert_error(function() cr.batch_norm(seq({ 4, 3 }, 0.5, 3, 'f32'), nil, nil, { training = true, splits = 4 }) end,
      'more than 1 value per channel when training, got input of shape [4, 3] in each split')
  end)

  it('passes gradchecks in f64: training, eval, with and without affine, 2-D to 5-D', function()
    local w, b = cr.tensor(W3, { dtype = 'f64' }), cr.tensor(B3, { dtype = 'f64' })
    local rm, rv = cr.tensor({ 0.3, -0.2, 0.5 }, { dtype = 'f64' }), cr.tensor({ 1.5, 0.7, 2.0 }, { dtype = 'f64' })
    for _, shape in ipairs { { 4, 3 }, { 2, 3, 4 }, { 2, 3, 2, 2 }, { 2, 3, 1, 2, 2 } } do
      local x = seq(shape, 0.77, 3)
      H.gradcheck(function(xx, ww, bb)
        return cr.batch_norm(xx, nil, nil, { weight = ww, bias = bb, training = true })
      end, { x, w, b })
      H.gradcheck(function(xx) return cr.batch_norm(xx, nil, nil, { training = true, eps = 1e-3 }) end, { x })
      H.gradcheck(function(xx, ww, bb)
        return cr.batch_norm(xx, rm, rv, { weight = ww, bias = bb, training = false })
      end, { x, w, b })
      H.gradcheck(function(xx, bb) -- bias without weight
        return cr.batch_norm(xx, nil, nil, { bias = bb, training = true })
      end, { x, b })
    end
    -- training with running stats updated on every evaluation: the output is unaffected
    H.gradcheck(function(xx, ww)
      return cr.batch_norm(xx, zeros(3), ones(3), { weight = ww, training = true })
    end, { seq({ 3, 3, 2 }, 0.5, 2), w })
  end)

  it('agrees between oneDNN and the reference path in f32, forward and backward', function()
    local shapes = { { 8, 16, 5, 5 }, { 64, 32 }, { 4, 8, 3, 3, 2 }, { 16, 3, 40, 40 } }
    for _, shape in ipairs(shapes) do
      local C = shape[2]
      for _, training in ipairs { true, false } do
        for _, affine in ipairs { 'both', 'weight', 'bias', 'none' } do
          local function run()
            local x = seq(shape, 0.37, 7, 'f32'):requires_grad_()
            local w = (affine == 'both' or affine == 'weight')
              and (seq({ C }, 1.1, 2, 'f32') + 0.5):detach():requires_grad_() or nil
            local b = (affine == 'both' or affine == 'bias') and seq({ C }, 0.4, 2, 'f32'):requires_grad_() or nil
            local rm, rv = seq({ C }, 0.3, 2, 'f32') * 0.1, seq({ C }, 0.2, 2, 'f32') * 0.1 + 1.5
            local y = cr.batch_norm(x, rm, rv, { weight = w, bias = b, training = training, momentum = 0.3 })
            ;(y * seq(shape, 1.9, 5, 'f32')):sum():backward()
            return y, x.grad, w and w.grad, b and b.grad, rm, rv
          end
          local fast = { run() }
          local ref = { reference(run) }
          local what = table.concat(shape, 'x') .. (training and ' train ' or ' eval ') .. affine
          -- oneDNN sums the parameter grads in f32, the reference in f64: over M terms that
          -- cancel, f32 is good to about 1e-7 of the sum of magnitudes (~M here)
          local M = 1
          for d = 1, #shape do if d ~= 2 then M = M * shape[d] end end
          for k = 1, 6 do
            if ref[k] then
              local scale = math.max(1, H.max_diff(ref[k], ref[k] * 0))
              local atol = (k == 3 or k == 4) and math.max(2e-4 * scale, 1e-6 * M) or 2e-4 * scale
              H.assert_close(fast[k], ref[k], atol, 1e-4, what .. ' output ' .. k)
            end
          end
        end
      end
    end
  end)

  it('agrees between the channels-last kernels and the reference path in f32, with and without relu', function()
    -- 16-channel vectors plus a tail (40 = 16 + 16 + 8), blocks of rows merged across
    -- threads (3600 rows), and an offset input whose variance is small against its mean
    local function channels_last(t) return t:permute(0, 2, 3, 1):contiguous():permute(0, 3, 1, 2) end
    local cases = { { shape = { 4, 40, 30, 30 } }, { shape = { 64, 24, 7, 7 }, relu = true },
                    { shape = { 2, 16, 3, 3 }, relu = true }, { shape = { 8, 32, 6, 6 }, offset = 100 } }
    for _, case in ipairs(cases) do
      local shape, C = case.shape, case.shape[2]
      local x0 = channels_last(seq(shape, 0.37, 7, 'f32') * (case.offset and 0.01 or 1) + (case.offset or 0))
      local function run()
        local x = x0:detach():requires_grad_()
        local w, b = (seq({ C }, 1.1, 2, 'f32') + 0.5):requires_grad_(), seq({ C }, 0.4, 2, 'f32'):requires_grad_()
        local rm, rv = cr.zeros(C), cr.ones(C)
        local y = cr.batch_norm(x, rm, rv, { weight = w, bias = b, training = true, relu = case.relu })
        ;(y * seq(shape, 1.9, 5, 'f32')):sum():backward()
        return y, x.grad, w.grad, b.grad
      end
      local fast = { run() }
      assert.is_true(fast[1]:is_channels_last(), table.concat(shape, 'x'))
      local ref = { reference(run) }
      local M = shape[1] * shape[3] * shape[4]
      for k = 1, 4 do
        local scale = math.max(1, H.max_diff(ref[k], ref[k] * 0))
        local atol = (k == 3 or k == 4) and math.max(2e-4 * scale, 1e-6 * M) or 2e-4 * scale
        H.assert_close(fast[k], ref[k], atol, 1e-4, table.concat(shape, 'x') .. ' output ' .. k)
      end
    end
  end)

  it('accepts non-contiguous inputs and half-precision inputs', function()
    local xt = seq({ 3, 2, 4 }, 0.6, 3):permute(2, 1, 0) -- [4, 2, 3], non-contiguous
    assert.is_false(xt:is_contiguous())
    local w = cr.tensor({ 2, 3 }, { dtype = 'f64' })
    local a = cr.batch_norm(xt, nil, nil, { weight = w, training = true })
    local b = cr.batch_norm(xt:contiguous(), nil, nil, { weight = w, training = true })
    H.assert_close(a, b, 1e-12, 0)
    local rm, rv = zeros(2, 'f32'), ones(2, 'f32')
    local h = cr.batch_norm(xt:half(), rm, rv, { training = true })
    assert.equal('f16', h.dtype)
    H.assert_close(h, cr.batch_norm(xt, nil, nil, { training = true }), 2e-2, 1e-2)
    assert.is_true(math.abs(rm:totable()[1]) > 0)
  end)

  it('refuses bad input with a message that names the problem', function()
    local x = seq({ 4, 3 }, 0.5, 2)
    H.assert_error(function() cr.batch_norm(nil) end, 'batch_norm', 'input', 'tensor')
    H.assert_error(function() cr.batch_norm(cr.tensor({ 1, 2, 3 }, { dtype = 'f64' }), nil, nil, { training = true }) end,
                   'batch_norm', 'at least 2 dims')
    H.assert_error(function() cr.batch_norm(cr.tensor({ { 1, 2 }, { 3, 4 } })) end, 'batch_norm', 'floating dtype')
    H.assert_error(function() cr.batch_norm(x, nil, nil, { weight = ones(4) }) end, 'batch_norm', "'weight'", '[4]', '3 channels')
    H.assert_error(function() cr.batch_norm(x, nil, nil, { bias = cr.full({ 3, 1 }, 0, { dtype = 'f64' }) }) end,
                   'batch_norm', "'bias'", '1-D')
    H.assert_error(function() cr.batch_norm(x, zeros(3), nil) end, 'batch_norm', 'running_var', 'both')
    H.assert_error(function() cr.batch_norm(x, zeros(5), ones(5)) end, 'batch_norm', 'running_mean', '[5]')
    H.assert_error(function() cr.batch_norm(x, cr.tensor({ 0, 0, 0 }), ones(3)) end, 'batch_norm', 'running_mean', 'floating')
    H.assert_error(function() cr.batch_norm(seq({ 1, 3 }, 0.5, 2), nil, nil, { training = true }) end,
                   'batch_norm', 'more than 1 value per channel')
    H.assert_error(function() cr.batch_norm(x, nil, nil, { eps = -1 }) end, 'batch_norm', 'eps')
    H.assert_error(function() cr.batch_norm(x, nil, nil, { momentum = 0 / 0 }) end, 'batch_norm', 'momentum')
    H.assert_error(function() cr.batch_norm(x, nil, nil, 'train') end, 'batch_norm', 'options must be a table')
    H.assert_error(function() cr.batch_norm(x, nil, nil, { weight = { 1, 2, 3 } }) end, 'batch_norm', "'weight' must be a tensor")
    H.assert_error(function() cr.batch_norm(x, 5, ones(3)) end, 'batch_norm', "'running_mean' must be a tensor")
    local rmg = zeros(3):requires_grad_()
    H.assert_error(function() cr.batch_norm(x, rmg, ones(3), { training = true }) end, 'batch_norm', 'in-place')
    H.assert_error(function() cr.batch_norm(cr.full({ 0, 3 }, 0, { dtype = 'f64' }), nil, nil, { training = true }) end,
                   'batch_norm', 'more than 1 value')
  end)
end)

describe('layer_norm', function()
  local y_t = { 0, 1.222483649, 2.972449261, 1.090201424, -0.8282129384, -1.144772973,
    0.5185879542, 0.1581986513, 0.1178247989, -4.821392337, -0.9309990866, 0.2009040186, 0,
    -1.836476986, 1.002517043, -0.3036046694, -0.602320803, -1.406698792, -0.4509237215,
    1.132009142, 1.787380254, -2.380734501, -0.4941417584, 0.2099663301 }
  local gx_t = { -0.588354446, 2.800551827, 1.750217774, 1.396619234, -1.251138222, -2.416347625,
    -3.629894473, 2.064619236, -0.07391546928, 0.4881318401, -0.03126792668, -0.509221749,
    -0.8635091985, 4.253024078, 2.604208828, 1.144076317, 0.3618433982, -1.163420979,
    -4.496542909, 2.523580677, -0.7665899046, -2.367914721, -0.6048677771, -0.6238878102 }
  local gw_t = { -2.254109157, -1.115729291, 6.612654776, 0.8307106633, -3.688637077,
    0.6229594189, 0.9320349155, 3.187798812, -0.0782026813, 0.5715204956, -0.3227476489,
    -3.534005512 }
  local gb_t = { 1.184147029, 5.755958649, 6.223229521, 4.260937927, -3.800893144, 0.2909212972,
    6.250430202, 9.750651525, 1.152131767, -0.7054465232, 0.3935081335, 5.433665078 }

  it('matches PyTorch values and grads over the last two dims, f64 and f32', function()
    for _, case in ipairs { { 'f64', 1e-8 }, { 'f32', 2e-5 } } do
      local dtype, tol = case[1], case[2]
      local x = seq({ 2, 3, 4 }, 0.45, 3, dtype):requires_grad_()
      local w = seq({ 3, 4 }, 0.9, 2, dtype):requires_grad_()
      local b = (seq({ 3, 4 }, 0.2, 2, dtype) * 0.1):detach():requires_grad_()
      local y = cr.layer_norm(x, { 3, 4 }, { weight = w, bias = b, eps = 1e-5 })
      assert.equal('layer_norm', y.grad_fn)
      H.assert_close(y:view(-1), y_t, tol, tol, dtype .. ' y')
      ;(y * seq({ 2, 3, 4 }, 1.1, 4, dtype)):sum():backward()
      H.assert_close(x.grad:view(-1), gx_t, tol, tol, dtype .. ' gx')
      H.assert_close(w.grad:view(-1), gw_t, tol, tol, dtype .. ' gw')
      H.assert_close(b.grad:view(-1), gb_t, tol, tol, dtype .. ' gb')
    end
  end)

  it('normalises over the last dim without affine (number normalized_shape)', function()
    local y_t2 = { -1.462010527, 0.01814497497, 1.361196363, 0.08266918986, 0.7261442407,
      1.238552519, -1.036425372, -0.9282713871, 1.422421607, -1.208953086, -0.6009725456,
      0.3875040245, -1.486179084, -0.1743194236, 1.266076958, 0.3944215499, -0.2265568734,
      1.625029907, -1.100978159, -0.2974948739, 1.714285789, -0.7387660645, -0.6232531634,
      -0.3522665611 }
    local y = cr.layer_norm(seq({ 2, 3, 4 }, 0.45, 3), 4, { eps = 1e-3 })
    H.assert_close(y:view(-1), y_t2, 1e-8, 1e-8)
  end)

  it('passes gradchecks in f64', function()
    local x = seq({ 3, 2, 5 }, 0.61, 3)
    H.gradcheck(function(xx, ww, bb) return cr.layer_norm(xx, 5, { weight = ww, bias = bb }) end,
                { x, seq({ 5 }, 0.3, 2), seq({ 5 }, 1.3, 2) })
    H.gradcheck(function(xx, ww, bb) return cr.layer_norm(xx, { 2, 5 }, { weight = ww, bias = bb }) end,
                { x, seq({ 2, 5 }, 0.3, 2), seq({ 2, 5 }, 1.3, 2) })
    H.gradcheck(function(xx) return cr.layer_norm(xx, { 3, 2, 5 }, { eps = 1e-2 }) end, { x })
    H.gradcheck(function(xx, ww) return cr.layer_norm(xx, 5, { weight = ww }) end, { x, seq({ 5 }, 0.3, 2) })
    H.gradcheck(function(xx, bb) return cr.layer_norm(xx, 5, { bias = bb }) end, { x, seq({ 5 }, 0.3, 2) })
  end)

  it('gives the same answer on the threaded path (many rows) as in f64', function()
    local x = seq({ 256, 3, 64 }, 0.013, 11, 'f32'):requires_grad_()
    local w = seq({ 64 }, 0.5, 3, 'f32'):requires_grad_()
    local b = seq({ 64 }, 0.25, 2, 'f32'):requires_grad_()
    local y = cr.layer_norm(x, 64, { weight = w, bias = b })
    local gy = seq({ 256, 3, 64 }, 0.7, 3, 'f32')
    ;(y * gy):sum():backward()
    local x64 = x:double():detach():requires_grad_()
    local w64, b64 = w:double():detach():requires_grad_(), b:double():detach():requires_grad_()
    local y64 = cr.layer_norm(x64, 64, { weight = w64, bias = b64 })
    ;(y64 * gy:double()):sum():backward()
    H.assert_close(y, y64, 1e-4, 1e-4)
    H.assert_close(x.grad, x64.grad, 1e-3, 1e-4)
    H.assert_close(w.grad, w64.grad, 1e-2, 1e-4)
    H.assert_close(b.grad, b64.grad, 1e-2, 1e-4)
  end)

  it('accepts non-contiguous inputs and halves', function()
    local x = seq({ 4, 6 }, 0.8, 3)
    local xt = x:t()
    local a = cr.layer_norm(xt, 4)
    H.assert_close(a, cr.layer_norm(xt:contiguous(), 4), 1e-12, 0)
    local h = cr.layer_norm(xt:bfloat16(), 4, { weight = cr.full({ 4 }, 2, { dtype = 'f32' }) })
    assert.equal('bf16', h.dtype)
    H.assert_close(h, a * 2, 5e-2, 2e-2)
  end)

  it('refuses bad input with a message that names the problem', function()
    local x = seq({ 2, 3, 4 }, 0.5, 2)
    H.assert_error(function() cr.layer_norm(nil, 4) end, 'layer_norm', 'input', 'tensor')
    H.assert_error(function() cr.layer_norm(x, 3) end, 'layer_norm', 'normalized_shape [3]', '[2, 3, 4]')
    H.assert_error(function() cr.layer_norm(x, { 2, 2, 3, 4 }) end, 'layer_norm', 'trailing dims')
    H.assert_error(function() cr.layer_norm(x, {}) end, 'layer_norm', 'non-empty')
    H.assert_error(function() cr.layer_norm(x, 'x') end, 'layer_norm', 'normalized_shape')
    H.assert_error(function() cr.layer_norm(x, -4) end, 'layer_norm', 'normalized_shape [-4]')
    H.assert_error(function() cr.layer_norm(x, 1e12) end, 'layer_norm', 'normalized_shape')
    H.assert_error(function() cr.layer_norm(cr.tensor({ { 1, 2 } }), 2) end, 'layer_norm', 'floating dtype')
    H.assert_error(function() cr.layer_norm(x, 4, { weight = ones(3) }) end, 'layer_norm', "'weight'", '[3]', '[4]')
    H.assert_error(function() cr.layer_norm(x, { 3, 4 }, { bias = ones(4) }) end, 'layer_norm', "'bias'", '[3, 4]')
    H.assert_error(function() cr.layer_norm(x, 4, { weight = cr.tensor({ 1, 2, 3, 4 }) }) end, 'layer_norm', 'floating')
    H.assert_error(function() cr.layer_norm(x, 4, { eps = -1 }) end, 'layer_norm', 'eps')
    H.assert_error(function() cr.layer_norm(x, 4, 5) end, 'layer_norm', 'options must be a table')
  end)
end)

describe('dropout', function()
  it('is the identity (same tensor) in eval or with p = 0', function()
    local x = seq({ 3, 4 }, 0.5, 2)
    assert.is_true(cr.dropout(x, 0.5, false):same_storage(x))
    assert.is_true(x:dropout(0):same_storage(x))
    assert.same(x:totable(), cr.dropout(x, 0.3, false):totable())
  end)

  it('zeroes about p of the elements and scales the rest by 1/(1-p)', function()
    cr.manual_seed(123)
    local x = cr.full({ 100, 100 }, 2, { dtype = 'f32' })
    local y = cr.dropout(x, 0.3)
    local zeros_n, bad = 0, 0
    for _, v in ipairs(H.flat(y)) do
      if v == 0 then zeros_n = zeros_n + 1
      elseif math.abs(v - 2 / 0.7) > 1e-5 then bad = bad + 1 end
    end
    assert.equal(0, bad)
    assert.is_true(math.abs(zeros_n / 10000 - 0.3) < 0.02, 'dropped fraction ' .. zeros_n / 10000)
    local all = cr.dropout(x, 1)
    assert.equal(0, H.max_diff(all, cr.full({ 100, 100 }, 0)))
  end)

  it('keeps element i when uniform(Philox word i) >= p, whatever the thread count', function()
    local n, p = 40000, 0.45
    local words = ffi.new('uint32_t[?]', n)
    cr.C.cr_rng_philox_words(words, n, 99, 0)
    local threads = cr.get_num_threads()
    local results = {}
    for k, nt in ipairs { 1, math.max(2, threads) } do
      cr.set_num_threads(nt)
      cr.manual_seed(99)
      results[k] = H.flat(cr.dropout(cr.full({ n }, 1, { dtype = 'f64' }), p))
    end
    cr.set_num_threads(threads)
    for i = 1, n do
      local u = math.floor(words[i - 1] / 256) / 16777216
      local want = u >= p and 1 / (1 - p) or 0
      assert(math.abs(results[1][i] - want) < 1e-12, 'element ' .. i)
      assert(results[2][i] == results[1][i], 'thread count changed element ' .. i)
    end
  end)

  it('is deterministic per seed and advances the stream between calls', function()
    local x = cr.full({ 64 }, 1, { dtype = 'f32' })
    cr.manual_seed(5)
    local a, b = cr.dropout(x, 0.5), cr.dropout(x, 0.5)
    cr.manual_seed(5)
    local c = cr.dropout(x, 0.5)
    assert.same(a:totable(), c:totable())
    assert.is_true(H.max_diff(a, b) > 0)
  end)

  it('back-propagates mask * scale, and passes a gradcheck with a fixed seed', function()
    cr.manual_seed(11)
    local x = seq({ 6, 7 }, 0.3, 3):requires_grad_()
    local y = cr.dropout(x, 0.25)
    assert.equal('dropout', y.grad_fn)
    y:sum():backward()
    local mask = H.flat(cr.no_grad(function() return y / x end))
    local g = H.flat(x.grad)
    for i = 1, #g do
      local want = math.abs(mask[i]) < 1e-9 and 0 or 1 / 0.75
      assert(math.abs(g[i] - want) < 1e-12, 'grad element ' .. i)
    end
    H.gradcheck(function(xx) cr.manual_seed(3); return cr.dropout(xx, 0.4) end, { seq({ 3, 5 }, 0.7, 2) })
    H.gradcheck(function(xx) return cr.dropout(xx, 1) end, { seq({ 2, 3 }, 0.7, 2) })
  end)

  it('works on non-contiguous views and halves', function()
    local x = seq({ 5, 8 }, 0.9, 3)
    cr.manual_seed(8)
    local a = cr.dropout(x:t(), 0.5)
    cr.manual_seed(8)
    local b = cr.dropout(x:t():contiguous(), 0.5)
    assert.same(b:totable(), a:totable())
    cr.manual_seed(8)
    local h = cr.dropout(x:t():half(), 0.5)
    assert.equal('f16', h.dtype)
    H.assert_close(h, b, 1e-2, 1e-2)
  end)

  it('refuses bad input with a message that names the problem', function()
    local x = seq({ 2, 2 }, 0.5, 2)
    H.assert_error(function() cr.dropout(x, -0.1) end, 'dropout', 'outside [0, 1]')
    H.assert_error(function() cr.dropout(x, 1.5) end, 'dropout', 'outside [0, 1]')
    H.assert_error(function() cr.dropout(x, 0 / 0) end, 'dropout', 'outside [0, 1]')
    H.assert_error(function() cr.dropout(x, 'half') end, 'dropout', "'p' must be a number")
    H.assert_error(function() cr.dropout(nil, 0.5) end, 'dropout', 'tensor')
    H.assert_error(function() cr.dropout(cr.tensor({ 1, 2 }), 0.5) end, 'dropout', 'floating dtype')
  end)
end)

describe('normalize', function()
  -- x = seq (3,4), a=0.8, b=3 with row 1 zeroed
  local function input()
    local x = seq({ 3, 4 }, 0.8, 3)
    x:select(0, 1):fill_(0)
    return x
  end

  it('matches PyTorch along dims 1 and 0, including a zero row', function()
    local y1_t = { 0, 0.4996344345, 0.8206767386, 0.2772275645, 0, 0, 0, 0, 0.434394398,
      0.3087771434, 0.5794360661, 0.6166133538 }
    local y0_t = { 0, 0.8376924573, 0.8019827634, 0.3920614556, 0, 0, 0, 0, 1, 0.5461422406,
      0.5973471747, 0.9199390279 }
    H.assert_close(cr.normalize(input()):view(-1), y1_t, 1e-9, 1e-9)
    H.assert_close(input():normalize({ dim = 0 }):view(-1), y0_t, 1e-9, 1e-9)
    H.assert_close(cr.normalize(input():float(), { dim = -1 }):view(-1), y1_t, 1e-6, 1e-6)
  end)

  it('gives PyTorch grads, g/eps on the zero row', function()
    local gx_t = { 0, 0.5265993741, -0.2455136505, -0.2222716873, 9.882267023e+11,
      2.596974225e+12, -1.399749375e+12, -2.362742245e+11, 0.2819564578, 0.3117008445,
      -0.4437966989, 0.06231686528 }
    local x = input():requires_grad_()
    ;(cr.normalize(x) * seq({ 3, 4 }, 1.7, 2)):sum():backward()
    H.assert_close(x.grad:view(-1), gx_t, 1e-8, 1e-8)
  end)

  it('passes gradchecks in f64, including rows whose norm is below eps', function()
    local x = seq({ 3, 4, 2 }, 0.4, 3)
    for _, dim in ipairs { 0, 1, 2, -1 } do
      H.gradcheck(function(xx) return cr.normalize(xx, { dim = dim }) end, { x })
    end
    local tiny = seq({ 3, 4 }, 0.8, 3)
    tiny:select(0, 1):mul_(cr.tensor(1e-5, { dtype = 'f64' })) -- norm ~5e-5 < eps
    H.gradcheck(function(xx) return cr.normalize(xx, { eps = 1e-3 }) end, { tiny }, { eps = 1e-8 })
    H.gradcheck(function(xx) return cr.normalize(xx, { dim = 0, eps = 1e-3 }) end, { tiny }, { eps = 1e-8 })
  end)

  it('accepts non-contiguous inputs, halves and large inputs (threaded)', function()
    local x = seq({ 5, 6 }, 0.5, 4)
    H.assert_close(cr.normalize(x:t()), cr.normalize(x:t():contiguous()), 1e-12, 0)
    local h = cr.normalize(x:half())
    assert.equal('f16', h.dtype)
    H.assert_close(h, cr.normalize(x), 2e-3, 2e-3)
    local big = seq({ 64, 32, 33 }, 0.01, 5, 'f32')
    local y = cr.normalize(big, { dim = 1 })
    H.assert_close(y, cr.normalize(big:double(), { dim = 1 }), 1e-6, 1e-5)
    local s = (y * y):sum(1)
    H.assert_close(s, cr.full({ 64, 33 }, 1, { dtype = 'f64' }), 1e-5, 0)
  end)

  it('refuses bad input with a message that names the problem', function()
    local x = seq({ 2, 3 }, 0.5, 2)
    H.assert_error(function() cr.normalize(x, { p = 1 }) end, 'normalize', 'only p = 2')
    H.assert_error(function() cr.normalize(x, { dim = 2 }) end, 'normalize', 'dim 2 out of range')
    H.assert_error(function() cr.normalize(x, { dim = -3 }) end, 'normalize', 'out of range')
    H.assert_error(function() cr.normalize(x, { eps = -1 }) end, 'normalize', 'eps')
    H.assert_error(function() cr.normalize(x, { dim = 'a' }) end, 'normalize', "'dim' must be a number")
    H.assert_error(function() cr.normalize(x, 1) end, 'normalize', 'options must be a table')
    H.assert_error(function() cr.normalize(nil) end, 'normalize', 'tensor')
    H.assert_error(function() cr.normalize(cr.tensor({ { 1, 2 } })) end, 'normalize', 'floating dtype')
  end)
end)

describe('batch_norm with a fused relu', function()
  local function case(dtype)
    cr.manual_seed(7)
    local x = cr.randn({ 4, 3, 5, 5 }, { dtype = dtype })
    local w = cr.randn({ 3 }, { dtype = dtype })
    local b = cr.randn({ 3 }, { dtype = dtype })
    return x, w, b
  end

  it('equals relu(batch_norm(x)) forward and backward, train and eval, fast and reference', function()
    for _, fast in ipairs { true, false } do
      local prev = cr.set_fast_paths(fast)
      for _, training in ipairs { true, false } do
        local x, w, b = case('f32')
        local rm1, rv1, rm2, rv2 = cr.zeros(3), cr.ones(3), cr.zeros(3), cr.ones(3)
        local x1, x2 = x:clone():requires_grad_(true), x:clone():requires_grad_(true)
        local w1, w2 = w:clone():requires_grad_(true), w:clone():requires_grad_(true)
        local gy = cr.randn({ 4, 3, 5, 5 })
        local y1 = cr.batch_norm(x1, rm1, rv1, { weight = w1, bias = b, training = training, relu = true })
        local y2 = cr.batch_norm(x2, rm2, rv2, { weight = w2, bias = b, training = training }):relu()
        H.assert_close(y1, y2, 1e-5, 1e-5, 'forward')
        H.assert_close(rm1, rm2, 1e-6, 1e-6, 'running mean')
        y1:backward(gy)
        y2:backward(gy)
        H.assert_close(x1.grad, x2.grad, 1e-4, 1e-4, 'grad x')
        H.assert_close(w1.grad, w2.grad, 1e-4, 1e-4, 'grad w')
      end
      cr.set_fast_paths(prev)
    end
  end)

  it('normalises [N, C] rows (an MLP head) on the row kernels as the reference does', function()
    local x0, gy = cr.randn({ 37, 20 }), cr.randn({ 37, 20 })
    for _, relu in ipairs { false, true } do
      local function run()
        local x, w = x0:clone():requires_grad_(true), cr.ones(20):requires_grad_(true)
        local rm, rv = cr.zeros(20), cr.ones(20)
        local y = cr.batch_norm(x, rm, rv, { weight = w, bias = cr.zeros(20), training = true, relu = relu })
        y:backward(gy)
        return { y, x.grad, w.grad, rm, rv }
      end
      local fast, ref = H.both_paths(run)
      for i, what in ipairs { 'output', 'grad x', 'grad w', 'running mean', 'running var' } do
        H.assert_close(fast[i], ref[i], 1e-5, 1e-5, what .. (relu and ' (relu)' or ''))
      end
    end
  end)

  it('passes a finite-difference gradcheck in f64', function()
    local x, w, b = case('f64')
    H.gradcheck(function(xx, ww, bb) return cr.batch_norm(xx, nil, nil, { weight = ww, bias = bb, training = true,
      relu = true }) end, { x, w, b })
  end)

  it('keeps NaN as NaN, as relu does', function()
    local x = cr.ones(2, 2, 3, 3)
    x:select(0, 0):select(0, 0):fill_(0 / 0)
    local y = cr.batch_norm(x, nil, nil, { training = true, relu = true })
    assert.is_true(y:select(1, 0):sum():item() ~= y:select(1, 0):sum():item())
  end)
end)
