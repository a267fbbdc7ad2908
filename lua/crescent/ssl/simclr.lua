-- crescent.ssl.simclr — SimCLR (Chen et al. 2020) as a module: trunk + MLP head, both views
-- in one forward (BatchNorm over the 2B crops, as SimCLR's global BN), NT-Xent over the 2B
-- projections.
--
--   local m = cr.ssl.simclr.SimCLR{trunk = resnet, feat_dim = 128, hidden_dim = 512, out_dim = 128,
--                                  temperature = 0.5}
--   local loss = m:loss(m(views))      -- views = {crops [B, C, h, w], crops [B, C, h, w]}
--
-- On k ranks the projections of every rank are gathered with their gradient
-- (cr.dist.all_gather_with_grad), so NT-Xent's negatives are the global batch's; `gather =
-- fn(z) -> z of every rank` replaces that. Parameter names: trunk.*, head.*.
local cr = require 'crescent'
local util = require 'crescent.util'
local method_parts = require 'crescent.ssl.method_parts'
local nn = cr.nn
local losses = require 'crescent.ssl.losses'

local M = {}

local function fail(msg) error(msg, util.user_level()) end

-- The simclr section of recipes/simclr.lua, the options of SimCLR{} by the same names.
M.options = cr.config.options('simclr', {
  { 'temperature', 'number', 0.5, "NT-Xent's temperature", above = 0 },
})

-- What SimCLR{} takes beside its options: the trunk, the head's sizes, the gather of the
-- embeddings of every rank.
local WIRING = { trunk = true, feat_dim = true, hidden_dim = true, out_dim = true, head_bn = true, gather = true }

local SimCLR = nn.Module:extend('SimCLR')
M.SimCLR = SimCLR

function SimCLR:init(given)
  local feat, hidden, out = method_parts.method_options('SimCLR', given)
  local o = cr.config.take(M.options, 'SimCLR', given, WIRING)
  self.temperature = o.temperature
  if o.gather ~= nil and type(o.gather) ~= 'function' then fail('SimCLR: gather must be a function(z) -> z of all ranks') end
  self.gather = o.gather
  self.trunk = o.trunk
  self.head = method_parts.head('SimCLR', o, feat, hidden, out, true)
end

function SimCLR:features(x) return self.trunk(x) end

-- forward(views) -> {z1 = [B, D], z2 = [B, D]} (not normalised; nt_xent normalises)
function SimCLR:forward(views)
  if type(views) ~= 'table' or cr.is_tensor(views) or #views ~= 2 then
    fail('SimCLR: the input must be a list of 2 views of the same batch (a two_views loader gives it)')
  end
  local B = views[1].shape[1]
  local z = self.head(self.trunk(cr.cat(views, 0)))
  return { z1 = z:narrow(0, 0, B), z2 = z:narrow(0, B, B) }
end

function SimCLR:loss(out)
  local z1, z2 = out.z1, out.z2
  local gather = self.gather or (cr.dist.is_distributed() and cr.dist.all_gather_with_grad)
  if gather then z1, z2 = gather(z1), gather(z2) end
  return losses.nt_xent(z1, z2, { temperature = self.temperature })
end

function SimCLR.hooks() return {} end
method_parts.stateless(SimCLR, 'SimCLR')

function SimCLR:extra_repr() return string.format('temperature=%g', self.temperature) end

-- ---- recipes ------------------------------------------------------------------------
function M.build(cfg, parts)
  method_parts.check_views(cfg, 'simclr', 'SimCLR', 2)
  return SimCLR(method_parts.wired(cfg, parts, cfg.simclr, { head_bn = cfg.model.head_bn }))
end

return M
