-- cuda_sort_spec — sort and topk on a CUDA GPU against the cpu: the same values and the
-- same indices, in every dtype, along every dim, ascending and descending, with ties
-- (the lower index first), NaN (last ascending, first descending), -0 and +0, infinities,
-- strided inputs, empty and 0-dim tensors, the kNN monitor's and top-k accuracy's shapes,
-- gradients, and the k-out-of-range error. Without a usable GPU the block is one pending
-- line.
local cr = H.cr

H.describe_gpu('cuda sort and topk', function()
  local DEV = 'cuda'
  local DTYPES = H.DTYPES

  local function same_on_both(what, f) H.same_on_devices(DEV, what, f) end

  -- Values with many ties; floats also get NaN, -0, +0 and both infinities among them.
  local function data(shape, seed, dt)
    local v = H.flat(H.park_miller(shape, seed) * 4)
    for k = 1, #v do v[k] = math.floor(v[k]) end
    if dt == 'f32' or dt == 'f64' or dt == 'f16' or dt == 'bf16' then
      local special = { 0 / 0, -0.0, 0.0, math.huge, -math.huge, 0.5, -0.25 }
      for k = 1, #v, 3 do v[k] = special[(k - 1) / 3 % #special + 1] end
    end
    local t = cr.tensor(v, { dtype = 'f64' }):view(shape)
    if dt == 'bool' then return t:gt(0) end
    if dt == 'u8' then return (t + 4):to('u8') end
    return t:to(dt)
  end

  it('sorts every dtype along every dim, both ways, stably, as the cpu does', function()
    for _, dt in ipairs(DTYPES) do
      local x = data({ 4, 6, 5 }, 1, dt)
      for dim = 0, 2 do
        for _, desc in ipairs({ false, true }) do
          same_on_both(string.format('sort %s dim %d%s', dt, dim, desc and ' descending' or ''), function(dev)
            local v, i = x:to(dev):sort(dim, desc)
            local pv, pi = x:to(dev):permute(2, 0, 1):sort((dim + 1) % 3, desc) -- a strided input
            return { v, i, pv, pi, x:to(dev):argsort(dim, desc) }
          end)
        end
      end
    end
  end)

  it('sorts long rows with many ties, one row and many, and 0-dim and empty tensors', function()
    local long = data({ 3, 5000 }, 2, 'f32')
    local one = data({ 20000 }, 3, 'f64')
    local many = data({ 3000, 7 }, 4, 'bf16')
    same_on_both('sort of long, single and short rows', function(dev)
      local a, ai = long:to(dev):sort(1)
      local b, bi = long:to(dev):sort(0, true)
      local c, ci = one:to(dev):sort(0, true)
      local d, di = many:to(dev):sort(1)
      local e, ei = cr.tensor(5.5):to(dev):sort()
      local f, fi = cr.zeros({ 3, 0 }, { device = dev }):sort(1)
      local g, gi = cr.zeros({ 0, 4 }, { device = dev }):sort(1, true)
      return { a, ai, b, bi, c, ci, d, di, e, ei, f, fi, g, gi }
    end)
  end)

  it('topk picks the largest or smallest k as the cpu does, ties to the lower index, NaN largest', function()
    for _, dt in ipairs(DTYPES) do
      local x = data({ 5, 40, 3 }, 5, dt)
      for _, k in ipairs({ 0, 1, 3, 7, 40 }) do
        for _, largest in ipairs({ true, false }) do
          same_on_both(string.format('topk %s k=%d%s', dt, k, largest and '' or ' smallest'), function(dev)
            local v, i = x:to(dev):topk(k, 1, largest)
            local r = { v, i }
            if k <= 3 then
              local v0, i0 = x:to(dev):topk(k, 2, largest)
              local vt, ti = x:to(dev):transpose(0, 1):topk(k, 0, largest)
              r[3], r[4], r[5], r[6] = v0, i0, vt, ti
            end
            return r
          end)
        end
      end
    end
    same_on_both('topk of a 0-dim tensor and of empty rows', function(dev)
      local a, ai = cr.tensor(2.5):to(dev):topk(1)
      local b, bi = cr.zeros({ 0, 5 }, { device = dev }):topk(3, 1)
      local c, ci = cr.zeros({ 4, 0 }, { device = dev }):topk(0, 1)
      return { a, ai, b, bi, c, ci }
    end)
  end)

  it('takes the kNN monitor and top-k accuracy shapes: k=200 of 5000, k=5 of 1000', function()
    local sim = (H.park_miller({ 16, 5000 }, 6) * 0.5):float() -- similarities
    local logits = data({ 64, 1000 }, 7, 'f32')
    same_on_both('knn and accuracy topk', function(dev)
      local v, i = sim:to(dev):topk(200, 1)
      local pv, pi = logits:to(dev):topk(5, 1)
      return { v, i, pv, pi }
    end)
  end)

  it('scatters the gradient back through the indices, as the cpu does', function()
    for _, dt in ipairs({ 'f32', 'f64' }) do
      same_on_both('grads ' .. dt, function(dev)
        local x = (H.park_miller({ 6, 9 }, 8) * 3):to(dt):to(dev):requires_grad_()
        local w = H.park_miller({ 6, 9 }, 9):to(dt):to(dev)
        local s = x:sort(1, true)
        local t = x:topk(4, 0)
        local loss = (s * w):sum() + (t * t):sum()
        loss:backward()
        return { s, t, x.grad }
      end)
    end
  end)

  it('refuses k out of range in the cpu words', function()
    local x = data({ 3, 4 }, 10, 'f32')
    for _, f in ipairs({
      function(dev) return x:to(dev):topk(5, 1) end,
      function(dev) return x:to(dev):topk(-1, 0) end,
      function(dev) return cr.tensor(1.0):to(dev):topk(2) end,
    }) do
      assert.are.equal(H.error_of(f, 'cpu'), H.error_of(f, DEV))
    end
  end)
end)
