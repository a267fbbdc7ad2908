-- crescent.nn.multihead_attention — nn.MultiheadAttention with PyTorch's parameters,
-- layouts, masks and defaults, so a torch.nn.MultiheadAttention state dict loads by name
-- (in_proj_weight [3E, E], in_proj_bias [3E], out_proj.weight, out_proj.bias):
--   local mha = nn.MultiheadAttention(embed_dim, num_heads, {dropout = 0, bias = true, batch_first = false})
--   local out = mha(query, key, value, {key_padding_mask = pad, attn_mask = m, is_causal = false})
--   local out, weights = mha(q, k, v, {need_weights = true})   -- weights averaged over heads
-- Inputs are [T, B, E] ([B, T, E] with batch_first). As in PyTorch, a boolean
-- key_padding_mask [B, Tk] or attn_mask [Tq, Tk] / [B heads, Tq, Tk] is true where a key
-- must NOT be attended to (the opposite of cr.scaled_dot_product_attention's bool mask); a
-- float mask is added to the scores. The attention runs fused unless need_weights asks
-- for the weights, which the plain path computes.
local checks = require 'crescent.checks'
local cr = require 'crescent'
local Module = require 'crescent.nn.module'
local init = require 'crescent.nn.initializers'
local common = require 'crescent.nn.common'
local layers = require 'crescent.nn.layers'

local M = {}   -- the classes and functions of this file, which crescent.nn carries

local options, int = checks.options, checks.int

local MHA = Module:extend('MultiheadAttention')
function MHA:init(embed_dim, num_heads, opts)
  opts = options('MultiheadAttention', opts, { dropout = true, bias = true, batch_first = true })
  self.embed_dim = int('MultiheadAttention', 'embed_dim', embed_dim, 1)
  self.num_heads = int('MultiheadAttention', 'num_heads', num_heads, 1)
  if embed_dim % num_heads ~= 0 then
    checks.fail(string.format('MultiheadAttention: embed_dim %d is not divisible by num_heads %d', embed_dim, num_heads))
  end
  self.head_dim = math.floor(embed_dim / num_heads)
  self.dropout = opts.dropout or 0
  if type(self.dropout) ~= 'number' or not (self.dropout >= 0 and self.dropout < 1) then
    checks.fail('MultiheadAttention: dropout must be a probability in [0, 1), got ' .. tostring(opts.dropout))
  end
  self.batch_first = opts.batch_first == true
  local bias = opts.bias ~= false
  self:register_parameter('in_proj_weight', cr.empty({ 3 * embed_dim, embed_dim }))
  if bias then self:register_parameter('in_proj_bias', cr.zeros({ 3 * embed_dim })) end
  self.out_proj = layers.Linear(embed_dim, embed_dim, { bias = bias })
  if not common.defer_init then
    init.xavier_uniform_(self.in_proj_weight)
    if bias then init.zeros_(self.out_proj.bias) end
  end
end

local FORWARD_KEYS = { key_padding_mask = true, attn_mask = true, need_weights = true, is_causal = true,
                       average_attn_weights = true }

local function fail(msg) checks.fail('MultiheadAttention: ' .. msg) end

-- x [T, B, E] (or [B, T, E]) -> [B, heads, T, head_dim], projected by rows [r0, r0 + E).
function MHA:_heads(x, r0)
  local E = self.embed_dim
  local w = self.in_proj_weight:narrow(0, r0, E)
  local b = self.in_proj_bias and self.in_proj_bias:narrow(0, r0, E)
  if not self.batch_first then x = x:transpose(0, 1) end
  local B, T = x.shape[1], x.shape[2]
  return cr.linear(x, w, b):view({ B, T, self.num_heads, self.head_dim }):permute({ 0, 2, 1, 3 })
end

-- One mask for the scores [B, heads, Tq, Tk] from PyTorch's two, or nil: bool (true
-- attends) when both are bool, else float with -inf where a bool one says no.
function MHA:_mask(o, B, Tq, Tk)
  local kpm, am = o.key_padding_mask, o.attn_mask
  local parts = {}
  if kpm ~= nil then
    if not cr.is_tensor(kpm) or kpm.ndim ~= 2 or kpm.shape[1] ~= B or kpm.shape[2] ~= Tk then
      fail(string.format('key_padding_mask must be a [%d, %d] tensor (batch, keys)', B, Tk))
    end
    parts[#parts + 1] = kpm:view({ B, 1, 1, Tk })
  end
  if am ~= nil then
    local H = self.num_heads
    if not cr.is_tensor(am) then fail('attn_mask must be a tensor') end
    if am.ndim == 2 and am.shape[1] == Tq and am.shape[2] == Tk then
      parts[#parts + 1] = am
    elseif am.ndim == 3 and am.shape[1] == B * H and am.shape[2] == Tq and am.shape[3] == Tk then
      parts[#parts + 1] = am:view({ B, H, Tq, Tk })
    else
      fail(string.format('attn_mask must be [%d, %d] or [%d, %d, %d] (batch * heads, queries, keys)', Tq, Tk,
        B * H, Tq, Tk))
    end
  end
  if #parts == 0 then return nil end
  local all_bool = true
  for _, m in ipairs(parts) do all_bool = all_bool and m.dtype == 'bool' end
  local mask
  for _, m in ipairs(parts) do
    local term
    if all_bool then term = cr.logical_not(m)
    elseif m.dtype == 'bool' then term = cr.masked_fill(cr.zeros(m.shape), m, -math.huge)
    else term = m end
    if mask == nil then mask = term
    elseif all_bool then mask = cr.logical_and(mask, term)
    else mask = mask + term end
  end
  return mask
end

function MHA:forward(query, key, value, o)
  if o ~= nil and type(o) ~= 'table' then fail('the fourth argument is a table of options, e.g. {need_weights = true}') end
  o = o or {}
  for k in pairs(o) do
    if not FORWARD_KEYS[k] then fail(string.format("unknown option '%s'", tostring(k))) end
  end
  key, value = key or query, value or key or query
  local E = self.embed_dim
  for _, t in ipairs { { query, 'query' }, { key, 'key' }, { value, 'value' } } do
    if not cr.is_tensor(t[1]) or t[1].ndim ~= 3 or t[1].shape[3] ~= E then
      fail(string.format('%s must be a 3-d tensor %s with %d features', t[2],
        self.batch_first and '[batch, tokens, embed]' or '[tokens, batch, embed]', E))
    end
  end
  local q, k, v = self:_heads(query, 0), self:_heads(key, E), self:_heads(value, 2 * E)
  local B, Tq, Tk = q.shape[1], q.shape[3], k.shape[3]
  local mask = self:_mask(o, B, Tq, Tk)
  local p = self.training and self.dropout or 0
  local out, weights
  if o.need_weights then
    local s = q:matmul(k:transpose(2, 3)) * (1 / math.sqrt(self.head_dim))
    if o.is_causal then
      s = cr.masked_fill(s, cr.arange(Tq):view({ Tq, 1 }):lt(cr.arange(Tk):view({ 1, Tk })), -math.huge)
    end
    if mask and mask.dtype == 'bool' then s = cr.masked_fill(s, cr.logical_not(mask), -math.huge)
    elseif mask then s = s + mask end
    local attn = s:softmax(3)
    weights = o.average_attn_weights == false and attn or attn:mean(1)
    out = attn:dropout(p, p > 0):matmul(v)
  else
    out = cr.scaled_dot_product_attention(q, k, v, { mask = mask, causal = o.is_causal == true, dropout = p })
  end
  out = self.out_proj(out:permute({ 0, 2, 1, 3 }):reshape({ B, Tq, E }))
  if not self.batch_first then out = out:transpose(0, 1) end
  return out, weights
end

function MHA:extra_repr()
  return string.format('embed_dim=%d, num_heads=%d%s%s', self.embed_dim, self.num_heads,
    self.dropout > 0 and string.format(', dropout=%g', self.dropout) or '', self.batch_first and ', batch_first' or '')
end
M.MultiheadAttention = MHA

return M
