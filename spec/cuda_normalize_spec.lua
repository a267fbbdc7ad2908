-- cuda_normalize_spec — L2 normalisation (cr.normalize) on a CUDA GPU against the cpu:
-- values and the input's grad for rows (a warp each: the embeddings SwAV, MoCo and
-- SimCLR normalise) and for inner dims (a thread per column), f32, f64 and halves (cast
-- to f32 by the op), rows whose norm is below eps (the clamped branch), empty batches.
-- Without a usable GPU this is one pending line.
local cr = H.cr

H.describe_gpu('cuda normalize', function()
  local device = 'cuda'
  local tol = { f32 = { 1e-5, 1e-6 }, f64 = { 1e-12, 1e-12 }, bf16 = { 2e-2, 2e-2 } }

  -- y and the grad of sum(y * r) for a fixed r
  local function run(dev, x0, dim, dt, eps, seed)
    local x = x0:clone():to(dt):to(dev):requires_grad_()
    local y = cr.normalize(x, { dim = dim, eps = eps })
    local r = H.park_miller(y.shape, seed):to(dt):to(dev)
    ;(y * r):sum():backward()
    return { y, (assert(x.grad, 'a grad for x')) }
  end

  it('normalises rows and columns as the cpu does, with the grad, in f32, f64 and bf16', function()
    local cases = {
      { shape = { 6, 10 }, dim = 1 },
      { shape = { 512, 128 }, dim = 1 },     -- SwAV's embeddings: a warp per row
      { shape = { 3, 1000 }, dim = 1 },      -- many elements per lane
      { shape = { 4, 7, 5 }, dim = 1 },      -- inner 5: a thread per column
      { shape = { 9, 3 }, dim = 0 },
      { shape = { 2, 3, 4, 5 }, dim = 3 },
    }
    for k, cs in ipairs(cases) do
      local x0 = H.park_miller(cs.shape, 10 + k) * 3 - 1
      for _, dt in ipairs { 'f32', 'f64', 'bf16' } do
        H.same_on_devices(device, 'normalize case ' .. k .. ' ' .. dt,
          function(dev) return run(dev, x0, cs.dim, dt, 1e-12, 20 + k) end, tol[dt])
      end
    end
  end)

  it('takes the clamped branch (g / eps) where a norm is below eps, as the cpu does', function()
    local x0 = H.park_miller({ 8, 16 }, 40) * 1e-3
    x0:narrow(0, 0, 4):mul_(1e-6)   -- rows 0-3: norms ~1e-9, under eps = 1e-6
    H.same_on_devices(device, 'normalize under eps',
      function(dev) return run(dev, x0, 1, 'f64', 1e-6, 41) end, tol.f64)
  end)

  it('returns empty results for an empty batch', function()
    local y = cr.normalize(cr.zeros({ 0, 128 }):to(device), { dim = 1 })
    assert.are.same({ 0, 128 }, y.shape)
    assert.are.equal('cuda:0', y.device)
  end)
end)
