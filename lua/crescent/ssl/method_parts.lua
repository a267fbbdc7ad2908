-- crescent.ssl.method_parts — what the SSL methods share: option checks (numbers, option
-- tables, the trunk and its feature size), the projection head, the multi-crop embedding,
-- the memories indexed by training sample (NPID, DeepCluster-v2) and the state of the
-- methods that have none beyond their parameters.
local checks = require 'crescent.checks'
local cr = require 'crescent'
local util = require 'crescent.util'
local nn = require 'crescent.nn'

local M = {}

local function fail(msg) error(msg, util.user_level()) end
M.fail = fail

local function opt_number(what, opts, key, default, lo)
  local v = opts[key]
  if v == nil then return default end
  if type(v) ~= 'number' or v ~= v or (lo and v < lo) then
    fail(string.format('%s: %s must be a number%s, got %s', what, key,
                       lo and (' >= ' .. lo) or '', tostring(v)))
  end
  return v
end
M.opt_number = opt_number

local function opts_table(what, opts)
  if opts == nil then return {} end
  if type(opts) ~= 'table' then fail(what .. ': options must be a table, got ' .. type(opts)) end
  return opts
end
M.opts_table = opts_table

-- What every method's constructor checks first: an options table with a trunk module (the
-- option names themselves are checked by cr.config.take against the method's declarations).
-- Returns the projection head's dims: feat_dim, hidden_dim (default 512; 0: no hidden
-- layer) and out_dim (default 128).
function M.method_options(what, o, example)
  if type(o) ~= 'table' then
    fail(string.format('%s: give an options table, e.g. %s%s', what, what, example or '{trunk = model, feat_dim = 128}'))
  end
  if not nn.is_module(o.trunk) then
    fail(what .. ': trunk must be a module returning features [B, feat_dim], got ' .. type(o.trunk))
  end
  return checks.int(what, 'feat_dim', o.feat_dim, 1), checks.int(what, 'hidden_dim', o.hidden_dim or 512, 0),
         checks.int(what, 'out_dim', o.out_dim or 128, 1)
end

-- A method's projection head: Linear -> [BatchNorm1d] -> ReLU -> Linear, or one Linear
-- when hidden is 0. The BatchNorm is there when o.head_bn is true, or (o.head_bn nil)
-- when default_bn is.
function M.head(what, o, feat, hidden, out, default_bn)
  local bn = o.head_bn
  if bn == nil then bn = default_bn end
  if type(bn) ~= 'boolean' then fail(what .. ': head_bn must be true or false, got ' .. tostring(bn)) end
  return nn.MLP { dims = hidden > 0 and { feat, hidden, out } or { feat, out }, bn = bn }
end

-- The L2-normalised embeddings [V B, D] of multi-crop batches (a list of V tensors [B, C,
-- h, w], global crops first): each run of same-sized crops goes through the trunk as one
-- batch (BatchNorm statistics per resolution, as SwAV's), the head once over all.
function M.multicrop_embed(trunk, head, crops)
  local parts, i, n = {}, 1, #crops
  while i <= n do
    local j = i
    local h, w = crops[i].shape[3], crops[i].shape[4]
    while j < n and crops[j + 1].shape[3] == h and crops[j + 1].shape[4] == w do j = j + 1 end
    local x = crops[i]
    if j > i then
      local group = {}
      for v = i, j do group[#group + 1] = crops[v] end
      x = cr.cat(group, 0)
    end
    parts[#parts + 1] = trunk(x)
    i = j + 1
  end
  return head(#parts == 1 and parts[1] or cr.cat(parts, 0)):normalize({ dim = 1 })
end

-- batch.index (a tensor of training-set rows, all < n) of a method whose loss reads a
-- memory of one row per sample; `what` names the method, `memory` its memory in messages.
function M.batch_index(what, batch, n, memory)
  local idx = batch and batch.index
  if not cr.is_tensor(idx) then fail(what .. ': the loss needs batch.index (the loader gives it)') end
  local top = idx:max():item()
  if top >= n then
    fail(string.format('%s: a batch index (%d) is past the %s (%d samples); num_samples must be the size of the ' ..
      'training set', what, top, memory, n))
  end
  return idx
end

-- Writes rows [B, D] at `index` of mem [N, D] in place, under no_grad; on MPI ranks every
-- rank's rows (all-gathered), so the memories of all ranks stay equal. The memory is
-- copied whole (index_add is out of place).
function M.write_rows(mem, index, rows)
  local dist = cr.dist
  cr.no_grad(function()
    rows = rows:detach():to(mem.dtype)
    if dist.is_distributed() then index, rows = dist.all_gather(index), dist.all_gather(rows) end
    mem:copy_(mem:index_add(0, index, rows - mem:index_select(0, index)))
  end)
end

-- The loader of a memory's fill pass, for a recipe's build: the training set in order,
-- every sample once (the last batch kept), with the recipe's views and its rank's shard.
function M.memory_loader(cfg, parts)
  return cr.data.Loader(parts.train_set, { batch_size = cfg.data.batch_size, shuffle = false, drop_last = false,
    views = parts.views, workers = cfg.data.workers, shard = cr.dist.setup.shard() })
end

-- One pass over `loader` (its batches carry index) under no_grad, for a method that
-- fills a memory before training: write(method's forward output, batch size, index) per
-- batch, the crops moved to `device` first.
function M.memory_pass(method, loader, device, write)
  cr.no_grad(function()
    for batch in loader:iter(0) do
      local crops = batch.input
      if device and device ~= 'cpu' then
        for i, c in ipairs(crops) do crops[i] = c:to(device) end
      end
      write(method:forward(crops), crops[1].shape[1], batch.index)
    end
  end)
end

-- extra_state and load_extra_state for a method class with no state beyond its
-- parameters: saves nothing, and refuses a checkpoint that holds method state.
function M.stateless(class, title)
  function class.extra_state() return {} end
  function class.load_extra_state(_, states)
    if next(states) ~= nil then
      error(string.format('%s:load_extra_state: %s has no state beyond its parameters', class.__name or title, title), 0)
    end
  end
end

-- A method's constructor options from a recipe config: its section's values (the same
-- names), a fresh trunk and the projection head's sizes (model.hidden_dim, out_dim), and
-- `extra` (head_bn for the methods that take it; what a method checks against the loader:
-- num_crops, batch_size; a second trunk).
function M.wired(cfg, parts, section, extra)
  local o = { trunk = parts.trunk(), feat_dim = parts.feat_dim, hidden_dim = cfg.model.hidden_dim,
              out_dim = cfg.model.out_dim }
  for k, v in pairs(section) do o[k] = v end
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

-- The number of crops a recipe's loader gives (the sum of crops.num).
function M.crop_count(cfg)
  local total = 0
  for _, n in ipairs(cfg.crops.num) do total = total + n end
  return total
end

-- The recipe config's crop count (the sum of crops.num), which must be `want` for a
-- method that takes that many views; an error names the key and the fix.
function M.check_views(cfg, key, title, want)
  local total = M.crop_count(cfg)
  if total ~= want then
    local noun = want == 1 and '1 view per sample' or (want .. ' views')
    error(string.format('%s: %s takes %s, but crops.num gives %d crops; use crops.num={%d}', key, title, noun, total,
      want), 0)
  end
end

return M
