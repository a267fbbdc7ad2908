-- cuda_attention_spec — cr.scaled_dot_product_attention on a CUDA GPU against the cpu:
-- values and the grads of q, k and v in f32 and f64, one tile and many, with heads and
-- without, causal, bool and additive masks, dropout (the same Philox words as the cpu),
-- fully masked rows, half inputs, and head sizes that shrink the shared-memory tiles.
-- Without a usable GPU this is one pending line.
local cr = H.cr

H.describe_gpu('cuda attention', function()
  local device = 'cuda'
  local tol = { f32 = { 1e-4, 1e-5 }, f64 = { 1e-11, 1e-12 } }

  -- the output and the grads of sum(out * r), with the dropout stream reseeded
  local function run(dev, dt, shapes, opts, seed)
    local function input(k)
      return (H.park_miller(shapes[k], seed + k) * 2 - 1):to(dt):to(dev):requires_grad_()
    end
    local q, k, v = input(1), input(2), input(3)
    local o = {}
    for key, val in pairs(opts) do o[key] = val end
    if opts.mask then o.mask = opts.mask:to(dev) end
    cr.manual_seed(seed)
    local out = cr.scaled_dot_product_attention(q, k, v, o)
    local r = H.park_miller(out.shape, seed + 7):to(dt):to(dev)
    local total = (out * r):sum()
    total:backward()
    return { out, q.grad, k.grad, v.grad }
  end

  it('computes what the cpu computes, values and every grad, in f32 and f64', function()
    local cases = {
      { { { 2, 3, 5, 8 }, { 2, 3, 7, 8 }, { 2, 3, 7, 4 } }, {} },
      { { { 1, 2, 70, 64 }, { 1, 2, 131, 64 }, { 1, 2, 131, 64 } }, { causal = true } },
      { { { 3, 33, 6 }, { 3, 65, 6 }, { 3, 65, 5 } }, { mask = cr.rand({ 3, 1, 65 }):gt(0.3) } },
      { { { 2, 2, 17, 16 }, { 2, 2, 40, 16 }, { 2, 2, 40, 16 } }, { mask = cr.randn({ 17, 40 }), scale = 0.3 } },
      { { { 2, 2, 9, 8 }, { 2, 2, 70, 8 }, { 2, 2, 70, 8 } }, { dropout = 0.25 } },
      { { { 1, 4, 200, 8 }, { 1, 4, 200, 8 }, { 1, 4, 200, 8 } }, { dropout = 0.1, causal = true } },
      { { { 2, 1, 3, 300 }, { 2, 1, 5, 300 }, { 2, 1, 5, 200 } }, {} }, -- large heads: smaller tiles
    }
    for i, cs in ipairs(cases) do
      for _, dt in ipairs { 'f32', 'f64' } do
        local o = cs[2]
        if o.mask and o.mask.dtype ~= 'bool' then o = { mask = o.mask:to(dt), scale = o.scale } end
        H.same_on_devices(device, 'attention case ' .. i .. ' ' .. dt,
          function(dev) return run(dev, dt, cs[1], o, 10 * i) end, tol[dt])
      end
    end
  end)

  it('gives a fully masked row 0 and no gradient, and half inputs their dtype', function()
    local m = cr.tensor({ { true, true, false, true }, { false, false, false, false } }, { dtype = 'bool' })
    H.same_on_devices(device, 'masked rows',
      function(dev) return run(dev, 'f32', { { 1, 2, 3 }, { 1, 4, 3 }, { 1, 4, 2 } }, { mask = m:view({ 1, 2, 4 }) }, 3) end,
      tol.f32)
    local q = cr.randn({ 2, 10, 8 }):to('bf16'):to(device)
    local out = cr.scaled_dot_product_attention(q, q, q)
    assert.are.equal('bf16', out.dtype)
    assert.is_true((out:cpu():float() - cr.scaled_dot_product_attention(q:cpu(), q:cpu(), q:cpu()):float()):abs():max()
      :item() < 2e-2)
  end)
end)
