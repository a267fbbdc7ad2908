-- spec/multihead_attention_spec.lua — nn.MultiheadAttention against PyTorch's documented
-- computation written head by head with plain ops (in-projection rows q | k | v, scores /
-- sqrt(head_dim), PyTorch's mask conventions, out_proj), its parameter names and shapes,
-- need_weights, batch_first, gradients, and bad input.
local H = require 'spec.helper'
local cr = H.cr
local nn = cr.nn

-- The reference for batch-first inputs [B, T, E]; bool masks are true where a key is NOT
-- attended to (PyTorch's convention); kpm [B, Tk], am [Tq, Tk].
local function reference(m, q, k, v, kpm, am, causal)
  local E, Hn = m.embed_dim, m.num_heads
  local Dh = E / Hn
  local W, b = m.in_proj_weight, m.in_proj_bias
  local Q = cr.linear(q, W:narrow(0, 0, E), b:narrow(0, 0, E))
  local K = cr.linear(k, W:narrow(0, E, E), b:narrow(0, E, E))
  local V = cr.linear(v, W:narrow(0, 2 * E, E), b:narrow(0, 2 * E, E))
  local B, Tq, Tk = q.shape[1], q.shape[2], k.shape[2]
  local outs, weights = {}, nil
  for h = 0, Hn - 1 do
    local qh, kh, vh = Q:narrow(2, h * Dh, Dh), K:narrow(2, h * Dh, Dh), V:narrow(2, h * Dh, Dh)
    local s = qh:matmul(kh:transpose(1, 2)) / math.sqrt(Dh)
    if kpm then s = cr.masked_fill(s, kpm:view({ B, 1, Tk }), -math.huge) end
    if am and am.dtype == 'bool' then s = cr.masked_fill(s, am, -math.huge) elseif am then s = s + am end
    if causal then s = cr.masked_fill(s, cr.arange(Tq):view({ Tq, 1 }):lt(cr.arange(Tk):view({ 1, Tk })), -math.huge) end
    local p = s:softmax(2)
    weights = weights and weights + p / Hn or p / Hn
    outs[#outs + 1] = p:matmul(vh)
  end
  return m.out_proj(cr.cat(outs, 2)), weights
end

local function randn(shape) return cr.randn(shape, { dtype = 'f64' }) end
local function max_diff(a, b) return (a - b):abs():max():item() end

describe('nn.MultiheadAttention', function()
  it("has PyTorch's parameter names, shapes and initial biases", function()
    local m = nn.MultiheadAttention(12, 3)
    local shapes = {}
    for _, np in ipairs(m:named_parameters()) do shapes[np[1]] = table.concat(np[2].shape, 'x') end
    assert.are.same({ in_proj_weight = '36x12', in_proj_bias = '36', ['out_proj.weight'] = '12x12',
                      ['out_proj.bias'] = '12' }, shapes)
    assert.are.equal(0, m.in_proj_bias:abs():max():item())
    assert.are.equal(0, m.out_proj.bias:abs():max():item())
    -- xavier_uniform: bound sqrt(6 / (12 + 36))
    assert.is_true(m.in_proj_weight:abs():max():item() <= math.sqrt(6 / 48))
    assert.is_nil(nn.MultiheadAttention(12, 3, { bias = false }).in_proj_bias)
  end)

  it('matches the head-by-head reference, with and without masks, batch first or not', function()
    cr.manual_seed(1)
    local m = nn.MultiheadAttention(12, 3, { batch_first = true }):double()
    cr.no_grad(function() m.in_proj_bias:copy_(randn({ 36 })) end)
    local q, k, v = randn({ 2, 5, 12 }), randn({ 2, 7, 12 }), randn({ 2, 7, 12 })
    local kpm = cr.tensor({ { false, false, true, false, false, false, true }, { false, true, false, false, false, false,
      false } }, { dtype = 'bool' })
    local am_bool = cr.rand({ 5, 7 }):gt(0.8)
    local am_float = randn({ 5, 7 })
    for _, case in ipairs { { nil, nil }, { kpm, nil }, { nil, am_bool }, { kpm, am_float }, { kpm, am_bool } } do
      local out = m(q, k, v, { key_padding_mask = case[1], attn_mask = case[2] })
      local want = reference(m, q, k, v, case[1], case[2])
      assert.is_true(max_diff(out, want) < 1e-12)
    end
    local out, w = m(q, k, v, { key_padding_mask = kpm, need_weights = true })
    local want, ww = reference(m, q, k, v, kpm)
    assert.is_true(max_diff(out, want) < 1e-12)
    assert.is_true(max_diff(w, ww) < 1e-12)
    local sa = m(q, nil, nil, { is_causal = true })
    assert.is_true(max_diff(sa, reference(m, q, q, q, nil, nil, true)) < 1e-12)
    -- sequence first: the same numbers transposed
    local seq = nn.MultiheadAttention(12, 3):double()
    seq:load_state_dict(m:state_dict())
    local out_t = seq(q:transpose(0, 1), k:transpose(0, 1), v:transpose(0, 1), { key_padding_mask = kpm })
    assert.is_true(max_diff(out_t:transpose(0, 1), reference(m, q, k, v, kpm)) < 1e-12)
  end)

  it('passes its gradients to the inputs and every parameter', function()
    cr.manual_seed(2)
    local m = nn.MultiheadAttention(8, 2, { batch_first = true }):double()
    local q = randn({ 2, 4, 8 }):requires_grad_(true)
    local loss = (m(q) * randn({ 2, 4, 8 })):sum()
    loss:backward()
    assert.is_true(q.grad:abs():max():item() > 0)
    for _, np in ipairs(m:named_parameters()) do assert.is_true(np[2].grad:abs():max():item() > 0, np[1]) end
    H.gradcheck(function(x) return m(x) end, { randn({ 1, 3, 8 }) })
  end)

  it('names the problem for bad input', function()
    local m = nn.MultiheadAttention(8, 2, { batch_first = true })
    local x = cr.randn({ 2, 4, 8 })
    H.assert_error(function() nn.MultiheadAttention(8, 3) end, 'not divisible by num_heads 3')
    H.assert_error(function() m(cr.randn({ 2, 4, 6 })) end, 'query must be a 3-d tensor [batch, tokens, embed] with 8')
    H.assert_error(function() m(x, nil, nil, { key_padding_mask = cr.zeros({ 2, 5 }, { dtype = 'bool' }) }) end,
      'key_padding_mask must be a [2, 4] tensor')
    H.assert_error(function() m(x, nil, nil, { attn_mask = cr.zeros({ 3, 4 }) }) end, 'attn_mask must be [4, 4]')
    H.assert_error(function() m(x, nil, nil, { need_weight = true }) end, "unknown option 'need_weight'")
    H.assert_error(function() nn.MultiheadAttention(8, 2, { dropout = 1 }) end, 'dropout must be a probability')
  end)
end)
