-- crescent.ssl.npid — NPID, instance discrimination with a memory bank (Wu et al. 2018), as
-- a module: every training image is its own class. The trunk and a Linear give an
-- L2-normalised embedding v; a memory bank holds one embedding per training sample;
-- the loss is a softmax over the sample's own bank entry and `negatives` entries drawn
-- uniformly from the bank, at temperature T. After the step the batch's bank rows move
-- towards v: m_i = normalize(momentum * m_i + (1 - momentum) * v_i).
--
--   local m = cr.ssl.npid.NPID{trunk = resnet, feat_dim = 128, out_dim = 128, num_samples = 60000,
--                              negatives = 4096, temperature = 0.07, momentum = 0.5}
--   local out = m(views)               -- views = {crops [B, C, h, w]} (one view per sample)
--   local loss = m:loss(out, batch)    -- batch.index: each sample's index in the data set
--
-- The paper estimates the full softmax by NCE; the sampled softmax here is the other
-- usual estimate of it (the bank and its update are the paper's). The bank starts as
-- uniform noise in [-1/sqrt(D/3), 1/sqrt(D/3)], as the official code's (bank_init =
-- 'noise'), or as the untrained network's embeddings of every sample, one pass over
-- m.memory_loader before the first epoch (bank_init = 'features'): with noise, each
-- sample's first target is a random vector, and a schedule of a few epochs spends its
-- first one fitting the network to random vectors. The bank is method
-- state: checkpoints save it, and loading one made for a data set of another size is an
-- error. The negatives come from the global RNG, which checkpoints save too, so a resumed
-- run draws what the uninterrupted one would. Parameter names: trunk.*, head.*.
--
-- On w MPI ranks every rank holds the whole bank (N x D floats: 655 MB for ImageNet at
-- D = 128), draws the negatives of the global batch (the same draw on every rank) and
-- keeps those of its own samples, and applies every rank's row updates (all-gathered), so
-- the banks stay equal and w ranks x batch b train what one rank x batch w b does (the
-- sharded loader's sample j of rank r is sample j w + r of the global batch).
local checks = require 'crescent.checks'
local cr = require 'crescent'
local util = require 'crescent.util'
local nn = cr.nn
local method_parts = require 'crescent.ssl.method_parts'

local M = {}

local function fail(msg) error(msg, util.user_level()) end

-- The npid section of recipes/npid.lua, the options of NPID{} by the same names, with the
-- paper's defaults (the recipe sets its own).
M.options = cr.config.options('npid', {
  { 'negatives', 'integer', 4096, 'bank entries drawn as negatives for each sample', min = 1 },
  { 'temperature', 'number', 0.07, "the softmax's temperature", above = 0 },
  { 'momentum', 'number', 0.5, "the memory bank's update momentum", min = 0, max = 0.999999 },
  { 'bank_init', { 'noise', 'features' }, 'noise', "the bank's start: 'noise' (the paper's) or 'features' (one " ..
    'pass of the untrained network before the first epoch)' },
})

-- What NPID{} takes beside its options: the trunk, the sizes, the training set's size.
local WIRING = { trunk = true, feat_dim = true, out_dim = true, num_samples = true }

local NPID = nn.Module:extend('NPID')
M.NPID = NPID

function NPID:init(given)
  local feat, _, out = method_parts.method_options('NPID', given, '{trunk = model, feat_dim = 128, num_samples = n}')
  local o = cr.config.take(M.options, 'NPID', given, WIRING)
  local N = checks.int('NPID', 'num_samples', o.num_samples, 1)
  self.negatives = o.negatives
  self.temperature = o.temperature
  self.momentum = o.momentum
  self.trunk = o.trunk
  self.head = nn.Linear(feat, out)
  local stdv = 1 / math.sqrt(out / 3)
  self.bank = cr.rand(N, out) * (2 * stdv) - stdv
  self.bank_init = o.bank_init
  self.bank_filled = self.bank_init == 'noise'   -- the bank holds its starting values
end

-- The bank follows the module to a device or dtype (Module:to).
function NPID:extra_to(what) self.bank = self.bank:to(what) end

function NPID:features(x) return self.trunk(x) end

-- forward(views) -> {v = [B, D]}: the L2-normalised embeddings of the one view
function NPID:forward(views)
  if type(views) ~= 'table' or cr.is_tensor(views) or #views ~= 1 then
    fail('NPID: the input must be a list of 1 view (crops.num={1}); NPID compares a sample with the memory bank')
  end
  return { v = self.head(self.trunk(views[1])):normalize({ dim = 1 }) }
end

-- The softmax over each sample's own bank entry and the sampled ones; then the update of
-- the batch's bank rows.
function NPID:loss(out, batch)
  local v, N = out.v, self.bank.shape[1]
  local idx = method_parts.batch_index('NPID', batch, N, 'memory bank')
  local B, K = v.shape[1], self.negatives
  local dist = cr.dist
  local W = dist.is_distributed() and dist.world_size() or 1
  idx = idx:to(self.bank.device)
  local neg_idx = cr.randint(0, N, { B * W * K }, { device = self.bank.device })
  if W > 1 then neg_idx = neg_idx:view({ B, W, K }):select(1, dist.rank()):contiguous():view({ B * K }) end
  local own = self.bank:index_select(0, idx):to(v.dtype)                      -- [B, D]
  local neg = self.bank:index_select(0, neg_idx):view({ B, K, -1 }):to(v.dtype)  -- [B, K, D]
  local l_pos = (v * own):sum(1, true)                                         -- [B, 1]
  local l_neg = neg:bmm(v:view({ B, -1, 1 })):view({ B, K })                   -- [B, K]
  local logits = cr.cat({ l_pos, l_neg }, 1) / self.temperature
  local labels = cr.zeros({ B }, { dtype = 'i64', device = v.device })
  local loss = cr.cross_entropy(logits, labels)
  local new = cr.no_grad(function()
    local old = self.bank:index_select(0, idx)
    return (old * self.momentum + v:detach():to(old.dtype) * (1 - self.momentum)):normalize({ dim = 1 })
  end)
  method_parts.write_rows(self.bank, idx, new)
  return loss
end

-- Fills the bank with the embeddings of one pass over a loader (its batches carry index).
function NPID:fill_bank(loader, device)
  method_parts.memory_pass(self, loader, device, function(out, _, index)
    method_parts.write_rows(self.bank, index:to(self.bank.device), out.v)
  end)
  self.bank_filled = true
end

-- With bank_init = 'features': the fill pass at the start of the first train phase.
function NPID:hooks()
  local method = self
  return {
    { name = 'npid', priority = 40,
      before_phase = function(_, task)
        if task.phase_name ~= 'train' or method.bank_filled then return end
        if not method.memory_loader then
          error("NPID: bank_init = 'features' needs m.memory_loader (a loader of the training set with the same " ..
            'view) or a call of m:fill_bank(loader) before training', 0)
        end
        method:fill_bank(method.memory_loader, task.device)
      end },
  }
end

function NPID:extra_state() return { bank = { memory = self.bank, filled = self.bank_filled and 1 or 0 } } end

function NPID:load_extra_state(states)
  local s = states.bank
  if type(s) ~= 'table' or not cr.is_tensor(s.memory) then
    error('NPID:load_extra_state: the saved state has no memory bank (was it saved by another method?)', 0)
  end
  local want, got = self.bank.shape, s.memory.shape
  if #got ~= 2 or got[1] ~= want[1] or got[2] ~= want[2] then
    error(string.format('NPID:load_extra_state: the saved memory bank is [%s] but this run has [%d, %d]: it was ' ..
      'made for a data set of another size (or another out_dim); resume it with the same data', table.concat(got, ', '),
      want[1], want[2]), 0)
  end
  cr.no_grad(function() self.bank:copy_(s.memory:to(self.bank.device)) end)
  self.bank_filled = s.filled ~= 0   -- checkpoints from before bank_init hold a started bank
end

function NPID:extra_repr()
  return string.format('num_samples=%d, negatives=%d, temperature=%g, momentum=%g, bank_init=%s', self.bank.shape[1],
    self.negatives, self.temperature, self.momentum, self.bank_init)
end

-- ---- recipes ------------------------------------------------------------------------
function M.build(cfg, parts)
  method_parts.check_views(cfg, 'npid', 'NPID', 1)
  local n = cfg.npid
  local m = NPID { trunk = parts.trunk(), feat_dim = parts.feat_dim, out_dim = cfg.model.out_dim,
                   num_samples = parts.num_samples, negatives = n.negatives, temperature = n.temperature,
                   momentum = n.momentum, bank_init = n.bank_init }   -- every option of M.options
  if n.bank_init == 'features' then m.memory_loader = method_parts.memory_loader(cfg, parts) end
  return m
end

return M
