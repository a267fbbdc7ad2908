-- reduce_spec — reductions: sum/mean fast paths against the reference walk, max/min with
-- indices, amax/amin, argmax/argmin, var/std, norm and logsumexp (values against PyTorch,
-- gradchecks, non-contiguous inputs, bad input).
local cr = H.cr

-- Deterministic inputs (H.park_miller): the PyTorch numbers below come from the same generator.
local rnd = H.park_miller

local function flat(t) return cr.tensor(H.flat(t), { dtype = 'f64' }) end

describe('sum and mean', function()
  local both = H.both_paths

  it('fast paths agree with the reference walk on every common layout (f32)', function()
    local cases = {
      { { 200003 }, nil },              -- full
      { { 300, 500 }, 1 },              -- rows
      { { 3, 40000 }, 1 },              -- few long rows
      { { 500, 300 }, 0 },              -- columns (bias grad)
      { { 50000, 3 }, 0 },              -- few columns, many rows
      { { 7, 600, 30 }, 1 },            -- [A, R, K]
      { { 8, 16, 20, 20 }, { 0, 2, 3 } }, -- channels (batch norm)
      { { 64, 3, 30, 30 }, { 0, 2, 3 } }, -- fewer channels than threads
      { { 2, 3, 4, 5 }, { 1, 3 } },     -- generic
    }
    for k, case in ipairs(cases) do
      local x = rnd(case[1], 11 + k, 'f32')
      for _, keep in ipairs { false, true } do
        local fs, rs = both(function() return x:sum(case[2], keep) end)
        H.assert_close(fs, rs, 1e-4, 1e-5, 'sum case ' .. k)
        local fm, rm = both(function() return x:mean(case[2], keep) end)
        H.assert_close(fm, rm, 1e-6, 1e-5, 'mean case ' .. k)
        -- and both agree with an f64 sum
        H.assert_close(fs, x:double():sum(case[2], keep), 1e-4, 1e-5, 'sum vs f64 case ' .. k)
      end
    end
  end)

  it('sums bf16 in the fast layouts as the reference walk does, in f64, rounded once', function()
    local cases = { { { 200003 }, nil }, { { 300, 500 }, 1 }, { { 500, 300 }, 0 }, { { 7, 600, 30 }, 1 },
                    { { 8, 16, 20, 20 }, { 0, 2, 3 } } }
    for k, case in ipairs(cases) do
      local x = rnd(case[1], 31 + k, 'f32'):bfloat16()
      local fs, rs = both(function() return x:sum(case[2]) end)
      assert.are.equal('bf16', fs.dtype)
      -- the same f64 sum up to its order, then one rounding to bf16
      H.assert_close(fs:float(), rs:float(), 1e-6, 2 ^ -7, 'bf16 sum case ' .. k)
      H.assert_close(fs:float(), x:double():sum(case[2]):float(), 1e-6, 2 ^ -7, 'bf16 sum vs f64 case ' .. k)
    end
  end)

  it('accumulates f32 in double: a million 0.1s sum to 100000', function()
    local x = cr.full({ 1000000 }, 0.1)
    assert.is_true(math.abs(x:sum():item() - 100000) < 0.02)
    assert.is_true(math.abs(x:view(1000, 1000):sum(0):sum():item() - 100000) < 0.02)
    assert.is_true(math.abs(x:view(1000, 1000):sum(1):sum():item() - 100000) < 0.02)
  end)

  it('handles non-contiguous inputs', function()
    local x = rnd({ 30, 40 }, 5, 'f32')
    H.assert_close(x:t():sum(1), x:sum(0), 1e-5, 1e-5)
    H.assert_close(x:t():sum(0), x:sum(1), 1e-5, 1e-5)
    H.assert_close(x:t():sum(), x:sum(), 1e-4, 1e-6)
  end)
end)

describe('max and min', function()
  local x = rnd({ 3, 4, 5 }, 7)

  it('matches PyTorch along a dim, with indices', function()
    local v, i = x:max(1)
    H.assert_close(flat(v), { 0.8316054134, 1.683058068, 1.267029691, 1.020299363, 0.9174826475, 1.689607285,
      1.229635946, 1.348683823, 1.749046795, 1.692672934, 0.9170887968, 1.511408014, 0.657684143, 1.697391528,
      0.2425200931 }, 1e-9)
    assert.same({ 3, 5 }, v.shape)
    assert.equal('i64', i.dtype)
    assert.same({ 3, 0, 2, 1, 0, 0, 0, 2, 3, 0, 0, 0, 2, 2, 0 }, H.flat(i))
    local mv, mi = x:min(2, true)
    assert.same({ 3, 4, 1 }, mv.shape)
    H.assert_close(flat(mv), { -1.999780862, -0.682750746, -1.031980905, -1.784450786, -1.508654, 0.3097309444,
      -1.389707232, -0.8205063934, -1.765508778, -1.780480642, -0.6235105799, -1.337798388 }, 1e-9)
    assert.same({ 0, 1, 3, 2, 2, 2, 4, 2, 2, 4, 1, 0 }, H.flat(mi))
    H.assert_close(x:amax({ 0, 2 }), { 1.692672934, 1.647981992, 1.697391528, 1.749046795 }, 1e-9)
    assert.equal(38, x:argmax():item())
    assert.equal(0, x:argmin():item())
    assert.same({ 1, 0, 0, 1, 1, 1, 1, 0, 1, 1, 0, 0, 1, 2, 2, 0, 0, 1, 1, 1 }, H.flat(x:argmax(0)))
  end)

  it('returns the first index on ties, NaN wins, integers stay exact', function()
    local t = cr.tensor({ { 1, 3, 3, 0 }, { 2, 2, 1, 2 } }, { dtype = 'f32' })
    local v, i = t:max(1)
    assert.same({ 3, 2 }, v:totable())
    assert.same({ 1, 0 }, i:totable())
    local _, j = t:min(1)
    assert.same({ 3, 2 }, j:totable())
    assert.equal(1, t:argmax():item())
    local n = cr.tensor({ 1, 0 / 0, 5, 0 / 0 })
    local nv, ni = n:max(0)
    assert.is_true(nv:item() ~= nv:item())
    assert.equal(1, ni:item())
    local big = cr.tensor({ 1, 2 }, { dtype = 'i64' }) -- 2^53 + 1 and 2^53: not Lua numbers
    local p = require('ffi').cast('int64_t *', big:data_ptr())
    p[0], p[1] = 9007199254740993LL, 9007199254740992LL
    assert.equal(0, big:argmax():item())
    assert.equal(1, big:argmin():item())
    assert.equal('i64', big:amax().dtype)
    local b = cr.tensor({ { 0, 7 }, { 200, 3 } }, { dtype = 'u8' })
    assert.same({ 200, 7 }, b:amax(0):totable())
    assert.same({ 1, 0 }, select(2, b:max(0)):totable())
  end)

  it('keeps dims, accepts negative dims, and the whole-tensor forms', function()
    assert.same({ 3, 1, 5 }, (x:max(-2, true)).shape)
    assert.same({}, x:max().shape)
    H.assert_close(x:max(), 1.749046795, 1e-9)
    assert.same({ 1, 1, 1 }, x:argmax(nil, true).shape)
    assert.same({ 3, 1, 5 }, x:argmin(1, true).shape)
    local s = cr.tensor(4.5)
    local v, i = s:max(0)
    assert.equal(4.5, v:item())
    assert.equal(0, i:item())
    -- f16 and non-contiguous views
    H.assert_close(x:half():amax(1):double(), x:amax(1), 2e-3)
    H.assert_close(x:transpose(0, 2):amax(0), x:amax(2):t(), 0)
    local tv, ti = x:transpose(1, 2):max(2)
    local rv, ri = x:max(1)
    H.assert_close(tv, rv, 0)
    assert.same(H.flat(ri), H.flat(ti))
  end)

  it('splits the amax/amin grad evenly among ties; max(dim) sends it to the index', function()
    local t = cr.tensor({ { 1, 3, 3 }, { 5, 4, 5 } }, { dtype = 'f64', requires_grad = true })
    t:amax(1):sum():backward()
    assert.same({ { 0, 0.5, 0.5 }, { 0.5, 0, 0.5 } }, t.grad:totable())
    t.grad = nil
    t:amin():backward()
    assert.same({ { 1, 0, 0 }, { 0, 0, 0 } }, t.grad:totable())
    t.grad = nil
    local v = t:max(1)
    v:sum():backward()
    assert.same({ { 0, 1, 0 }, { 1, 0, 0 } }, t.grad:totable())
  end)

  it('passes gradcheck', function()
    local a = rnd({ 3, 4, 5 }, 21)
    H.gradcheck(function(t) return (t:max(1)) end, { a })
    H.gradcheck(function(t) return (t:min(2, true)) end, { a })
    H.gradcheck(function(t) return (t:min(0)) end, { a:transpose(0, 2) })
    H.gradcheck(function(t) return t:amax({ 0, 2 }) end, { a })
    H.gradcheck(function(t) return t:amin(1, true) end, { a })
    H.gradcheck(function(t) return t:amax() end, { a })
  end)

  it('parallel chunks keep the first index (large inputs)', function()
    local t = cr.zeros(100000)
    t:narrow(0, 70000, 1):fill_(3)
    t:narrow(0, 90000, 1):fill_(3)
    assert.equal(70000, t:argmax():item())
    local v, i = t:view(1, 100000):max(1)
    assert.equal(3, v:item())
    assert.equal(70000, i:item())
  end)

  it('fast contiguous loops agree exactly with the reference (ties, NaN, f32 and f64)', function()
    local t = (rnd({ 40, 5000 }, 61, 'f32') * 3):long():float() -- many ties
    t:select(0, 7):narrow(0, 4321, 1):fill_(0 / 0)
    t:select(0, 9):narrow(0, 17, 1):fill_(0 / 0)
    t:select(0, 9):narrow(0, 4000, 1):fill_(0 / 0)
    for _, v in ipairs { t, t:double() } do
      local function all()
        local mv, mi = v:max(1)
        local nv, ni = v:min(1)
        return { mv, mi, nv, ni, v:amax(), v:amin(0), v:argmax(), v:argmin(), v:argmax(1), v:view(-1):argmin(0) }
      end
      local prev = cr.set_fast_paths(true)
      local f = all()
      cr.set_fast_paths(false)
      local r = all()
      cr.set_fast_paths(prev)
      for k = 1, #f do H.assert_close(f[k], r[k], 0, 0, 'result ' .. k) end
      assert.equal(7 * 5000 + 4321, f[7]:item())
      assert.equal(17, f[9]:totable()[10])
    end
  end)

  it('rejects bad input', function()
    H.assert_error(function() cr.max(nil) end, 'max', 'self')
    H.assert_error(function() x:max(3) end, 'max', 'dim 3 out of range')
    H.assert_error(function() x:argmax(5) end, 'argmax', 'out of range')
    H.assert_error(function() x:max('a') end, 'max', 'integer')
    H.assert_error(function() cr.zeros(0, 3):max(0) end, 'max', 'size 0')
    H.assert_error(function() cr.zeros(0):amax() end, 'amax', 'size 0')
    H.assert_error(function() cr.zeros(2, 0):argmin(1) end, 'argmin', 'size 0')
    H.assert_error(function() x:amax(7) end, 'amax', 'out of range')
    H.assert_error(function() x:amin({ 0, 9 }) end, 'amin', 'out of range')
    H.assert_error(function() x:sum(99) end, 'sum', 'out of range')
    H.assert_error(function() x:max(2 ^ 40) end, 'max', 'out of range')
    H.assert_error(function() cr.argmin(nil) end, 'argmin', 'self')
    assert.same({ 0 }, cr.zeros(0, 3):amax(1).shape) -- nothing to reduce into: fine
  end)
end)

describe('var and std', function()
  local x = rnd({ 3, 4, 5 }, 7)

  it('matches PyTorch', function()
    H.assert_close(x:var({ 0, 2 }), { 1.868023866, 1.056588819, 0.9031853287, 0.8631009014 }, 1e-9)
    H.assert_close(flat(x:var(1, { correction = 0 })), { 1.307538846, 0.7143883965, 1.621458401, 0.9851492633,
      0.272106382, 1.006065581, 0.543285774, 1.187918505, 1.074572717, 1.586055622, 0.6770785705, 0.7261889375,
      0.8111779177, 1.44593221, 0.632613617 }, 1e-9)
    H.assert_close(flat(x:var(1, false)), flat(x:var(1, { correction = 0 })), 0)
    H.assert_close(x:var(), 1.148838577, 1e-9)
    assert.same({ 1, 1, 1 }, x:var(nil, true, true).shape)
    assert.same({ 3, 1, 5 }, x:var(1, { keepdim = true }).shape)
  end)

  it('std is the square root of var', function()
    if not cr.Tensor.sqrt then pending('sqrt is not built yet') return end
    H.assert_close(flat(x:std(2)), { 1.527478366, 0.7118566531, 0.9431612909, 1.120396965, 1.371064106,
      0.6199422168, 1.023128501, 1.063171907, 1.334367415, 1.31424514, 0.9593830231, 0.4238887877 }, 1e-9)
    H.gradcheck(function(t) return t:std(1) end, { rnd({ 3, 4 }, 3) })
  end)

  it('is accurate in f32 far from zero (computed in f64)', function()
    local t = (rnd({ 100000 }, 9, 'f32') + 10000):float()
    local ref = (rnd({ 100000 }, 9, 'f32'):double() + 10000):var():item()
    assert.is_true(math.abs(t:var():item() - ref) < 1e-4 * ref)
    assert.is_true(math.abs(t:view(10, 10000):var(1):mean():item() - ref) < 2e-3 * ref)
  end)

  it('gives nan or inf when the correction leaves no degrees of freedom', function()
    local v = cr.tensor({ 2.0 }, { dtype = 'f32' }):var():item()
    assert.is_true(v ~= v)
    assert.equal(math.huge, cr.tensor({ 1.0, 2.0 }, { dtype = 'f32' }):var(0, { correction = 2 }):item())
  end)

  it('passes gradcheck', function()
    local a = rnd({ 3, 4, 5 }, 33)
    H.gradcheck(function(t) return t:var({ 0, 2 }) end, { a })
    H.gradcheck(function(t) return t:var(1, { correction = 0, keepdim = true }) end, { a })
    H.gradcheck(function(t) return t:var() end, { a:transpose(0, 1) })
  end)

  it('rejects bad input', function()
    H.assert_error(function() cr.ones(3, { dtype = 'i64' }):var() end, 'var', 'floating')
    H.assert_error(function() x:var(0, { correction = -1 }) end, 'var', 'negative')
    H.assert_error(function() x:var(0, { correction = 0.5 }) end, 'var', 'integer')
    H.assert_error(function() x:var(0, 'yes') end, 'var', 'options')
    H.assert_error(function() cr.var(nil) end, 'var', 'self')
  end)
end)

describe('norm', function()
  local x = rnd({ 3, 4, 5 }, 7)

  it('matches PyTorch for p = 2, 1, inf, 3, 0.5', function()
    H.assert_close(x:norm(), 8.250263301, 1e-9)
    H.assert_close(flat(x:norm(1, 1)), { 3.700301662, 3.701649986, 4.902743528, 3.945714796, 1.720375302,
      3.764071472, 2.749227875, 3.98757516, 4.120244255, 4.945199591, 2.828238127, 2.826659763, 4.517017298,
      4.781480372, 2.386618984 }, 1e-9)
    H.assert_close(x:norm(math.huge, { 0, 2 }), { 1.999780862, 1.780480642, 1.697391528, 1.784450786 }, 1e-9)
    H.assert_close(flat(x:norm(3, 2)), { 2.503379924, 1.341190234, 1.563651351, 1.926914292, 2.4643639,
      2.116541362, 1.80268517, 1.863270862, 2.188721235, 2.283427163, 1.772987232, 1.486426317 }, 1e-9)
    H.assert_close(flat(x:norm(0.5, 0)), { 13.48088568, 13.2176611, 12.07684364, 5.091295859, 7.569894256,
      2.009890853, 4.601652992, 7.12289076, 12.76526485, 9.158935118, 5.324749958, 5.468166722, 9.597169564,
      9.846080052, 4.544983479, 8.810485074, 4.15902809, 10.06184157, 8.506164497, 1.929152943 }, 1e-8)
    assert.equal(3, cr.tensor({ 0, 2, 0, -1, 5 }, { dtype = 'f32' }):norm(0):item())
    assert.equal(1, cr.tensor({ 3, -1, 2 }, { dtype = 'f32' }):norm(-math.huge):item())
    assert.same({ 3, 1, 1 }, x:norm(2, { 1, 2 }, true).shape)
  end)

  it('has a zero (not nan) grad at the origin for p = 2', function()
    local z = cr.zeros({ 3 }, { dtype = 'f64', requires_grad = true })
    z:norm():backward()
    assert.same({ 0, 0, 0 }, z.grad:totable())
  end)

  it('passes gradcheck for every p', function()
    local a = rnd({ 3, 4 }, 44)
    for _, p in ipairs { 2, 1, 3, 0.5, math.huge, -math.huge } do
      H.gradcheck(function(t) return t:norm(p, 1) end, { a })
      H.gradcheck(function(t) return t:norm(p, nil, true) end, { a:t() })
    end
    local t = cr.tensor({ { 1, -3, 3 } }, { dtype = 'f64', requires_grad = true })
    t:norm(math.huge):backward()
    assert.same({ { 0, -0.5, 0.5 } }, t.grad:totable())
  end)

  it('rejects bad input', function()
    H.assert_error(function() x:norm(-1) end, 'norm', 'not a norm order')
    H.assert_error(function() x:norm('x') end, 'norm', 'number')
    H.assert_error(function() cr.ones(2, { dtype = 'i32' }):norm() end, 'norm', 'floating')
    H.assert_error(function() cr.zeros(0):norm(math.huge) end, 'norm', 'zero elements')
  end)
end)

describe('logsumexp', function()
  local x = rnd({ 3, 4, 5 }, 7)

  it('matches PyTorch', function()
    H.assert_close(flat(x:logsumexp(1)), { 1.734137931, 2.284189123, 1.929965495, 1.710425894, 1.64366608,
      2.150347471, 1.866552703, 1.771016879, 2.526561299, 2.490061376, 1.477979805, 1.86950491, 1.034970964,
      2.44921578, 1.176174503 }, 1e-9)
    H.assert_close(cr.tensor({ 1, 2, 3 }):logsumexp(0), 3.40760596444438, 1e-6) -- integers give f32
    H.assert_close(x:logsumexp({ 0, 2 }), { 3.502424365, 3.443342664, 3.162380649, 2.942907989 }, 1e-9)
    assert.same({ 1, 4, 1 }, x:logsumexp({ 0, 2 }, true).shape)
  end)

  it('is stable for large and infinite values', function()
    H.assert_close(cr.tensor({ 1000, 1000 }, { dtype = 'f32' }):logsumexp(0), 1000 + math.log(2), 1e-3)
    H.assert_close(cr.tensor({ -1000, -1000 }, { dtype = 'f64' }):logsumexp(0), -1000 + math.log(2), 1e-9)
    assert.equal(-math.huge, cr.tensor({ -math.huge, -math.huge }, { dtype = 'f32' }):logsumexp(0):item())
    assert.equal(math.huge, cr.tensor({ 1, math.huge }, { dtype = 'f32' }):logsumexp(0):item())
    H.assert_close(cr.tensor({ -math.huge, 0 }, { dtype = 'f32' }):logsumexp(0), 0, 0)
    local big = rnd({ 200000 }, 3, 'f32') * 20
    H.assert_close(big:logsumexp(0), big:double():logsumexp(0), 1e-5)
    local prev = cr.set_fast_paths(false)
    local ref = big:view(400, 500):logsumexp(1)
    cr.set_fast_paths(true)
    H.assert_close(big:view(400, 500):logsumexp(1), ref, 1e-5, 1e-6)
    cr.set_fast_paths(prev)
  end)

  it('passes gradcheck', function()
    local a = rnd({ 3, 4, 5 }, 55)
    H.gradcheck(function(t) return t:logsumexp(1) end, { a })
    H.gradcheck(function(t) return t:logsumexp({ 0, 2 }, true) end, { a })
    H.gradcheck(function(t) return t:logsumexp() end, { a:transpose(0, 2) })
  end)

  it('rejects bad input', function()
    H.assert_error(function() cr.logsumexp(nil) end, 'logsumexp', 'self')
    H.assert_error(function() x:logsumexp(4) end, 'logsumexp', 'out of range')
    H.assert_error(function() x:logsumexp('a') end, 'logsumexp', 'dim')
  end)
end)
