-- cuda_index_spec — index_select, gather, scatter_add, index_add, embedding and one_hot on
-- a CUDA GPU against the cpu: every dtype, every dim, strided data and indices, repeated
-- indices, empty and 0-dim cases, gradients, and the out-of-range errors. The GPU
-- scatters add in the cpu's order, so every result must equal the cpu's bit for bit.
-- Without a usable GPU the block is one pending line.
local cr = H.cr

H.describe_gpu('cuda index ops', function()
  local DEV = 'cuda'
  local DTYPES = H.DTYPES

  local function same_on_both(what, f) H.same_on_devices(DEV, what, f) end

  local function data(shape, seed, dt)
    local x = H.park_miller(shape, seed) * 5
    if dt == 'bool' then return x:gt(0) end
    if dt == 'u8' then return (x + 5):to('u8') end
    return x:to(dt)
  end
  local function index(values, dt) return cr.tensor(values, { dtype = dt or 'i64' }) end
  -- n values in [0, size), with repeats (Park-Miller, deterministic)
  local function draws(n, size, seed)
    local v = {}
    for k, x in ipairs(H.flat(H.park_miller({ n }, seed))) do v[k] = math.floor((x + 2) / 4 * size) % size end
    return v
  end

  it('index_select picks slices along every dim, in every dtype, from strided data and indices', function()
    for _, dt in ipairs(DTYPES) do
      local x = data({ 4, 5, 6 }, 1, dt)
      for dim = 0, 2 do
        local idx = index(draws(7, x.shape[dim + 1], dim + 2))
        same_on_both('index_select ' .. dt .. ' dim ' .. dim, function(dev)
          local i = idx:to(dev)
          return { x:to(dev):index_select(dim, i), x:to(dev):permute(2, 0, 1):index_select((dim + 1) % 3, i),
                   x:to(dev):index_select(dim, i:to('i32')) }
        end)
      end
    end
    local x = data({ 6, 8 }, 3, 'f32')
    same_on_both('index_select strided index, empty index, 0-dim', function(dev)
      local strided = index({ 5, 9, 0, 9, 5, 9 }):to(dev):slice(0, 0, 6, 2)
      return { x:to(dev):index_select(0, strided), x:to(dev):t():index_select(1, strided),
               x:to(dev):index_select(1, index({}):to(dev)), cr.tensor(4.5):to(dev):index_select(0, index({ 0 }):to(dev)) }
    end)
  end)

  it('gather reads along every dim, in every dtype, with strided data and indices', function()
    for _, dt in ipairs(DTYPES) do
      local x = data({ 4, 5, 6 }, 4, dt)
      for dim = 0, 2 do
        local shape = { 3, 4, 5 }
        shape[dim + 1] = 7
        local idx = index(draws(shape[1] * shape[2] * shape[3], x.shape[dim + 1], 5 + dim)):view(shape)
        same_on_both('gather ' .. dt .. ' dim ' .. dim, function(dev)
          local i = idx:to(dev)
          local it = i:permute(2, 1, 0):contiguous():permute(2, 1, 0) -- same values, other strides
          return { x:to(dev):gather(dim, i), x:to(dev):gather(dim, it), x:to(dev):gather(dim, i:to('i32')) }
        end)
      end
    end
    local x = data({ 5, 3 }, 6, 'f64')
    same_on_both('gather of a transpose, a 0-dim tensor, an empty index', function(dev)
      local i = index({ { 0, 2, 1 }, { 2, 2, 0 } }):to(dev):t()
      return { x:to(dev):t():gather(1, i), cr.tensor(2.5):to(dev):gather(0, index(0):to(dev)),
               x:to(dev):gather(0, cr.zeros({ 0, 3 }, { dtype = 'i64', device = dev })) }
    end)
  end)

  it('scatter_add sums repeated indices in the cpu order, bit for bit, in every dtype', function()
    for _, dt in ipairs(DTYPES) do
      for dim = 0, 1 do
        local base = data({ 6, 7 }, 10, dt)
        local src = data({ 9, 8 }, 11, dt)
        local shape = dim == 0 and { 9, 7 } or { 6, 8 } -- smaller than src, larger than base along dim
        local idx = index(draws(shape[1] * shape[2], base.shape[dim + 1], 12 + dim)):view(shape)
        same_on_both('scatter_add ' .. dt .. ' dim ' .. dim, function(dev)
          local i = idx:to(dev)
          return { base:to(dev):scatter_add(dim, i, src:to(dev)),
                   base:to(dev):t():contiguous():t():scatter_add(dim, i:t():contiguous():t(), src:to(dev)) }
        end)
      end
    end
    -- many collisions: 4000 f32 values into 3 slots, where the order of the adds shows
    local big = (H.park_miller({ 4000, 5 }, 13) * 1000):float()
    local idx = index(draws(20000, 3, 14)):view(4000, 5)
    same_on_both('scatter_add with long runs', function(dev)
      return { cr.zeros({ 3, 5 }, { device = dev }):scatter_add(0, idx:to(dev), big:to(dev)) }
    end)
  end)

  it('index_add adds rows at repeated indices in the cpu order, in every dtype and dim', function()
    for _, dt in ipairs(DTYPES) do
      local base = data({ 5, 6, 4 }, 20, dt)
      for dim = 0, 2 do
        local shape = { 5, 6, 4 }
        shape[dim + 1] = 11
        local src = data(shape, 21 + dim, dt)
        local idx = index(draws(11, base.shape[dim + 1], 24 + dim))
        same_on_both('index_add ' .. dt .. ' dim ' .. dim, function(dev)
          local i = idx:to(dev)
          return { base:to(dev):index_add(dim, i, src:to(dev)),
                   base:to(dev):permute(1, 2, 0):contiguous():permute(2, 0, 1):index_add(dim, i:to('i32'), src:to(dev)) }
        end)
      end
    end
    local rows = (H.park_miller({ 3000, 16 }, 25) * 100):float()
    local idx = index(draws(3000, 4, 26))
    same_on_both('index_add with long runs, a strided index and a 0-dim tensor', function(dev)
      local strided = index({ 2, 7, 0, 7 }):to(dev):slice(0, 0, 4, 2)
      return { cr.zeros({ 4, 16 }, { device = dev }):index_add(0, idx:to(dev), rows:to(dev)),
               cr.zeros({ 3, 2 }, { device = dev }):index_add(0, strided, cr.ones({ 2, 2 }, { device = dev })),
               cr.tensor(1.5):to(dev):index_add(0, index({ 0 }):to(dev), cr.tensor(2.25):to(dev)) }
    end)
  end)

  it('embedding picks rows for indices of any shape, and its grad sums repeated tokens', function()
    for _, dt in ipairs({ 'f32', 'f64', 'f16', 'bf16', 'i64' }) do
      local w = data({ 10, 6 }, 30, dt)
      local tokens = index(draws(24, 10, 31)):view(2, 3, 4)
      same_on_both('embedding ' .. dt, function(dev)
        local t = tokens:to(dev)
        return { cr.embedding(t, w:to(dev)), cr.embedding(t:permute(2, 0, 1), w:to(dev):t():contiguous():t()),
                 cr.embedding(index(3):to(dev), w:to(dev)) }
      end)
    end
    local tokens = index(draws(500, 7, 32)):view(50, 10)
    for _, dt in ipairs({ 'f32', 'f64' }) do
      same_on_both('embedding grad ' .. dt, function(dev)
        local w = data({ 7, 5 }, 33, dt):to(dev):requires_grad_()
        local y = cr.embedding(tokens:to(dev), w)
        local loss = (y * data({ 50, 10, 5 }, 34, dt):to(dev)):sum()
        loss:backward()
        return { y, w.grad }
      end)
    end
  end)

  it('one_hot writes i64 rows, and infers num_classes from a GPU index', function()
    local idx = index(draws(12, 5, 40)):view(3, 4)
    same_on_both('one_hot', function(dev)
      local i = idx:to(dev)
      return { cr.one_hot(i, 6), cr.one_hot(i), cr.one_hot(i:to('i32'):t(), 5), cr.one_hot(index({}):to(dev), 3),
               cr.one_hot(index(2):to(dev), 3) }
    end)
  end)

  it('differentiates gathers and scatters on the GPU as on the cpu', function()
    for _, dt in ipairs({ 'f32', 'f64' }) do
      local gi = index(draws(4 * 9, 6, 50)):view(4, 9)
      local si = index(draws(7, 4, 51))
      same_on_both('grads ' .. dt, function(dev)
        local x = data({ 4, 6 }, 52, dt):to(dev):requires_grad_()
        local s = data({ 4, 9 }, 53, dt):to(dev):requires_grad_()
        local r = data({ 7, 6 }, 54, dt):to(dev):requires_grad_()
        local a = x:gather(1, gi:to(dev))
        local b = x:index_select(0, si:to(dev))
        local c = x:scatter_add(1, gi:to(dev), s)
        local d = x:index_add(0, si:to(dev), r)
        local loss = (a * a):sum() + (b * data({ 7, 6 }, 55, dt):to(dev)):sum() + (c * c):sum() + (d * d * d):sum()
        loss:backward()
        return { a, b, c, d, x.grad, s.grad, r.grad }
      end)
    end
  end)

  it('reports an index out of range, or on another device, in the cpu words', function()
    local x = data({ 4, 5 }, 60, 'f32')
    local cases = {
      function(dev) return x:to(dev):index_select(1, index({ 0, 5, 7 }):to(dev)) end,
      function(dev) return x:to(dev):index_select(0, index({ 1, -1 }, 'i32'):to(dev)) end,
      function(dev) return x:to(dev):gather(1, index({ { 0, 1 }, { 2, 3 }, { 9, 4 } }):to(dev):t()) end,
      function(dev) return x:to(dev):scatter_add(0, index({ { 0, 4 } }):to(dev), x:to(dev)) end,
      function(dev) return x:to(dev):index_add(1, index({ 5 }):to(dev), x:to(dev):narrow(1, 0, 1)) end,
      function(dev) return cr.embedding(index({ { 1, 2 }, { 3, 4 } }):to(dev), x:to(dev)) end,
      function(dev) return cr.one_hot(index({ 0, 3, 1 }):to(dev), 3) end,
      function(dev) return cr.one_hot(index({ 0, 1 }):to(dev), 0) end,
      function(dev) return x:to(dev):narrow(1, 0, 0):index_select(1, index({ 0 }):to(dev)) end,
    }
    for k, f in ipairs(cases) do
      local want = H.error_of(f, 'cpu')
      assert.are.equal(want, H.error_of(f, DEV), 'case ' .. k)
    end
    if DEV ~= 'cpu' then
      H.assert_error(function() return x:cuda():index_select(0, index({ 0 })) end,
                     'index_select', 'the index is on cpu but self is on cuda:0', ":to('cuda:0')")
      H.assert_error(function() return x:gather(0, index({ { 0 } }):cuda()) end, 'gather', 'cuda:0', 'cpu')
    end
  end)
end)
