-- cuda_random_spec — the creation ops on a CUDA GPU: ranges and the Philox draws give the
-- cpu's numbers for the same seed (bit for bit, except randn f64 within a few ulp, since
-- CUDA's log/sin/cos are not glibc's). Without a usable GPU this is one pending line.
local cr = H.cr

H.describe_gpu('cuda creation ops', function()
  local device = 'cuda'

  -- the same draw made on the cpu and on the device from one seed
  local function both(seed, make)
    cr.manual_seed(seed)
    local want = make('cpu')
    cr.manual_seed(seed)
    local got = make(device)
    assert.are.equal(device == 'cpu' and 'cpu' or 'cuda:0', got.device)
    return got:cpu(), want
  end
  local function same(got, want, msg)
    assert.are.equal(want.dtype, got.dtype, msg)
    assert.are.same(want.shape, got.shape, msg)
    assert.are.same(want:totable(), got:totable(), msg)
  end

  it('makes ranges and identities as the cpu does', function()
    for _, dt in ipairs({ 'f32', 'f64', 'f16', 'bf16', 'i64', 'i32', 'u8' }) do
      same(cr.arange(0, 40, 3, { dtype = dt, device = device }):cpu(), cr.arange(0, 40, 3, { dtype = dt }), dt)
      same(cr.eye(3, 5, { dtype = dt, device = device }):cpu(), cr.eye(3, 5, { dtype = dt }), dt)
    end
    same(cr.arange(-1.5, 2.25, 0.25, { device = device }):cpu(), cr.arange(-1.5, 2.25, 0.25), 'fractional steps')
    same(cr.arange(2 ^ 60, 2 ^ 60 + 5, { device = device }):cpu(), cr.arange(2 ^ 60, 2 ^ 60 + 5), 'exact i64')
    assert.are.same({ 0 }, cr.arange(0, { device = device }).shape)
    same(cr.zeros(2, 3, { device = device }):cpu(), cr.zeros(2, 3), 'zeros')
    same(cr.full({ 4 }, 2.5, { dtype = 'f64', device = device }):cpu(), cr.full({ 4 }, 2.5, { dtype = 'f64' }), 'full')
  end)

  it('draws rand, randint and randperm bit for bit as the cpu does', function()
    for _, n in ipairs({ 1, 3, 4, 5, 1000, 4099 }) do
      for _, dt in ipairs({ 'f32', 'f64', 'f16', 'bf16' }) do
        same(both(n, function(d) return cr.rand(n, { dtype = dt, device = d }) end))
      end
      for _, dt in ipairs({ 'i64', 'i32', 'f32', 'u8' }) do
        same(both(n, function(d) return cr.randint(0, 200, { n }, { dtype = dt, device = d }) end))
      end
      same(both(n, function(d) return cr.randint(-2 ^ 40, 2 ^ 40, { n }, { device = d }) end))
      same(both(n, function(d) return cr.randperm(n, { device = d }) end))
      same(both(n, function(d) return cr.randperm(n, { dtype = 'f32', device = d }) end))
    end
    -- the draws after a GPU draw come from the same place in the stream
    same(both(7, function(d) cr.rand(5, { device = d }); return cr.rand(9, { device = d }) end))
  end)

  it('draws randn bit for bit in f32 and its halves, within a few ulp in f64', function()
    for _, n in ipairs({ 1, 2, 3, 5, 1000, 4097 }) do
      for _, dt in ipairs({ 'f32', 'f16', 'bf16' }) do
        same(both(n, function(d) return cr.randn(n, { dtype = dt, device = d }) end))
      end
      local got, want = both(n, function(d) return cr.randn(n, { dtype = 'f64', device = d }) end)
      H.assert_close(got, want, 1e-14, 1e-14, 'randn f64')
    end
    local got, want = both(3, function(d) return cr.randn_like(cr.zeros(2, 3, { device = d })) end)
    same(got, want, 'randn_like keeps the device')
  end)

  it('draws bernoulli and dropout masks as the cpu does', function()
    same(both(4, function(d) return cr.bernoulli(0.3, { 1001 }, { device = d }) end))
    local p = H.park_miller({ 33, 7 }, 2):abs() / 2
    same(both(5, function(d) return cr.bernoulli(p:to(d)) end))
    same(both(5, function(d) return cr.bernoulli(p:to('f64'):to(d)) end))
    local flat = p:reshape({ -1 }):totable()
    flat[18] = 1.5
    local bad = cr.tensor(flat, { dtype = 'f64' }):view({ 33, 7 })
    H.assert_error(function() return cr.bernoulli(bad:to(device)) end,
      'bernoulli: probability 1.5 at flat index 17 is outside [0, 1]')
    for _, dt in ipairs({ 'f32', 'f64', 'f16', 'bf16' }) do
      local x = H.park_miller({ 40, 9 }, 6):to(dt)
      local function run(d)
        local xd = x:to(d):detach():requires_grad_()
        local y = cr.dropout(xd, 0.4)
        y:backward(cr.ones_like(y) * 3)
        return y, xd.grad
      end
      cr.manual_seed(9)
      local y_cpu, g_cpu = run('cpu')
      cr.manual_seed(9)
      local y_dev, g_dev = run(device)
      same(y_dev:cpu(), y_cpu, 'dropout ' .. dt)
      same(g_dev:cpu(), g_cpu, 'dropout grad ' .. dt)
    end
  end)
end)
