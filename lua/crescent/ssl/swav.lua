-- crescent.ssl.swav — SwAV (Caron et al. 2020) as a module: trunk -> projection head ->
-- L2-normalised embedding -> prototypes (a Linear without bias whose rows are kept on the
-- unit sphere), the swapped-prediction loss over multi-crop views with codes from
-- Sinkhorn-Knopp (C), an optional queue with VISSL's start epoch, and the hooks the method
-- needs in a task (prototype normalisation after every step, prototypes frozen for the
-- first iterations).
--
--   local m = cr.ssl.swav.SwAV{trunk = resnet, feat_dim = 128, hidden_dim = 512, out_dim = 128,
--       num_prototypes = 100, temperature = 0.1, epsilon = 0.05, sinkhorn_iterations = 3,
--       crops_for_assign = {0, 1}, queue_length = 0, queue_start_epoch = 0, queue_start_iteration = 0,
--       freeze_prototypes_iterations = 100}     -- M.options: each option's type, range, default
--   local out = m(crops)                 -- crops: the list of crop batches [B, C, h, w]
--   local loss = m:loss(out)             -- scalar; out.codes holds the assignments
--   for _, h in ipairs(m:hooks()) do task:add_hook(h) end
--
-- Crops of the same size that follow each other go through the trunk together (one
-- forward per resolution, as SwAV's multi-resolution forward), so the trunk's BatchNorm
-- statistics are per resolution group; the head then runs once over every crop.
-- Parameter names: trunk.*, head.*, prototypes.weight.
-- The queue (one per assigned crop, of detached embeddings) is filled from the epoch
-- queue_start_epoch (SwAV's epoch_queue_starts) and the iteration queue_start_iteration
-- (VISSL's queue.start_iter) on, and used once full; its scores come from the current
-- prototypes.
local checks = require 'crescent.checks'
local cr = require 'crescent'
local util = require 'crescent.util'
local method_parts = require 'crescent.ssl.method_parts'
local nn = cr.nn
local losses = require 'crescent.ssl.losses'
local Queue = require 'crescent.ssl.queue'

local M = {}

local function fail(msg) error(msg, util.user_level()) end

-- The swav section of recipes/swav.lua, the options of SwAV{} by the same names, with
-- SwAV's defaults (the recipe sets its own values for 28 px images).
M.options = cr.config.options('swav', {
  { 'num_prototypes', 'integer', 100, 'the number of prototypes (clusters)', min = 2, was = 'prototypes' },
  { 'temperature', 'number', 0.1, 'the softmax temperature of the swapped prediction', above = 0 },
  { 'epsilon', 'number', 0.05, "Sinkhorn's entropic regularisation (the codes' sharpness)", above = 0 },
  { 'sinkhorn_iterations', 'integer', 3, 'Sinkhorn-Knopp iterations per batch', min = 0 },
  { 'crops_for_assign', 'list', { 0, 1 }, 'the crops (0-based) whose codes the others predict', elem = 'integer' },
  { 'queue_length', 'integer', 0, 'earlier embeddings added to the Sinkhorn batch (0: none)', min = 0 },
  { 'queue_start_epoch', 'integer', 0, 'the queue is used from this epoch on', min = 0 },
  { 'queue_start_iteration', 'integer', 0, 'and not before this step', min = 0 },
  { 'freeze_prototypes_iterations', 'integer', 0, 'the prototypes get no update for the first N steps', min = 0,
    was = 'freeze_prototypes_iters' },
})

-- What SwAV{} takes beside its options: the trunk and head (crescent.ssl.method_parts),
-- the crop count and global batch to check against, and Sinkhorn's reduce.
local WIRING = { trunk = true, feat_dim = true, hidden_dim = true, out_dim = true, head_bn = true, num_crops = true,
                 batch_size = true, sinkhorn_reduce = true }

local function int(name, v, lo) return checks.int('SwAV', name, v, lo) end

local SwAV = nn.Module:extend('SwAV')
M.SwAV = SwAV

function SwAV:init(given)
  local feat, hidden, out = method_parts.method_options('SwAV', given)
  local o = cr.config.take(M.options, 'SwAV', given, WIRING)
  local K = o.num_prototypes
  self.temperature = o.temperature
  self.epsilon = o.epsilon
  self.sinkhorn_iterations = o.sinkhorn_iterations
  -- Sinkhorn's sums over the ranks of a distributed run: nil or true (over every rank when
  -- there are several), false (each rank alone), or a table for ssl.sinkhorn's reduce
  self.sinkhorn_reduce = o.sinkhorn_reduce
  self.crops_for_assign = o.crops_for_assign
  local cfa = self.crops_for_assign
  if #cfa == 0 then fail('SwAV: crops_for_assign must be a non-empty list of crop ids (0-based)') end
  if o.num_crops ~= nil then
    local V = int('num_crops', o.num_crops, 2)
    for _, c in ipairs(cfa) do
      if type(c) ~= 'number' or c ~= math.floor(c) or c < 0 or c >= V then
        fail(string.format('SwAV: crops_for_assign has %s, outside the %d crops (ids 0 .. %d); '
          .. 'pick ids of global crops, e.g. {0, 1}', tostring(c), V, V - 1))
      end
    end
    self.num_crops = V
  end
  self.queue_length = o.queue_length
  self.queue_start_epoch = o.queue_start_epoch
  self.queue_start_iteration = o.queue_start_iteration
  self.freeze_prototypes_iterations = o.freeze_prototypes_iterations
  if self.queue_length > 0 then
    local B = o.batch_size
    if B == nil then fail('SwAV: with a queue, give batch_size (the global batch) so its length can be checked') end
    if self.queue_length % B ~= 0 then
      fail(string.format('SwAV: queue_length %d is not a multiple of the batch size %d; use e.g. %d',
        self.queue_length, B, math.max(B, math.floor(self.queue_length / B) * B)))
    end
    self.queues = {}
    for j = 1, #cfa do self.queues[j] = Queue(self.queue_length, out, { batch_size = B }) end
  end
  self.trunk = o.trunk
  self.head = method_parts.head('SwAV', o, feat, hidden, out, true)
  self.prototypes = nn.Linear(out, K, { bias = false })
  self.epoch, self.iteration = 0, 0
  self:normalize_prototypes()
end

-- Rows of the prototype matrix back onto the unit sphere (under no_grad).
function SwAV:normalize_prototypes()
  local w = self.prototypes.weight
  cr.no_grad(function() w:copy_(w:normalize({ dim = 1 })) end)
end

-- The trunk's features of a batch of images (what kNN and linear probes use).
function SwAV:features(x) return self.trunk(x) end

-- L2-normalised embeddings [sum of crop batches, out_dim] of a list of crops: one trunk
-- forward per run of same-sized crops, then the head once over every crop's features
-- (SwAV's forward_head), so the head's BatchNorm takes its statistics from all crops.
function SwAV:embed(crops) return method_parts.multicrop_embed(self.trunk, self.head, crops) end

-- forward(crops) -> {embedding = [V B, D], scores = {V tensors [B, K]}, batch = B}
function SwAV:forward(crops)
  if type(crops) ~= 'table' or cr.is_tensor(crops) or #crops < 2 then
    fail('SwAV: the input must be a list of at least 2 crop batches [B, C, h, w] (a multicrop loader gives it)')
  end
  local B = crops[1].shape[1]
  for v, c in ipairs(crops) do
    if not cr.is_tensor(c) or c.ndim ~= 4 or c.shape[1] ~= B then
      fail(string.format('SwAV: crop %d must be a batch [%d, C, h, w] like crop 0', v - 1, B))
    end
  end
  if self.num_crops and #crops ~= self.num_crops then
    fail(string.format('SwAV: built for %d crops but the batch holds %d; make num_crops match the loader\'s crops',
      self.num_crops, #crops))
  end
  local emb = self:embed(crops)
  local all = self.prototypes(emb)
  local scores = {}
  for v = 1, #crops do scores[v] = all:narrow(0, (v - 1) * B, B) end
  return { embedding = emb, scores = scores, batch = B }
end

-- The swapped-prediction loss of a forward's output; fills the queues afterwards.
function SwAV:queue_active()
  return self.queues ~= nil and self.epoch >= self.queue_start_epoch and self.iteration >= self.queue_start_iteration
end

-- ssl.sinkhorn's reduce for this run (nil: this rank's batch alone).
function SwAV:_sinkhorn_reduce()
  local r = self.sinkhorn_reduce
  if type(r) == 'table' then return r end
  if r == false then return nil end
  local dist = cr.dist
  if not dist.is_distributed() then return nil end
  if not self._reduce then
    self._reduce = { max = dist.double_reducer('max'), sum = dist.double_reducer('sum'), world = dist.world_size() }
  end
  return self._reduce
end

function SwAV:loss(out)
  local B, qs = out.batch, nil
  local queues = self.queues
  local active = self:queue_active()
  if active and queues[1]:full() then
    qs = cr.no_grad(function()
      local w = self.prototypes.weight:detach():t()
      local t = {}
      for j, q in ipairs(queues) do t[j] = q:newest_first():mm(w) end
      return t
    end)
  end
  local loss, codes = losses.swav_loss(out.scores, {
    crops_for_assign = self.crops_for_assign, temperature = self.temperature, epsilon = self.epsilon,
    iterations = self.sinkhorn_iterations, queue_scores = qs, reduce = self:_sinkhorn_reduce() })
  out.codes = codes
  if active then
    for j, c in ipairs(self.crops_for_assign) do queues[j]:enqueue(out.embedding:narrow(0, c * B, B)) end
  end
  return loss
end

-- The queues follow the module to a device or dtype (Module:to).
function SwAV:extra_to(what)
  for _, q in ipairs(self.queues or {}) do q:to(what) end
end

-- State beyond parameters and buffers (the queues), for checkpoints.
function SwAV:extra_state()
  local s = {}
  for j, q in ipairs(self.queues or {}) do s['queue' .. (j - 1)] = q:state_dict() end
  return s
end

function SwAV:load_extra_state(states)
  local qs = {}
  for j, q in ipairs(self.queues or {}) do qs['queue' .. (j - 1)] = q end
  Queue.load_named(qs, states, 'SwAV:load_extra_state')
end

-- The hooks a task running this method needs: the epoch and iteration for the queue,
-- the prototype normalisation after each train step, and the prototype freeze.
function SwAV:hooks()
  local method = self
  local hs = {
    { name = 'swav', priority = 45,
      before_phase = function(_, task) method.epoch = task.epoch end,
      before_step = function(_, task) method.iteration = task.iteration end,
      after_step = function(_, task) if task.phase_name == 'train' then method:normalize_prototypes() end end },
  }
  if self.freeze_prototypes_iterations > 0 then
    hs[#hs + 1] = cr.hooks.freeze { pattern = '^prototypes%.', iterations = self.freeze_prototypes_iterations }
  end
  return hs
end

function SwAV:extra_repr()
  return string.format('prototypes=%d, temperature=%g, epsilon=%g, sinkhorn_iterations=%d, queue_length=%d',
    self.prototypes.out_features, self.temperature, self.epsilon, self.sinkhorn_iterations, self.queue_length)
end

-- ---- recipes ------------------------------------------------------------------------
-- The multi-crop options SwAV adds (crescent.recipe.ssl.views): its assignment crops,
-- checked against the crops there.
function M.view_options(cfg) return { crops_for_assign = cfg.swav.crops_for_assign } end

-- build(cfg, parts) -> SwAV, from the recipe config (crescent.recipe.ssl makes parts).
function M.build(cfg, parts)
  return SwAV(method_parts.wired(cfg, parts, cfg.swav, { head_bn = cfg.model.head_bn,
    num_crops = method_parts.crop_count(cfg), batch_size = cfg.data.batch_size }))
end

return M
