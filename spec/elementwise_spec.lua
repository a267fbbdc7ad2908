-- elementwise_spec — pow, maximum/minimum, comparisons, logical ops, unary math
-- (abs ... gelu), pow_scalar, clamp, where and masked_fill: values against PyTorch,
-- dtype promotion, strided inputs, fast-vs-reference parity of the f32 kernels,
-- gradchecks and the messages for bad input.
local cr = H.cr

-- Deterministic values in [lo, hi) (a small LCG, so the spec needs no RNG).
local function values(n, lo, hi, seed)
  local s, out = seed or 12345, {}
  for i = 1, n do
    s = (s * 1103515245 + 12345) % 2147483648
    out[i] = lo + (hi - lo) * s / 2147483648
  end
  return out
end

local function f64(t) return cr.tensor(t, { dtype = 'f64' }) end

-- Runs f with the fast paths on and off; returns both results.
local both_paths = H.both_paths

-- Expected values: torch 1.13 (Debian python3-torch), f64, e.g.
--   torch.nn.functional.gelu(torch.tensor([-3, -1.5, ...], dtype=torch.float64))
local X = { -3, -1.5, -0.5, 0, 0.25, 1, 2.5, 4 }
local XP = { 0.001, 0.25, 1, 2.5, 4, 100 }
local TORCH = {
  abs = { 3.0, 1.5, 0.5, 0.0, 0.25, 1.0, 2.5, 4.0 },
  sign = { -1.0, -1.0, -1.0, 0.0, 1.0, 1.0, 1.0, 1.0 },
  exp = { 0.049787068367863944, 0.22313016014842982, 0.6065306597126334, 1.0, 1.2840254166877414,
          2.718281828459045, 12.182493960703473, 54.598150033144236 },
  sigmoid = { 0.04742587317756678, 0.18242552380635635, 0.3775406687981454, 0.5, 0.5621765008857981,
              0.7310585786300049, 0.9241418199787566, 0.9820137900379085 },
  tanh = { -0.9950547536867305, -0.9051482536448664, -0.46211715726000974, 0.0, 0.24491866240370913,
           0.7615941559557649, 0.9866142981514303, 0.999329299739067 },
  relu = { 0.0, 0.0, 0.0, 0.0, 0.25, 1.0, 2.5, 4.0 },
  gelu = { -0.00404969409489031, -0.10021080190328704, -0.15426876936299344, 0.0, 0.14967658142073093,
           0.841344746068543, 2.4844758366855597, 3.9998733150326675 },
  -- torch 2.15: torch.nn.functional.gelu(x, approximate='tanh')
  gelu_tanh = { -0.0036373920817729943, -0.10042842301976707, -0.15428599017485606, 0.0, 0.149675350701685,
                0.8411919906082768, 2.484915733910001, 3.9999297540518075 },
}
local TORCH_POS = {
  log = { -6.907755278982137, -1.3862943611198906, 0.0, 0.9162907318741551, 1.3862943611198906,
          4.605170185988092 },
  sqrt = { 0.03162277660168379, 0.5, 1.0, 1.5811388300841898, 2.0, 10.0 },
  rsqrt = { 31.622776601683796, 2.0, 1.0, 0.6324555320336759, 0.5, 0.1 },
}

describe('unary math', function()
  it('matches PyTorch in f64, and in f32 on both paths', function()
    for name, want in pairs(TORCH) do
      H.assert_close(cr[name](f64(X)), want, 1e-14, 1e-13, name .. ' f64')
      local fast, ref = both_paths(cr[name], cr.tensor(X))
      H.assert_close(fast, want, 1e-7, 1e-6, name .. ' f32 fast')
      H.assert_close(ref, want, 1e-7, 1e-6, name .. ' f32 ref')
    end
    for name, want in pairs(TORCH_POS) do
      H.assert_close(cr[name](f64(XP)), want, 1e-14, 1e-13, name .. ' f64')
      local fast, ref = both_paths(cr[name], cr.tensor(XP))
      H.assert_close(fast, want, 1e-7, 1e-6, name .. ' f32 fast')
      H.assert_close(ref, want, 1e-7, 1e-6, name .. ' f32 ref')
    end
  end)

  it('works as methods and keeps shape', function()
    local x = cr.tensor({ { 1, 2 }, { 3, 4 } })
    assert.same({ 2, 2 }, x:exp().shape)
    H.assert_close(x:sqrt(), { { 1, math.sqrt(2) }, { math.sqrt(3), 2 } }, 1e-6)
    H.assert_close(x:log(), { { 0, math.log(2) }, { math.log(3), math.log(4) } }, 1e-6)
    H.assert_close(x:rsqrt(), { { 1, 1 / math.sqrt(2) }, { 1 / math.sqrt(3), 0.5 } }, 1e-6)
  end)

  it('handles special values: inf, nan, 0, negatives, subnormals', function()
    local inf, nan = math.huge, 0 / 0
    local x = cr.tensor({ -inf, -1e30, -100, -0.0, 0, 1e-40, 100, 1e30, inf, nan })
    local fast, ref = both_paths(cr.exp, x)
    H.assert_close(fast, ref, 0, 1e-6, 'exp')
    H.assert_close(ref, { 0, 0, math.exp(-100), 1, 1, 1, inf, inf, inf, nan }, 1e-45, 1e-6)
    fast, ref = both_paths(cr.log, x)
    H.assert_close(fast, ref, 0, 1e-6, 'log')
    H.assert_close(ref, { nan, nan, nan, -inf, -inf, math.log(1e-40), math.log(100), math.log(1e30), inf, nan }, 1e-6, 1e-6)
    for _, name in ipairs { 'tanh', 'sigmoid', 'gelu', 'gelu_tanh', 'sqrt', 'rsqrt', 'abs', 'relu', 'sign' } do
      fast, ref = both_paths(cr[name], x)
      H.assert_close(fast, ref, 1e-7, 1e-6, name)
    end
    H.assert_close(cr.tanh(x), { -1, -1, -1, 0, 0, 1e-40, 1, 1, 1, nan }, 1e-7)
    H.assert_close(cr.sigmoid(x), { 0, 0, 1 / (1 + math.exp(100)), 0.5, 0.5, 0.5, 1, 1, 1, nan }, 1e-7)
    H.assert_close(cr.relu(x), { 0, 0, 0, 0, 0, 1e-40, 100, 1e30, inf, nan })
    H.assert_close(cr.sign(x), { -1, -1, -1, 0, 0, 1, 1, 1, 1, 0 })
  end)

  it('fast f32 kernels agree with the libm reference over wide ranges', function()
    -- exp, log, tanh, sigmoid are within 2.5 ulp of the truth; gelu within 8 (its
    -- Phi is a Chebyshev fit of erfc); the tolerances leave room for libm's own ulp.
    -- gelu_tanh's exp argument, -2 sqrt(2/pi) (x + 0.044715 x^3), is rounded to f32 on
    -- the fast path and not on the f64 reference: up to ~40 ulp apart in the far tail
    local tol = { exp = 4e-7, tanh = 4e-7, sigmoid = 4e-7, gelu = 1e-6, gelu_tanh = 1e-5 }
    local wide = cr.tensor(values(40000, -30, 30, 7))
    for _, name in ipairs { 'exp', 'tanh', 'sigmoid', 'gelu', 'gelu_tanh' } do
      local fast, ref = both_paths(cr[name], wide)
      H.assert_close(fast, ref, 1e-30, tol[name], name)
    end
    local ex = cr.tensor(values(40000, -105, 89, 8))
    local fast, ref = both_paths(cr.exp, ex)
    H.assert_close(fast, ref, 1e-44, 4e-7, 'exp full range')
    local mags = {}
    for i, v in ipairs(values(40000, -44, 38, 9)) do mags[i] = 10 ^ v end
    local pos = cr.tensor(mags)
    for _, name in ipairs { 'log', 'sqrt', 'rsqrt' } do
      fast, ref = both_paths(cr[name], pos)
      H.assert_close(fast, ref, 1e-30, 4e-7, name)
    end
    -- gelu near 0 and tanh/sigmoid in the polynomial range
    local small = cr.tensor(values(20000, -1, 1, 10))
    for _, name in ipairs { 'tanh', 'sigmoid', 'gelu', 'gelu_tanh' } do
      fast, ref = both_paths(cr[name], small)
      H.assert_close(fast, ref, 1e-30, tol[name], name .. ' near 0')
    end
  end)

  it('f16/bf16 GELU (both forms) by table equals the reference path bit for bit, forward and backward', function()
    -- every finite value of each half, as f32 numbers the half holds exactly
    local function every_finite(dt)
      local v = {}
      for h = 0, 65535 do
        local sign = h >= 32768 and -1 or 1
        local x
        if dt == 'bf16' then
          local e, m = math.floor(h / 128) % 256, h % 128
          if e ~= 255 then x = sign * (e == 0 and m * 2 ^ -133 or (1 + m / 128) * 2 ^ (e - 127)) end
        else
          local e, m = math.floor(h / 1024) % 32, h % 1024
          if e ~= 31 then x = sign * (e == 0 and m * 2 ^ -24 or (1 + m / 1024) * 2 ^ (e - 15)) end
        end
        if x then v[#v + 1] = x end
      end
      return cr.tensor(v):to(dt)
    end
    for _, dt in ipairs { 'bf16', 'f16' } do
      local x = every_finite(dt)
      assert.are.equal(dt == 'bf16' and 65280 or 63488, x:numel())
      local g = cr.randn(x.shape):to(dt)
      for _, form in ipairs { 'none', 'tanh' } do
        local function fwd(t) return t:gelu { approximate = form } end
        local function grad(t)
          local l = t:detach():requires_grad_()
          fwd(l):backward(g)
          return l.grad
        end
        local fast, ref = both_paths(fwd, x)
        assert.are.equal(dt, fast.dtype)
        assert.are.equal(0, (fast:float() - ref:float()):abs():max():item(), dt .. ' ' .. form)
        fast, ref = both_paths(grad, x)
        assert.are.equal(0, (fast:float() - ref:float()):abs():max():item(), dt .. ' ' .. form .. ' grad')
        -- and strided: every other element
        local xs = x:view(-1, 2):select(1, 0)
        fast, ref = both_paths(fwd, xs)
        assert.are.equal(0, (fast:float() - ref:float()):abs():max():item(), dt .. ' ' .. form .. ' strided')
      end
    end
  end)

  it('promotes integer inputs of float math to f32, keeps them for abs/sign/relu', function()
    local i = cr.tensor({ -2, 0, 3 })
    assert.equal('i64', i.dtype)
    for _, name in ipairs { 'exp', 'log', 'sqrt', 'rsqrt', 'sigmoid', 'tanh', 'gelu' } do
      assert.equal('f32', cr[name](i).dtype, name)
    end
    H.assert_close(i:exp(), { math.exp(-2), 1, math.exp(3) }, 1e-6, 1e-6)
    assert.equal('i64', i:abs().dtype)
    assert.same({ 2, 0, 3 }, i:abs():totable())
    assert.same({ -1, 0, 1 }, i:sign():totable())
    assert.same({ 0, 0, 3 }, i:relu():totable())
    assert.same({ 0, 0, 3 }, cr.tensor({ -2, 0, 3 }, { dtype = 'i32' }):relu():totable())
    assert.same({ 2, 0, 3 }, cr.tensor({ 2, 0, 3 }, { dtype = 'u8' }):abs():totable())
    assert.same({ true, false }, cr.tensor({ true, false }):sign():totable())
  end)

  it('computes halves through f32', function()
    local x = cr.tensor(values(64, -4, 4, 3))
    for _, name in ipairs { 'exp', 'tanh', 'sigmoid', 'gelu', 'abs', 'relu' } do
      H.assert_close(cr[name](x:half()):float(), cr[name](x), 1e-2, 1e-2, name .. ' f16')
      H.assert_close(cr[name](x:bfloat16()):float(), cr[name](x), 2e-2, 2e-2, name .. ' bf16')
      assert.equal('f16', cr[name](x:half()).dtype)
    end
  end)

  it('works on strided views and on large (threaded) tensors', function()
    local base = cr.tensor(values(12 * 7, -3, 3, 4)):view(12, 7)
    local tv = base:t()
    assert.is_false(tv:is_contiguous())
    for _, name in ipairs { 'exp', 'tanh', 'sigmoid', 'gelu', 'abs', 'relu', 'sign', 'logical_not' } do
      H.assert_close(cr[name](tv), cr[name](tv:contiguous()), 0, 0, name)
    end
    H.assert_close(tv:abs():sqrt(), tv:contiguous():abs():sqrt(), 0, 0)
    H.assert_close(tv:clamp(-1, 1), tv:contiguous():clamp(-1, 1), 0, 0)
    H.assert_close(tv ^ 2, tv:contiguous() ^ 2, 0, 0)
    local big = cr.tensor(values(200000, -5, 5, 5))
    local e = big:exp()
    H.assert_close(e:log(), big, 1e-5, 1e-5)
    local fast, ref = both_paths(cr.gelu, big)
    H.assert_close(fast, ref, 1e-30, 1e-6)
    -- halves take the fast f32 formulas too (a rounding apart at most), forward and backward
    local hb = big:bfloat16()
    fast, ref = both_paths(cr.gelu, hb)
    assert.are.equal('bf16', fast.dtype)
    H.assert_close(fast:float(), ref:float(), 1e-30, 2 ^ -7)
    local function gelu_grad(x)
      local l = x:detach():requires_grad_()
      cr.gelu(l):backward(cr.ones(l.shape):to(l.dtype))
      return l.grad
    end
    fast, ref = both_paths(gelu_grad, hb)
    H.assert_close(fast:float(), ref:float(), 1e-30, 2 ^ -7)
  end)
end)

describe('pow', function()
  it('pow_scalar matches PyTorch, with the special exponents on both paths', function()
    H.assert_close(f64(XP) ^ 1.5, { 3.1622776601683795e-05, 0.125, 1.0, 3.952847075210474, 8.0, 1000.0 }, 1e-15, 1e-14)
    H.assert_close(f64(X) ^ -2, { 0.1111111111111111, 0.4444444444444444, 4.0, math.huge, 16.0, 1.0, 0.16, 0.0625 }, 1e-15, 1e-14)
    H.assert_close(f64(X) ^ 3, { -27.0, -3.375, -0.125, 0.0, 0.015625, 1.0, 15.625, 64.0 }, 1e-15, 1e-14)
    local x = cr.tensor(values(1000, 0.01, 10, 11))
    local neg = cr.tensor(values(1000, -10, 10, 12))
    for _, e in ipairs { 2, 3, 0.5, -0.5, 1, -1, -2, 0, 1.7, -2.5 } do
      local fast, ref = both_paths(function() return x ^ e end)
      H.assert_close(fast, ref, 1e-30, 3e-7, 'x^' .. e)
      H.assert_close(ref:double(), x:double() ^ e, 1e-30, 3e-7, 'x^' .. e .. ' vs f64')
      fast, ref = both_paths(function() return neg ^ e end)
      H.assert_close(fast, ref, 1e-30, 3e-7, 'neg^' .. e)
    end
    assert.same({ 1, 1, 1 }, (cr.tensor({ 0, 2, -3 }) ^ 0):totable())
  end)

  it('keeps integers integral, and promotes them for fractional exponents', function()
    local i = cr.tensor({ 1, 2, 3 })
    assert.equal('i64', (i ^ 2).dtype)
    assert.same({ 1, 4, 9 }, (i ^ 2):totable())
    assert.equal('f32', (i ^ 0.5).dtype)
    H.assert_close(i ^ 0.5, { 1, math.sqrt(2), math.sqrt(3) }, 1e-6)
    assert.same({ 1 }, (cr.tensor({ true }) ^ 2):totable())
    -- tensor exponents, integer: torch.tensor([1,2,3]).pow(torch.tensor([2,-1,0])) = [1, 0, 1]
    assert.same({ 1, 0, 1 }, i:pow(cr.tensor({ 2, -1, 0 })):totable())
    assert.same({ -1, 0, 0 }, cr.tensor({ -1, 2, 0 }):pow(cr.tensor({ -3, -1, -2 })):totable())
  end)

  it('pow of tensors broadcasts; numbers work on either side', function()
    local a = f64({ { 1.5, 2.0, 0.5 }, { 3.0, 0.25, 2.0 } })
    local b = f64({ 2.0, -1.0, 0.5 })
    H.assert_close(a:pow(b), { { 2.25, 0.5, 0.7071067811865476 }, { 9.0, 4.0, 1.4142135623730951 } }, 1e-15)
    H.assert_close(2 ^ cr.tensor({ 0, 1, 3 }), { 1, 2, 8 })
    H.assert_close(cr.pow(2, cr.tensor({ -1, 2 }, { dtype = 'f32' })), { 0.5, 4 })
    assert.same({ 0, 4 }, cr.pow(2, cr.tensor({ -1, 2 })):totable()) -- integers, as torch.pow(2, tensor([-1, 2]))
    H.assert_close(cr.pow(cr.tensor({ 3, 4 }), 2), { 9, 16 })
    assert.equal('f16', (cr.tensor({ 1, 2 }):half() ^ 2).dtype)
  end)

  it('gradchecks', function()
    H.gradcheck(function(x) return x ^ 2 end, { cr.tensor(values(6, -2, 2, 1)) })
    H.gradcheck(function(x) return x ^ 3 end, { cr.tensor(values(6, -2, 2, 2)) })
    H.gradcheck(function(x) return x ^ 0.5 end, { cr.tensor(values(6, 0.5, 3, 3)) })
    H.gradcheck(function(x) return x ^ -1.5 end, { cr.tensor(values(6, 0.5, 3, 4)) })
    H.gradcheck(function(x) return x:pow(1) end, { cr.tensor(values(6, -2, 2, 5)) })
    H.gradcheck(function(x) return x:pow(0) end, { cr.tensor(values(6, -2, 2, 5)) })
    H.gradcheck(function(a, b) return a:pow(b) end,
      { cr.tensor(values(6, 0.5, 3, 6)):view(2, 3), cr.tensor(values(6, -2, 2, 7)):view(2, 3) })
    H.gradcheck(function(a, b) return a:pow(b) end,
      { cr.tensor(values(6, 0.5, 3, 8)):view(2, 3), cr.tensor(values(3, -2, 2, 9)) })
    H.gradcheck(function(a, b) return a:pow(b) end,
      { cr.tensor(values(3, 0.5, 3, 10)):view(3, 1), cr.tensor(values(4, -2, 2, 11)):view(1, 4) })
  end)

  it('has PyTorch grads where the base is 0', function()
    -- torch: a = [0, 0, 2], b = [0, 2, 3]; (a ** b).sum().backward()
    local a = f64({ 0, 0, 2 }):requires_grad_()
    local b = f64({ 0, 2, 3 }):requires_grad_()
    a:pow(b):sum():backward()
    H.assert_close(a.grad, { 0, 0, 12 })
    H.assert_close(b.grad, { 0, 0, 5.545177444479562 }, 1e-14)
    local x = f64({ 0, 1 }):requires_grad_()
    ;(x ^ 0):sum():backward()
    assert.same({ 0, 0 }, x.grad:totable())
  end)
end)

describe('maximum and minimum', function()
  it('pick elementwise, broadcast, and propagate NaN', function()
    local nan = 0 / 0
    local a = cr.tensor({ { 1, 5 }, { -2, 0 } })
    local b = cr.tensor({ 0, 3 })
    assert.same({ { 1, 5 }, { 0, 3 } }, cr.maximum(a, b):totable())
    assert.same({ { 0, 3 }, { -2, 0 } }, cr.minimum(a, b):totable())
    assert.same({ { 1, 5 }, { 0, 0 } }, a:maximum(0):totable())
    assert.same({ { 1, 2 }, { -2, 0 } }, cr.minimum(a, 2):totable())
    assert.equal('i64', cr.maximum(a, 0):long().dtype)
    H.assert_close(cr.maximum(cr.tensor({ nan, 1 }), cr.tensor({ 0, nan })), { nan, nan })
    H.assert_close(cr.minimum(cr.tensor({ nan, 1 }), cr.tensor({ 0, nan })), { nan, nan })
    assert.same({ 3, 7 }, cr.maximum(cr.tensor({ 3, -7 }, { dtype = 'i32' }), cr.tensor({ 1, 7 }, { dtype = 'i32' })):totable())
    assert.same({ true, false }, cr.minimum(cr.tensor({ true, false }), cr.tensor({ true, true })):totable())
  end)

  it('split the grad evenly on ties (as PyTorch)', function()
    -- torch: a = [1, 2, 3], b = [1, 5, 0]
    local a = f64({ 1, 2, 3 }):requires_grad_()
    local b = f64({ 1, 5, 0 }):requires_grad_()
    cr.maximum(a, b):sum():backward()
    assert.same({ 0.5, 0, 1 }, a.grad:totable())
    assert.same({ 0.5, 1, 0 }, b.grad:totable())
    a.grad, b.grad = nil, nil
    cr.minimum(a, b):sum():backward()
    assert.same({ 0.5, 1, 0 }, a.grad:totable())
    assert.same({ 0.5, 0, 1 }, b.grad:totable())
  end)

  it('gradchecks, with broadcasting', function()
    local a = cr.tensor(values(6, -2, 2, 21)):view(2, 3)
    local b = cr.tensor(values(3, -2, 2, 22))
    H.gradcheck(function(x, y) return cr.maximum(x, y) end, { a, b })
    H.gradcheck(function(x, y) return cr.minimum(x, y) end, { a, b })
    H.gradcheck(function(x, y) return cr.maximum(x, y) end, { b:view(3, 1), a:view(1, 6) })
    H.gradcheck(function(x) return cr.minimum(x, 0.3) end, { a })
  end)
end)

describe('comparisons and logical ops', function()
  it('compare with numbers and tensors, broadcasting, to bool', function()
    local x = cr.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
    assert.same({ { false, true, false }, { false, false, false } }, x:eq(2):totable())
    assert.same({ { true, false, true }, { true, true, true } }, x:ne(2):totable())
    assert.same({ { true, false, false }, { false, false, false } }, x:lt(2):totable())
    assert.same({ { true, true, false }, { false, false, false } }, x:le(2):totable())
    assert.same({ { false, false, true }, { true, true, true } }, x:gt(2):totable())
    assert.same({ { false, true, true }, { true, true, true } }, x:ge(2):totable())
    local row = cr.tensor({ 1, 5, 3 })
    assert.same({ { true, false, true }, { false, true, false } }, cr.eq(x, row):totable())
    assert.same({ { false, true, false }, { false, false, false } }, cr.lt(x, row):totable())
    assert.equal('bool', x:gt(2).dtype)
    -- an integer tensor against a fractional number compares in float
    assert.same({ { false, false, true }, { true, true, true } }, x:gt(2.5):totable())
    -- 2 > x: numbers on the left
    assert.same({ { true, false, false }, { false, false, false } }, cr.gt(2, x):totable())
  end)

  it('follow IEEE for NaN and work for every dtype', function()
    local nan = 0 / 0
    local x = cr.tensor({ nan, 1, 2 })
    assert.same({ false, true, false }, x:eq(1):totable())
    assert.same({ true, false, true }, x:ne(1):totable())
    assert.same({ false, false, true }, x:gt(1):totable())
    assert.same({ false, true, false }, x:le(1):totable())
    for _, dt in ipairs { 'f32', 'f64', 'f16', 'bf16', 'i64', 'i32', 'u8' } do
      local a = cr.tensor({ 1, 2, 3 }, { dtype = dt })
      local b = cr.tensor({ 3, 2, 1 }, { dtype = dt })
      assert.same({ true, false, false }, a:lt(b):totable(), dt)
      assert.same({ false, true, false }, a:eq(b):totable(), dt)
      assert.same({ false, true, true }, a:ge(b):totable(), dt)
    end
    -- mixed dtypes promote: i64 vs f64
    assert.same({ false, true }, cr.tensor({ 1, 2 }):eq(f64({ 1.5, 2 })):totable())
  end)

  it('logical and/or/not treat nonzero as true', function()
    local a = cr.tensor({ true, true, false, false })
    local b = cr.tensor({ true, false, true, false })
    assert.same({ true, false, false, false }, a:logical_and(b):totable())
    assert.same({ true, true, true, false }, cr.logical_or(a, b):totable())
    assert.same({ false, false, true, true }, a:logical_not():totable())
    -- torch.logical_and(torch.tensor([0.5, 0.0]), torch.tensor([2, 3])) = [True, False]
    assert.same({ true, false }, cr.logical_and(cr.tensor({ 0.5, 0.0 }), cr.tensor({ 2, 3 })):totable())
    assert.same({ false, true, false }, cr.tensor({ 0.5, 0, -1 }):logical_not():totable())
    assert.same({ false, true }, cr.tensor({ 7, 0 }, { dtype = 'i32' }):logical_not():totable())
    -- broadcasting, and an expanded (stride 0) operand
    local col = cr.tensor({ { true }, { false } })
    assert.same({ { true, true }, { false, true } }, cr.logical_or(col, cr.tensor({ false, true })):totable())
    assert.same({ { false, false }, { true, true } }, col:expand(2, 2):logical_not():totable())
  end)

  it('record no graph: the result is bool', function()
    local x = cr.tensor({ 1.5, 2 }, { requires_grad = true })
    local m = x:gt(1)
    assert.is_false(m.requires_grad)
    assert.is_false(x:logical_not().requires_grad)
  end)

  it('work on strided views', function()
    local base = cr.tensor(values(30, -1, 1, 31)):view(5, 6)
    local tv = base:t()
    assert.same(tv:contiguous():gt(0):totable(), tv:gt(0):totable())
    assert.same(tv:contiguous():le(tv:contiguous():t():t()):totable(), tv:le(tv):totable())
    local big = cr.tensor(values(100000, -1, 1, 32))
    assert.equal(100000, (big:gt(0):long() + big:le(0):long()):sum():item())
  end)
end)

describe('clamp', function()
  it('clamps to [lo, hi] with either bound optional', function()
    local x = cr.tensor({ -3, -1, 0, 2, 5 })
    assert.same({ -1, -1, 0, 2, 2 }, x:float():clamp(-1, 2):totable())
    assert.same({ 0, 0, 0, 2, 5 }, x:clamp(0):totable())
    assert.same({ -3, -1, 0, 1, 1 }, x:clamp(nil, 1):totable())
    assert.same({ 0, 0, 0, 2, 5 }, cr.clamp_min(x, 0):totable())
    assert.same({ -3, -1, 0, 1, 1 }, x:clamp_max(1):totable())
    -- lo > hi gives hi everywhere, NaN stays (torch.clamp([nan, 1, 5], 2, 1) = [nan, 1, 1])
    H.assert_close(cr.tensor({ 0 / 0, 1, 5 }):clamp(2, 1), { 0 / 0, 1, 1 })
  end)

  it('keeps integer dtypes, promotes for fractional bounds (as PyTorch)', function()
    local i = cr.tensor({ 1, 5, 9 })
    assert.equal('i64', i:clamp(2, 7).dtype)
    assert.same({ 2, 5, 7 }, i:clamp(2, 7):totable())
    assert.equal('f32', i:clamp(2.5, 7).dtype)
    assert.same({ 2.5, 5, 7 }, i:clamp(2.5, 7):totable())
    assert.same({ 1, 5, 9 }, i:clamp(-1e300, 1e300):totable())
    assert.same({ 2, 5, 6 }, cr.tensor({ 1, 5, 9 }, { dtype = 'u8' }):clamp(2, 6):totable())
    assert.same({ 2, 5, 6 }, cr.tensor({ 1, 5, 9 }, { dtype = 'i32' }):clamp(2, 6):totable())
    H.assert_close(cr.tensor({ 1, 5, 9 }):half():clamp(2, 6):float(), { 2, 5, 6 })
  end)

  it('accepts tensor bounds, which broadcast', function()
    local x = cr.tensor({ { -3, 0, 3 }, { 4, -4, 1 } })
    local lo = cr.tensor({ -1, 1, 0 })
    assert.same({ { -1, 1, 3 }, { 4, 1, 1 } }, x:clamp(lo):totable())
    assert.same({ { -1, 1, 2 }, { 2, 1, 1 } }, x:clamp(lo, 2):totable())
  end)

  it('passes the grad where lo <= x <= hi (bounds included)', function()
    -- torch: torch.clamp(tensor([-1., 0., 2.]), -1, 0).sum().backward() -> [1, 1, 0]
    local x = f64({ -1, 0, 2 }):requires_grad_()
    x:clamp(-1, 0):sum():backward()
    assert.same({ 1, 1, 0 }, x.grad:totable())
    H.gradcheck(function(t) return t:clamp(-0.5, 0.7) end, { cr.tensor(values(12, -2, 2, 41)):view(3, 4) })
    H.gradcheck(function(t) return t:clamp(-0.5) end, { cr.tensor(values(12, -2, 2, 42)) })
    H.gradcheck(function(t) return t:clamp(nil, 0.25) end, { cr.tensor(values(12, -2, 2, 43)) })
  end)
end)

describe('activations and their grads', function()
  it('have grad 0 at the kink for relu and abs, and zero grad for sign', function()
    -- torch: relu'([-1, 0, 2]) = [0, 0, 1]; abs' = [-1, 0, 1]
    local x = f64({ -1, 0, 2 }):requires_grad_()
    x:relu():sum():backward()
    assert.same({ 0, 0, 1 }, x.grad:totable())
    x.grad = nil
    x:abs():sum():backward()
    assert.same({ -1, 0, 1 }, x.grad:totable())
    x.grad = nil
    x:sign():sum():backward()
    assert.same({ 0, 0, 0 }, x.grad:totable())
  end)

  it('gradcheck every differentiable unary op', function()
    local any = cr.tensor(values(12, -3, 3, 51)):view(3, 4)
    local pos = cr.tensor(values(12, 0.2, 4, 52)):view(3, 4)
    for _, name in ipairs { 'abs', 'sign', 'exp', 'sigmoid', 'tanh', 'relu', 'gelu', 'gelu_tanh' } do
      H.gradcheck(function(x) return cr[name](x) end, { any })
    end
    for _, name in ipairs { 'log', 'sqrt', 'rsqrt' } do
      H.gradcheck(function(x) return cr[name](x) end, { pos })
    end
    -- through a strided view, and chained
    H.gradcheck(function(x) return x:t():tanh():sigmoid() end, { any })
    H.gradcheck(function(x) return x:gelu() * x:exp() end, { any })
  end)

  it('fused backward kernels agree on both paths', function()
    local x = cr.tensor(values(5000, -8, 8, 61))
    for _, name in ipairs { 'relu', 'sigmoid', 'tanh', 'gelu', 'gelu_tanh' } do
      local function grad()
        local v = x:clone():requires_grad_()
        cr[name](v):sum():backward()
        return v.grad
      end
      local fast, ref = both_paths(grad)
      H.assert_close(fast, ref, 1e-7, name == 'gelu_tanh' and 5e-6 or 1e-6, name) -- (its f32 exp argument)
    end
    -- gelu'(x) = Phi(x) + x phi(x); at 1: torch gives 1.0833154705876864
    local v = f64({ 1 }):requires_grad_()
    v:gelu():sum():backward()
    H.assert_close(v.grad, { 1.0833154705876864 }, 1e-14)
    -- the tanh form's grads, torch 2.15 in f64 at X
    local w = f64(X):requires_grad_()
    w:gelu({ approximate = 'tanh' }):sum():backward()
    H.assert_close(w.grad, { -0.011584166630969648, -0.12771079315143308, 0.13263009646535764, 0.5, 0.6953540951510604,
                             1.0829640838457826, 1.037951576212666, 1.000335123197122 }, 1e-14, 1e-13)
    H.assert_error(function() x:gelu({ approximate = 'erf' }) end, "approximate must be 'none' or 'tanh'")
    H.assert_close(cr.nn.GELU({ approximate = 'tanh' })(f64(X)), TORCH.gelu_tanh, 1e-14, 1e-13)
  end)

  it('work in f32 autograd too', function()
    local x = cr.tensor({ -1, 0.5, 2 }, { requires_grad = true })
    x:sigmoid():sum():backward()
    local s = { 1 / (1 + math.exp(1)), 1 / (1 + math.exp(-0.5)), 1 / (1 + math.exp(-2)) }
    H.assert_close(x.grad, { s[1] * (1 - s[1]), s[2] * (1 - s[2]), s[3] * (1 - s[3]) }, 1e-6)
  end)
end)

describe('where and masked_fill', function()
  it('where selects, broadcasting all three, with numbers for a or b', function()
    local cond = cr.tensor({ { true, false, true } })
    local a = cr.tensor({ { 1 }, { 2 } })
    local b = cr.tensor({ 10, 20, 30 })
    assert.same({ { 1, 20, 1 }, { 2, 20, 2 } }, cr.where(cond, a, b):totable())
    local x = cr.tensor({ -1.5, 2, -3 })
    assert.same({ 0, 2, 0 }, cr.where(x:gt(0), x, 0):totable())
    assert.same({ -1.5, 7, -3 }, cr.where(x:gt(0), 7, x):totable())
    assert.same({ -1.5, 0, -3 }, x:where(x:lt(0), 0):totable())
    assert.equal('f16', cr.where(x:gt(0), x:half(), 0).dtype)
    assert.equal('i64', cr.where(x:gt(0), 1, 0).dtype)
    assert.equal('f32', cr.where(x:gt(0), 1.5, 0).dtype)
    assert.same({ 0, 1, 0 }, cr.where(x:gt(0), 1, 0):totable())
    assert.same({ false, true, false }, cr.where(x:gt(0), true, false):totable())
    -- promotion between a and b: i64 with f64
    assert.equal('f64', cr.where(x:gt(0), cr.tensor({ 1, 2, 3 }), f64({ 4, 5, 6 })).dtype)
    for _, dt in ipairs { 'f64', 'f16', 'i32', 'u8', 'bool' } do
      local p = cr.tensor({ 1, 0, 1 }, { dtype = dt })
      local q = cr.tensor({ 0, 1, 1 }, { dtype = dt })
      local w = cr.where(x:gt(0):logical_not(), p, q)
      assert.equal(dt, w.dtype)
      assert.same(cr.tensor({ 1, 1, 1 }, { dtype = dt }):totable(), w:totable(), dt)
    end
  end)

  it('where works on strided and large inputs', function()
    local base = cr.tensor(values(42, -1, 1, 71)):view(6, 7)
    local tv = base:t()
    local z = cr.zeros(7, 6)
    assert.same(cr.where(tv:contiguous():gt(0), tv:contiguous(), z):totable(), cr.where(tv:gt(0), tv, z):totable())
    assert.same(cr.where(tv:contiguous():gt(0), z, tv:contiguous()):totable(), cr.where(tv:gt(0), 0, tv):totable())
    local big = cr.tensor(values(100000, -1, 1, 72))
    H.assert_close(cr.where(big:gt(0), big, 0), big:relu(), 0, 0)
  end)

  it('where sends the grad to a and b, summed to their shapes', function()
    local cond = cr.tensor({ { true, false, true }, { false, false, true } })
    H.gradcheck(function(a, b) return cr.where(cond, a, b) end,
      { cr.tensor(values(6, -1, 1, 81)):view(2, 3), cr.tensor(values(3, -1, 1, 82)) })
    H.gradcheck(function(a, b) return cr.where(cond, a, b) end,
      { cr.tensor(values(2, -1, 1, 83)):view(2, 1), cr.tensor(values(1, -1, 1, 84)) })
    H.gradcheck(function(a) return cr.where(cond, a, 0) end, { cr.tensor(values(6, -1, 1, 85)):view(2, 3) })
    local a = f64({ 1, 2 }):requires_grad_()
    local b = f64({ 3 }):requires_grad_()
    cr.where(cr.tensor({ true, false }), a, b):sum():backward()
    assert.same({ 1, 0 }, a.grad:totable())
    assert.same({ 1 }, b.grad:totable())
  end)

  it('masked_fill writes the value where the mask is set, broadcasting the mask', function()
    local t = cr.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
    assert.same({ { 1, 0, 3 }, { 4, 0, 6 } }, t:masked_fill(cr.tensor({ false, true, false }), 0):totable())
    assert.same({ { 9, 9, 9 }, { 4, 5, 6 } }, t:masked_fill(cr.tensor({ { true }, { false } }), 9):totable())
    assert.same({ { 1, 2, 3 }, { 4, 5, 6 } }, t:masked_fill(cr.tensor(false), 9):totable())
    assert.same({ { -1, -1, -1 }, { -1, -1, -1 } }, t:masked_fill(cr.tensor(true), -1):totable())
    local x = cr.tensor({ 1, 2, 3 })
    H.assert_close(x:float():masked_fill(x:gt(1), -math.huge), { 1, -math.huge, -math.huge })
    assert.same({ 0, 2, 0 }, cr.masked_fill(x, x:ne(2), 0.5):totable()) -- i64: 0.5 truncates, as PyTorch
    assert.same({ 1, 7, 3 }, x:masked_fill(x:eq(2), cr.tensor(7)):totable())
    assert.same({ true, true }, cr.tensor({ false, true }):masked_fill(cr.tensor({ true, false }), true):totable())
    H.assert_close(x:half():masked_fill(x:eq(1), 0.5):float(), { 0.5, 2, 3 })
    local tv = t:t()
    assert.same(tv:contiguous():masked_fill(tv:contiguous():gt(3), 0):totable(), tv:masked_fill(tv:gt(3), 0):totable())
  end)

  it('masked_fill has zero grad where the mask is set', function()
    local x = f64({ 1, 2, 3 }):requires_grad_()
    x:masked_fill(cr.tensor({ false, true, false }), 5):sum():backward()
    assert.same({ 1, 0, 1 }, x.grad:totable())
    local mask = cr.tensor({ { true }, { false } })
    H.gradcheck(function(t) return t:masked_fill(mask, 0.5) end, { cr.tensor(values(6, -1, 1, 91)):view(2, 3) })
  end)
end)

describe('bad input', function()
  local x = cr.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })

  it('names the op and the problem for nil and non-tensors', function()
    H.assert_error(function() cr.exp(nil) end, 'exp', 'expected a tensor')
    H.assert_error(function() cr.sigmoid('x') end, 'sigmoid', 'expected a tensor')
    H.assert_error(function() cr.maximum(x, nil) end, 'maximum', 'expected a tensor or a number')
    H.assert_error(function() cr.eq(x, {}) end, 'eq', 'expected a tensor or a number')
    H.assert_error(function() cr.pow_scalar(x, 'a') end, 'pow', 'exponent must be a number')
    H.assert_error(function() cr.where(nil, x, x) end, 'where', 'condition')
    H.assert_error(function() cr.where(x:gt(1), 'a', 'b') end, 'where', 'tensors or numbers')
    H.assert_error(function() x:masked_fill(nil, 0) end, 'masked_fill', 'mask')
    H.assert_error(function() x:masked_fill(x:gt(1), 'v') end, 'masked_fill', 'value must be a number')
    H.assert_error(function() x:clamp('a') end, 'clamp', 'lo must be')
    H.assert_error(function() x:clamp(nil, {}) end, 'clamp', 'hi must be')
  end)

  it('refuses shapes that do not broadcast, naming them', function()
    local y = cr.ones(4)
    for _, name in ipairs { 'pow', 'maximum', 'minimum', 'eq', 'ne', 'lt', 'le', 'gt', 'ge', 'logical_and', 'logical_or' } do
      H.assert_error(function() cr[name](x, y) end, name, 'do not broadcast', '[2, 3]', '[4]')
    end
    H.assert_error(function() cr.where(x:gt(1), x, y) end, 'where', 'do not broadcast', '(other)')
    H.assert_error(function() cr.where(cr.ones(5):gt(0), x, x) end, 'where', 'do not broadcast', '(condition)')
    H.assert_error(function() cr.ones(3):masked_fill(x:gt(1), 0) end, 'masked_fill', 'does not broadcast to the tensor')
    H.assert_error(function() x:masked_fill(cr.ones(4):gt(0), 0) end, 'masked_fill', 'do not broadcast')
  end)

  it('refuses wrong dtypes with the fix', function()
    H.assert_error(function() cr.where(x, x, x) end, 'where', 'must be bool', ':bool()')
    H.assert_error(function() x:masked_fill(x, 0) end, 'masked_fill', 'must be bool', ':bool()')
    local b = cr.tensor({ true, false })
    H.assert_error(function() b:abs() end, 'abs', 'bool')
    H.assert_error(function() b:relu() end, 'relu', 'bool')
    H.assert_error(function() b:clamp(0, 1) end, 'clamp', 'bool')
    H.assert_error(function() return x ^ -1 end, 'pow', 'negative integer powers', ':float()')
    H.assert_error(function() x:clamp() end, 'clamp', 'neither lo nor hi')
    H.assert_error(function() x:masked_fill(x:gt(1), math.huge) end, 'masked_fill', 'cannot be stored')
  end)

  it('checks the fused backward entry points', function()
    local call = cr.Tensor.op_helpers.call
    local g, y = cr.ones(3), cr.ones(4)
    H.assert_error(function() call(cr.C.cr_op_relu_backward, g, y) end, 'relu_backward', '[3]', '[4]')
    H.assert_error(function() call(cr.C.cr_op_gelu_backward, cr.ones(2), cr.tensor({ 1, 2 })) end,
      'gelu_backward', 'floating dtype')
    H.assert_close(call(cr.C.cr_op_tanh_backward, cr.ones(2), cr.tensor({ 0.5, 0 })), { 0.75, 1 })
  end)

  it('handles empty and 0-dim tensors', function()
    local e = cr.zeros(0, 3)
    assert.same({ 0, 3 }, e:exp().shape)
    assert.same({ 0, 3 }, cr.where(e:gt(0), e, 1).shape)
    assert.same({ 0, 3 }, e:masked_fill(e:gt(0), 1).shape)
    local s = cr.tensor(2.0)
    H.assert_close(s:exp(), math.exp(2), 1e-6, 1e-6)
    assert.is_true(s:gt(1):item())
    assert.equal(4, (s ^ 2):item())
  end)
end)

describe('add_relu (the fused residual join)', function()
  it('equals relu(a + b) with broadcasting, and keeps NaN', function()
    local a = cr.tensor({ { -1, 2, -3 }, { 4, -5, 6 } }, { dtype = 'f32' })
    local b = cr.tensor({ 0.5, -3, 4 }, { dtype = 'f32' })
    assert.same({ { 0, 0, 1 }, { 4.5, 0, 10 } }, cr.add_relu(a, b):totable())
    H.assert_close(cr.add_relu(a, b), (a + b):relu())
    local n = cr.add_relu(cr.tensor({ 0 / 0 }, { dtype = 'f32' }), cr.tensor({ 1 }, { dtype = 'f32' })):item()
    assert.is_true(n ~= n)
  end)
  it('passes a gradcheck in f64, including broadcast inputs', function()
    H.gradcheck(function(x, y) return cr.add_relu(x, y) end,
      { cr.tensor({ { -1.3, 2.1, -0.7 }, { 0.4, -2.5, 1.6 } }), cr.tensor({ 0.5, -0.3, 0.9 }) })
  end)
  it('refuses integer tensors with a message', function()
    H.assert_error(function() return cr.add_relu(cr.tensor({ 1 }), cr.tensor({ 2 })) end, 'add_relu', 'floating')
  end)
end)
