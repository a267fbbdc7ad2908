-- recipes/supervised.lua — supervised training of a ResNet on Fashion-MNIST (or any data
-- set the SSL recipes read: CIFAR, image folders, file lists, tar shards), with test
-- accuracy after every epoch. Copy it and change what you like; every default below can
-- also be overridden from the command line:
--
--   luajit recipes/supervised.lua
--   luajit recipes/supervised.lua train.epochs=2 optim.lr=0.2 data.batch_size=128 model.width=32
--   luajit recipes/supervised.lua model.arch=vit_tiny model.patch=4 optim.name=adamw optim.lr=1e-3
--   luajit recipes/supervised.lua data.name=image_folder data.root=data/demo data.size=48 data.workers=2
--   luajit recipes/supervised.lua --config myrun.lua        (a file returning a table of overrides)
--
-- Streamed sets (image folders, file lists, tar shards) are decoded by the loader's
-- workers and resized to data.size; data.augment is the random crop (padding 4) and flip
-- for every source. model.stem auto: the CIFAR stem (3x3 conv, no pool) up to 64 px,
-- else ImageNet's; a test split is needed (an image folder's val/, data.test_list, ...).
--
-- The run folder runs/<run.name> (default runs/supervised) gets config.lua, metrics.jsonl,
-- TensorBoard events and checkpoints/; running again with the same run.name resumes from
-- the newest checkpoint (run.resume=false starts afresh); SIGTERM or Ctrl-C checkpoints
-- after the current step and exits. run.resume_from=<checkpoint> goes on from another
-- run's checkpoint; model.init=<file> fine-tunes from its weights. The last line on stdout is one JSON object with the
-- final figures.
local root = (debug.getinfo(1, 'S').source:match('^@(.*)/recipes/[^/]*$') or '.')
package.path = root .. '/lua/?.lua;' .. root .. '/lua/?/init.lua;' .. package.path
local cr = require 'crescent'
local nn = cr.nn

-- the keys every training recipe has, the data, the ranks, the optimizer (name: sgd, lars,
-- adamw; accum_steps, clip_norm, scaling, ...: crescent/optim/from_config.lua), the trunk,
-- then this recipe's own keys and values
local schema = cr.config.schema(cr.recipe.run.BASE, cr.recipe.run.TRAINING, cr.recipe.run.INIT, cr.data.sources.options,
  cr.dist.setup.options, cr.optim.from_config.options, cr.recipe.ssl.ARCH, cr.recipe.ssl.TRUNK,
  cr.config.options('train', {
    { 'test_every', 'integer', 1, 'a test phase after every N epochs and the last (0: never)', min = 0 },
  }),
  cr.config.options('data', {
    { 'augment', 'boolean', false, 'random crop (padding 4) and horizontal flip of the training images' },
  })):with {
  train = { epochs = 4, log_every = 100 },
  data = { batch_size = 128 },
  optim = { lr = 0.1, nesterov = true, weight_decay = 5e-4, no_decay_bias_norm = true, warmup_epochs = 0.3 },
  checkpoint = { best = 'test_top1' },
}
local cfg = cr.config.parse(arg, schema)

cr.recipe.run.main(function()
  local device = cr.recipe.run.setup(cfg)
  if cfg.train.epochs > 0 and cfg.optim.warmup_epochs >= cfg.train.epochs then
    error(string.format('supervised: optim.warmup_epochs = %g is not shorter than train.epochs = %g: the cosine after the '
      .. 'warm-up would have no steps; give optim.warmup_epochs=%g or less', cfg.optim.warmup_epochs,
      cfg.train.epochs, cfg.train.epochs / 2), 0)
  end

  -- data: the normalised images of cfg.data (data.limit keeps the first N of each split;
  -- data.val_split tests on held-out training images instead)
  local train_set, test_set, eval_name = cr.data.sources.datasets(cfg)
  if not test_set then
    error("supervised: data.name='" .. cfg.data.name .. "' has no test split here (image_folder: a val/ folder; " ..
      'file_list: data.test_list; tar_shards: data.test_root), or hold one out with data.val_split', 0)
  end
  if not train_set.num_classes or train_set.num_classes < 1 then
    error("supervised: data.name='" .. cfg.data.name .. "' has no labels to train on", 0)
  end
  local workers = cfg.data.workers
  local train_loader = cr.data.Loader(train_set, { batch_size = cfg.data.batch_size, shuffle = true,
                                                   drop_last = true, seed = cfg.train.seed, augment = cfg.data.augment,
                                                   shard = cr.dist.setup.shard(), workers = workers })
  local test_loader = cr.data.Loader(test_set, { batch_size = 500, shuffle = false, drop_last = false, workers = workers })

  -- model: the data's channels and classes; built on the cpu (the same weights for a seed on
  -- any device), then moved to the run's device before the optimizer takes its parameters
  local nchan, height = cr.data.sources.image_shape(train_set)
  local stem = cfg.model.stem == 'auto' and (height > 64 and 'imagenet' or 'cifar') or cfg.model.stem
  local model
  if cfg.model.arch:match('^vit_') then
    model = nn.models[cfg.model.arch] { img_size = height, patch = cfg.model.patch, drop_path = cfg.model.drop_path,
                                        in_channels = nchan, num_classes = train_set.num_classes }
  else
    model = nn.models[cfg.model.arch] { stem = stem, width = cfg.model.width, in_channels = nchan,
                                        num_classes = train_set.num_classes }
  end
  model:to(device)
  local freeze = cr.recipe.run.freeze(cfg, model)   -- model.freeze=<pattern>: fixed, in eval mode
  local ddp = cr.dist.setup.model(cfg, model)   -- k ranks: SyncBatchNorm (dist.sync_bn) and DDP

  -- optimizer: SGD with Nesterov momentum, no weight decay on biases and BatchNorm weights
  -- (optim.name picks another); lr (scaled to the global batch with optim.scaling): linear
  -- warmup from 0 then cosine to 0, applied every step
  local peak, _, scaled = cr.optim.from_config.scaled_lr(cfg.optim, cfg.data.batch_size)
  if scaled then print(scaled) end
  local trainable = {}
  for _, np in ipairs(model:named_parameters()) do
    if np[2].requires_grad then trainable[#trainable + 1] = np end
  end
  local optimizer = cr.optim.from_config.build(trainable, cfg.optim, peak, schema.defaults.optim)
  local warmup = cfg.train.epochs > 0 and cfg.optim.warmup_epochs / cfg.train.epochs or 0
  local lr = cr.schedule.warmup_cosine { warmup = warmup, from = 0, peak = peak, to = 0 }

  local task = cr.engine.Task {
    config = cfg, model = model, optimizer = optimizer,
    schedules = { lr = lr, weight_decay = cr.optim.from_config.weight_decay_schedule(cfg.optim) },
    loss = function(output, batch) return cr.cross_entropy(output, batch.target) end,
    train_loader = train_loader, test_loader = test_loader,
  }
  task.ddp = ddp                                                  -- accumulation: one all-reduce per step
  task:add_hook(cr.hooks.schedule())                              -- the lr every step
  task:add_hook(cr.hooks.timer())                                 -- time, img/s, ETA
  task:add_hook(cr.hooks.nan_guard { every = 100 })               -- stop on NaN/Inf
  task:add_hook(cr.hooks.eval { topk = { 1, 5 } })                -- test top-1/top-5
  if freeze then task:add_hook(freeze) end                       -- model.freeze_iters: for the first steps
  local ema = cr.recipe.run.ema_hook(cfg, model)                -- model.ema=0.999: test the averaged weights
  if ema then task:add_hook(ema) end
  task:add_hook(cr.hooks.diagnostics { every = cfg.train.log_every }) -- norms, lr, memory, time split
  task:add_hook(cr.hooks.console { every = cfg.train.log_every, split = eval_name }) -- progress, test (val) lines
  -- the run folder: config.lua, TensorBoard events, metrics.jsonl, checkpoints; the start
  -- (its checkpoints, else run.resume_from, else model.init weights, else from scratch)
  local dir, env = cr.recipe.run.prepare(cfg, cr.recipe.run.dir(cfg, 'supervised'))
  cr.recipe.run.keep_log(cfg, dir)                                -- log.txt: what this run prints
  cr.recipe.run.add_log_hooks(task, cfg, dir)                     -- events, metrics.jsonl (and .csv)
  task:add_hook(cr.recipe.run.checkpoint_hook(cfg, dir, env))
  local profile = cr.recipe.run.profile_hook(cfg, dir)           -- train.profile=<first>:<count>
  if profile then task:add_hook(profile) end
  cr.dist.setup.task(task)   -- k ranks: rank 0 logs, evaluates and checkpoints; the ranks stop together

  local vit = cfg.model.arch:find('^vit') ~= nil
  print(string.format('supervised: %s %s (%.2fM params) on %s (%d train, %d %s), ' ..
    '%d epochs, batch %d, lr %g, %s%s%s', cfg.model.arch,
    vit and ('patch ' .. cfg.model.patch) or ('width ' .. cfg.model.width), model:num_parameters() / 1e6,
    cfg.data.name, #train_set, #test_set, eval_name, cfg.train.epochs, cfg.data.batch_size, peak,
    require('crescent.util').count_of(cr.get_num_threads(), 'thread'),
    task.amp ~= 'off' and ', amp ' .. task.amp or '', cr.dist.setup.describe(ddp)))
  cr.train(task)

  -- the final figures; train_loss is the mean over the last epoch's steps
  local h = task.storage:history('loss')
  local train_loss = h and h:avg(task.iterations_per_epoch) or 0
  local m = task.metrics
  local function round(v, digits) return tonumber(string.format('%.' .. digits .. 'f', v or 0)) end
  local seconds = cr.engine.loop.now() - task.started_at   -- the whole cr.train, its last test phase included
  local results = { recipe = 'supervised', epochs = task.epoch, evaluated_on = eval_name, test_top1 = round(m.test_top1, 2),
    train_loss = round(train_loss, 4), seconds = round(seconds, 1), img_per_s = round(m.train_img_per_s, 1),
    preempted = task.signal }
  print('the run on one page: bin/crescent report ' .. dir)
  print(require('crescent.util').json(results))
  cr.recipe.run.write_results(cfg, dir, results)                  -- and results.json
end)
