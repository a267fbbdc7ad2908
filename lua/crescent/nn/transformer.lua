-- crescent.nn.transformer — the Vision Transformer's building blocks, with timm's parameter
-- names so that a timm or DINO state dict loads by name: LayerNorm, DropPath (stochastic
-- depth), Attention (qkv, proj), Mlp (fc1, GELU, fc2) and Block (norm1, attn, norm2,
-- mlp, a residual with DropPath around each). Attention runs the fused
-- cr.scaled_dot_product_attention (no [T, T] matrix per head beyond a tile), except when
-- asked to keep its weights (keep_attn, DINO's attention maps), which the plain path
-- (bmm, softmax, bmm) computes.
--   nn.LayerNorm(dim, {eps = 1e-6})             over the last dim (timm's ViT eps)
--   nn.DropPath(p)                               zeroes whole samples' residual branch
--   nn.Attention(dim, {num_heads = 3, qkv_bias = true, attn_drop = 0})
--   nn.TransformerBlock(dim, {num_heads = 3, mlp_ratio = 4, qkv_bias = true, drop_path = 0})
local checks = require 'crescent.checks'
local cr = require 'crescent'
local Module = require 'crescent.nn.module'
local common = require 'crescent.nn.common'
local layers = require 'crescent.nn.layers'

local M = {}   -- the classes and functions of this file, which crescent.nn carries

local check_input, options, int = common.check_input, checks.options, checks.int

-- nn.LayerNorm(dim, {eps = 1e-6, elementwise_affine = true}): weight ones, bias zeros.
local LayerNorm = Module:extend('LayerNorm')
function LayerNorm:init(dim, opts)
  opts = options('LayerNorm', opts, { eps = true, elementwise_affine = true })
  self.dim = int('LayerNorm', 'dim', dim, 1)
  self.eps = opts.eps or 1e-6
  if opts.elementwise_affine ~= false then
    self:register_parameter('weight', cr.ones(dim))
    self:register_parameter('bias', cr.zeros(dim))
  end
end
function LayerNorm:forward(x)
  check_input(self, x)
  return cr.layer_norm(x, { self.dim }, { weight = self.weight, bias = self.bias, eps = self.eps })
end
function LayerNorm:extra_repr() return string.format('%d, eps=%g', self.dim, self.eps) end
M.LayerNorm = LayerNorm

-- nn.DropPath(p): in training each sample's branch is zeroed with probability p and the
-- kept ones scaled by 1 / (1 - p) (stochastic depth); in eval, or with p = 0, identity.
-- The draws come from the global Philox stream (cr.rand), so checkpoints replay them.
local DropPath = Module:extend('DropPath')
function DropPath:init(p)
  p = p or 0
  if type(p) ~= 'number' or p < 0 or p >= 1 then checks.fail('DropPath: p must be in [0, 1), got ' .. tostring(p)) end
  self.p = p
end
function DropPath:forward(x)
  if self.p == 0 or not self.training then return x end
  local shape = { x.shape[1] }
  for d = 2, x.ndim do shape[d] = 1 end
  local keep = cr.rand(shape, { dtype = x.dtype, device = x.device }):ge(self.p):to(x.dtype)
  -- timm's order, (x / (1 - p)) * keep: neither product keeps x for the backward
  return x / (1 - self.p) * keep
end
function DropPath:extra_repr() return string.format('p=%g', self.p) end
M.DropPath = DropPath

-- nn.Attention(dim, {num_heads = 8, qkv_bias = true, attn_drop = 0}): multi-head
-- self-attention over tokens x [B, T, dim]: qkv = Linear(dim, 3 dim), softmax(q k^T /
-- sqrt(head_dim)) v per head (attn_drop: dropout on the weights while training), proj =
-- Linear(dim, dim). The attention weights of the last forward are kept in self.last_attn
-- when self.keep_attn is true ([B, heads, T, T], for DINO's maps).
local Attention = Module:extend('Attention')
function Attention:init(dim, opts)
  opts = options('Attention', opts, { num_heads = true, qkv_bias = true, attn_drop = true })
  self.dim = int('Attention', 'dim', dim, 1)
  self.num_heads = int('Attention', 'num_heads', opts.num_heads or 8, 1)
  if dim % self.num_heads ~= 0 then
    checks.fail(string.format('Attention: dim %d is not divisible by num_heads %d', dim, self.num_heads))
  end
  self.head_dim = math.floor(dim / self.num_heads)
  self.scale = self.head_dim ^ -0.5
  self.attn_drop = opts.attn_drop or 0
  if type(self.attn_drop) ~= 'number' or not (self.attn_drop >= 0 and self.attn_drop < 1) then
    checks.fail('Attention: attn_drop must be a probability in [0, 1), got ' .. tostring(opts.attn_drop))
  end
  self.qkv = layers.Linear(dim, 3 * dim, { bias = opts.qkv_bias ~= false })
  self.proj = layers.Linear(dim, dim)
end
function Attention:forward(x)
  check_input(self, x)
  if x.ndim ~= 3 or x.shape[3] ~= self.dim then
    checks.fail(string.format('Attention: expected tokens [B, T, %d], got [%s]', self.dim, table.concat(x.shape, ', ')))
  end
  local B, T, H, Dh = x.shape[1], x.shape[2], self.num_heads, self.head_dim
  -- [B, T, 3, H, Dh] -> [3, B, H, T, Dh], then q, k, v as [B, H, T, Dh] views (the CPU
  -- kernel reads f16/bf16/f32 views in place, a head at a time; the GPU's copies them)
  local qkv = self.qkv(x):view({ B, T, 3, H, Dh }):permute({ 2, 0, 3, 1, 4 })
  local q, k, v = qkv:select(0, 0), qkv:select(0, 1), qkv:select(0, 2)
  local p = self.training and self.attn_drop or 0
  local out
  if self.keep_attn then
    local attn = (q:matmul(k:transpose(2, 3)) * self.scale):softmax(3)   -- [B, H, T, T]
    self.last_attn = attn:detach()
    out = attn:dropout(p, p > 0):matmul(v)
  else
    out = cr.scaled_dot_product_attention(q, k, v, { scale = self.scale, dropout = p })
  end
  return self.proj(out:permute({ 0, 2, 1, 3 }):reshape({ B, T, self.dim }))
end
function Attention:extra_repr()
  return string.format('dim=%d, num_heads=%d%s', self.dim, self.num_heads,
    self.attn_drop > 0 and string.format(', attn_drop=%g', self.attn_drop) or '')
end
M.Attention = Attention

-- nn.Mlp(dim, hidden): fc1, GELU, fc2 (timm's Mlp).
local Mlp = Module:extend('Mlp')
function Mlp:init(dim, hidden)
  self.fc1 = layers.Linear(dim, hidden)
  self.act = layers.GELU()
  self.fc2 = layers.Linear(hidden, dim)
end
function Mlp:forward(x) return self.fc2(self.act(self.fc1(x))) end
M.Mlp = Mlp

-- nn.TransformerBlock(dim, {num_heads = 8, mlp_ratio = 4, qkv_bias = true, drop_path = 0,
-- eps = 1e-6}): pre-norm, x + drop_path(attn(norm1(x))), then x + drop_path(mlp(norm2(x))).
local Block = Module:extend('TransformerBlock')
function Block:init(dim, opts)
  opts = options('TransformerBlock', opts, { num_heads = true, mlp_ratio = true, qkv_bias = true, drop_path = true,
                                             eps = true })
  self.norm1 = M.LayerNorm(dim, { eps = opts.eps })
  self.attn = M.Attention(dim, { num_heads = opts.num_heads, qkv_bias = opts.qkv_bias })
  self.drop_path = M.DropPath(opts.drop_path or 0)
  self.norm2 = M.LayerNorm(dim, { eps = opts.eps })
  self.mlp = M.Mlp(dim, math.floor(dim * (opts.mlp_ratio or 4)))
end
function Block:forward(x)
  x = x + self.drop_path(self.attn(self.norm1(x)))
  return x + self.drop_path(self.mlp(self.norm2(x)))
end
M.TransformerBlock = Block

return M
