-- crescent.recipe.ssl — what the self-supervised recipes (recipes/swav.lua, moco.lua,
-- simclr.lua, ...) share: the config schema, the data sets and the multi-crop
-- views, the trunk, and the task around a method: loader, optimizer and lr schedule, the
-- hooks (schedule, timer, NaN guard, the method's own, kNN monitor, diagnostics, console,
-- TensorBoard events, metrics.jsonl and checkpoints, resumed automatically, in the run
-- folder run.dir/<run.name>: crescent/recipe/run.lua), and the end of a run (the JSON
-- last line). A recipe file runs config, setup, data, the method's build, assemble,
-- cr.train and finish (the steps under "the task" below); task(name, cfg) runs them up
-- to the task in one call:
--
--   local task = cr.recipe.ssl.task('swav', cfg)   -- cfg: cr.config.load('recipes/swav.lua', {...})
--   cr.train(task)
--   cr.recipe.ssl.finish(task)
--
-- A method file (crescent.ssl.<method>) provides build(cfg, parts) -> the method module;
-- parts = {trunk = fn() -> a fresh trunk, feat_dim = n, nchan = channels, views = the crops'
-- transform, num_samples and train_set (memory banks: NPID, DeepCluster-v2)}. The module has
-- forward, loss, features, hooks, extra_state and load_extra_state, and may have
-- param_groups(named) -> the optimizer's input groups, and feature_trunk() -> the module
-- features runs (the kNN monitor puts it in eval mode; default: the method's trunk).
local cr = require 'crescent'
local util = require 'crescent.util'
local sources = require 'crescent.data.sources'
local run = require 'crescent.recipe.run'

local R = {}

local function fail(msg) error(msg, 0) end

-- ---- config ---------------------------------------------------------------------------
local options = cr.config.options

-- The trunk: its architecture (the frozen-feature recipes add 'pixels') and shape.
R.ARCH = options('model', {
  { 'arch', { 'resnet18', 'resnet34', 'resnet50', 'vit_tiny', 'vit_small', 'vit_base' }, 'resnet18',
    "the trunk: a ResNet, or a Vision Transformer (model.patch; width and stem are ResNets')" },
})
R.TRUNK = options('model', {
  { 'width', 'integer', 16, "the trunk's first stage width (64: torchvision's)", min = 1 },
  { 'stem', { 'auto', 'cifar', 'imagenet' }, 'auto', 'cifar: 3x3 conv, no pool; imagenet: 7x7/2 and a pool; auto: ' ..
    'cifar up to 64 px' },
  { 'patch', 'integer', 4, "a ViT trunk's patch size (the global crops' size a multiple of it)", min = 1 },
  { 'drop_path', 'number', 0, "a ViT trunk's stochastic depth rate (the last block's)", min = 0, max = 1 },
})

-- The SSL recipes' own keys: the projection head, the schedule's end, the kNN monitor's,
-- VISSL's multi-crop (num[i] crops of size[i] px with RandomResizedCrop scale
-- {min_scale[i], max_scale[i]}, global crops first) and the augmentations.
local SSL = {}
for _, list in ipairs {
  options('model', {
    { 'hidden_dim', 'integer', 512, "the projection head's hidden width (0: one Linear)", min = 0 },
    { 'out_dim', 'integer', 128, 'the embedding size', min = 1 },
    { 'head_bn', 'boolean', true, "BatchNorm1d after the head's hidden Linear" },
  }),
  options('optim', { { 'final_lr', 'number', 0.0006, 'the lr the cosine schedule ends at', min = 0 } }),
  cr.hooks.knn.options,   -- knn.k, temperature, every, at_start: the monitor's own
  options('crops', {
    { 'size', 'list', { 28, 14 }, 'multi-crop: the side of each crop size, global crops first', elem = 'integer' },
    { 'num', 'list', { 2, 4 }, 'multi-crop: how many crops of each size', elem = 'integer' },
    { 'min_scale', 'list', { 0.25, 0.08 }, "RandomResizedCrop's smallest area share, per crop size", elem = 'number' },
    { 'max_scale', 'list', { 1, 0.25 }, "RandomResizedCrop's largest area share, per crop size", elem = 'number' },
  }),
  options('augment', {
    { 'flip', 'number', 0.5, 'horizontal flip probability', min = 0, max = 1 },
    { 'jitter', 'number', 0.8, 'colour jitter probability', min = 0, max = 1 },
    { 'brightness', 'number', 0.4, 'colour jitter: brightness strength', min = 0 },
    { 'contrast', 'number', 0.4, 'colour jitter: contrast strength', min = 0 },
    { 'saturation', 'number', 0.4, 'colour jitter: saturation strength (colour images)', min = 0 },
    { 'hue', 'number', 0.1, 'colour jitter: hue strength (colour images)', min = 0, max = 0.5 },
    { 'grayscale', 'number', 0.2, 'grey-scale probability (colour images)', min = 0, max = 1 },
    { 'blur', 'number', 0.5, 'Gaussian blur probability', min = 0, max = 1 },
    { 'blur_sigma', 'list', { 0.1, 1 }, "the blur's sigma range {min, max}", elem = 'number' },
    { 'solarize', 'number', 0, 'solarize probability (threshold 128)', min = 0, max = 1 },
  }),
} do
  for _, o in ipairs(list) do SSL[#SSL + 1] = o end
end

-- What the SSL recipes set otherwise than the declarations.
local SSL_VALUES = {
  train = { epochs = 3 },
  dist = { sync_bn = true },   -- global-batch BatchNorm statistics on k ranks, as VISSL's SwAV
  model = { drop_path = 0.1 },
  optim = { lr = 0.6, weight_decay = 1e-6, warmup_epochs = 1 },
  checkpoint = { best = 'knn_top1' },
}

-- The optim section of the SSL recipes before a recipe's own values (from_config.build
-- tells an option set for another optimizer from these).
local SSL_OPTIM = cr.config.schema(cr.optim.from_config.options):with({ optim = SSL_VALUES.optim }).defaults.optim

-- The method module crescent.ssl.<name>, or an error naming the methods; a method module
-- of your own (a table with options and build) is taken as it is.
local function method_module(method)
  if type(method) == 'table' and type(method.build) == 'function' then return method end
  local known = false
  for _, m in ipairs(require('crescent.ssl').METHODS) do known = known or m == method end
  if not known then
    fail(string.format("no self-supervised method '%s'; the methods: %s", tostring(method),
      table.concat(require('crescent.ssl').METHODS, ', ')))
  end
  return require('crescent.ssl.' .. method)
end

-- schema(method, own_defaults) -> the schema of the SSL recipe of `method` (a name in
-- cr.ssl.METHODS, or a method module of your own): the keys every training recipe has,
-- the SSL keys, the method's section (its M.options), then the recipe's own defaults
-- (which may set the method's keys too: byol = {momentum = 0.9}).
function R.schema(method, own_defaults)
  local mod = method_module(method)
  return cr.config.schema(run.BASE, run.TRAINING, run.INIT, sources.options, cr.dist.setup.options,
    cr.optim.from_config.options, R.ARCH, R.TRUNK, SSL, mod.options):with(SSL_VALUES):with(own_defaults)
end

-- The run's device, thread count and seed (cr.recipe.run.setup): first thing a recipe does.
R.setup = run.setup

-- ---- data: crescent.data.sources -----------------------------------------------------
R.datasets = sources.datasets
R.image_shape = sources.image_shape

-- The multi-crop transform of cfg.crops and cfg.augment, checked against the images;
-- method_opts: the method's own transform options (SwAV's crops_for_assign, checked
-- against the crops), from its view_options(cfg).
function R.views(cfg, ds, method_opts)
  local c, a = cfg.crops, cfg.augment
  local n = #c.size
  for _, k in ipairs { 'num', 'min_scale', 'max_scale' } do
    if type(c[k]) ~= 'table' or #c[k] ~= n then
      fail(string.format('crops.%s must list %d values, one per crop size in crops.size (%s)', k, n,
        table.concat(c.size, ', ')))
    end
  end
  local _, h, w = R.image_shape(ds)
  local scales = {}
  for i = 1, n do
    if c.size[i] > math.max(h, w) * 4 then
      fail(string.format('crops.size[%d] = %d does not fit the %dx%d images of %s (at most 4x upsampling); ' ..
        'lower crops.size', i, c.size[i], h, w, ds.name or 'the data set'))
    end
    scales[i] = { c.min_scale[i], c.max_scale[i] }
  end
  local opts = {
    size_crops = c.size, num_crops = c.num, crop_scales = scales, flip = a.flip, grayscale = a.grayscale,
    solarize = a.solarize > 0 and { p = a.solarize, threshold = 128 } or 0,
  }
  if a.jitter > 0 then
    opts.color_jitter = { p = a.jitter, brightness = a.brightness, contrast = a.contrast,
                          saturation = a.saturation, hue = a.hue }
  end
  if a.blur > 0 then opts.blur = { p = a.blur, sigma = a.blur_sigma } end
  for k, v in pairs(method_opts or {}) do opts[k] = v end
  return cr.data.transforms.multicrop(opts)
end

-- ---- model ---------------------------------------------------------------------------
-- A function making fresh trunks (pooled features out, no classifier) and their size. A
-- ViT trunk gives its class token; it is built for image_size (the global crops' size,
-- other sizes resample the position embedding).
local VIT_DIM = { vit_tiny = 192, vit_small = 384, vit_base = 768 }
function R.trunk_factory(cfg, nchan, image_size)
  local m = cfg.model
  if VIT_DIM[m.arch] then
    local sizes = cfg.crops and cfg.crops.size or { image_size }
    for _, px in ipairs(sizes) do
      if px % m.patch ~= 0 then
        fail(string.format('model.patch = %d does not divide the %d px crops; pick crop sizes that are multiples of ' ..
          'the patch', m.patch, px))
      end
    end
    local size = sizes[1]
    return function()
      return cr.nn.models[m.arch] { img_size = size, patch = m.patch, in_channels = nchan, num_classes = 0,
                                    drop_path = m.drop_path }
    end, VIT_DIM[m.arch]
  end
  local stem = m.stem
  if stem == 'auto' then stem = image_size > 64 and 'imagenet' or 'cifar' end
  local function make()
    return cr.nn.models[m.arch] { stem = stem, width = m.width, in_channels = nchan, num_classes = 0 }
  end
  local expansion = m.arch == 'resnet50' and 4 or 1
  return make, m.width * 8 * expansion
end

local function trainable(model)
  local out = {}
  for _, np in ipairs(model:named_parameters()) do
    if np[2].requires_grad then out[#out + 1] = np end
  end
  return out
end
R.trainable = trainable

-- ---- the task ------------------------------------------------------------------------
-- A recipe file builds its task in these steps, which task(name, cfg) below runs in one
-- call (the REPL's and the specs' way):
--   local cfg = recipe.config('swav', arg, {train = {epochs = 5}, ...})
--   local device = recipe.setup(cfg)
--   local data = recipe.data(cfg, 'swav')
--   local swav = cr.ssl.swav.build(cfg, recipe.parts(cfg, data)):to(device)
--   local task = recipe.assemble('swav', cfg, swav, data)

-- config(name, argv, own_defaults) -> cfg: R.schema(name, own_defaults) with the command
-- line argv over it.
function R.config(name, argv, own_defaults)
  return cr.config.parse(argv, R.schema(name, own_defaults))
end

-- data(cfg, method) -> {train_set, test_set, eval_name, views, nchan, side}: the data sets
-- of cfg.data and the multi-crop views of cfg.crops and cfg.augment (with the method's
-- own view options: SwAV's crops_for_assign, checked against the crops).
function R.data(cfg, method)
  local mod = method_module(method)
  local train_set, test_set, eval_name = R.datasets(cfg)
  local views = R.views(cfg, train_set, mod.view_options and mod.view_options(cfg))
  local nchan, _, side = R.image_shape(train_set)
  return { train_set = train_set, test_set = test_set, eval_name = eval_name, views = views, nchan = nchan,
           side = side }
end

-- parts(cfg, data) -> what a method's build(cfg, parts) takes: a function making fresh
-- trunks and their feature size, the channels, the views, and the training set (memory
-- banks: NPID, DeepCluster-v2). Build on the cpu (the same initial weights for a seed on
-- any device), then move the method to the run's device.
function R.parts(cfg, data)
  local make_trunk, feat_dim = R.trunk_factory(cfg, data.nchan, data.side)
  return { trunk = make_trunk, feat_dim = feat_dim, nchan = data.nchan, views = data.views,
           num_samples = #data.train_set, train_set = data.train_set }
end

-- assemble(name, cfg, method, data) -> a Task ready for cr.train (task.method holds the
-- method): model.freeze, SyncBatchNorm and DDP on k ranks, the multi-crop loader, the
-- optimizer with its warmup + cosine lr, and the hooks (schedule, timer, NaN guard, the
-- method's, kNN monitor, freeze, EMA, diagnostics, console, the run folder's writers and
-- checkpoints, profile).
function R.assemble(name, cfg, method, data)
  local train_set, test_set = data.train_set, data.test_set
  -- k ranks: SyncBatchNorm (dist.sync_bn) and DDP, before the optimizer takes the parameters
  local freeze = run.freeze(cfg, method) -- model.freeze: before DDP and the optimizer see the parameters
  local ddp = cr.dist.setup.model(cfg, method)
  local loader = cr.data.Loader(train_set, { batch_size = cfg.data.batch_size, shuffle = true, drop_last = true,
                                             seed = cfg.train.seed, views = data.views, workers = cfg.data.workers,
                                             shard = cr.dist.setup.shard() })
  local o = cfg.optim
  -- optim.scaling: lr and final_lr follow the global batch (ranks, accumulation)
  local peak, factor, scaled = cr.optim.from_config.scaled_lr(o, cfg.data.batch_size)
  if scaled then print(scaled) end
  -- a method may split its parameters into groups (SimSiam: the predictor's fixed lr)
  local params = trainable(method)
  if method.param_groups then params = method:param_groups(params) end
  local optimizer = cr.optim.from_config.build(params, o, peak, SSL_OPTIM)
  local epochs = cfg.train.epochs
  local warmup = epochs > 0 and math.min(0.999, o.warmup_epochs / epochs) or 0
  local lr = cr.schedule.warmup_cosine { warmup = warmup, from = 0, peak = peak, to = o.final_lr * factor }
  local task = cr.engine.Task {
    config = cfg, model = method, optimizer = optimizer,
    schedules = { lr = lr, weight_decay = cr.optim.from_config.weight_decay_schedule(o) },
    loss = function(out, batch) return method:loss(out, batch) end, train_loader = loader,
    name = cfg.run.name ~= '' and cfg.run.name or name,
  }
  task.method, task.method_name, task.ddp, task.peak_lr = method, name, ddp, peak
  task.train_set, task.test_set, task.eval_name = train_set, test_set, data.eval_name
  task:add_hook(cr.hooks.schedule())
  task:add_hook(cr.hooks.timer())
  task:add_hook(cr.hooks.nan_guard { every = 50 })
  for _, h in ipairs(method:hooks()) do task:add_hook(h) end
  if test_set then
    task:add_hook(cr.hooks.knn { train_set = train_set, test_set = test_set, every = cfg.knn.every, k = cfg.knn.k,
      temperature = cfg.knn.temperature, at_start = cfg.knn.at_start, test_name = data.eval_name,
      model = method.feature_trunk and method:feature_trunk() or method.trunk,
      forward = function(x) return method:features(x) end })
  end
  if freeze then task:add_hook(freeze) end
  local ema = run.ema_hook(cfg, method) -- model.ema: an average of the weights, evaluated with
  if ema then task:add_hook(ema) end
  task:add_hook(cr.hooks.diagnostics { every = cfg.train.log_every })
  task:add_hook(cr.hooks.console { every = cfg.train.log_every })
  local dir, env = run.prepare(cfg, R.run_dir(task))
  run.add_log_hooks(task, cfg, dir)
  task:add_hook(run.checkpoint_hook(cfg, dir, env))
  local profile = run.profile_hook(cfg, dir)
  if profile then task:add_hook(profile) end
  return cr.dist.setup.task(task)
end

-- task(name, cfg) -> the task a recipe file builds, in one call (the steps above).
function R.task(name, cfg)
  local mod = method_module(name)
  local device = R.setup(cfg)
  local data = R.data(cfg, name)
  local method = mod.build(cfg, R.parts(cfg, data)):to(device)
  return R.assemble(name, cfg, method, data)
end

-- From here on, what the recipe prints goes to the run folder's log.txt too (a task
-- built in the REPL or a spec leaves that process's output alone).
function R.keep_log(task)
  run.keep_log(task.config, R.run_dir(task))
end

-- One line describing the run, printed before training.
function R.banner(task)
  local cfg, m = task.config, task.method
  local crops = {}
  for i, s in ipairs(cfg.crops.size) do crops[i] = cfg.crops.num[i] .. 'x' .. s end
  local trunk = VIT_DIM[cfg.model.arch] and string.format('%s, patch %d', cfg.model.arch, cfg.model.patch)
    or string.format('%s width %d', cfg.model.arch, cfg.model.width)
  return string.format('%s: %s (%.2fM params) on %s (%d train%s), crops %s, %d epochs, batch %d, ' ..
    'lr %g, %s%s%s', task.method_name, trunk, m:num_parameters() / 1e6, cfg.data.name,
    #task.train_set, task.test_set and (', ' .. #task.test_set .. ' ' .. task.eval_name) or '', table.concat(crops, ' + '),
    cfg.train.epochs, cfg.data.batch_size, task.peak_lr or cfg.optim.lr, util.count_of(cr.get_num_threads(), 'thread'),
    task.amp ~= 'off' and ', amp ' .. task.amp or '', cr.dist.setup.describe(task.ddp))
end

-- ---- frozen trunks (linear_eval.lua, extract.lua) -------------------------------------
-- The network a frozen-feature recipe evaluates, as forward(x) -> [B, D] and the module
-- (nil for raw pixels): model.arch = 'pixels' is the raw-pixel baseline (the normalised
-- image flattened); otherwise a trunk, random or loaded from model.init. From a file,
-- the keys under model.init_prefix are taken and the prefix dropped ('auto': 'trunk.'
-- when the file has such keys, as the SSL recipes save them); model.init_remove_prefix
-- then strips a further prefix (PyTorch's 'module.') and model.init_add_prefix adds one;
-- names matching a Lua pattern of model.init_skip are left alone; model.init_strict
-- refuses missing, unexpected or mismatched keys. Prints the load report. The trunk goes
-- to `device` (default cpu). A crescent checkpoint's stored config gives model.arch,
-- width and stem that were left at their defaults (trunk_from_checkpoint).
-- With model.init a crescent checkpoint, the trunk its config describes: each trunk key
-- (cr.recipe.run.TRUNK_KEYS) left at the default takes the checkpoint's value (one line
-- says so); one set to another value than the checkpoint's is an error.
local function trunk_from_checkpoint(cfg)
  local sm = run.init_config(cfg.model)
  if not sm then return end
  local defaults, taken = R.frozen_schema().defaults.model, {}
  for _, k in ipairs(run.TRUNK_KEYS) do
    local mine, theirs = cfg.model[k], sm[k]
    if theirs ~= nil and mine ~= theirs then
      if mine ~= defaults[k] then
        error(string.format("model.%s=%s, but the trunk of model.init '%s' has %s = %s (its config): leave " ..
          'model.%s out to take it', k, tostring(mine), cfg.model.init, k, tostring(theirs), k), 0)
      end
      cfg.model[k] = theirs
      taken[#taken + 1] = string.format('%s %s', k, tostring(theirs))
    end
  end
  if #taken > 0 then print("model.init: the trunk of the checkpoint's config: " .. table.concat(taken, ', ')) end
end

function R.frozen_trunk(cfg, train_set, device)
  if cfg.model.arch == 'pixels' then
    return function(x) return x:flatten(1) end, nil
  end
  if cfg.model.init ~= '' then trunk_from_checkpoint(cfg) end
  local nchan, _, side = R.image_shape(train_set)
  local make = R.trunk_factory(cfg, nchan, side)
  local trunk = make()
  if cfg.model.init ~= '' then print(run.load_weights(trunk, cfg.model)) end
  trunk:eval():to(device or 'cpu')
  return function(x) return trunk(x) end, trunk
end

-- The config keys of the frozen-feature recipes (linear_eval.lua, extract.lua): the keys
-- every recipe has less those they do not read (and `drop`'s), the data, model.init and
-- the trunk; each recipe adds its own.
local FROZEN_ARCH = options('model', {
  { 'arch', { 'resnet18', 'resnet34', 'resnet50', 'vit_tiny', 'vit_small', 'vit_base', 'pixels' }, 'resnet18',
    'the trunk (pixels: the raw normalised image, the baseline)' },
})
function R.frozen_schema(drop)
  local gone = { 'train.amp', 'train.repl_on_signal', 'data.workers', 'dist.sync_bn', 'dist.bucket_mb',
                 'dist.find_unused', 'dist.broadcast_buffers' }
  for _, k in ipairs(drop or {}) do gone[#gone + 1] = k end
  return cr.config.schema(run.BASE, run.INIT, sources.options, cr.dist.setup.options, FROZEN_ARCH, R.TRUNK)
    :without(gone):with { data = { batch_size = 500 } }
end

-- A frozen-feature recipe's --dry-run, once its data sets and trunk are built (so the
-- data, the trunk and model.init are checked): the plan, then exit 0. `plan` lists the
-- recipe's own lines (what it would compute and write).
function R.frozen_dry_run(cfg, trunk, train_set, test_set, eval_name, plan)
  if not cfg.run.dry_run then return end
  local lines = {}
  if trunk then
    lines[1] = string.format('model: %s trunk, %.3fM parameters%s', cfg.model.arch, trunk:num_parameters() / 1e6,
      cfg.model.init ~= '' and (", weights of model.init '" .. cfg.model.init .. "'") or ' (random: the baseline)')
  else
    lines[1] = 'model: raw pixels (the baseline)'
  end
  lines[2] = string.format('data: %d train samples%s', #train_set,
    test_set and string.format(', %d %s samples', #test_set, eval_name or 'test') or '')
  for _, l in ipairs(plan) do lines[#lines + 1] = l end
  require('crescent.engine.dry_run').report(cfg, lines)
end

-- ---- the end of a run ----------------------------------------------------------------
-- The run's folder: run.dir/<run.name or the method's name>.
function R.run_dir(task)
  return run.dir(task.config, task.name)
end

-- After cr.train: the JSON last line, also the run folder's results.json (checkpoint: the newest one, where the checkpoint
-- hook keeps it; preempted: the signal that stopped the run early).
function R.finish(task)
  local path = R.run_dir(task) .. '/checkpoints/latest.safetensors'
  if not util.file_exists(path) then path = nil end
  local h = task.storage:history('loss')
  local per = task.iterations_per_epoch or 0
  local loss = h and h:avg(per > 0 and per or nil) or nil   -- nil (JSON null): no step ran
  local m = task.metrics
  -- the whole cr.train, its after_train hooks (the final kNN) included
  local seconds = task.started_at and cr.engine.loop.now() - task.started_at or m.seconds
  local out = { recipe = task.method_name, epochs = task.epoch, knn_top1 = m.knn_top1, knn_top5 = m.knn_top5,
                evaluated_on = task.test_set and task.eval_name or nil,
                knn_top1_init = m.knn_top1_init, train_loss = loss, seconds = seconds, train_seconds = m.train_seconds,
                img_per_s = m.train_img_per_s, checkpoint = path, preempted = task.signal }
  local shown = {}
  for k, v in pairs(out) do shown[k] = type(v) == 'number' and tonumber(string.format('%.4f', v)) or v end
  print('the run on one page: bin/crescent report ' .. R.run_dir(task))
  print(util.json(shown))
  run.write_results(task.config, R.run_dir(task), shown)
  return out
end

return R
