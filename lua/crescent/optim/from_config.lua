-- crescent.optim.from_config — the optimizer a recipe's `optim` section names, and the
-- learning rate scaled to the global batch (mmengine's auto_scale_lr, VISSL's
-- auto_scale). Every training recipe builds its optimizer here, so every engine option
-- is reachable from the command line:
--
--   luajit recipes/swav.lua optim.name=lars optim.lr=4.8 optim.base_batch_size=256 optim.scaling=linear
--   luajit recipes/supervised.lua optim.name=adamw optim.lr=1e-3 optim.weight_decay=0.05 optim.clip_norm=1
--
--   local o = cfg.optim
--   local lr, factor, line = cr.optim.from_config.scaled_lr(o, cfg.data.batch_size)  -- line: nil unscaled
--   local opt = cr.optim.from_config.build(named_params, o, lr, defaults.optim)
--
-- Keys (M.options declares them):
--   name = 'sgd' | 'lars' | 'adamw'       momentum, nesterov (sgd, lars); betas, eps (adamw);
--                                         trust_coefficient, lars_clip, exclude_bias_norm (lars)
--   no_decay_bias_norm = false            biases and norm weights get no weight decay
--   layer_decay = 1                       < 1: a ViT's layer-wise lr decay (BEiT, MAE
--                                         fine-tuning): block i of L gets lr * d^(L - i), the
--                                         patch and position embeddings and the class token
--                                         d^(L + 1), the final norm and head d^0 (layer_decay_groups)
--   weight_decay_end = -1                 >= 0: the weight decay follows a cosine from
--                                         weight_decay to this over training (DINO's
--                                         0.04 -> 0.4); the recipes apply weight_decay_schedule(o)
--   lr_mult = {}                          {{'<Lua pattern>', m}, ...}: lr multipliers by name
--   accum_steps = 1                       the optimizer steps every k batches (the loss / k;
--                                         under DDP, one all-reduce per k batches)
--   clip_norm = 0, clip_value = 0         clip the grads' global L2 norm / each value (0: off)
--   base_batch_size = 0, scaling = 'off'  lr = optim.lr * f(global batch / base_batch_size):
--                                         'linear' (Goyal et al.), 'sqrt' (Krizhevsky; LAMB),
--                                         'off'; the global batch is data.batch_size * ranks
--                                         * accum_steps. The same factor scales optim.final_lr.
-- An option set for another optimizer than optim.name (optim.betas with sgd: a value
-- other than the recipe's default) is an error.
local M = {}

local OPTIMIZERS = { sgd = 'crescent.optim.sgd', lars = 'crescent.optim.lars', adamw = 'crescent.optim.adamw' }

-- Options that belong to some optimizers only: key -> {optimizer = true}.
local OWN = {
  momentum = { sgd = true, lars = true }, nesterov = { sgd = true, lars = true },
  betas = { adamw = true }, eps = { adamw = true },
  trust_coefficient = { lars = true }, lars_clip = { lars = true }, exclude_bias_norm = { lars = true },
}

-- The optim section's keys.
M.options = require('crescent.config').options('optim', {
  { 'name', { 'sgd', 'lars', 'adamw' }, 'sgd', 'the optimizer' },
  { 'lr', 'number', 0.1, 'the peak learning rate (before optim.scaling)', min = 0 },
  { 'weight_decay', 'number', 0, 'weight decay (decoupled for adamw)', min = 0 },
  { 'warmup_epochs', 'number', 0, 'linear lr warm-up from 0, in epochs', min = 0 },
  { 'layer_decay', 'number', 1, "a ViT's layer-wise lr decay (1: off)", min = 0, max = 1 },
  { 'weight_decay_end', 'number', -1, 'the weight decay at the end of a cosine from optim.weight_decay (-1: constant)' },
  { 'momentum', 'number', 0.9, 'momentum (sgd, lars)', min = 0 },
  { 'nesterov', 'boolean', false, 'Nesterov momentum (sgd, lars)' },
  { 'betas', 'list', { 0.9, 0.999 }, "Adam's {beta1, beta2} (adamw)", elem = 'number' },
  { 'eps', 'number', 1e-8, "Adam's epsilon (adamw)", min = 0 },
  { 'trust_coefficient', 'number', 0.001, "LARS's trust coefficient (lars)", min = 0 },
  { 'lars_clip', 'boolean', false, "LARC's clip mode: the ratio capped at 1 (lars)" },
  { 'exclude_bias_norm', 'boolean', true, 'biases and norm weights get plain SGD (lars)' },
  { 'no_decay_bias_norm', 'boolean', false, 'no weight decay on biases and norm weights' },
  { 'lr_mult', 'list', {}, "lr multipliers by parameter name, {{'<Lua pattern>', m}, ...} (the first match wins; " ..
    'the schedule keeps the ratios)', elem = 'any' },
  { 'accum_steps', 'integer', 1, 'an optimizer step every N batches (gradient accumulation)', min = 1 },
  { 'clip_norm', 'number', 0, "clip the grads' global L2 norm to this (0: off)", min = 0 },
  { 'clip_value', 'number', 0, 'clip each grad value to [-v, v] (0: off)', min = 0 },
  { 'base_batch_size', 'integer', 0, 'the global batch optim.lr is meant for (optim.scaling)', min = 0 },
  { 'scaling', { 'off', 'linear', 'sqrt' }, 'off', 'scale lr and final_lr by the global batch / ' ..
    'optim.base_batch_size, or its root' },
})

local function fail(msg) error(msg, 0) end

-- The lr for a per-rank batch of `batch_size` (and the factor); with scaling on, also a
-- line saying how it was scaled. ranks: the number of ranks (default: the group's).
function M.scaled_lr(o, batch_size, ranks)
  ranks = ranks or require('crescent.dist.comm').world_size()
  if o.scaling == 'off' or o.scaling == nil then return o.lr, 1, nil end
  if (o.base_batch_size or 0) <= 0 then
    fail("optim.scaling='" .. o.scaling .. "' scales the lr by the global batch over optim.base_batch_size: " ..
      'set optim.base_batch_size (the batch that optim.lr was tuned for, e.g. 256)')
  end
  local global = batch_size * ranks * (o.accum_steps or 1)
  local ratio = global / o.base_batch_size
  local factor = o.scaling == 'linear' and ratio or math.sqrt(ratio)
  local line = string.format('optim.scaling=%s: lr %g = %g x %s(%d / %d) for a global batch of %d (%d x %d rank%s x %d ' ..
    'accumulated)', o.scaling, o.lr * factor, o.lr, o.scaling == 'sqrt' and 'sqrt' or '', global, o.base_batch_size,
    global, batch_size, ranks, ranks == 1 and '' or 's', o.accum_steps or 1)
  return o.lr * factor, factor, line
end

-- The weight decay's schedule over training (a cosine to optim.weight_decay_end), or nil
-- when it is constant: what a task puts in schedules.weight_decay.
function M.weight_decay_schedule(o)
  local e = o.weight_decay_end
  if e == nil or e < 0 or e == o.weight_decay then return nil end
  return require('crescent.optim.schedule').cosine { from = o.weight_decay, to = e }
end

-- {name, tensor} pairs of a ViT (timm's names: [prefix]blocks.<i>.*, cls_token, pos_embed,
-- patch_embed.*) as optimizer groups with lr_mult = decay^(L + 1 - id): id 0 for the
-- embeddings and the class token, i + 1 for block i, L + 1 for the rest, L the number of
-- blocks (BEiT's rule).
function M.layer_decay_groups(named, decay)
  local L = 0
  for _, np in ipairs(named) do
    local i = np[1]:match('blocks%.(%d+)%.')
    if i then L = math.max(L, tonumber(i) + 1) end
  end
  if L == 0 then
    fail('optim.layer_decay applies to a Vision Transformer (parameters named blocks.<i>.*); this model has none')
  end
  local groups, by_id = {}, {}
  for _, np in ipairs(named) do
    local name = np[1]
    local i = name:match('blocks%.(%d+)%.')
    local id = i and tonumber(i) + 1 or ((name:find('cls_token', 1, true) or name:find('pos_embed', 1, true)
      or name:find('patch_embed', 1, true)) and 0 or L + 1)
    if not by_id[id] then
      by_id[id] = { params = {}, lr_mult = decay ^ (L + 1 - id), name = 'layer ' .. id }
      groups[#groups + 1] = by_id[id]
    end
    table.insert(by_id[id].params, np)
  end
  table.sort(groups, function(a, b) return a.lr_mult < b.lr_mult end)
  return groups
end

local function same(a, b)
  if type(a) ~= 'table' or type(b) ~= 'table' then return a == b end
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

-- The optimizer over named_params ({name, tensor} pairs that require grad) at lr
-- (default o.lr). defaults: the recipe's optim defaults, to tell a value the user set for
-- another optimizer (an error) from the recipe's own (default: the declared ones).
function M.build(named_params, o, lr, defaults)
  local module = OPTIMIZERS[o.name]
  if not module then fail("optim.name must be 'sgd', 'lars' or 'adamw', got '" .. tostring(o.name) .. "'") end
  local base = {}
  for _, opt in ipairs(M.options) do base[opt.name] = opt.default end
  for k, v in pairs(defaults or {}) do base[k] = v end
  for key, owners in pairs(OWN) do
    if not owners[o.name] and o[key] ~= nil and not same(o[key], base[key]) then
      local names = {}
      for n in pairs(owners) do names[#names + 1] = n end
      table.sort(names)
      fail(string.format("optim.%s applies to optim.name=%s, and this run's optimizer is %s: drop it or set optim.name",
        key, table.concat(names, ' or '), o.name))
    end
  end
  local opts = { lr = lr or o.lr, weight_decay = o.weight_decay, no_decay_bias_norm = o.no_decay_bias_norm }
  if o.lr_mult and #o.lr_mult > 0 then
    for i, rule in ipairs(o.lr_mult) do
      if type(rule) ~= 'table' or type(rule[1]) ~= 'string' or type(rule[2]) ~= 'number' then
        fail(string.format("optim.lr_mult[%d] must be a pair {'<Lua pattern>', multiplier}, e.g. " ..
          "optim.lr_mult=\"{{'^head%%.', 10}}\"", i))
      end
    end
    opts.lr_mult = o.lr_mult
  end
  if o.name == 'sgd' or o.name == 'lars' then opts.momentum, opts.nesterov = o.momentum, o.nesterov end
  if o.name == 'adamw' then opts.betas, opts.eps = o.betas, o.eps end
  if o.name == 'lars' then
    opts.trust_coefficient, opts.clip, opts.exclude_bias_norm = o.trust_coefficient, o.lars_clip, o.exclude_bias_norm
  end
  if o.layer_decay and o.layer_decay < 1 then
    if type(named_params[1]) == 'table' and named_params[1].params then
      fail('optim.layer_decay needs the parameters as one list; this recipe already splits them into groups')
    end
    named_params = M.layer_decay_groups(named_params, o.layer_decay)
  end
  return require(module)(named_params, opts)
end

return M
