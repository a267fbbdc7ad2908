-- crescent.ssl.simsiam — SimSiam (Chen & He 2021) as a module: a trunk, a projector (an
-- MLP whose last Linear is followed by a BatchNorm without affine parameters) and a
-- bottleneck predictor. Each view's prediction regresses the other view's projection,
-- which is detached (the stop-gradient): loss = (D(p1, z2) + D(p2, z1)) / 2 with D the
-- negative cosine similarity. No momentum encoder, no negatives.
--
--   local m = cr.ssl.simsiam.SimSiam{trunk = resnet, feat_dim = 128, hidden_dim = 512, out_dim = 512,
--                                    pred_dim = 128, proj_layers = 2}
--   local loss = m:loss(m(views))      -- views = {crops [B, C, h, w], crops [B, C, h, w]}
--
-- As the official code, each view goes through the encoder on its own (BatchNorm
-- statistics per view), the projector's Linears have no bias (a BatchNorm follows each),
-- and the predictor is Linear -> BatchNorm -> ReLU -> Linear. fix_pred_lr = true keeps the
-- predictor's lr at the peak while the rest follows the schedule (the paper's setting):
-- m:param_groups(named) puts the predictor in its own optimizer group with fix_lr = true,
-- which schedules leave at the lr the optimizer was made with (the recipe's peak).
-- Parameter names: trunk.*, projector.*, predictor.*.
local cr = require 'crescent'
local util = require 'crescent.util'
local nn = cr.nn
local method_parts = require 'crescent.ssl.method_parts'
local losses = require 'crescent.ssl.losses'

local M = {}

local function fail(msg) error(msg, util.user_level()) end

-- The simsiam section of recipes/simsiam.lua, the options of SimSiam{} by the same names,
-- with SimSiam's defaults (the recipe sets its own).
M.options = cr.config.options('simsiam', {
  { 'pred_dim', 'integer', 0, "the predictor's bottleneck width (0: out_dim / 4, the paper's ratio)", min = 0 },
  { 'proj_layers', 'integer', 3, "the projector's Linear layers (the paper: 3, CIFAR: 2)", min = 1 },
  { 'fix_pred_lr', 'boolean', true, "keep the predictor's lr at the peak (no schedule)" },
})

-- What SimSiam{} takes beside its options: the trunk and the sizes.
local WIRING = { trunk = true, feat_dim = true, hidden_dim = true, out_dim = true }

local SimSiam = nn.Module:extend('SimSiam')
M.SimSiam = SimSiam

function SimSiam:init(given)
  local feat, hidden, out = method_parts.method_options('SimSiam', given, '{trunk = model, feat_dim = 128}')
  local o = cr.config.take(M.options, 'SimSiam', given, WIRING)
  local pred, layers = o.pred_dim, o.proj_layers
  if pred == 0 then pred = math.max(1, math.floor(out / 4)) end
  if layers > 1 and hidden == 0 then fail('SimSiam: a projector of 2 or more layers needs hidden_dim > 0') end
  self.fix_pred_lr = o.fix_pred_lr
  local dims = { feat }
  for _ = 1, layers - 1 do dims[#dims + 1] = hidden end
  dims[#dims + 1] = out
  self.trunk = o.trunk
  self.projector = nn.MLP { dims = dims, bn = true, bias = false, last_bn = true, last_bn_affine = false }
  self.predictor = nn.MLP { dims = { out, pred, out }, bn = true }
end

function SimSiam:features(x) return self.trunk(x) end

-- forward(views) -> {p1, p2 (with graph), z1, z2 (projections; the loss detaches them)}
function SimSiam:forward(views)
  if type(views) ~= 'table' or cr.is_tensor(views) or #views ~= 2 then
    fail('SimSiam: the input must be a list of 2 views of the same batch (a two_views loader gives it)')
  end
  local z1 = self.projector(self.trunk(views[1]))
  local z2 = self.projector(self.trunk(views[2]))
  return { p1 = self.predictor(z1), p2 = self.predictor(z2), z1 = z1, z2 = z2 }
end

function SimSiam.loss(_, out)
  return (losses.cosine_prediction(out.p1, out.z2) + losses.cosine_prediction(out.p2, out.z1)) * 0.5
end

-- The optimizer's input groups for named parameters ({name, tensor} pairs): the
-- predictor apart (group name 'predictor', fix_lr) when its lr is fixed, else one group.
function SimSiam:param_groups(named)
  if not self.fix_pred_lr then return { { params = named } } end
  local rest, pred = {}, {}
  for _, np in ipairs(named) do
    local list = np[1]:find('^predictor%.') and pred or rest
    list[#list + 1] = np
  end
  local groups = { { params = rest } }
  if #pred > 0 then groups[#groups + 1] = { params = pred, name = 'predictor', fix_lr = true } end
  return groups
end

function SimSiam.hooks() return {} end

method_parts.stateless(SimSiam, 'SimSiam')

function SimSiam:extra_repr() return string.format('fix_pred_lr=%s', tostring(self.fix_pred_lr)) end

-- ---- recipes ------------------------------------------------------------------------
function M.build(cfg, parts)
  method_parts.check_views(cfg, 'simsiam', 'SimSiam', 2)
  return SimSiam(method_parts.wired(cfg, parts, cfg.simsiam))
end

return M
