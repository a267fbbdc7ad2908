-- crescent.ssl.byol — BYOL (Grill et al. 2020) as a module: an online network (trunk,
-- projector, predictor) regresses the projections of a target network (trunk and
-- projector), an exponential moving average of the online one. Symmetric loss: each
-- view's prediction against the other view's target projection, 2 - 2 cos per pair,
-- averaged over the batch and summed over the two directions.
--
--   local m = cr.ssl.byol.BYOL{trunk = resnet, target_trunk = resnet_copy, feat_dim = 128,
--                              hidden_dim = 1024, out_dim = 256, momentum = 0.99, cosine_momentum = true}
--   local loss = m:loss(m(views))      -- views = {crops [B, C, h, w], crops [B, C, h, w]}
--   for _, h in ipairs(m:hooks()) do task:add_hook(h) end   -- the momentum schedule
--
-- The projector and predictor are Linear -> BatchNorm -> ReLU -> Linear. target_trunk is a
-- second trunk of the same architecture: at construction the target takes the online
-- weights, and its parameters never require grad. The target moves by one fused C EMA at
-- the start of every forward (after the previous optimizer step, as BYOL's update), with
-- momentum 1 - (1 - m0) (cos(pi k / K) + 1) / 2 at step k of K when cosine_momentum (the
-- paper's schedule, m0 = 0.996 for ImageNet). Each view goes through the networks on its
-- own (BatchNorm statistics per view). Parameter names: trunk.*, projector.*,
-- predictor.*, target_trunk.*, target_projector.*.
local cr = require 'crescent'
local util = require 'crescent.util'
local nn = cr.nn
local method_parts = require 'crescent.ssl.method_parts'
local momentum = require 'crescent.ssl.momentum'
local losses = require 'crescent.ssl.losses'

local M = {}

local function fail(msg) error(msg, util.user_level()) end

-- The byol section of recipes/byol.lua, the options of BYOL{} by the same names, with
-- BYOL's defaults (the recipe sets its own).
M.options = cr.config.options('byol', {
  { 'momentum', 'number', 0.996, "the target network's EMA momentum (at the start)", min = 0, max = 1 },
  { 'cosine_momentum', 'boolean', true, 'raise the momentum to 1 along a cosine over training' },
})

-- What BYOL{} takes beside its options: the two trunks and the sizes.
local WIRING = { trunk = true, target_trunk = true, feat_dim = true, hidden_dim = true, out_dim = true }

local BYOL = nn.Module:extend('BYOL')
M.BYOL = BYOL

function BYOL:init(given)
  local feat, hidden, out = method_parts.method_options('BYOL', given, '{trunk = a, target_trunk = b, feat_dim = 128}')
  local o = cr.config.take(M.options, 'BYOL', given, WIRING)
  if not nn.is_module(o.target_trunk) or o.target_trunk == o.trunk then
    fail('BYOL: target_trunk must be a second module of the same architecture as trunk (build the model twice)')
  end
  if hidden == 0 then fail('BYOL: the projector and predictor need hidden_dim > 0') end
  self.base_momentum, self.momentum = o.momentum, o.momentum
  self.cosine_momentum = o.cosine_momentum
  local function mlp(a) return nn.MLP { dims = { a, hidden, out }, bn = true } end
  self.trunk, self.projector, self.predictor = o.trunk, mlp(feat), mlp(out)
  self.target_trunk, self.target_projector = o.target_trunk, mlp(feat)
  local online, target = self:online_parameters(), self:target_parameters()
  if #online ~= #target then
    fail('BYOL: trunk and target_trunk differ in their parameters; build both with the same constructor')
  end
  momentum.copy_tensors(target, online)
  for _, np in ipairs(target) do np[2].requires_grad = false end
end

-- The online trunk and projector, and the target's, as {name, tensor} pairs in one order.
function BYOL:online_parameters() return momentum.named_parameters_of(self.trunk, self.projector) end
function BYOL:target_parameters() return momentum.named_parameters_of(self.target_trunk, self.target_projector) end

function BYOL:features(x) return self.trunk(x) end

-- forward(views) -> {p1, p2 (online predictions, with graph), t1, t2 (target projections)}
function BYOL:forward(views)
  if type(views) ~= 'table' or cr.is_tensor(views) or #views ~= 2 then
    fail('BYOL: the input must be a list of 2 views of the same batch (a two_views loader gives it)')
  end
  momentum.ema_update(self:target_parameters(), self:online_parameters(), self.momentum)
  local out = {}
  for i, x in ipairs(views) do
    out['p' .. i] = self.predictor(self.projector(self.trunk(x)))
  end
  cr.no_grad(function()
    for i, x in ipairs(views) do out['t' .. i] = self.target_projector(self.target_trunk(x)) end
  end)
  return out
end

-- 2 - 2 cos(p1, t2) + 2 - 2 cos(p2, t1), each averaged over the batch.
function BYOL.loss(_, out)
  return (losses.cosine_prediction(out.p1, out.t2) + losses.cosine_prediction(out.p2, out.t1)) * 2 + 4
end

-- The momentum schedule, set before each train step; the value goes into the storage.
function BYOL:hooks() return { momentum.schedule_hook('byol', self) } end

method_parts.stateless(BYOL, 'BYOL')

function BYOL:extra_repr()
  return string.format('momentum=%g%s', self.base_momentum, self.cosine_momentum and ' (cosine to 1)' or '')
end

-- ---- recipes ------------------------------------------------------------------------
function M.build(cfg, parts)
  method_parts.check_views(cfg, 'byol', 'BYOL', 2)
  return BYOL(method_parts.wired(cfg, parts, cfg.byol, { target_trunk = parts.trunk() }))
end

return M
