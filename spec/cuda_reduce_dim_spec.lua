-- cuda_reduce_dim_spec — max/min (values and indices), amax/amin, argmax/argmin, var, norm
-- and logsumexp on a CUDA GPU against the cpu, forward and backward, in every dtype each
-- op takes: ties (the first index), NaN (the first NaN wins), -0 and +0, infinities,
-- empty dims, strided views, keepdim, and reductions long enough for the GPU to cut them
-- into slices. Without a usable GPU the block is one pending line.
local cr = H.cr

H.describe_gpu('cuda reductions: max/min, arg, var, norm, logsumexp', function()
  local DEV = 'cuda'
  local DTYPES = H.DTYPES
  local FLOATS = { 'f32', 'f64', 'f16', 'bf16' }
  -- statistics: both sides accumulate in f64 and round once, so floats agree to the
  -- rounding of the output (one unit in the last place for halves)
  local TOL = { f32 = { 1e-6, 1e-6 }, f64 = { 1e-12, 1e-12 }, f16 = { 1e-3, 1e-3 }, bf16 = { 8e-3, 8e-3 } }
  -- grads: the GPU rules compute their weights in the input's dtype, the cpu's in f64
  local GTOL = { f32 = { 1e-5, 1e-5 }, f64 = { 1e-12, 1e-12 }, f16 = { 4e-3, 4e-3 }, bf16 = { 3e-2, 3e-2 } }

  local function same_on_both(what, f, tol) H.same_on_devices(DEV, what, f, tol) end

  -- Values with many ties; floats also get NaN (when `nan`), -0, +0 and both infinities.
  local function data(shape, seed, dt, nan)
    local v = H.flat(H.park_miller(shape, seed) * 4)
    for k = 1, #v do v[k] = math.floor(v[k]) end
    if dt == 'f32' or dt == 'f64' or dt == 'f16' or dt == 'bf16' then
      local special = { -0.0, 0.0, math.huge, -math.huge, 0.5, -0.25, nan and 0 / 0 or 1.5 }
      for k = 1, #v, 5 do v[k] = special[(k - 1) / 5 % #special + 1] end
    end
    local t = cr.tensor(v, { dtype = 'f64' }):view(shape)
    if dt == 'bool' then return t:gt(0) end
    if dt == 'u8' then return (t + 4):to('u8') end
    return t:to(dt)
  end

  -- Smooth values (no ties, no specials) for statistics and grads.
  local function smooth(shape, seed, dt) return H.park_miller(shape, seed):to(dt) end

  it('max/min along a dim: the cpu values and indices in every dtype, ties, NaN, views', function()
    for _, dt in ipairs(DTYPES) do
      for _, nan in ipairs({ false, true }) do
        local x = data({ 5, 7, 6 }, 3, dt, nan)
        for _, dim in ipairs({ 0, 1, 2, -1 }) do
          for _, keep in ipairs({ false, true }) do
            same_on_both(string.format('max/min %s dim %d%s%s', dt, dim, keep and ' keepdim' or '', nan and ' nan' or ''),
              function(dev)
                local t = x:to(dev)
                local v, i = t:max(dim, keep)
                local nv, ni = t:min(dim, keep)
                local tv, ti = t:transpose(0, 2):max(dim, keep) -- strided
                local sv, si = t:narrow(1, 2, 4):min(dim, keep)
                return { v, i, nv, ni, tv, ti, sv, si }
              end)
          end
        end
      end
    end
    same_on_both('max of a 0-dim tensor', function(dev)
      local v, i = cr.tensor(4.5):to(dev):max(0)
      return { v, i }
    end)
  end)

  it('amax/amin and argmax/argmin over any dims, keepdim, flattened, in every dtype', function()
    for _, dt in ipairs(DTYPES) do
      local x = data({ 4, 6, 5 }, 7, dt, true)
      same_on_both('amax/amin/argmax/argmin ' .. dt, function(dev)
        local t = x:to(dev)
        local out = { t:amax(), t:amin(), t:argmax(), t:argmin(), t:argmax(nil, true),
                      t:permute(2, 0, 1):argmin() }
        for _, dims in ipairs({ 0, 1, 2, { 0, 2 }, { 1, 2 }, { 0, 1, 2 } }) do
          out[#out + 1] = t:amax(dims)
          out[#out + 1] = t:amin(dims, true)
          out[#out + 1] = t:transpose(0, 1):amax(dims)
        end
        for dim = 0, 2 do
          out[#out + 1] = t:argmax(dim)
          out[#out + 1] = t:argmin(dim, true)
          out[#out + 1] = t:transpose(1, 2):argmax(dim)
        end
        return out
      end)
    end
  end)

  it('long reductions cut into slices keep the first index, the first NaN, and exact values', function()
    for _, dt in ipairs({ 'f32', 'f64', 'bf16', 'i64' }) do
      same_on_both('slices ' .. dt, function(dev)
        local flat = cr.zeros(300000):to(dt)
        flat:narrow(0, 170001, 1):fill_(3)
        flat:narrow(0, 290000, 1):fill_(3)
        flat:narrow(0, 5, 1):fill_(-2)
        flat:narrow(0, 250000, 1):fill_(-2)
        local t = flat:to(dev)
        local out = { t:argmax(), t:argmin(), t:amax(), t:amin() }
        local rows = t:view(3, 100000) -- long rows: a block per row, then slices
        local v, i = rows:max(1)
        out[#out + 1], out[#out + 1] = v, i
        local cols = t:view(30000, 10) -- many rows, few columns: a thread per column, slices
        local cv, ci = cols:min(0)
        out[#out + 1], out[#out + 1] = cv, ci
        out[#out + 1] = cols:t():argmax(1)
        if dt == 'f32' or dt == 'f64' or dt == 'bf16' then
          local withnan = flat:clone()
          withnan:narrow(0, 260000, 1):fill_(0 / 0)
          withnan:narrow(0, 280000, 1):fill_(0 / 0)
          local n = withnan:to(dev)
          out[#out + 1] = n:argmax()
          out[#out + 1] = n:argmin()
          out[#out + 1] = n:amax()
          local nv, ni = n:view(3, 100000):max(1)
          out[#out + 1], out[#out + 1] = nv, ni
        end
        return out
      end)
    end
    same_on_both('many short rows', function(dev)
      local x = data({ 20000, 9 }, 11, 'f32', true):to(dev)
      local v, i = x:max(1)
      local w, j = x:t():min(0)
      return { v, i, w, j, x:argmax(1), x:amax(0), x:amin({ 0, 1 }) }
    end)
  end)

  it('refuses empty max/min as the cpu does and reduces nothing into nothing', function()
    local e = cr.zeros(0, 3):to(DEV)
    H.assert_error(function() return e:max(0) end, 'max', 'size 0')
    H.assert_error(function() return e:amax() end, 'amax', 'size 0')
    H.assert_error(function() return e:argmin(0) end, 'argmin', 'size 0')
    H.assert_error(function() return e:norm(math.huge) end, 'norm', 'zero elements')
    same_on_both('empty outputs', function(dev)
      local t = cr.zeros(0, 3):to(dev)
      local v, i = t:max(1)
      return { t:amax(1), v, i, t:argmax(1), t:var(1), t:norm(2, 1), t:logsumexp(1) }
    end)
    same_on_both('empty reductions', function(dev)
      local t = cr.zeros(3, 0):to(dev)
      return { t:var(1), t:var(1, false), t:norm(2, 1), t:norm(1, 1), t:norm(0, 1), t:norm(3, 1),
               t:logsumexp(1) }
    end, TOL.f32)
  end)

  it('var in every float dtype, with every correction, over any dims and views', function()
    for _, dt in ipairs(FLOATS) do
      local x = smooth({ 6, 9, 7 }, 21, dt)
      same_on_both('var ' .. dt, function(dev)
        local t = x:to(dev)
        local out = { t:var(), t:var(nil, false), t:var(nil, { correction = 5 }) }
        for _, dims in ipairs({ 0, 1, 2, { 0, 2 }, { 1, 2 } }) do
          out[#out + 1] = t:var(dims)
          out[#out + 1] = t:var(dims, { correction = 0, keepdim = true })
          out[#out + 1] = t:transpose(0, 2):var(dims)
          out[#out + 1] = t:var(dims, { correction = 6 }) -- N - correction <= 0 for dim 0: inf
        end
        return out
      end, TOL[dt])
    end
    same_on_both('var of specials', function(dev)
      local t = data({ 4, 10 }, 23, 'f32', true):to(dev)
      local one = cr.tensor({ { 2.0 } }, { dtype = 'f32' }):to(dev)
      return { t:var(1), t:var(0), one:var(), one:var(nil, false) }
    end, TOL.f32)
    same_on_both('var far from zero, long', function(dev)
      local t = (smooth({ 200000 }, 9, 'f32') + 10000):float():to(dev)
      return { t:var(), t:view(20, 10000):var(1), t:view(10000, 20):var(0) }
    end, { 0, 1e-6 })
  end)

  it('norm for p = 2, 1, 0, 3, 0.5, inf, -inf in every float dtype, with NaN and zeros', function()
    for _, dt in ipairs(FLOATS) do
      for _, p in ipairs({ 2, 1, 0, 3, 0.5, math.huge, -math.huge }) do
        same_on_both('norm ' .. dt .. ' p=' .. p, function(dev)
          local t = data({ 5, 8, 6 }, 31, dt, false):to(dev)
          local n = data({ 5, 8 }, 32, dt, true):to(dev)
          return { t:norm(p), t:norm(p, 1), t:norm(p, { 0, 2 }, true), t:transpose(0, 2):norm(p, 0),
                   n:norm(p, 1), n:norm(p) }
        end, TOL[dt])
      end
    end
    same_on_both('norm, long', function(dev)
      local t = smooth({ 400000 }, 33, 'f32'):to(dev)
      return { t:norm(), t:norm(1), t:norm(math.huge), t:view(400, 1000):norm(2, 0) }
    end, { 1e-6, 1e-6 })
  end)

  it('logsumexp in every dtype (integers give f32), with -inf rows, +inf, NaN and large values', function()
    for _, dt in ipairs(DTYPES) do
      same_on_both('logsumexp ' .. dt, function(dev)
        local t = data({ 5, 8, 6 }, 41, dt, true):to(dev)
        local out = { t:logsumexp(), t:transpose(0, 2):logsumexp(0) }
        for _, dims in ipairs({ 0, 1, 2, { 0, 2 } }) do
          out[#out + 1] = t:logsumexp(dims)
          out[#out + 1] = t:logsumexp(dims, true)
        end
        return out
      end, TOL[dt] or TOL.f32)
    end
    same_on_both('logsumexp of infinite rows', function(dev)
      local ni, pi = -math.huge, math.huge
      local t = cr.tensor({ { ni, ni, ni }, { ni, 0, ni }, { 1, pi, 2 }, { ni, pi, ni }, { 1000, 1000, 999 } },
                          { dtype = 'f32' }):to(dev)
      return { t:logsumexp(1), t:double():logsumexp(1), t:logsumexp(0) }
    end, TOL.f32)
    same_on_both('logsumexp, long', function(dev)
      local t = (smooth({ 300000 }, 43, 'f32') * 20):to(dev)
      return { t:logsumexp(0), t:view(300, 1000):logsumexp(1), t:view(300, 1000):logsumexp(0) }
    end, { 1e-5, 1e-6 })
  end)

  it('differentiates max/min, amax/amin (ties split evenly), var, norm and logsumexp as the cpu', function()
    for _, dt in ipairs(FLOATS) do
      same_on_both('grads ' .. dt, function(dev)
        local ties = data({ 4, 6, 5 }, 51, 'f64', false):clamp(-3, 3):to(dt) -- ties, -0 and +0
        local x = ties:to(dev):requires_grad_()
        local w = smooth({ 4, 6, 5 }, 52, dt):to(dev)
        local v, _ = x:max(1)
        local mv, _ = x:transpose(0, 2):min(0, true)
        local loss = (v * w:select(1, 0)):sum() + (mv * 2):sum() + (x:amax({ 0, 2 }) * 3):sum()
          + x:amin(1, true):sum() + x:amax() + x:norm(math.huge, 1):sum() + x:norm(-math.huge)
        loss:backward()
        local y = smooth({ 4, 6, 5 }, 53, dt):to(dev):requires_grad_()
        local loss2 = (y:var(1) * w:select(1, 1)):sum() + y:var({ 0, 2 }, { correction = 0, keepdim = true }):sum()
          + y:norm() + y:norm(1, 0):sum() + y:norm(3, { 1, 2 }):sum() + y:norm(0.5, 2):sum()
          + y:norm(0, 1):sum() + (y:logsumexp(1) * w:select(1, 2)):sum() + y:transpose(0, 2):logsumexp({ 0, 2 }):sum()
        loss2:backward()
        return { loss, x.grad, loss2, y.grad }
      end, GTOL[dt])
    end
    same_on_both('grads with NaN, zeros and -inf rows', function(dev)
      local x = data({ 4, 10 }, 55, 'f64', true):to(dev):requires_grad_()
      local z = cr.zeros(3, 4, { dtype = 'f64' }):to(dev):requires_grad_()
      local ninf = cr.tensor({ { -math.huge, -math.huge }, { 0, -math.huge } }, { dtype = 'f64' }):to(dev):requires_grad_()
      local loss = x:amax(1):sum() + x:amin(0):sum() + (x:max(1)):sum() + x:norm(math.huge, 0):sum()
      loss:backward()
      local l2 = z:norm() + z:norm(3, 1):sum() + z:norm(1)
      l2:backward()
      ninf:logsumexp(1):sum():backward()
      return { x.grad, z.grad, ninf.grad }
    end, GTOL.f64)
  end)
end)
