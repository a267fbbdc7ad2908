-- linalg_spec — matrix products: mm, bmm, addmm, matmul (PyTorch semantics, broadcast
-- batches) and linear; values against hand computation, a naive Lua triple loop and
-- pasted PyTorch results; the oneDNN fast path against the reference loop; f64
-- gradchecks; and errors on bad input.
local cr = H.cr

-- Deterministic values from a seed, shaped; f32 unless told.
local function mk(shape, seed, dtype)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local vals = {}
  for i = 1, n do vals[i] = math.sin(seed * 1.37 + i * 0.91) end
  if n == 0 then return cr.zeros(shape, { dtype = dtype or 'f32' }) end
  return cr.tensor(vals, { dtype = dtype or 'f32' }):view(shape)
end

-- The plain definition, on nested tables.
local function naive_mm(a, b)
  local A, B = a:double():totable(), b:double():totable()
  local n, k, m = #A, #B, #B[1]
  local out = {}
  for i = 1, n do
    out[i] = {}
    for j = 1, m do
      local s = 0
      for kk = 1, k do s = s + A[i][kk] * B[kk][j] end
      out[i][j] = s
    end
  end
  return out
end

-- Runs f with the fast paths off, restoring the previous setting.
local function reference(f, ...)
  local old = cr.set_fast_paths(false)
  local r = { pcall(f, ...) }
  cr.set_fast_paths(old)
  if not r[1] then error(r[2], 2) end
  return unpack(r, 2, table.maxn(r))
end

describe('mm', function()
  it('multiplies small matrices (hand-computed)', function()
    local a = cr.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = 'f32' })
    local b = cr.tensor({ { 1, 0 }, { 0, 1 }, { 1, 1 } }, { dtype = 'f32' })
    assert.same({ { 4, 5 }, { 10, 11 } }, cr.mm(a, b):totable())
    assert.same({ { 4, 5 }, { 10, 11 } }, a:mm(b):totable())
    assert.same({ { 4, 10 }, { 5, 11 } }, cr.mm(b:t(), a:t()):totable())
    assert.same({ { 4, 5 }, { 10, 11 } }, reference(cr.mm, a, b):totable())
    assert.equal('f32', cr.mm(a, b).dtype)
    assert.equal('f64', cr.mm(a:double(), b:double()).dtype)
  end)

  it('agrees with the definition across shapes, dtypes and layouts', function()
    for _, dt in ipairs { 'f32', 'f64' } do
      for _, s in ipairs { { 1, 1, 1 }, { 3, 5, 2 }, { 7, 1, 9 }, { 17, 33, 5 }, { 2, 140, 3 } } do
        local a, b = mk({ s[1], s[2] }, 1, dt), mk({ s[2], s[3] }, 2, dt)
        local want = naive_mm(a, b)
        local tol = dt == 'f32' and 1e-4 or 1e-12
        H.assert_close(cr.mm(a, b), want, tol, tol, dt .. ' fast')
        H.assert_close(reference(cr.mm, a, b), want, tol, tol, dt .. ' reference')
        -- the same product from transposed storage
        local at, bt = mk({ s[2], s[1] }, 1, dt):t(), mk({ s[3], s[2] }, 2, dt):t()
        H.assert_close(cr.mm(at, bt), naive_mm(at, bt), tol, tol, dt .. ' transposed')
        H.assert_close(reference(cr.mm, at, bt), naive_mm(at, bt), tol, tol, dt .. ' transposed ref')
      end
    end
  end)

  it('reads non-contiguous views correctly', function()
    local big = mk({ 9, 12 }, 3)
    local a = big:slice(0, 0, 9, 2):slice(1, 1, 12, 3)   -- [5, 4], strides {24, 3}
    local b = mk({ 4, 10 }, 4):slice(1, 0, 10, 2)        -- [4, 5], strides {10, 2}
    assert.is_false(a:is_contiguous())
    assert.is_false(b:is_contiguous())
    local want = naive_mm(a, b)
    H.assert_close(cr.mm(a, b), want, 1e-5, 1e-5)
    H.assert_close(reference(cr.mm, a, b), want, 1e-5, 1e-5)
    -- a broadcast (stride-0) operand
    local e = mk({ 1, 4 }, 5):expand(6, 4)
    H.assert_close(cr.mm(e, b), naive_mm(e, b), 1e-5, 1e-5)
    H.assert_close(cr.mm(b:t(), e:t()), naive_mm(b:t(), e:t()), 1e-5, 1e-5)
  end)

  it('fast path matches the reference path in f32', function()
    local cases = {
      { mk({ 64, 64 }, 1), mk({ 64, 64 }, 2) },
      { mk({ 130, 260 }, 3), mk({ 260, 600 }, 4) },           -- crosses the loop's blocks
      { mk({ 260, 130 }, 3):t(), mk({ 260, 70 }, 4) },        -- a^T
      { mk({ 33, 260 }, 5), mk({ 70, 260 }, 6):t() },         -- b^T
      { mk({ 96, 48 }, 7):t(), mk({ 31, 96 }, 8):t() },       -- both transposed
      { mk({ 40, 80 }, 9):slice(1, 0, 80, 2), mk({ 40, 90 }, 10):slice(1, 5, 90, 3) },
      { mk({ 1, 300 }, 11), mk({ 300, 1 }, 12) },
    }
    for i, c in ipairs(cases) do
      local fast = cr.mm(c[1], c[2])
      local ref = reference(cr.mm, c[1], c[2])
      H.assert_close(fast, ref, 1e-4, 1e-4, 'case ' .. i)
    end
  end)

  it('handles empty dims', function()
    local z = cr.mm(cr.zeros(3, 0), cr.zeros(0, 4))
    assert.same({ 3, 4 }, z.shape)
    assert.same({ { 0, 0, 0, 0 }, { 0, 0, 0, 0 }, { 0, 0, 0, 0 } }, z:totable())
    assert.same({ 0, 4 }, cr.mm(cr.zeros(0, 2), cr.ones(2, 4)).shape)
    assert.same({ 3, 4 }, reference(cr.mm, cr.zeros(3, 0), cr.zeros(0, 4)).shape)
    assert.same({ 2, 3, 4 }, cr.matmul(cr.zeros(2, 3, 0), cr.zeros(0, 4)).shape)
    assert.same({ 0, 3, 4 }, cr.bmm(cr.zeros(0, 3, 5), cr.zeros(0, 5, 4)).shape)
    assert.equal(0, cr.matmul(cr.zeros(0), cr.zeros(0)):item())
    assert.same({ { 1, 1 }, { 1, 1 } }, cr.linear(cr.zeros(2, 0), cr.zeros(2, 0), cr.ones(2)):totable())
  end)

  it('computes f16 and bf16 through f32', function()
    local a, b = mk({ 4, 6 }, 1), mk({ 6, 3 }, 2)
    local want = cr.mm(a, b)
    for _, dt in ipairs { 'f16', 'bf16' } do
      local r = cr.mm(a:to(dt), b:to(dt))
      assert.equal(dt, r.dtype)
      H.assert_close(r:float(), want, 0.05, 0.02, dt)
    end
    local ha = a:half():requires_grad_(true)
    cr.mm(ha, b:half()):sum():backward()
    assert.equal('f16', ha.grad.dtype)
  end)

  it('has the right gradients (f64 gradcheck)', function()
    H.gradcheck(cr.mm, { mk({ 3, 4 }, 1), mk({ 4, 2 }, 2) })
    H.gradcheck(function(a, b) return cr.mm(a:t(), b:t()) end, { mk({ 4, 3 }, 3), mk({ 2, 4 }, 4) })
    H.gradcheck(function(a) return cr.mm(a, a) end, { mk({ 3, 3 }, 5) })
    assert.equal('mm', cr.mm(mk({ 2, 2 }, 1):requires_grad_(true), mk({ 2, 2 }, 2)).grad_fn)
  end)

  it('gives the same f32 gradients on both paths', function()
    local function grads()
      local a = mk({ 20, 30 }, 1):requires_grad_(true)
      local b = mk({ 30, 10 }, 2):requires_grad_(true)
      local loss = (cr.mm(a, b) * mk({ 20, 10 }, 3)):sum()
      loss:backward()
      return a.grad, b.grad
    end
    local ga, gb = grads()
    local ra, rb = reference(grads)
    H.assert_close(ga, ra, 1e-4, 1e-4)
    H.assert_close(gb, rb, 1e-4, 1e-4)
  end)

  it('rejects bad input with a message', function()
    local a, b = mk({ 2, 3 }, 1), mk({ 3, 4 }, 2)
    H.assert_error(function() return cr.mm(nil, b) end, 'mm', "'self' is nil")
    H.assert_error(function() return cr.mm(a, nil) end, 'mm', "'mat2' is nil")
    H.assert_error(function() return cr.mm(a, 3) end, 'mm', 'must be a tensor')
    H.assert_error(function() return cr.mm(a, a) end, 'mm', '[2, 3]', 'inner sizes must match')
    H.assert_error(function() return cr.mm(mk({ 2, 3, 4 }, 1), b) end, 'mm', '2-D', 'matmul')
    H.assert_error(function() return cr.mm(a, mk({ 3 }, 1)) end, 'mm', '2-D')
    H.assert_error(function() return cr.mm(a, b:double()) end, 'mm', 'f64', 'same dtype')
    H.assert_error(function() return cr.mm(cr.zeros({ 2, 3 }, { dtype = 'i64' }), b) end, 'mm', 'i64', ':float()')
    -- absurdly large: broadcast views cost nothing, the product would not fit anywhere
    local tall = cr.zeros(1, 1):expand(2 ^ 31, 1)
    local wide = cr.zeros(1, 1):expand(1, 2 ^ 31)
    H.assert_error(function() return cr.mm(tall, wide) end, 'mm', 'beyond any memory')
  end)
end)

describe('bmm', function()
  it('multiplies each batch entry', function()
    local a, b = mk({ 3, 4, 5 }, 1), mk({ 3, 5, 2 }, 2)
    local r = cr.bmm(a, b)
    assert.same({ 3, 4, 2 }, r.shape)
    for p = 0, 2 do
      H.assert_close(r:select(0, p), naive_mm(a:select(0, p), b:select(0, p)), 1e-5, 1e-5)
    end
    H.assert_close(a:bmm(b), r, 0, 0)
  end)

  it('fast path matches the reference on strided and broadcast batches', function()
    local cases = {
      { mk({ 8, 16, 24 }, 1), mk({ 8, 24, 12 }, 2) },
      { mk({ 8, 24, 16 }, 3):transpose(1, 2), mk({ 8, 12, 24 }, 4):transpose(1, 2) },
      { mk({ 16, 8, 24 }, 5):transpose(0, 1), mk({ 8, 24, 12 }, 6) },   -- batch not outermost
      { mk({ 1, 16, 24 }, 7):expand(8, 16, 24), mk({ 8, 24, 12 }, 8) }, -- shared lhs
      { mk({ 8, 16, 24 }, 9), mk({ 1, 24, 12 }, 10):expand(8, 24, 12) },
      { mk({ 64, 3, 4 }, 11), mk({ 64, 4, 5 }, 12) },                    -- many small
    }
    for i, c in ipairs(cases) do
      H.assert_close(cr.bmm(c[1], c[2]), reference(cr.bmm, c[1], c[2]), 1e-4, 1e-4, 'case ' .. i)
    end
    local r = cr.bmm(cases[4][1], cases[4][2])
    H.assert_close(r:select(0, 5), naive_mm(cases[4][1]:select(0, 5), cases[4][2]:select(0, 5)), 1e-5, 1e-5)
  end)

  it('has the right gradients (f64 gradcheck)', function()
    H.gradcheck(cr.bmm, { mk({ 2, 3, 4 }, 1), mk({ 2, 4, 2 }, 2) })
    H.gradcheck(function(a, b) return cr.bmm(a:transpose(1, 2), b) end, { mk({ 2, 4, 3 }, 3), mk({ 2, 4, 2 }, 4) })
  end)

  it('rejects bad input with a message', function()
    local a, b = mk({ 2, 3, 4 }, 1), mk({ 2, 4, 5 }, 2)
    H.assert_error(function() return cr.bmm(a, nil) end, 'bmm', "'mat2' is nil")
    H.assert_error(function() return cr.bmm(mk({ 3, 4 }, 1), b) end, 'bmm', '3-D')
    H.assert_error(function() return cr.bmm(a, mk({ 3, 4, 5 }, 2)) end, 'bmm', 'batch sizes differ')
    H.assert_error(function() return cr.bmm(a, mk({ 2, 5, 4 }, 2)) end, 'bmm', 'inner sizes must match')
    H.assert_error(function() return cr.bmm(a, b:double()) end, 'bmm', 'same dtype')
  end)
end)

describe('addmm', function()
  local a = cr.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = 'f32' })
  local b = cr.tensor({ { 1, 0 }, { 0, 1 }, { 1, 1 } }, { dtype = 'f32' })

  it('computes beta * bias + alpha * a @ b (hand-computed)', function()
    local bias = cr.tensor({ 10, 20 }, { dtype = 'f32' })
    assert.same({ { 14, 25 }, { 20, 31 } }, cr.addmm(bias, a, b):totable())
    assert.same({ { 22, 42.5 }, { 25, 45.5 } }, cr.addmm(bias, a, b, { beta = 2, alpha = 0.5 }):totable())
    assert.same({ { 22, 42.5 }, { 25, 45.5 } }, reference(cr.addmm, bias, a, b, { beta = 2, alpha = 0.5 }):totable())
    assert.same({ { 14, 25 }, { 20, 31 } }, bias:addmm(a, b):totable())
    -- bias as a column, a full matrix, a scalar
    local col = cr.tensor({ { 1 }, { 2 } }, { dtype = 'f32' })
    assert.same({ { 5, 6 }, { 12, 13 } }, cr.addmm(col, a, b):totable())
    assert.same({ { 5, 6 }, { 11, 12 } }, cr.addmm(cr.ones(2, 2), a, b):totable())
    assert.same({ { 7, 8 }, { 13, 14 } }, cr.addmm(cr.tensor(3, { dtype = 'f32' }), a, b):totable())
    -- beta = 0 ignores the bias, NaNs included
    local nan = cr.full({ 2 }, 0 / 0)
    assert.same({ { 4, 5 }, { 10, 11 } }, cr.addmm(nan, a, b, { beta = 0 }):totable())
  end)

  it('fast path matches the reference for every bias layout', function()
    local x, w = mk({ 37, 50 }, 1), mk({ 50, 29 }, 2)
    for _, bias in ipairs { mk({ 29 }, 3), mk({ 1, 29 }, 4), mk({ 37, 1 }, 5), mk({ 37, 29 }, 6), mk({ 29, 37 }, 7):t() } do
      for _, o in ipairs { {}, { beta = 0.5 }, { alpha = -2 }, { beta = 3, alpha = 0.25 } } do
        H.assert_close(cr.addmm(bias, x, w, o), reference(cr.addmm, bias, x, w, o), 1e-4, 1e-4)
      end
    end
    H.assert_close(cr.addmm(mk({ 29 }, 3), mk({ 50, 37 }, 8):t(), mk({ 29, 50 }, 9):t()),
                   reference(cr.addmm, mk({ 29 }, 3), mk({ 50, 37 }, 8):t(), mk({ 29, 50 }, 9):t()), 1e-4, 1e-4)
    -- an empty inner dim leaves beta * bias
    H.assert_close(cr.addmm(mk({ 3 }, 1), cr.zeros(2, 0), cr.zeros(0, 3), { beta = 2 }),
                   (mk({ 3 }, 1) * 2):expand(2, 3), 1e-6, 1e-6)
  end)

  it('has the right gradients (f64 gradcheck)', function()
    for _, bs in ipairs { { 2 }, { 1, 2 }, { 3, 1 }, { 3, 2 }, {} } do
      H.gradcheck(function(bias, x, w) return cr.addmm(bias, x, w) end, { mk(bs, 1), mk({ 3, 4 }, 2), mk({ 4, 2 }, 3) })
    end
    H.gradcheck(function(bias, x, w) return cr.addmm(bias, x, w, { beta = 0.5, alpha = -1.5 }) end,
                { mk({ 2 }, 4), mk({ 3, 4 }, 5), mk({ 4, 2 }, 6) })
  end)

  it('rejects bad input with a message', function()
    H.assert_error(function() return cr.addmm(nil, a, b) end, 'addmm', "'self' is nil")
    H.assert_error(function() return cr.addmm(mk({ 3 }, 1), a, b) end, 'addmm', 'does not broadcast', '[2, 2]')
    H.assert_error(function() return cr.addmm(mk({ 2, 2, 2 }, 1), a, b) end, 'addmm', 'does not broadcast')
    H.assert_error(function() return cr.addmm(mk({ 2 }, 1, 'f64'), a, b) end, 'addmm', 'bias is f64')
    H.assert_error(function() return cr.addmm(mk({ 2 }, 1), a, a) end, 'addmm', 'inner sizes must match')
    H.assert_error(function() return cr.addmm(mk({ 2 }, 1), a, b, { beta = 'x' }) end, 'addmm', 'beta must be a number')
    H.assert_error(function() return cr.addmm(mk({ 2 }, 1), a, b, 5) end, 'addmm', 'options must be a table')
  end)
end)

describe('matmul', function()
  it('follows PyTorch for 1-D and 2-D operands', function()
    local v = cr.tensor({ 1, 2, 3 }, { dtype = 'f32' })
    local w = cr.tensor({ 4, 5, 6 }, { dtype = 'f32' })
    local m = cr.tensor({ { 1, 0 }, { 0, 1 }, { 1, 1 } }, { dtype = 'f32' })
    local d = cr.matmul(v, w)
    assert.same({}, d.shape)
    assert.equal(32, d:item())
    assert.same({ 4, 5 }, cr.matmul(v, m):totable())
    assert.same({ 4, 5 }, cr.matmul(m:t(), v):totable())
    assert.same({ 14, 32 }, cr.matmul(cr.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = 'f32' }), v):totable())
    assert.same({ { 4, 5 }, { 10, 11 } }, cr.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = 'f32' }):matmul(m):totable())
  end)

  it('broadcasts batch dims like PyTorch', function()
    -- a[i] = sin(0.5 i) as [2,1,3,4], b[i] = cos(0.3 i) as [3,4,2]; expected values from
    -- torch.matmul(a, b) in f64 (python3-torch 1.13), rounded to 10 places.
    local av, bv = {}, {}
    for i = 0, 23 do av[i + 1] = math.sin(0.5 * i); bv[i + 1] = math.cos(0.3 * i) end
    local a = cr.tensor(av, { dtype = 'f64' }):view(2, 1, 3, 4)
    local b = cr.tensor(bv, { dtype = 'f64' }):view(3, 4, 2)
    local want = { 0.4739675578, -0.1460424618, 1.5340724152, 1.4277752423, -1.7507663231, -1.0422858391,
      -1.718256585, -1.2945417446, -1.2175684218, -1.4415495493, 2.7316310791, 2.4943343139, 2.0600956572,
      2.0552163557, 0.2615821897, 0.6982039142, -2.2778088587, -2.636327056, -0.0769206815, -0.5602873329,
      1.8147869196, 1.5086094414, -1.4335149897, -0.6953187603, -1.0559508425, -0.6344691188, -1.8527698737,
      -1.9662696806, 2.5979994861, 2.2709829335, 1.6342237119, 1.4959944147, 0.9176548029, 1.3912203696,
      -2.3979819984, -2.6538983263 }
    local r = cr.matmul(a, b)
    assert.same({ 2, 3, 3, 2 }, r.shape)
    H.assert_close(r:reshape(36), want, 1e-9, 0)
    H.assert_close(cr.matmul(a:float(), b:float()):reshape(36), want, 1e-5, 1e-5)
    H.assert_close(reference(cr.matmul, a:float(), b:float()):reshape(36), want, 1e-5, 1e-5)
    -- 1-D @ 3-D: torch.matmul(a[0,0,0], b)
    local r2 = cr.matmul(a:reshape(24):narrow(0, 0, 4), b)
    assert.same({ 3, 2 }, r2.shape)
    H.assert_close(r2, { { 0.4739675578, -0.1460424618 }, { -1.718256585, -1.2945417446 },
                         { 2.0600956572, 2.0552163557 } }, 1e-9, 0)
  end)

  it('gives the shapes PyTorch gives', function()
    local cases = {
      { { 5, 3, 4 }, { 4 }, { 5, 3 } },
      { { 5, 3, 4 }, { 4, 2 }, { 5, 3, 2 } },
      { { 4 }, { 5, 4, 2 }, { 5, 2 } },
      { { 3, 4 }, { 5, 4, 2 }, { 5, 3, 2 } },
      { { 2, 1, 3, 4 }, { 5, 4, 2 }, { 2, 5, 3, 2 } },
      { { 6, 3, 4 }, { 6, 4, 2 }, { 6, 3, 2 } },
    }
    for _, c in ipairs(cases) do
      assert.same(c[3], cr.matmul(mk(c[1], 1), mk(c[2], 2)).shape)
    end
    -- folding the batch into rows equals the per-entry products
    local a, b = mk({ 5, 3, 4 }, 1), mk({ 4, 2 }, 2)
    H.assert_close(cr.matmul(a, b):select(0, 3), naive_mm(a:select(0, 3), b), 1e-5, 1e-5)
  end)

  it('has the right gradients (f64 gradcheck), broadcasting included', function()
    local cases = {
      { { 4 }, { 4 } }, { { 3, 4 }, { 4 } }, { { 4 }, { 4, 2 } }, { { 3, 4 }, { 4, 2 } },
      { { 2, 3, 4 }, { 4 } }, { { 2, 3, 4 }, { 4, 2 } }, { { 4 }, { 2, 4, 3 } }, { { 3, 4 }, { 2, 4, 3 } },
      { { 2, 1, 3, 4 }, { 3, 4, 2 } }, { { 2, 3, 4 }, { 2, 4, 2 } }, { { 1, 3, 4 }, { 2, 4, 2 } },
    }
    for i, c in ipairs(cases) do
      local ok, err = pcall(H.gradcheck, cr.matmul, { mk(c[1], i), mk(c[2], i + 20) })
      assert(ok, 'case ' .. i .. ': ' .. tostring(err))
    end
    H.gradcheck(function(a, b) return cr.matmul(a:transpose(1, 2), b) end, { mk({ 2, 4, 3 }, 1), mk({ 4, 2 }, 2) })
  end)

  it('rejects bad input with a message', function()
    local a = mk({ 2, 3 }, 1)
    H.assert_error(function() return cr.matmul(a, nil) end, 'matmul', "'other' is nil")
    H.assert_error(function() return cr.matmul(a, 'x') end, 'matmul', 'must be a tensor')
    H.assert_error(function() return cr.matmul(cr.tensor(2, { dtype = 'f32' }), a) end, 'matmul', 'at least 1 dim')
    H.assert_error(function() return cr.matmul(a, mk({ 2, 3 }, 2)) end, 'matmul', '[2, 3]', 'second-to-last')
    H.assert_error(function() return cr.matmul(mk({ 3 }, 1), mk({ 4 }, 2)) end, 'matmul', '3 vs 4')
    H.assert_error(function() return cr.matmul(mk({ 2, 3, 4 }, 1), mk({ 3, 4, 2 }, 2)) end, 'matmul', 'do not broadcast')
    H.assert_error(function() return cr.matmul(a, mk({ 3, 2 }, 2):double()) end, 'matmul', 'same dtype')
    H.assert_error(function() return cr.matmul(cr.tensor({ 1, 2 }), cr.tensor({ 1, 2 })) end, 'matmul', 'i64')
  end)
end)

describe('linear', function()
  it('computes x @ w^T + b (hand-computed)', function()
    local x = cr.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = 'f32' })
    local w = cr.tensor({ { 1, 0, 1 }, { 0, 1, 1 } }, { dtype = 'f32' })
    local b = cr.tensor({ 1, 1 }, { dtype = 'f32' })
    assert.same({ { 5, 6 }, { 11, 12 } }, cr.linear(x, w, b):totable())
    assert.same({ { 4, 5 }, { 10, 11 } }, cr.linear(x, w):totable())
    assert.same({ 5, 6 }, cr.linear(x:select(0, 0), w, b):totable())
    assert.equal('addmm', cr.linear(x, w:requires_grad_(true), b).grad_fn)
  end)

  it('matches the reference on batched inputs', function()
    local x, w, b = mk({ 4, 5, 32 }, 1), mk({ 24, 32 }, 2), mk({ 24 }, 3)
    local r = cr.linear(x, w, b)
    assert.same({ 4, 5, 24 }, r.shape)
    H.assert_close(r, reference(cr.linear, x, w, b), 1e-4, 1e-4)
    local want = naive_mm(x:select(0, 2), w:t())
    for i = 1, 5 do
      for j = 1, 24 do want[i][j] = want[i][j] + b:select(0, j - 1):item() end
    end
    H.assert_close(r:select(0, 2), want, 1e-4, 1e-4)
  end)

  it('has the right gradients (f64 gradcheck), with and without bias', function()
    H.gradcheck(cr.linear, { mk({ 3, 4 }, 1), mk({ 2, 4 }, 2), mk({ 2 }, 3) })
    H.gradcheck(function(x, w) return cr.linear(x, w) end, { mk({ 3, 4 }, 4), mk({ 2, 4 }, 5) })
    H.gradcheck(cr.linear, { mk({ 2, 3, 4 }, 6), mk({ 2, 4 }, 7), mk({ 2 }, 8) })
    H.gradcheck(cr.linear, { mk({ 4 }, 9), mk({ 2, 4 }, 10), mk({ 2 }, 11) })
    H.gradcheck(function(x, w) return cr.linear(x:transpose(0, 1), w) end, { mk({ 4, 3 }, 12), mk({ 2, 4 }, 13) })
  end)

  it('leaves contiguous grads for the weight, as PyTorch does', function()
    local x = mk({ 3, 4 }, 1):requires_grad_(true)
    local w = mk({ 6, 4 }, 2):requires_grad_(true)
    local b = mk({ 6 }, 3):requires_grad_(true)
    cr.linear(x, w, b):sum():backward()
    assert.is_true(w.grad:is_contiguous())
    H.assert_close(w.grad, naive_mm(cr.ones(6, 3), x), 1e-5, 1e-5)
    H.assert_close(b.grad, { 3, 3, 3, 3, 3, 3 }, 0, 0)
    H.assert_close(x.grad, naive_mm(cr.ones(3, 6), w), 1e-5, 1e-5)
  end)

  it('rejects bad input with a message', function()
    local x, w = mk({ 3, 4 }, 1), mk({ 2, 4 }, 2)
    H.assert_error(function() return cr.linear(nil, w) end, 'linear', "'input' is nil")
    H.assert_error(function() return cr.linear(x, nil) end, 'linear', "'weight' is nil")
    H.assert_error(function() return cr.linear(x, mk({ 2, 5 }, 2)) end, 'linear', 'in_features = 5')
    H.assert_error(function() return cr.linear(x, mk({ 8 }, 2)) end, 'linear', 'weight must be 2-D')
    H.assert_error(function() return cr.linear(x, w, mk({ 3 }, 3)) end, 'linear', 'bias of shape [3]')
    H.assert_error(function() return cr.linear(x, w, mk({ 2 }, 3, 'f64')) end, 'linear', 'bias is f64')
    H.assert_error(function() return cr.linear(x, w:double()) end, 'linear', 'weight is f64')
    H.assert_error(function() return cr.linear(x, w, 1) end, 'linear', 'must be a tensor')
  end)
end)
