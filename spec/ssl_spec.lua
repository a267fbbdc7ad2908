-- spec/ssl_spec.lua — the SSL core against independent plain-Lua computations (Lua numbers
-- only, no crescent ops in the references): Sinkhorn-Knopp (marginals, SwAV's algorithm
-- literally, stability, the distributed steps with two simulated ranks), the SwAV
-- swapped-prediction loss (value and gradient, with and without a queue), InfoNCE and
-- NT-Xent (values), f64 gradchecks, the queue's bookkeeping, the fused EMA update and the
-- cosine momentum schedule (closed forms), and the weighted kNN classifier.
local cr = H.cr
local ssl = require 'crescent.ssl'

-- ---- plain-Lua helpers: matrices are tables of rows ---------------------------------------
local function softmax(row, T)
  local m, s, out = -math.huge, 0, {}
  for _, x in ipairs(row) do m = math.max(m, x / T) end
  for k, x in ipairs(row) do out[k] = math.exp(x / T - m); s = s + out[k] end
  for k = 1, #out do out[k] = out[k] / s end
  return out
end
local function log_softmax(row, T)
  local m, s, out = -math.huge, 0, {}
  for _, x in ipairs(row) do m = math.max(m, x / T) end
  for _, x in ipairs(row) do s = s + math.exp(x / T - m) end
  for k, x in ipairs(row) do out[k] = x / T - m - math.log(s) end
  return out
end
-- SwAV's distributed_sinkhorn on one process, literally (K x B, no max shift), in doubles.
local function sinkhorn_ref(S, eps, iters)
  local B, K = #S, #S[1]
  local Q, total = {}, 0
  for k = 1, K do
    Q[k] = {}
    for b = 1, B do Q[k][b] = math.exp(S[b][k] / eps); total = total + Q[k][b] end
  end
  for k = 1, K do for b = 1, B do Q[k][b] = Q[k][b] / total end end
  for _ = 1, iters do
    for k = 1, K do
      local r = 0
      for b = 1, B do r = r + Q[k][b] end
      for b = 1, B do Q[k][b] = Q[k][b] / r / K end
    end
    for b = 1, B do
      local c = 0
      for k = 1, K do c = c + Q[k][b] end
      for k = 1, K do Q[k][b] = Q[k][b] / c / B end
    end
  end
  local out = {}
  for b = 1, B do
    out[b] = {}
    for k = 1, K do out[b][k] = Q[k][b] * B end
  end
  return out
end
-- fixed pseudo-random numbers (a LCG), so the references need no crescent op
local function lcg_matrix(seed, r, c, scale)
  local x, out = seed, {}
  for i = 1, r do
    out[i] = {}
    for j = 1, c do
      x = (x * 1103515245 + 12345) % 2147483648
      out[i][j] = (x / 2147483648 * 2 - 1) * (scale or 1)
    end
  end
  return out
end
local function T64(m) return cr.tensor(m, { dtype = 'f64' }) end

describe('ssl.sinkhorn', function()
  it('matches SwAV distributed_sinkhorn written in plain Lua (f64 and f32)', function()
    local S = lcg_matrix(7, 5, 3)
    local ref = sinkhorn_ref(S, 0.05, 3)
    H.assert_close(ssl.sinkhorn(T64(S), { epsilon = 0.05, iterations = 3 }), ref, 1e-12, 1e-10)
    local q32 = ssl.sinkhorn(cr.tensor(S), {})
    assert.equal('f32', q32.dtype)
    H.assert_close(q32, ref, 1e-5, 1e-4)
    -- eps and iterations matter
    H.assert_close(ssl.sinkhorn(T64(S), { epsilon = 0.3, iterations = 1 }), sinkhorn_ref(S, 0.3, 1), 1e-12, 1e-10)
    H.assert_close(ssl.sinkhorn(T64(S), { iterations = 0 }), sinkhorn_ref(S, 0.05, 0), 1e-12, 1e-10)
  end)

  it('gives samples that sum to 1 and prototypes that sum to B/K', function()
    local S = T64(lcg_matrix(3, 12, 4))
    local q = ssl.sinkhorn(S, { epsilon = 0.5, iterations = 3 })
    H.assert_close(q:sum(1), cr.ones(12, { dtype = 'f64' }), 1e-12) -- the last step is exact
    local q50 = ssl.sinkhorn(S, { epsilon = 0.5, iterations = 50 })
    H.assert_close(q50:sum(1), cr.ones(12, { dtype = 'f64' }), 1e-12)
    H.assert_close(q50:sum(0), cr.full({ 4 }, 3, { dtype = 'f64' }), 1e-9)
    assert.is_false(q.requires_grad)
    assert.is_false(ssl.sinkhorn(S:clone():requires_grad_(true)).requires_grad)
  end)

  it('stays finite where SwAV overflows, and equals it in exact arithmetic', function()
    -- scores up to 10 with eps 0.05: exp(200) overflows f32 (SwAV gives inf/inf = NaN);
    -- the per-prototype shift gives the plain-Lua (double) answer
    local S = lcg_matrix(11, 6, 4, 10)
    local q = ssl.sinkhorn(cr.tensor(S), { epsilon = 0.05, iterations = 3 })
    H.assert_close(q, sinkhorn_ref(S, 0.05, 3), 1e-5, 1e-4)
    -- absurd scores: no NaN anywhere, samples sum to 1 or (all underflowed) to 0
    local big = ssl.sinkhorn(cr.tensor(lcg_matrix(5, 8, 5, 1e6)))
    for _, row in ipairs(big:totable()) do
      local s = 0
      for _, v in ipairs(row) do
        assert.is_true(v == v and v >= 0)
        s = s + v
      end
      assert.is_true(math.abs(s - 1) < 1e-5 or s == 0)
    end
    -- scores with a different max per prototype need no common scale
    H.assert_close(ssl.sinkhorn(T64(S) + T64({ { 50, -50, 0, 20 } })),
                   sinkhorn_ref(S, 0.05, 3), 1e-10, 1e-8)
  end)

  it('runs in steps across two simulated ranks with all-reduce hooks', function()
    local S = lcg_matrix(21, 8, 5)
    local full = ssl.sinkhorn(T64(S))
    local halves = { T64({ unpack(S, 1, 3) }), T64({ unpack(S, 4, 8) }) } -- uneven: 3 + 5
    local results, pending = {}, {}
    local function reducer(op)
      return function(ptr, n)
        local mine = {}
        for i = 0, n - 1 do mine[i + 1] = ptr[i] end
        local res = coroutine.yield(op, mine)
        for i = 0, n - 1 do ptr[i] = res[i] end
      end
    end
    local cos = {}
    for r = 1, 2 do
      cos[r] = coroutine.create(function()
        results[r] = ssl.sinkhorn(halves[r], { reduce = { max = reducer('max'), sum = reducer('sum'), world_batch = 8 } })
      end)
    end
    local res = nil
    while true do
      for r = 1, 2 do
        local ok, op, vals = coroutine.resume(cos[r], res)
        assert(ok, op)
        pending[r] = { op, vals }
      end
      if coroutine.status(cos[1]) == 'dead' then break end
      assert.equal(pending[1][1], pending[2][1])
      res = {}
      for i, a in ipairs(pending[1][2]) do
        local b = pending[2][2][i]
        res[i - 1] = pending[1][1] == 'max' and math.max(a, b) or a + b
      end
    end
    H.assert_close(cr.cat({ results[1], results[2] }, 0), full, 1e-12, 1e-10)
  end)

  it('gives the same bits on 1 and 2 threads, and takes f16 and strided scores', function()
    cr.manual_seed(5)
    local s = cr.randn(300, 200) -- above the parallel grain
    local n0 = cr.get_num_threads()
    cr.set_num_threads(1)
    local a = ssl.sinkhorn(s)
    cr.set_num_threads(2)
    local b = ssl.sinkhorn(s)
    cr.set_num_threads(n0)
    assert.equal(0, H.max_diff(a, b))
    local small = cr.randn(4, 6)
    H.assert_close(ssl.sinkhorn(small:half()):float(), ssl.sinkhorn(small:half():float()), 1e-3, 1e-2)
    H.assert_close(ssl.sinkhorn(small:t()), ssl.sinkhorn(small:t():contiguous()), 0)
  end)

  it('rejects bad input with a message', function()
    H.assert_error(function() ssl.sinkhorn(cr.zeros(3)) end, 'sinkhorn', '[B, K]')
    H.assert_error(function() ssl.sinkhorn(cr.zeros(2, 2, { dtype = 'i64' })) end, 'float')
    H.assert_error(function() ssl.sinkhorn(cr.zeros(2, 2), { epsilon = 0 }) end, 'epsilon')
    H.assert_error(function() ssl.sinkhorn(cr.zeros(2, 2), { iterations = -1 }) end, 'iterations')
  end)
end)

-- ---- SwAV loss -----------------------------------------------------------------------------
-- plain-Lua swapped prediction: returns the loss and d loss / d scores[v] (codes fixed)
local function swav_ref(P, assign, T, eps, iters, queue)
  local V, B, K = #P, #P[1], #P[1][1]
  local loss, grads = 0, {}
  for v = 1, V do
    grads[v] = {}
    for b = 1, B do grads[v][b] = {}; for k = 1, K do grads[v][b][k] = 0 end end
  end
  for j, c in ipairs(assign) do
    local q
    if queue and queue[j] then
      local rows_ = {}
      for _, r in ipairs(queue[j]) do rows_[#rows_ + 1] = r end
      for _, r in ipairs(P[c + 1]) do rows_[#rows_ + 1] = r end
      local all = sinkhorn_ref(rows_, eps, iters)
      q = { unpack(all, #all - B + 1, #all) }
    else
      q = sinkhorn_ref(P[c + 1], eps, iters)
    end
    for v = 1, V do
      if v ~= c + 1 then
        local coef = 1 / (#assign * (V - 1) * B)
        for b = 1, B do
          local lp, sm, sq = log_softmax(P[v][b], T), softmax(P[v][b], T), 0
          for k = 1, K do
            loss = loss - coef * q[b][k] * lp[k]
            sq = sq + q[b][k]
          end
          for k = 1, K do grads[v][b][k] = grads[v][b][k] + coef / T * (sm[k] * sq - q[b][k]) end
        end
      end
    end
  end
  return loss, grads
end

describe('ssl.swav_loss', function()
  local P = { lcg_matrix(1, 4, 3), lcg_matrix(2, 4, 3), lcg_matrix(3, 4, 3), lcg_matrix(4, 4, 3) }

  it('matches a plain-Lua computation, value and gradient', function()
    local ps = {}
    for v = 1, 4 do ps[v] = T64(P[v]):requires_grad_(true) end
    local loss, codes = ssl.swav_loss(ps, { crops_for_assign = { 0, 1 } })
    local ref, g = swav_ref(P, { 0, 1 }, 0.1, 0.05, 3)
    assert.is_true(math.abs(loss:item() - ref) < 1e-10)
    loss:backward()
    for v = 1, 4 do H.assert_close(ps[v].grad, g[v], 1e-10, 1e-8, 'grad of crop ' .. (v - 1)) end
    assert.equal(2, #codes)
    H.assert_close(codes[1], sinkhorn_ref(P[1], 0.05, 3), 1e-12, 1e-10)
    -- other settings, f32
    local ps32 = {}
    for v = 1, 4 do ps32[v] = cr.tensor(P[v]) end
    local l32 = ssl.swav_loss(ps32, { crops_for_assign = { 2 }, temperature = 0.5, epsilon = 0.1, iterations = 5 })
    assert.is_true(math.abs(l32:item() - swav_ref(P, { 2 }, 0.5, 0.1, 5)) < 1e-5)
  end)

  it('prepends queue scores before Sinkhorn and keeps the last B codes', function()
    local Q1, Q2 = lcg_matrix(8, 4, 3), lcg_matrix(9, 8, 3)
    local ps = {}
    for v = 1, 3 do ps[v] = T64(P[v]):requires_grad_(true) end
    local loss = ssl.swav_loss(ps, { queue_scores = { T64(Q1), T64(Q2) } })
    local ref, g = swav_ref({ P[1], P[2], P[3] }, { 0, 1 }, 0.1, 0.05, 3, { Q1, Q2 })
    assert.is_true(math.abs(loss:item() - ref) < 1e-10)
    loss:backward()
    for v = 1, 3 do H.assert_close(ps[v].grad, g[v], 1e-10, 1e-8) end
  end)

  it('passes gradcheck in f64 (codes are constants: the assigned crop is skipped)', function()
    H.gradcheck(function(a, b, c)
      return ssl.swav_loss({ a, b, c }, { crops_for_assign = { 0 }, temperature = 0.3 })
    end, { T64(P[1]), T64(P[2]), T64(P[3]) }, { skip = { true } })
  end)

  it('rejects crops_for_assign outside the crops and mismatched crops', function()
    local ps = { cr.zeros(2, 3), cr.zeros(2, 3) }
    H.assert_error(function() ssl.swav_loss(ps, { crops_for_assign = { 2 } }) end, 'crops_for_assign', 'outside')
    H.assert_error(function() ssl.swav_loss({ cr.zeros(2, 3), cr.zeros(3, 3) }) end, 'crop 1')
    H.assert_error(function() ssl.swav_loss(ps, { queue_scores = { cr.zeros(4, 2) } }) end, 'queue_scores[1]')
  end)
end)

-- ---- InfoNCE and NT-Xent -----------------------------------------------------------------
local function l2n(row)
  local s = 0
  for _, x in ipairs(row) do s = s + x * x end
  s = math.sqrt(s)
  local out = {}
  for i, x in ipairs(row) do out[i] = x / s end
  return out
end
local function dot(a, b)
  local s = 0
  for i = 1, #a do s = s + a[i] * b[i] end
  return s
end

describe('ssl.infonce', function()
  local Qm, Km, N = lcg_matrix(31, 3, 4), lcg_matrix(32, 3, 4), lcg_matrix(33, 5, 4)
  for i = 1, #N do N[i] = l2n(N[i]) end
  it('matches MoCo v2 written in plain Lua', function()
    local ref = 0
    for b = 1, 3 do
      local q, k = l2n(Qm[b]), l2n(Km[b])
      local logits = { dot(q, k) / 0.2 }
      for j = 1, #N do logits[#logits + 1] = dot(q, N[j]) / 0.2 end
      ref = ref - log_softmax(logits, 1)[1] / 3
    end
    local loss, logits = ssl.infonce(T64(Qm), T64(Km), T64(N))
    assert.is_true(math.abs(loss:item() - ref) < 1e-12)
    assert.same({ 3, 6 }, logits.shape)
    local l32 = ssl.infonce(cr.tensor(Qm), cr.tensor(Km), cr.tensor(N))
    assert.is_true(math.abs(l32:item() - ref) < 1e-5)
  end)
  it('passes gradcheck in f64 and stops the key gradient by default', function()
    H.gradcheck(function(q, k, n) return ssl.infonce(q, k, n, { detach_key = false, temperature = 0.5 }) end,
                { T64(Qm), T64(Km), T64(N) }, { skip = { nil, nil, true } })
    local k = T64(Km):requires_grad_(true)
    local q = T64(Qm):requires_grad_(true)
    ssl.infonce(q, k, T64(N)):backward()
    assert.is_nil(k.grad)
    assert.is_not_nil(q.grad)
  end)
end)

describe('ssl.nt_xent', function()
  local Z1, Z2 = lcg_matrix(41, 3, 4), lcg_matrix(42, 3, 4)
  it('matches SimCLR written in plain Lua', function()
    local z = {}
    for i = 1, 3 do z[i] = l2n(Z1[i]); z[i + 3] = l2n(Z2[i]) end
    local T, ref = 0.5, 0
    for i = 1, 6 do
      local logits, pos = {}, (i <= 3) and i + 3 or i - 3
      local m, s = -math.huge, 0
      for j = 1, 6 do if j ~= i then logits[j] = dot(z[i], z[j]) / T; m = math.max(m, logits[j]) end end
      for j = 1, 6 do if j ~= i then s = s + math.exp(logits[j] - m) end end
      ref = ref - (logits[pos] - m - math.log(s)) / 6
    end
    assert.is_true(math.abs(ssl.nt_xent(T64(Z1), T64(Z2)):item() - ref) < 1e-12)
    local zz = {}
    for i = 1, 3 do zz[i] = Z1[i]; zz[i + 3] = Z2[i] end
    assert.is_true(math.abs(ssl.nt_xent(cr.tensor(zz)):item() - ref) < 1e-5)
  end)
  it('passes gradcheck in f64', function()
    H.gradcheck(function(a, b) return ssl.nt_xent(a, b, { temperature = 0.2 }) end, { T64(Z1), T64(Z2) })
  end)
  it('rejects mismatched views', function()
    H.assert_error(function() ssl.nt_xent(cr.zeros(3, 4), cr.zeros(2, 4)) end, 'nt_xent', 'z2')
    H.assert_error(function() ssl.nt_xent(cr.zeros(3, 4)) end, '[2B, D]')
  end)
end)

-- ---- queue ----------------------------------------------------------------------------------
describe('ssl.Queue', function()
  local function batch(v, B) return cr.full({ B, 2 }, v) + cr.arange(0, B, { dtype = 'f32' }):view(B, 1) * 0.1 end
  it('enqueues FIFO with a circular pointer and counts what it holds', function()
    local q = ssl.Queue(6, 2, { batch_size = 2 })
    assert.equal(0, q.filled)
    assert.is_false(q:full())
    q:enqueue(batch(1, 2)); q:enqueue(batch(2, 2))
    assert.equal(4, q.filled)
    assert.equal(4, q.ptr)
    H.assert_close(q:newest_first():select(1, 0), { 2, 2.1, 1, 1.1 })
    q:enqueue(batch(3, 2))
    assert.is_true(q:full())
    q:enqueue(batch(4, 2)) -- overwrites the oldest (batch 1)
    assert.equal(6, q.filled)
    assert.equal(2, q.ptr)
    H.assert_close(q:buffer():select(1, 0), { 4, 4.1, 2, 2.1, 3, 3.1 })
    -- SwAV's order: newest batch first, as queue[bs:] = queue[:-bs]; queue[:bs] = new
    H.assert_close(q:newest_first():select(1, 0), { 4, 4.1, 3, 3.1, 2, 2.1 })
  end)
  it('holds detached copies and round-trips its state', function()
    local q = ssl.Queue(4, 2)
    local x = cr.ones(2, 2):requires_grad_(true)
    q:enqueue(x * 3)
    assert.is_false(q:buffer().requires_grad)
    local sd = q:state_dict()
    local q2 = ssl.Queue(4, 2):load_state_dict({ buffer = sd.buffer:clone(), ptr = sd.ptr, filled = sd.filled, batch = sd.batch })
    assert.equal(2, q2.ptr)
    assert.equal(2, q2.filled)
    H.assert_close(q2:buffer(), q:buffer())
  end)
  it('rejects a length that is not a multiple of the batch (MoCo)', function()
    H.assert_error(function() ssl.Queue(10, 2, { batch_size = 4 }) end, 'not a multiple of the batch 4')
    local q = ssl.Queue(10, 2)
    H.assert_error(function() q:enqueue(cr.zeros(3, 2)) end, 'not a multiple')
    H.assert_error(function() q:enqueue(cr.zeros(2, 3)) end, '[B, 2]')
  end)
end)

-- ---- EMA and the momentum schedule ------------------------------------------------------
describe('ssl.ema_update', function()
  it('computes m * target + (1 - m) * source over every pair, f32 and f64', function()
    local t1, t2 = cr.tensor({ 1, 2, 3 }, { dtype = 'f64' }), cr.tensor({ { 4 } }, { dtype = 'f32' })
    local s1, s2 = cr.tensor({ 3, 0, -1 }, { dtype = 'f64' }), cr.tensor({ { 0 } }, { dtype = 'f32' })
    local v1 = t1.version
    ssl.ema_update({ t1, t2 }, { s1, s2 }, 0.75)
    H.assert_close(t1, { 1.5, 1.5, 2 }, 1e-15)
    H.assert_close(t2, { { 3 } }, 1e-7)
    assert.is_true(t1.version > v1)
    ssl.ema_update({ t1 }, { s1 }, 0.75)
    H.assert_close(t1, { 0.75 * 1.5 + 0.75, 0.75 * 1.5, 0.75 * 2 - 0.25 }, 1e-15)
    -- big tensors go through several chunks and threads: each element still exact
    local big_t, big_s = cr.full({ 100000 }, 2, { dtype = 'f64' }), cr.arange(0, 100000, { dtype = 'f64' })
    ssl.ema_update(big_t, big_s, 0.9)
    assert.equal(0.9 * 2 + (1 - 0.9) * 99999, big_t:select(0, 99999):item())
    assert.equal(1.8, big_t:select(0, 0):item())
  end)
  it('takes modules and named lists, and copies buffers of any dtype', function()
    local nn = cr.nn
    local a, b = nn.Linear(3, 2), nn.Linear(3, 2)
    ssl.copy_tensors(a, b)
    H.assert_close(a.weight, b.weight, 0)
    local w0 = a.weight:clone()
    cr.no_grad(function() b.weight:add_(1) end)
    ssl.ema_update(a, b, 0.5)
    H.assert_close(a.weight, w0 + 0.5, 1e-6)
    local c1, c2 = cr.tensor({ 5 }, { dtype = 'i64' }), cr.tensor({ 9 }, { dtype = 'i64' })
    ssl.copy_tensors({ { 'n', c1 } }, { { 'n', c2 } })
    assert.equal(9, c1:item())
  end)
  it('names mismatched pairs', function()
    H.assert_error(function() ssl.ema_update({ cr.zeros(2) }, { cr.zeros(2), cr.zeros(1) }, 0.9) end,
                   'target has 1 tensors but the source has 2')
    H.assert_error(function() ssl.ema_update({ { 'fc.w', cr.zeros(2) } }, { { 'fc.w', cr.zeros(3) } }, 0.9) end,
                   "'fc.w'", '[2]', '[3]')
    H.assert_error(function() ssl.ema_update({ { 'a', cr.zeros(2) } }, { { 'b', cr.zeros(2) } }, 0.9) end,
                   "'a' in the target but 'b'")
    H.assert_error(function() ssl.ema_update({ cr.zeros(2) }, { cr.zeros(2) }, 1.5) end, 'momentum')
    H.assert_error(function() ssl.ema_update({ cr.zeros(2, { dtype = 'i64' }) }, { cr.zeros(2, { dtype = 'i64' }) }, 0.5) end,
                   'f32 or f64')
    local x = cr.zeros(2)
    H.assert_error(function() ssl.ema_update({ x }, { x }, 0.5) end, 'shares storage')
  end)
  it('follows the cosine momentum schedule', function()
    assert.equal(0.99, ssl.cosine_momentum(0.99, 0))
    assert.equal(1, ssl.cosine_momentum(0.99, 1))
    assert.is_true(math.abs(ssl.cosine_momentum(0.99, 0.5) - 0.995) < 1e-15)
    assert.is_true(math.abs(ssl.cosine_momentum(0.996, 0.25) - (1 - 0.004 * (math.cos(math.pi / 4) + 1) / 2)) < 1e-15)
  end)
end)

-- ---- kNN -------------------------------------------------------------------------------------
describe('ssl.knn_classify', function()
  it('weights the k nearest by exp(sim / T) (a hand-checked case)', function()
    -- train: class 0 at (1, 0) and (0.6, 0.8), class 1 at (0.8, 0.6); T = 0.1
    local F = { dtype = 'f32' }
    local tr = cr.tensor({ { 1, 0 }, { 0.6, 0.8 }, { 0.8, 0.6 } })
    local ytr = cr.tensor({ 0, 0, 1 }, { dtype = 'i64' })
    -- test (1, 0): sims 1, 0.6, 0.8 -> class 0: e^10 + e^6, class 1: e^8 -> 0 (right)
    local top1, top5 = ssl.knn_classify(tr, ytr, cr.tensor({ { 1, 0 } }, F), cr.tensor({ 0 }, { dtype = 'i64' }), { k = 3 })
    assert.equal(100, top1)
    assert.equal(100, top5)
    -- test (0.6, 0.8) labelled 1: sims 0.6, 1, 0.96 -> class 0: e^6 + e^10 = 22430,
    -- class 1: e^9.6 = 14765 -> 0 (wrong); with k = 2 only 1 and 0.96 vote: still 0
    local t1 = ssl.knn_classify(tr, ytr, cr.tensor({ { 0.6, 0.8 } }), cr.tensor({ 1 }, { dtype = 'i64' }), { k = 3 })
    assert.equal(0, t1)
    assert.equal(0, (ssl.knn_classify(tr, ytr, cr.tensor({ { 0.6, 0.8 } }), cr.tensor({ 1 }, { dtype = 'i64' }), { k = 2 })))
    -- with T = 1 and k = 3: class 0 e^0.6 + e^1 = 4.54 beats e^0.96 = 2.61; the top-2 holds 1
    local a1, a5 = ssl.knn_classify(tr, ytr, cr.tensor({ { 0.6, 0.8 } }), cr.tensor({ 1 }, { dtype = 'i64' }),
                                    { k = 3, temperature = 1 })
    assert.equal(0, a1)
    assert.equal(100, a5)
    -- at (0.8, 0.6) with k = 1 the one neighbour is itself: class 1
    assert.equal(100, (ssl.knn_classify(tr, ytr, cr.tensor({ { 0.8, 0.6 } }), cr.tensor({ 1 }, { dtype = 'i64' }), { k = 1 })))
  end)
  it('gives 100% on separated classes, in any chunking, and bounded top-5', function()
    cr.manual_seed(3)
    local C, n = 7, 20
    local centers = cr.eye(C, 16)
    local function labels(m, shift)
      local t = {}
      for i = 1, m do t[i] = (i + shift) % C end
      return cr.tensor(t, { dtype = 'i64' })
    end
    local ytr, yte = labels(C * n, 0), labels(50, 0)
    local xtr = centers:index_select(0, ytr) + cr.randn(C * n, 16) * 0.05
    local xte = centers:index_select(0, yte) + cr.randn(50, 16) * 0.05
    local top1, top5 = ssl.knn_classify(xtr, ytr, xte, yte, { k = 10, chunk = 7 })
    assert.equal(100, top1)
    assert.equal(100, top5)
    -- random labels: top-5 of 7 classes catches at least top-1
    local t1, t5 = ssl.knn_classify(xtr, ytr, xte, labels(50, 3), { k = 200 })
    assert.is_true(t5 >= t1)
  end)
  it('rejects mismatched inputs', function()
    local function ids(n) return cr.zeros(n, { dtype = 'i64' }) end
    H.assert_error(function() ssl.knn_classify(cr.zeros(4, 3), ids(3), cr.zeros(1, 3), ids(1)) end, 'train_labels')
    H.assert_error(function() ssl.knn_classify(cr.zeros(4, 3), ids(4), cr.zeros(1, 2), ids(1)) end, 'feature dims')
  end)
end)
