-- random_spec — the creation ops: arange and eye, and the random draws from the Philox
-- stream (rand, randn, randint, randperm, bernoulli): reproducibility per seed, the word
-- layout documented in csrc/core/rng.h (the GPU kernels must match it), independence
-- of the thread count, statistics of large draws, and errors on bad arguments.
local ffi = require 'ffi'
local cr = H.cr
local C = cr.C

local function state()
  local s, o = ffi.new('uint64_t[1]'), ffi.new('uint64_t[1]')
  C.cr_rng_get_state(s, o)
  return s[0], o[0]
end
-- words [0, n) of the stream at (seed, offset), as Lua numbers
local function words(n, seed, offset)
  local w = ffi.new('uint32_t[?]', n)
  C.cr_rng_philox_words(w, n, seed, offset)
  local out = {}
  for i = 0, n - 1 do out[i + 1] = tonumber(w[i]) end
  return out
end
local function with_threads(n, f)
  local old = cr.get_num_threads()
  cr.set_num_threads(n)
  local ok, a, b = pcall(f)
  cr.set_num_threads(old)
  if not ok then error(a, 2) end
  return a, b
end
local function var(t) local d = t - t:mean(); return (d * d):mean():item() end

describe('arange and eye', function()
  it('counts ceil((end - start) / step) values, like PyTorch', function()
    assert.same({ 0, 1, 2, 3, 4 }, cr.arange(5):totable())
    assert.equal('i64', cr.arange(5).dtype)
    assert.same({ 10, 7, 4, 1 }, cr.arange(10, 0, -3):totable())
    assert.equal('i64', cr.arange(10, 0, -3).dtype)
    assert.equal('f32', cr.arange(0, 1, 0.1).dtype)
    assert.same({ 0 }, cr.arange(3, 3).shape)
    -- torch.arange(1, 2.5, 0.3).tolist(); torch.arange(-1.0, 1.0, 0.7, dtype=torch.float64)
    H.assert_close(cr.arange(1, 2.5, 0.3),
      { 1.0, 1.2999999523162842, 1.600000023841858, 1.899999976158142, 2.200000047683716 }, 0, 0)
    H.assert_close(cr.arange(-1, 1, 0.7, { dtype = 'f64' }), { -1.0, -0.30000000000000004, 0.3999999999999999 }, 0, 0)
    assert.same({ 0, 2.5, 5, 7.5 }, cr.arange(0, 10, 2.5):totable())
    assert.equal('f64', cr.arange(4, { dtype = 'f64' }).dtype)
    assert.same({ 2, 3, 4 }, cr.arange(2, 5, { dtype = 'i32' }):totable())
    -- i64 ranges far past 2^53
    local big = 2 ^ 60
    assert.same({ big, big + 1024, big + 2048, big + 3072 }, cr.arange(big, big + 4096, 1024):totable())
  end)

  it('fills large ranges without drift', function()
    local t = cr.arange(0, 100000, 1, { dtype = 'f64' })
    assert.equal(99999, t:select(0, 99999):item())
    assert.equal(99999 * 100000 / 2, t:sum():item())
  end)

  it('builds identity matrices', function()
    assert.same({ { 1, 0, 0 }, { 0, 1, 0 } }, cr.eye(2, 3):totable())
    assert.same({ { 1, 0 }, { 0, 1 }, { 0, 0 } }, cr.eye(3, 2, { dtype = 'i64' }):totable())
    assert.same({ 4, 4 }, cr.eye(4).shape)
    assert.equal('f64', cr.eye(2, { dtype = 'f64' }).dtype)
    assert.same({ 0, 3 }, cr.eye(0, 3).shape)
  end)

  it('rejects bad ranges and sizes', function()
    H.assert_error(function() cr.arange(0, 5, 0) end, 'arange', 'step must be nonzero')
    H.assert_error(function() cr.arange(0, 5, -1) end, 'arange', 'other sign')
    H.assert_error(function() cr.arange(5, 0) end, 'arange', 'other sign')
    H.assert_error(function() cr.arange(0, 0 / 0) end, 'arange', 'finite')
    H.assert_error(function() cr.arange(0, 1e300, 1e-300) end, 'arange', 'beyond any memory')
    H.assert_error(function() cr.arange() end, 'arange', 'give end')
    H.assert_error(function() cr.arange('a') end, 'arange', 'give numbers')
    H.assert_error(function() cr.eye(-1) end, 'eye', 'must be >= 0')
    H.assert_error(function() cr.eye(1e9, 1e9) end, 'eye', 'beyond any memory')
    H.assert_error(function() cr.eye(nil) end, 'eye', 'number of rows')
  end)
end)

describe('random draws', function()
  it('Philox4x32-10 matches the Random123 known answer', function()
    -- Random123 kat_vectors: philox4x32 10 rounds, counter 0, key 0
    local w = words(4, 0, 0)
    assert.same({ 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8 }, w)
  end)

  it('the same seed gives the same numbers, another seed others', function()
    local function draw_all()
      return { cr.rand(7):totable(), cr.randn(5, { dtype = 'f64' }):totable(), cr.randint(0, 100, { 9 }):totable(),
               cr.randperm(12):totable(), cr.bernoulli(0.3, { 10 }):totable() }
    end
    cr.manual_seed(42)
    local a = draw_all()
    cr.manual_seed(42)
    local b = draw_all()
    assert.same(a, b)
    cr.manual_seed(43)
    local c = draw_all()
    assert.are_not.same(a[1], c[1])
    assert.are_not.same(a[2], c[2])
  end)

  it('follows the word layout documented in rng.h', function()
    cr.manual_seed(7)
    local seed, off = state()
    local x = H.flat(cr.rand(6))
    local w = words(8, seed, off)
    for i = 1, 6 do assert.equal(math.floor(w[i] / 256) / 2 ^ 24, x[i]) end
    local _, off2 = state()
    assert.equal(off + 2, off2) -- 6 words round up to 2 counters
    -- f64: words 2i, 2i+1 -> 53 bits
    seed, off = state()
    local d = H.flat(cr.rand(3, { dtype = 'f64' }))
    w = words(6, seed, off)
    for i = 0, 2 do
      local hi, lo = w[2 * i + 1], w[2 * i + 2]
      local v = (hi * 2 ^ 21 + math.floor(lo / 2 ^ 11)) / 2 ^ 53
      assert.equal(v, d[i + 1])
    end
    -- randn f32: Box-Muller on words (0, 1)
    seed, off = state()
    local z = H.flat(cr.randn(2))
    w = words(2, seed, off)
    local u1 = (math.floor(w[1] / 256) + 1) / 2 ^ 24
    local u2 = math.floor(w[2] / 256) / 2 ^ 24
    local r = math.sqrt(-2 * math.log(u1))
    assert.is_true(math.abs(z[1] - r * math.cos(2 * math.pi * u2)) < 1e-5)
    assert.is_true(math.abs(z[2] - r * math.sin(2 * math.pi * u2)) < 1e-5)
    -- an odd randn count keeps the first half of its last pair; f16/bf16 round the f32 values
    cr.manual_seed(12)
    local r6 = cr.randn(6):totable()
    cr.manual_seed(12)
    local r5 = cr.randn(5):totable()
    for i = 1, 5 do assert.equal(r6[i], r5[i]) end
    cr.manual_seed(12)
    assert.equal(0, H.max_diff(cr.randn(6, { dtype = 'f16' }), cr.tensor(r6, { dtype = 'f16' })))
    cr.manual_seed(12)
    assert.equal(0, H.max_diff(cr.randn(5, { dtype = 'bf16' }), cr.tensor(r5, { dtype = 'bf16' })))
    -- rand f16: 11 bits, bf16: 8 bits
    seed, off = state()
    local h = H.flat(cr.rand(4, { dtype = 'f16' }))
    w = words(4, seed, off)
    for i = 1, 4 do assert.equal(math.floor(w[i] / 2 ^ 21) / 2 ^ 11, h[i]) end
    seed, off = state()
    local bh = H.flat(cr.rand(4, { dtype = 'bf16' }))
    w = words(4, seed, off)
    for i = 1, 4 do assert.equal(math.floor(w[i] / 2 ^ 24) / 2 ^ 8, bh[i]) end
    -- randn f64: the four words of one counter per pair
    seed, off = state()
    local zd = H.flat(cr.randn(2, { dtype = 'f64' }))
    w = words(4, seed, off)
    local d1 = 1 - (w[1] * 2 ^ 21 + math.floor(w[2] / 2 ^ 11)) / 2 ^ 53
    local d2 = (w[3] * 2 ^ 21 + math.floor(w[4] / 2 ^ 11)) / 2 ^ 53
    local rd = math.sqrt(-2 * math.log(d1))
    assert.is_true(math.abs(zd[1] - rd * math.cos(2 * math.pi * d2)) < 1e-12)
    assert.is_true(math.abs(zd[2] - rd * math.sin(2 * math.pi * d2)) < 1e-12)
    -- randint: low + (w * range) >> 32
    seed, off = state()
    local k = H.flat(cr.randint(-5, 995, { 4 }))
    w = words(4, seed, off)
    for i = 1, 4 do assert.equal(-5 + math.floor(w[i] * 1000 / 2 ^ 32), k[i]) end
    -- bernoulli: w / 2^32 < p
    seed, off = state()
    local b = H.flat(cr.bernoulli(0.5, { 8 }))
    w = words(8, seed, off)
    for i = 1, 8 do assert.equal(w[i] / 2 ^ 32 < 0.5 and 1 or 0, b[i]) end
  end)

  it('does not depend on the thread count', function()
    local function draw_all()
      cr.manual_seed(2024)
      return { cr.rand(200003), cr.rand(100001, { dtype = 'f64' }), cr.randn(150001), cr.randn(90001, { dtype = 'f64' }),
               cr.randint(-3, 1000, { 120000 }), cr.randint(0, 2 ^ 40, { 70001 }), cr.randperm(50000),
               cr.bernoulli(cr.rand(130000)), cr.rand(100000, { dtype = 'f16' }) }
    end
    local one = with_threads(1, draw_all)
    local two = with_threads(2, draw_all)
    local three = with_threads(3, draw_all)
    for i = 1, #one do
      assert.equal(0, H.max_diff(one[i], two[i]))
      assert.equal(0, H.max_diff(one[i], three[i]))
    end
  end)

  it('successive draws continue the stream at the next counter', function()
    cr.manual_seed(5)
    local a, b = cr.rand(4), cr.rand(4)
    cr.manual_seed(5)
    local ab = cr.rand(8)
    assert.same(ab:totable(), cr.cat({ a, b }, 0):totable())
  end)

  it('manual_seed resets and get/set_state replays the stream', function()
    cr.manual_seed(11)
    local first = cr.randn(10):totable()
    cr.rand(3)
    cr.manual_seed(11)
    assert.same(first, cr.randn(10):totable())
    local s, o = state()
    local x = cr.rand(20):totable()
    local y = cr.randint(0, 7, { 5 }):totable()
    C.cr_rng_set_state(s, o)
    assert.same(x, cr.rand(20):totable())
    assert.same(y, cr.randint(0, 7, { 5 }):totable())
  end)

  it('has the right moments on large draws', function()
    cr.manual_seed(1)
    local n = 1000000
    local u = cr.rand(n)
    assert.is_true(math.abs(u:mean():item() - 0.5) < 0.003)
    assert.is_true(math.abs(var(u) - 1 / 12) < 0.002)
    local ud = cr.rand(n, { dtype = 'f64' })
    assert.is_true(math.abs(ud:mean():item() - 0.5) < 0.003)
    local z = cr.randn(n)
    assert.is_true(math.abs(z:mean():item()) < 0.005)
    assert.is_true(math.abs(var(z) - 1) < 0.01)
    local zd = cr.randn(n + 1, { dtype = 'f64' })
    assert.is_true(math.abs(zd:mean():item()) < 0.005)
    assert.is_true(math.abs(var(zd) - 1) < 0.01)
    local k = cr.randint(0, 10, { n }):double()
    assert.is_true(math.abs(k:mean():item() - 4.5) < 0.02)
    assert.is_true(math.abs(var(k) - 8.25) < 0.05)
    local b = cr.bernoulli(0.2, { n })
    assert.is_true(math.abs(b:mean():item() - 0.2) < 0.003)
    local p = cr.rand(n)
    local bp = cr.bernoulli(p)
    assert.is_true(math.abs(bp:mean():item() - 0.5) < 0.003)
    assert.is_true(math.abs(cr.bernoulli(p * 0.5):mean():item() - 0.25) < 0.003)
  end)

  it('keeps rand in [0, 1) in every float dtype and randint in [low, high)', function()
    cr.manual_seed(3)
    for _, dt in ipairs { 'f32', 'f64', 'f16', 'bf16' } do
      local lo, hi = math.huge, -math.huge
      for _, v in ipairs(H.flat(cr.rand(20000, { dtype = dt }))) do lo = math.min(lo, v); hi = math.max(hi, v) end
      assert.is_true(lo >= 0 and lo < 0.01, dt)
      assert.is_true(hi < 1 and hi > 0.9, dt)
    end
    local seen, lo, hi = {}, math.huge, -math.huge
    for _, v in ipairs(H.flat(cr.randint(-3, 4, { 5000 }))) do
      seen[v] = true
      lo, hi = math.min(lo, v), math.max(hi, v)
    end
    assert.equal(-3, lo)
    assert.equal(3, hi)
    for v = -3, 3 do assert.is_true(seen[v]) end
    local wide = H.flat(cr.randint(-2 ^ 40, 2 ^ 40, { 1000 }))
    for _, v in ipairs(wide) do assert.is_true(v >= -2 ^ 40 and v < 2 ^ 40) end
    assert.same({ 3 }, cr.randint(10, { 3 }).shape)
    assert.equal('i32', cr.randint(0, 5, { 2 }, { dtype = 'i32' }).dtype)
    assert.equal('f32', cr.randint(0, 5, { 2 }, { dtype = 'f32' }).dtype)
    assert.equal('u8', cr.randint(0, 256, { 2 }, { dtype = 'u8' }).dtype)
    assert.equal('f16', cr.randn(3, { dtype = 'f16' }).dtype)
    assert.equal('bf16', cr.randn(3, { dtype = 'bf16' }).dtype)
  end)

  it('randperm is a permutation, the same for both sort paths', function()
    cr.manual_seed(9)
    for _, n in ipairs { 0, 1, 2, 10, 300, 5000 } do
      local p = H.flat(cr.randperm(n))
      table.sort(p)
      for i = 1, n do assert.equal(i - 1, p[i]) end
    end
    -- 300000 keys hold a few pairs with equal high words (about n^2 / 2^33), which the
    -- fast path orders in a second step
    cr.manual_seed(9)
    local fast = cr.randperm(300000)
    local old = cr.set_fast_paths(false)
    cr.manual_seed(9)
    local ref = cr.randperm(300000)
    cr.set_fast_paths(old)
    assert.equal(0, H.max_diff(fast, ref))
    assert.equal('i32', cr.randperm(4, { dtype = 'i32' }).dtype)
  end)

  it('takes shapes as numbers or a table, with dtype and requires_grad options', function()
    local w = cr.randn({ 16, 1, 3, 3 }, { requires_grad = true })
    assert.same({ 16, 1, 3, 3 }, w.shape)
    assert.is_true(w.requires_grad)
    assert.is_true(w.is_leaf)
    assert.same({ 2, 3 }, cr.rand(2, 3).shape)
    assert.same({}, cr.rand({}).shape)
    assert.equal('f64', cr.rand(2, { dtype = 'f64' }).dtype)
    local x = cr.zeros(4, 5, { dtype = 'f64' })
    assert.same({ 4, 5 }, cr.rand_like(x).shape)
    assert.equal('f64', cr.randn_like(x).dtype)
    assert.equal('f32', cr.randn_like(x, { dtype = 'f32' }).dtype)
    assert.same({ 0, 3 }, cr.randn(0, 3).shape)
  end)

  it('bernoulli takes probabilities of any float dtype and strided views', function()
    cr.manual_seed(4)
    local p = cr.tensor({ { 0, 1 }, { 0, 1 }, { 0, 1 } }, { dtype = 'f64' }):t()
    assert.equal('f64', cr.bernoulli(p).dtype)
    assert.same({ { 0, 0, 0 }, { 1, 1, 1 } }, cr.bernoulli(p):totable())
    assert.same({ 0, 1, 0 }, cr.tensor({ 0, 1, 0 }, { dtype = 'f16' }):bernoulli():totable())
    local pr = cr.rand(4):requires_grad_(true)
    assert.is_false(cr.bernoulli(pr).requires_grad)
  end)

  it('rejects bad arguments with the op name and the fix', function()
    H.assert_error(function() cr.rand(2, { dtype = 'i64' }) end, 'rand', 'not a floating dtype', 'randint')
    H.assert_error(function() cr.randn(2, { dtype = 'bool' }) end, 'randn', 'not a floating dtype')
    H.assert_error(function() cr.rand(-2, 3) end, 'rand', 'negative size')
    H.assert_error(function() cr.randn(1e10, 1e10) end, 'randn', 'beyond any memory')
    H.assert_error(function() cr.rand() end, 'rand', 'give a shape')
    H.assert_error(function() cr.rand('x') end, 'rand', 'expected a number')
    H.assert_error(function() cr.rand(2.5) end, 'rand', 'expected an integer')
    H.assert_error(function() cr.rand(2, { dtype = 'f99' }) end, 'unknown dtype')
    H.assert_error(function() cr.randint(5, 5, { 2 }) end, 'randint', 'empty range', 'low must be below high')
    H.assert_error(function() cr.randint(0, 300, { 2 }, { dtype = 'u8' }) end, 'randint', 'does not fit dtype u8')
    H.assert_error(function() cr.randint(0, 1.5, { 2 }) end, 'randint', 'integers')
    H.assert_error(function() cr.randint(0, 5) end, 'randint', 'shape')
    H.assert_error(function() cr.randint(nil, 5, { 2 }) end, 'randint', 'low and high')
    H.assert_error(function() cr.randint(0, 5, { -1 }) end, 'randint', 'negative size')
    H.assert_error(function() cr.randperm(-1) end, 'randperm', 'negative size')
    H.assert_error(function() cr.randperm(1e18) end, 'randperm', 'beyond any memory')
    H.assert_error(function() cr.randperm(300, { dtype = 'u8' }) end, 'randperm', 'does not fit dtype u8')
    H.assert_error(function() cr.randperm(nil) end, 'randperm', 'integer')
    H.assert_error(function() cr.bernoulli(1.5, { 2 }) end, 'bernoulli', 'outside [0, 1]')
    H.assert_error(function() cr.bernoulli(0 / 0, { 2 }) end, 'bernoulli', 'outside [0, 1]')
    H.assert_error(function() cr.bernoulli(cr.tensor({ 0.5, -0.1 })) end, 'bernoulli', '-0.1', 'flat index 1', 'outside [0, 1]')
    H.assert_error(function() cr.bernoulli(cr.tensor({ 0, 1 })) end, 'bernoulli', 'floating dtype')
    H.assert_error(function() cr.bernoulli(0.5) end, 'bernoulli', 'give a shape')
    H.assert_error(function() cr.bernoulli(nil) end, 'bernoulli', 'tensor of probabilities')
    H.assert_error(function() cr.rand_like(nil) end, 'rand_like', 'must be a tensor')
  end)
end)
