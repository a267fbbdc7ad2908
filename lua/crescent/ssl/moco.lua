-- crescent.ssl.moco — MoCo v2 (Chen et al. 2020) as a module: a query encoder (trunk +
-- MLP head) trained by InfoNCE against a momentum key encoder (an EMA of the query
-- encoder, one fused C update over all parameters) and a queue of negatives.
--
--   local m = cr.ssl.moco.MoCo{trunk = resnet, key_trunk = resnet_copy, feat_dim = 128,
--       hidden_dim = 512, out_dim = 128, head_bn = false, queue_length = 4096, temperature = 0.2,
--       momentum = 0.99, cosine_momentum = false, bn_splits = 8, batch_size = 256}
--   local out = m(views)               -- views = {query crops [B, C, h, w], key crops}
--   local loss = m:loss(out)           -- InfoNCE; enqueues the keys afterwards
--   for _, h in ipairs(m:hooks()) do task:add_hook(h) end   -- the cosine momentum schedule
--
-- key_trunk is a second trunk of the same architecture (its weights are overwritten with
-- the query trunk's at construction; its parameters never require grad). The key encoder
-- is updated by EMA at the start of every forward, before the keys are computed, as MoCo
-- does. The head is MoCo v2's Linear -> ReLU -> Linear (head_bn adds a BatchNorm1d after
-- the hidden Linear).
-- BatchNorm as on bn_splits GPUs: every BatchNorm of both encoders (trunks and heads)
-- takes its training statistics from bn_splits groups of B / bn_splits samples
-- (nn.split_batchnorm), as MoCo's per-GPU BatchNorm does and its single-GPU CIFAR demo
-- imitates with SplitBatchNorm. Shuffle-BN: the keys' batch is permuted before the key
-- encoder and put back in order after it, so a query and its key never share a group's
-- statistics (with bn_splits = 1 there is nothing to shuffle). On k ranks each rank's
-- batch is split so, and the shuffle is global, as MoCo's: the key crops of every rank
-- are gathered, permuted by rank 0's permutation, each rank encodes its slice, and the
-- keys are gathered and put back in order; the queue takes the keys of every rank (k * B
-- per step, as MoCo's concat_all_gather). SyncBatchNorm (dist.sync_bn) would share the
-- statistics that shuffle-BN keeps apart; the MoCo recipe leaves it off. The queue starts
-- as random unit vectors, as MoCo's. Parameter names: trunk.*, head.*, key_trunk.*, key_head.*.
local checks = require 'crescent.checks'
local cr = require 'crescent'
local util = require 'crescent.util'
local nn = cr.nn
local method_parts = require 'crescent.ssl.method_parts'
local momentum = require 'crescent.ssl.momentum'
local losses = require 'crescent.ssl.losses'
local Queue = require 'crescent.ssl.queue'

local M = {}

local function fail(msg) error(msg, util.user_level()) end

-- The moco section of recipes/moco.lua, the options of MoCo{} by the same names, with
-- MoCo v2's defaults (the recipe sets its own).
M.options = cr.config.options('moco', {
  { 'queue_length', 'integer', 4096, 'negative keys kept from earlier batches', min = 1 },
  { 'temperature', 'number', 0.2, "InfoNCE's temperature", above = 0 },
  { 'momentum', 'number', 0.999, "the key encoder's EMA momentum", min = 0, max = 1 },
  { 'cosine_momentum', 'boolean', false, 'raise the momentum to 1 along a cosine (BYOL-style)' },
  { 'bn_splits', 'integer', 1, "BatchNorm over this many groups of the batch in both encoders (MoCo's GPUs)", min = 1 },
})

-- What MoCo{} takes beside its options: the two trunks, the head's sizes, the batch.
local WIRING = { trunk = true, key_trunk = true, feat_dim = true, hidden_dim = true, out_dim = true, head_bn = true,
                 batch_size = true }

local function int(name, v, lo) return checks.int('MoCo', name, v, lo) end

local MoCo = nn.Module:extend('MoCo')
M.MoCo = MoCo

function MoCo:init(given)
  local feat, hidden, out = method_parts.method_options('MoCo', given, '{trunk = a, key_trunk = b, feat_dim = 128}')
  local o = cr.config.take(M.options, 'MoCo', given, WIRING)
  if not nn.is_module(o.key_trunk) or o.key_trunk == o.trunk then
    fail('MoCo: key_trunk must be a second module of the same architecture as trunk (build the model twice)')
  end
  local L = o.queue_length
  local B = int('batch_size', o.batch_size, 1)
  self.temperature = o.temperature
  self.base_momentum, self.momentum = o.momentum, o.momentum
  self.cosine_momentum = o.cosine_momentum
  self.bn_splits = o.bn_splits
  if B % self.bn_splits ~= 0 then
    fail(string.format('MoCo: bn_splits %d does not divide the batch size %d', self.bn_splits, B))
  end
  self.queue = Queue(L, out, { batch_size = B })  -- checks that L is a multiple of B
  -- MoCo v2's head has no BatchNorm
  self.trunk, self.head = o.trunk, method_parts.head('MoCo', o, feat, hidden, out, false)
  self.key_trunk, self.key_head = o.key_trunk, method_parts.head('MoCo', o, feat, hidden, out, false)
  for _, part in ipairs { self.trunk, self.head, self.key_trunk, self.key_head } do
    nn.split_batchnorm(part, self.bn_splits)
  end
  local q, k = self:query_parameters(), self:key_parameters()
  if #q ~= #k then fail('MoCo: trunk and key_trunk differ in their parameters; build both with the same constructor') end
  momentum.copy_tensors(k, q)
  for _, np in ipairs(k) do np[2].requires_grad = false end
  cr.no_grad(function()
    self.queue.data:copy_(cr.randn({ L, out }):normalize({ dim = 1 }))
  end)
  self.queue.filled, self.queue.batch = L, B
end

-- The queue follows the module to a device or dtype (Module:to).
function MoCo:extra_to(what) self.queue:to(what) end

-- {name, tensor} pairs of the query encoder and of the key encoder, in the same order.
function MoCo:query_parameters() return momentum.named_parameters_of(self.trunk, self.head) end
function MoCo:key_parameters() return momentum.named_parameters_of(self.key_trunk, self.key_head) end

-- The trunk's features of a batch of images (what kNN and linear probes use).
function MoCo:features(x) return self.trunk(x) end

-- The key encoder on x, its batch permuted at random (and put back) when its BatchNorm
-- is split.
function MoCo:_key_encode(x) return self.key_head(self.key_trunk(x)) end
function MoCo:_encode_shuffled(x)
  if self.bn_splits == 1 then return self:_key_encode(x) end
  local perm = cr.randperm(x.shape[1], { device = x.device })
  return self:_key_encode(x:index_select(0, perm)):index_select(0, perm:argsort())
end

-- Keys [B, out_dim], L2-normalised, from the key encoder with shuffle-BN; no graph.
function MoCo:keys(x)
  return cr.no_grad(function()
    local dist = cr.dist
    if not dist.is_distributed() then return self:_encode_shuffled(x):normalize({ dim = 1 }) end
    local B, r = x.shape[1], dist.rank()
    local all = dist.all_gather(x)
    local perm = dist.broadcast(cr.randperm(all.shape[1], { device = x.device }), 0)
    local mine = self:_key_encode(all:index_select(0, perm:narrow(0, r * B, B)))
    local k = dist.all_gather(mine):index_select(0, perm:argsort())
    return k:narrow(0, r * B, B):normalize({ dim = 1 })
  end)
end

-- forward(views) -> {q = [B, D] (with graph), k = [B, D] (no graph)}
function MoCo:forward(views)
  if type(views) ~= 'table' or cr.is_tensor(views) or #views ~= 2 then
    fail('MoCo: the input must be a list of 2 views {query crops, key crops} (a two_views loader gives it)')
  end
  local q = self.head(self.trunk(views[1])):normalize({ dim = 1 })
  momentum.ema_update(self:key_parameters(), self:query_parameters(), self.momentum)
  local k = self:keys(views[2])
  return { q = q, k = k }
end

-- InfoNCE of a forward's output against the queue; enqueues the keys afterwards.
function MoCo:loss(out)
  -- a copy: the product saves the negatives for q's gradient, and enqueue writes the queue
  local negatives = self.queue:buffer():clone()
  local loss, logits = losses.infonce(out.q, out.k, negatives, { temperature = self.temperature })
  out.logits = logits
  self.queue:enqueue(cr.dist.is_distributed() and cr.dist.all_gather(out.k) or out.k)
  return loss
end

function MoCo:extra_state() return { queue = self.queue:state_dict() } end
function MoCo:load_extra_state(states) Queue.load_named({ queue = self.queue }, states, 'MoCo:load_extra_state') end

-- The momentum schedule (cosine from base momentum to 1 over training, when asked), set
-- before each train step; the value goes into the storage as 'momentum'.
function MoCo:hooks() return { momentum.schedule_hook('moco', self) } end

function MoCo:extra_repr()
  return string.format('queue_length=%d, temperature=%g, momentum=%g%s, bn_splits=%d', self.queue.length,
    self.temperature, self.base_momentum, self.cosine_momentum and ' (cosine)' or '', self.bn_splits)
end

-- ---- recipes ------------------------------------------------------------------------
-- The config section of recipes/moco.lua and its defaults (scaled for Fashion-MNIST: a
-- shorter run than ImageNet's, so a faster-moving key encoder; BatchNorm in groups of 32
-- at batch 256, as MoCo's 8 GPUs and its CIFAR demo).
-- build(cfg, parts) -> MoCo, from the recipe config (crescent.recipe.ssl makes parts).
function M.build(cfg, parts)
  method_parts.check_views(cfg, 'moco', 'MoCo', 2)
  return MoCo(method_parts.wired(cfg, parts, cfg.moco, { head_bn = cfg.model.head_bn, key_trunk = parts.trunk(),
                                                          batch_size = cfg.data.batch_size }))
end

return M
