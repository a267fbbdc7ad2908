-- crescent.ssl.deepcluster_v2 — DeepCluster-v2 (as in the SwAV paper's code) as a module:
-- multi-crop embeddings (trunk, MLP head, L2 norm) classified by several prototype heads
-- whose weights are k-means centroids of a memory bank of the previous epoch's
-- embeddings; the targets are each sample's cluster in that k-means.
--
--   local m = cr.ssl.deepcluster_v2.DeepClusterV2{trunk = resnet, feat_dim = 128, hidden_dim = 512,
--       out_dim = 128, num_prototypes = {300, 300, 300}, temperature = 0.1, crops_for_assign = {0, 1},
--       num_crops = 6, num_samples = 60000, kmeans_iterations = 10}
--   m:cluster()                         -- at each epoch's start (m:hooks() does it)
--   local loss = m:loss(m(crops), batch)   -- batch.index: each sample's index in the data set
--
-- Memory: for each crop of crops_for_assign, one embedding per training sample, written
-- as the samples are seen (under no_grad). Clustering, for head h of K_h centroids on the
-- memory of crop (h - 1) % #crops_for_assign: centroids start as K_h random embeddings,
-- then kmeans_iterations rounds of assignment by the largest dot product and centroid =
-- normalised mean of its members (an empty cluster keeps its centroid), then a final
-- assignment; the head's weights become the centroids and the assignments its targets.
-- Loss: the mean over heads of the cross-entropy of every crop's scores / T against its
-- sample's cluster. Before the first epoch the memory is filled by one pass over the
-- training set (m:fill_memory(loader), which the hook runs with the recipe's loader).
-- The memory, the assignments and the epoch they were made for are method state, so a run
-- resumed mid-epoch keeps its clusters.
-- Parameter names: trunk.*, head.*, prototypes.<h - 1>.weight.
--
-- On w MPI ranks every rank holds the whole memory and writes every rank's rows into it
-- (all-gathered each step, and in the fill pass over the rank's shard), and the k-means
-- runs on every rank from rank 0's draw of the first centroids, so all ranks hold the
-- same clusters and w ranks x batch b train what one rank x batch w b does. The official
-- code shards the memory and all-reduces the k-means sums instead; here each rank keeps
-- N x out_dim floats per assigned crop (1.3 GB for ImageNet at 128 and two crops).
local checks = require 'crescent.checks'
local cr = require 'crescent'
local util = require 'crescent.util'
local nn = cr.nn
local method_parts = require 'crescent.ssl.method_parts'

local M = {}

local function fail(msg) error(msg, util.user_level()) end

-- The deepcluster_v2 section of recipes/deepcluster_v2.lua, the options of DeepClusterV2{}
-- by the same names (num_prototypes also takes one number: one head).
M.options = cr.config.options('deepcluster_v2', {
  { 'num_prototypes', 'list', { 300, 300, 300 }, 'the k of each prototype head (k-means clusters)', elem = 'integer',
    was = 'prototypes' },
  { 'temperature', 'number', 0.1, "the scores' temperature", above = 0 },
  { 'crops_for_assign', 'list', { 0, 1 }, 'the crops (0-based) whose embeddings are clustered', elem = 'integer' },
  { 'kmeans_iterations', 'integer', 10, 'k-means rounds at each epoch start', min = 0 },
})

-- What DeepClusterV2{} takes beside its options: the trunk and head, the crop count, the
-- training set's size.
local WIRING = { trunk = true, feat_dim = true, hidden_dim = true, out_dim = true, head_bn = true, num_crops = true,
                 num_samples = true }

local IGNORE = -100   -- a sample no clustering has seen yet: no target

local DeepClusterV2 = nn.Module:extend('DeepClusterV2')
M.DeepClusterV2 = DeepClusterV2

local function int(name, v, lo) return checks.int('DeepClusterV2', name, v, lo) end

function DeepClusterV2:init(given)
  local feat, hidden, out = method_parts.method_options('DeepClusterV2', given,
    '{trunk = model, feat_dim = 128, num_samples = n}')
  if type(given.num_prototypes) == 'number' then   -- one head
    local copy = {}
    for k, v in pairs(given) do copy[k] = v end
    copy.num_prototypes = { given.num_prototypes }
    given = copy
  end
  local o = cr.config.take(M.options, 'DeepClusterV2', given, WIRING)
  local N = int('num_samples', o.num_samples, 1)
  self.num_crops = int('num_crops', o.num_crops or 2, 2)
  self.temperature = o.temperature
  self.kmeans_iterations = o.kmeans_iterations
  local assign = o.crops_for_assign
  if #assign == 0 then
    fail('DeepClusterV2: crops_for_assign must list crop ids (0-based), e.g. {0, 1}')
  end
  for _, c in ipairs(assign) do
    int('crops_for_assign entry', c, 0)
    if c >= self.num_crops then
      fail(string.format('DeepClusterV2: crops_for_assign names crop %d but there are %d crops', c, self.num_crops))
    end
  end
  self.crops_for_assign = assign
  local ks = o.num_prototypes
  if #ks == 0 then fail('DeepClusterV2: num_prototypes must list each head\'s k, e.g. {300, 300}') end
  self.trunk, self.head = o.trunk, method_parts.head('DeepClusterV2', o, feat, hidden, out, true)
  self.prototypes = nn.ModuleList()
  for h, k in ipairs(ks) do
    int('num_prototypes[' .. h .. ']', k, 2)
    if k > N then
      fail(string.format('DeepClusterV2: head %d asks for %d clusters but the data set has %d samples; k must not ' ..
        'exceed the number of samples', h, k, N))
    end
    self.prototypes:add(nn.Linear(out, k, { bias = false }))
  end
  self.memory = {}
  for v = 1, #assign do self.memory[v] = cr.zeros(N, out) end
  self.assignments = cr.full({ #ks, N }, IGNORE, { dtype = 'i64' })
  self.memory_filled = false   -- every sample's embedding is in the memory
  self.clustered_epoch = -1    -- the epoch the assignments were made for
end

function DeepClusterV2:extra_to(what)
  for v, t in ipairs(self.memory) do self.memory[v] = t:to(what) end
  if type(what) == 'string' and (what == 'cpu' or what:find('^cuda')) then self.assignments = self.assignments:to(what) end
end

function DeepClusterV2:features(x) return self.trunk(x) end

-- forward(crops) -> {embedding = [V B, D], batch = B}
function DeepClusterV2:forward(crops)
  if type(crops) ~= 'table' or cr.is_tensor(crops) or #crops ~= self.num_crops then
    fail(string.format('DeepClusterV2: the input must be a list of %d crop batches (a multicrop loader gives it)',
      self.num_crops))
  end
  return { embedding = method_parts.multicrop_embed(self.trunk, self.head, crops), batch = crops[1].shape[1] }
end

-- Writes the embeddings of the assigned crops of samples `index` into the memory (on
-- MPI ranks, every rank's).
function DeepClusterV2:remember(embedding, B, index)
  for v, c in ipairs(self.crops_for_assign) do
    method_parts.write_rows(self.memory[v], index, embedding:narrow(0, c * B, B))
  end
end

function DeepClusterV2:loss(out, batch)
  local index = method_parts.batch_index('DeepClusterV2', batch, self.assignments.shape[2], 'memory')
  local B, emb = out.batch, out.embedding
  index = index:to(self.assignments.device)
  local loss
  for h = 1, self.prototypes:len() do
    local scores = self.prototypes:get(h - 1)(emb) / self.temperature
    local own, reps = self.assignments:select(0, h - 1):index_select(0, index), {}
    for v = 1, self.num_crops do reps[v] = own end
    local target = cr.cat(reps, 0)   -- crops are stacked crop by crop: [crop 0 of B, crop 1 of B, ...]
    local l = cr.cross_entropy(scores, target, { ignore_index = IGNORE })
    loss = loss and (loss + l) or l
  end
  self:remember(emb, B, index)
  return loss / self.prototypes:len()
end

-- k-means of memory x [N, D] with k centroids: returns the centroids [k, D] and the
-- assignments i64 [N].
function DeepClusterV2:kmeans(x, k)
  return cr.no_grad(function()
    local N = x.shape[1]
    local first = cr.randperm(N, { device = x.device }):narrow(0, 0, k)
    if cr.dist.is_distributed() then first = cr.dist.broadcast(first:contiguous(), 0) end   -- one draw for all ranks
    local centroids = x:index_select(0, first):clone()
    local assign
    for it = 0, self.kmeans_iterations do
      assign = x:mm(centroids:t()):argmax(1)
      if it == self.kmeans_iterations then break end
      local sums = cr.zeros({ k, x.shape[2] }, { dtype = x.dtype, device = x.device }):index_add(0, assign, x)
      local counts = cr.zeros({ k }, { dtype = x.dtype, device = x.device })
                       :index_add(0, assign, cr.ones({ N }, { dtype = x.dtype, device = x.device }))
      local filled = counts:gt(0):unsqueeze(1)
      centroids = cr.where(filled, sums / counts:clamp(1, math.huge):unsqueeze(1), centroids):normalize({ dim = 1 })
    end
    return centroids, assign
  end)
end

-- Clusters the memory: every head's weights become centroids, its assignments targets.
function DeepClusterV2:cluster(epoch)
  cr.no_grad(function()
    for h = 1, self.prototypes:len() do
      local x = self.memory[(h - 1) % #self.crops_for_assign + 1]
      local w = self.prototypes:get(h - 1).weight
      local centroids, assign = self:kmeans(x, w.shape[1])
      w:copy_(centroids:to(w.dtype))
      self.assignments:select(0, h - 1):copy_(assign:to(self.assignments.device))
    end
  end)
  self.clustered_epoch = epoch or self.clustered_epoch + 1
end

-- Fills the memory with one pass over a loader (its batches carry index), under no_grad.
function DeepClusterV2:fill_memory(loader, device)
  method_parts.memory_pass(self, loader, device, function(out, B, index)
    self:remember(out.embedding, B, index:to(self.assignments.device))
  end)
  self.memory_filled = true
end

-- At the start of each train phase: fill the memory once (before the first epoch), and
-- cluster it unless this epoch's clusters exist (a run resumed mid-epoch has them).
function DeepClusterV2:hooks()
  local method = self
  return {
    { name = 'deepcluster_v2', priority = 40,
      before_phase = function(_, task)
        if task.phase_name ~= 'train' or method.clustered_epoch == task.epoch then return end
        if not method.memory_filled then
          if not method.memory_loader then
            error('DeepClusterV2: the memory is empty; give m.memory_loader (a loader of the training set with ' ..
              'the same crops) or call m:fill_memory(loader) before training', 0)
          end
          method:fill_memory(method.memory_loader, task.device)
        end
        method:cluster(task.epoch)
      end },
  }
end

function DeepClusterV2:extra_state()
  local mem = { filled = self.memory_filled and 1 or 0, clustered_epoch = self.clustered_epoch }
  for v, t in ipairs(self.memory) do mem['view' .. v] = t end
  return { memory = mem, assignments = { heads = self.assignments } }
end

function DeepClusterV2:load_extra_state(states)
  local mem, asg = states.memory, states.assignments
  if type(mem) ~= 'table' or type(asg) ~= 'table' or not cr.is_tensor(asg.heads) then
    error('DeepClusterV2:load_extra_state: the saved state has no memory and assignments (saved by another method?)', 0)
  end
  local function same(a, b) return table.concat(a.shape, ',') == table.concat(b.shape, ',') end
  if not same(asg.heads, self.assignments) then
    error(string.format('DeepClusterV2:load_extra_state: the saved assignments are [%s] but this run has [%s]: the ' ..
      'data set size or the number of heads differs', table.concat(asg.heads.shape, ', '),
      table.concat(self.assignments.shape, ', ')), 0)
  end
  for v, t in ipairs(self.memory) do
    local saved = mem['view' .. v]
    if not cr.is_tensor(saved) or not same(saved, t) then
      error(string.format('DeepClusterV2:load_extra_state: the saved memory of crop %d does not match this run\'s ' ..
        '[%s]: the data set size, out_dim or crops_for_assign differs', v, table.concat(t.shape, ', ')), 0)
    end
  end
  cr.no_grad(function()
    for v, t in ipairs(self.memory) do t:copy_(mem['view' .. v]:to(t.device)) end
    self.assignments:copy_(asg.heads:to(self.assignments.device))
  end)
  self.memory_filled = mem.filled == 1
  self.clustered_epoch = mem.clustered_epoch or -1
end

function DeepClusterV2:extra_repr()
  local ks = {}
  for h = 1, self.prototypes:len() do ks[h] = self.prototypes:get(h - 1).weight.shape[1] end
  return string.format('num_prototypes={%s}, temperature=%g, kmeans_iterations=%d', table.concat(ks, ', '),
    self.temperature, self.kmeans_iterations)
end

-- ---- recipes ------------------------------------------------------------------------
function M.build(cfg, parts)
  local m = DeepClusterV2(method_parts.wired(cfg, parts, cfg.deepcluster_v2, { head_bn = cfg.model.head_bn,
    num_crops = method_parts.crop_count(cfg), num_samples = parts.num_samples }))
  m.memory_loader = method_parts.memory_loader(cfg, parts)
  return m
end

return M
