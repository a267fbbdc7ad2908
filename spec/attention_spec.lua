-- spec/attention_spec.lua — the fused scaled dot-product attention op
-- (cr.scaled_dot_product_attention, csrc/ops/attention.c) against the plain path written
-- with matmul, masked_fill and softmax: values and gradients, causal, boolean and additive
-- masks, dropout against the Philox words it documents, fully masked rows, thread-count
-- independence, half dtypes, finite-difference gradchecks, and the errors.
local H = require 'spec.helper'
local cr = H.cr

local sdpa = cr.scaled_dot_product_attention

-- softmax(scale q k^T + mask) v with ordinary ops; keep (or nil): the dropout factors.
local function plain(q, k, v, o)
  o = o or {}
  local d, Tq, Tk = q.shape[#q.shape], q.shape[#q.shape - 1], k.shape[#k.shape - 1]
  local s = q:matmul(k:transpose(-2, -1)) * (o.scale or 1 / math.sqrt(d))
  if o.causal then
    s = cr.masked_fill(s, cr.arange(Tq):view({ Tq, 1 }):lt(cr.arange(Tk):view({ 1, Tk })), -math.huge)
  end
  if o.mask and o.mask.dtype == 'bool' then s = cr.masked_fill(s, cr.logical_not(o.mask), -math.huge)
  elseif o.mask then s = s + o.mask end
  local p = s:softmax(-1)
  if o.keep then p = p * o.keep end
  return p:matmul(v)
end

local function randn(shape, dtype) return cr.randn(shape, { dtype = dtype or 'f64' }) end

local function max_diff(a, b) return (a:double() - b:double()):abs():max():item() end

-- Gradients of sum(f(q, k, v) * g) for q, k, v.
local function grads(f, q, k, v, g)
  local a, b, c = q:clone():requires_grad_(true), k:clone():requires_grad_(true), v:clone():requires_grad_(true)
  local l = (f(a, b, c) * g):sum()
  l:backward()
  return { a.grad, b.grad, c.grad }
end

describe('scaled_dot_product_attention', function()
  local shapes = {
    { 'one tile, [B, H, T, d]', { 2, 3, 5, 8 }, { 2, 3, 7, 8 }, { 2, 3, 7, 4 } },
    { 'several tiles of queries and keys', { 1, 2, 70, 16 }, { 1, 2, 131, 16 }, { 1, 2, 131, 8 } },
    { '[N, T, d] without heads', { 3, 33, 6 }, { 3, 65, 6 }, { 3, 65, 5 } },
  }
  local cases = {
    { 'no mask', function() return {} end },
    { 'causal', function() return { causal = true } end },
    { 'a bool mask over keys', function(B, _, Tk, nd)
      cr.manual_seed(5)
      local m = cr.rand(nd == 4 and { B, 1, 1, Tk } or { B, 1, Tk }):gt(0.3)
      return { mask = m }
    end },
    { 'an additive [Tq, Tk] mask and a scale', function(_, Tq, Tk)
      return { mask = randn({ Tq, Tk }), scale = 0.3 }
    end },
    { 'causal and a bool [B, 1, Tq, Tk] mask', function(B, Tq, Tk, nd)
      cr.manual_seed(6)
      local m = cr.rand(nd == 4 and { B, 1, Tq, Tk } or { B, Tq, Tk }):gt(0.2)
      return { mask = m, causal = true }
    end },
  }
  for _, sh in ipairs(shapes) do
    for _, case in ipairs(cases) do
      it(string.format('matches the plain path in f64, values and gradients: %s, %s', sh[1], case[1]), function()
        cr.manual_seed(1)
        local q, k, v = randn(sh[2]), randn(sh[3]), randn(sh[4])
        local nd = #sh[2]
        local o = case[2](sh[2][1], sh[2][nd - 1], sh[3][nd - 1], nd)
        local fused = sdpa(q, k, v, o)
        local ref = plain(q, k, v, o)
        -- causal rows past the keys and random masks can hide every key of a row: the
        -- fused op gives 0 there, the plain path NaN; compare where the plain path is finite
        local finite = ref:eq(ref)
        assert.is_true(max_diff(cr.where(finite, fused, 0), cr.where(finite, ref, 0)) < 1e-12)
        assert.are.equal(0, cr.where(finite, 0, fused):abs():max():item())
        local g = cr.where(finite, randn(fused.shape), 0)
        local gf = grads(function(a, b, c) return sdpa(a, b, c, o) end, q, k, v, g)
        local gp = grads(function(a, b, c) return cr.where(finite, plain(a, b, c, o), 0) end, q, k, v, g)
        for i = 1, 3 do
          local ok = gp[i]:eq(gp[i])
          assert.is_true(max_diff(cr.where(ok, gf[i], 0), cr.where(ok, gp[i], 0)) < 1e-12)
        end
      end)
    end
  end

  it('matches the plain path in f32 within rounding', function()
    cr.manual_seed(2)
    local q, k, v = randn({ 2, 3, 50, 64 }, 'f32'), randn({ 2, 3, 50, 64 }, 'f32'), randn({ 2, 3, 50, 64 }, 'f32')
    assert.are.equal('f32', sdpa(q, k, v).dtype)
    assert.is_true(max_diff(sdpa(q, k, v), plain(q:double(), k:double(), v:double())) < 2e-5)
    local g = randn({ 2, 3, 50, 64 }, 'f32')
    local gf = grads(sdpa, q, k, v, g)
    local gp = grads(function(a, b, c) return plain(a, b, c) end, q:double(), k:double(), v:double(), g:double())
    for i = 1, 3 do assert.is_true(max_diff(gf[i], gp[i]) < 1e-4) end
  end)

  it('matches the plain path in f32 at head sizes that are not whole register blocks', function()
    -- head dims 20 and 12 and 70 keys (a last key tile of 6): the f32 tile products'
    -- narrow last blocks of columns, and rows that are not a multiple of 6
    cr.manual_seed(4)
    local q, k, v = randn({ 2, 3, 37, 20 }, 'f32'), randn({ 2, 3, 70, 20 }, 'f32'), randn({ 2, 3, 70, 12 }, 'f32')
    local opts = { mask = randn({ 37, 70 }, 'f32') }
    local p64 = function(a, b, c) return plain(a, b, c, { mask = opts.mask:double() }) end
    assert.is_true(max_diff(sdpa(q, k, v, opts), p64(q:double(), k:double(), v:double())) < 2e-5)
    local g = randn({ 2, 3, 37, 12 }, 'f32')
    local gf = grads(function(a, b, c) return sdpa(a, b, c, opts) end, q, k, v, g)
    local gp = grads(p64, q:double(), k:double(), v:double(), g:double())
    for i = 1, 3 do assert.is_true(max_diff(gf[i], gp[i]) < 1e-4) end
  end)

  it('passes finite-difference gradchecks with masks', function()
    cr.manual_seed(3)
    local q, k, v = randn({ 1, 2, 3, 4 }), randn({ 1, 2, 5, 4 }), randn({ 1, 2, 5, 3 })
    local m = cr.tensor({ { true, false, true, true, false } }):view({ 1, 1, 1, 5 })
    H.gradcheck(function(a, b, c) return sdpa(a, b, c) end, { q, k, v })
    H.gradcheck(function(a, b, c) return sdpa(a, b, c, { causal = true, scale = 0.7 }) end, { q, k, v })
    H.gradcheck(function(a, b, c) return sdpa(a, b, c, { mask = m }) end, { q, k, v })
    local add = randn({ 3, 5 })
    H.gradcheck(function(a, b, c) return sdpa(a, b, c, { mask = add }) end, { q, k, v })
  end)

  it('drops exactly the weights whose Philox word is below p, and its gradients follow', function()
    cr.manual_seed(4)
    local q, k, v = randn({ 2, 2, 9, 4 }), randn({ 2, 2, 70, 4 }), randn({ 2, 2, 70, 3 })
    local p = 0.25
    cr.manual_seed(11)
    local dropped = sdpa(q, k, v, { dropout = p })
    -- word (n Tq + i) Tk + j of the reservation: what cr.rand draws for those elements
    cr.manual_seed(11)
    local keep = cr.rand({ 2, 2, 9, 70 }):ge(p):double() / (1 - p)
    assert.is_true(max_diff(dropped, plain(q, k, v, { keep = keep })) < 1e-12)
    local g = randn(dropped.shape)
    local gf = grads(function(a, b, c)
      cr.manual_seed(11)
      return sdpa(a, b, c, { dropout = p })
    end, q, k, v, g)
    local gp = grads(function(a, b, c) return plain(a, b, c, { keep = keep }) end, q, k, v, g)
    for i = 1, 3 do assert.is_true(max_diff(gf[i], gp[i]) < 1e-12) end
    H.gradcheck(function(a, b, c)
      cr.manual_seed(12)
      return sdpa(a, b, c, { dropout = 0.5, causal = true })
    end, { randn({ 1, 1, 4, 3 }), randn({ 1, 1, 4, 3 }), randn({ 1, 1, 4, 2 }) })
  end)

  it('gives a query row with every key masked 0, and no gradient through it', function()
    local q, k, v = randn({ 1, 2, 3 }), randn({ 1, 4, 3 }), randn({ 1, 4, 2 })
    local m = cr.tensor({ { true, true, false, true }, { false, false, false, false } }, { dtype = 'bool' })
    m = m:view({ 1, 2, 4 })
    local out = sdpa(q, k, v, { mask = m })
    assert.are.equal(0, out:select(1, 1):abs():max():item())
    local ones = cr.ones({ 1, 2, 2 }, { dtype = 'f64' })
    local gq = grads(function(a, b, c) return sdpa(a, b, c, { mask = m }) end, q, k, v, ones)[1]
    assert.are.equal(0, gq:select(1, 1):abs():max():item())
    assert.is_true(max_diff(out:select(1, 0), plain(q:narrow(1, 0, 1), k, v, { mask = m:narrow(1, 0, 1) }):select(1, 0)) < 1e-12)
  end)

  it('gives the same bits on 1, 2 and 4 threads, forward and backward, with dropout', function()
    -- 12 heads: one and two threads run the backward a head per work item, four the two
    -- passes over key and query blocks; every sum runs in the same order in both
    cr.manual_seed(7)
    local q, k, v = randn({ 4, 3, 80, 32 }, 'f32'), randn({ 4, 3, 80, 32 }, 'f32'), randn({ 4, 3, 80, 32 }, 'f32')
    local g = randn({ 4, 3, 80, 32 }, 'f32')
    local function run()
      cr.manual_seed(13)
      local a, b, c = q:clone():requires_grad_(true), k:clone():requires_grad_(true), v:clone():requires_grad_(true)
      local o = sdpa(a, b, c, { dropout = 0.1, causal = true })
      local l = (o * g):sum()
      l:backward()
      return { o:detach(), a.grad, b.grad, c.grad }
    end
    local before = cr.get_num_threads()
    cr.set_num_threads(1)
    local one = run()
    cr.set_num_threads(2)
    local two = run()
    cr.set_num_threads(4)
    local four = run()
    cr.set_num_threads(before)
    for i = 1, 4 do
      assert.are.equal(0, max_diff(one[i], two[i]))
      assert.are.equal(0, max_diff(one[i], four[i]))
    end
  end)

  it('computes half inputs in f32 and returns their dtype', function()
    cr.manual_seed(8)
    local q, k, v = randn({ 2, 10, 8 }, 'f32'), randn({ 2, 12, 8 }, 'f32'), randn({ 2, 12, 8 }, 'f32')
    for _, dt in ipairs { 'bf16', 'f16' } do
      local a, b, c = q:to(dt), k:to(dt), v:to(dt)
      local out = sdpa(a, b, c)
      assert.are.equal(dt, out.dtype)
      assert.is_true(max_diff(out, sdpa(a:float(), b:float(), c:float()):to(dt)) == 0)
    end
  end)

  it('takes f16/bf16/f32 views in any strides (q, k, v of one qkv product), forward and backward', function()
    -- a ViT's q, k and v: views of one [B, T, 3, H, d] product; the CPU kernel reads them in
    -- place and writes the output and the grads in their dtype (f32 views are read the
    -- same way instead of being copied contiguous first). Two head counts: the
    -- backward's two-pass scheme (B H = 2, T over one 64-row block) and its head pass.
    cr.manual_seed(9)
    for _, case in ipairs { { B = 1, H = 2, T = 70 }, { B = 4, H = 2, T = 9 } } do
      local base = randn({ case.B, case.T, 3, case.H, 8 }, 'f32')
      for _, dt in ipairs { 'bf16', 'f16', 'f32' } do
        local x = base:to(dt):requires_grad_(true)
        local qkv = x:permute({ 2, 0, 3, 1, 4 })
        local q, k, v = qkv:select(0, 0), qkv:select(0, 1), qkv:select(0, 2)
        assert.is_false(q:is_contiguous())
        local out = sdpa(q, k, v, { causal = true })
        local xf = x:detach():float():requires_grad_(true)
        local rf = xf:permute({ 2, 0, 3, 1, 4 })
        local ref = sdpa(rf:select(0, 0):contiguous(), rf:select(0, 1):contiguous(), rf:select(0, 2):contiguous(),
          { causal = true })
        assert.are.equal(dt, out.dtype)
        assert.are.equal(0, max_diff(out, ref:to(dt)), dt)
        local g = randn(out.shape, 'f32'):to(dt)
        out:backward(g)
        ref:backward(g:float())
        assert.are.equal(dt, x.grad.dtype)
        -- the backward's row terms use the output as saved, rounded to dt
        local tol = ({ bf16 = 2e-2, f16 = 3e-3, f32 = 1e-6 })[dt] * xf.grad:abs():max():item()
        assert.is_true(max_diff(x.grad, xf.grad) <= tol, dt .. ' grad ' .. max_diff(x.grad, xf.grad) .. ' > ' .. tol)
      end
    end
  end)

  it('names the problem and the fix for bad input', function()
    local q, k, v = randn({ 1, 2, 3, 4 }), randn({ 1, 2, 5, 4 }), randn({ 1, 2, 5, 3 })
    H.assert_error(function() sdpa(q, randn({ 1, 2, 5, 3 }), v) end, 'do not fit')
    H.assert_error(function() sdpa(q, k, randn({ 1, 2, 4, 3 })) end, 'do not fit')
    H.assert_error(function() sdpa(randn({ 3, 4 }), randn({ 5, 4 }), randn({ 5, 3 })) end, 'do not fit')
    H.assert_error(function() sdpa(q, k:float(), v) end, 'the same dtype')
    local bad_mask = cr.ones({ 2, 5 }, { dtype = "bool" })
    H.assert_error(function() sdpa(q, k, v, { mask = bad_mask }) end, "does not broadcast")
    H.assert_error(function() sdpa(q, k, v, { mask = cr.ones({ 3, 5 }, { dtype = 'i64' }) }) end, 'bool mask')
    H.assert_error(function() sdpa(q, k, v, { mask = randn({ 3, 5 }):requires_grad_(true) }) end, 'detach')
    H.assert_error(function() sdpa(q, k, v, { dropout = 1 }) end, 'outside [0, 1)')
    H.assert_error(function() sdpa(q, k, v, { scale = 0 }) end, 'scale must not be 0')
    H.assert_error(function() sdpa(q, k, v, { casual = true }) end, "unknown option 'casual'")
    H.assert_error(function() sdpa(q, k, v, { causal = 1 }) end, 'causal must be true or false')
    H.assert_error(function() sdpa(q, 'k', v) end, "argument 'key' must be a tensor")
  end)
end)
