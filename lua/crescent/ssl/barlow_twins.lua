-- crescent.ssl.barlow_twins — Barlow Twins (Zbontar et al. 2021) as a module: a trunk and
-- a projector whose two views' embeddings, batch-normalised without affine parameters,
-- give a cross-correlation matrix pushed towards the identity: the invariance term
-- sum_i (1 - c_ii)^2 plus lambda times the redundancy term sum_{i ~= j} c_ij^2.
--
--   local m = cr.ssl.barlow_twins.BarlowTwins{trunk = resnet, feat_dim = 128, hidden_dim = 1024,
--                                             out_dim = 1024, proj_layers = 3, lambda = 0.0051}
--   local loss = m:loss(m(views))      -- views = {crops [B, C, h, w], crops [B, C, h, w]}
--
-- As the official code: each view through the encoder on its own, a projector of
-- bias-free Linears with BatchNorm and ReLU between them, and a final BatchNorm1d without
-- affine parameters (nn.BatchNorm1d, so SyncBatchNorm takes the global batch's statistics
-- on k ranks). On k ranks c is summed over the ranks (all_reduce) and divided by the
-- global batch, as the paper does, and the loss is scaled so that DDP's gradient is the
-- global batch's. Parameter names: trunk.*, projector.*, bn.*.
local cr = require 'crescent'
local util = require 'crescent.util'
local nn = cr.nn
local method_parts = require 'crescent.ssl.method_parts'
local losses = require 'crescent.ssl.losses'

local M = {}

local function fail(msg) error(msg, util.user_level()) end

-- The barlow_twins section of recipes/barlow_twins.lua, the options of BarlowTwins{} by the
-- same names.
M.options = cr.config.options('barlow_twins', {
  { 'proj_layers', 'integer', 3, "the projector's Linear layers", min = 1 },
  { 'lambda', 'number', 0.0051, 'the weight of the off-diagonal (redundancy) term', min = 0 },
})

-- What BarlowTwins{} takes beside its options: the trunk and the sizes.
local WIRING = { trunk = true, feat_dim = true, hidden_dim = true, out_dim = true }

local BarlowTwins = nn.Module:extend('BarlowTwins')
M.BarlowTwins = BarlowTwins

function BarlowTwins:init(given)
  local feat, hidden, out = method_parts.method_options('BarlowTwins', given, '{trunk = model, feat_dim = 128}')
  local o = cr.config.take(M.options, 'BarlowTwins', given, WIRING)
  local layers = o.proj_layers
  if layers > 1 and hidden == 0 then fail('BarlowTwins: a projector of 2 or more layers needs hidden_dim > 0') end
  self.lambda = o.lambda
  local dims = { feat }
  for _ = 1, layers - 1 do dims[#dims + 1] = hidden end
  dims[#dims + 1] = out
  self.trunk = o.trunk
  self.projector = nn.MLP { dims = dims, bn = true, bias = false }
  self.bn = nn.BatchNorm1d(out, { affine = false })
end

function BarlowTwins:features(x) return self.trunk(x) end

-- forward(views) -> {n1, n2}: each view's batch-normalised embedding [B, out_dim]
function BarlowTwins:forward(views)
  if type(views) ~= 'table' or cr.is_tensor(views) or #views ~= 2 then
    fail('BarlowTwins: the input must be a list of 2 views of the same batch (a two_views loader gives it)')
  end
  return { n1 = self.bn(self.projector(self.trunk(views[1]))), n2 = self.bn(self.projector(self.trunk(views[2]))) }
end

function BarlowTwins:loss(out)
  local dist = cr.dist
  local opts = { lambda = self.lambda }
  if dist.is_distributed() then
    opts.world = dist.world_size()
    opts.reduce = function(c) return dist.all_reduce(c, 'sum') end
  end
  local loss, c = losses.barlow_twins(out.n1, out.n2, opts)
  out.c = c
  return loss
end

function BarlowTwins.hooks() return {} end
method_parts.stateless(BarlowTwins, 'Barlow Twins')

function BarlowTwins:extra_repr() return string.format('lambda=%g', self.lambda) end

-- ---- recipes ------------------------------------------------------------------------
function M.build(cfg, parts)
  method_parts.check_views(cfg, 'barlow_twins', 'Barlow Twins', 2)
  return BarlowTwins(method_parts.wired(cfg, parts, cfg.barlow_twins))
end

return M
