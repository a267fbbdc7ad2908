-- recipes/linear_eval.lua — linear evaluation of a frozen trunk: features of the train and
-- test sets (un-augmented, eval mode), a weighted kNN on them, and a linear classifier
-- trained on the standardised features (SGD, cosine lr), reporting test top-1.
--
--   luajit recipes/linear_eval.lua model.init=runs/swav/checkpoints/latest.safetensors
--   luajit recipes/linear_eval.lua                     (no init: a random trunk, the baseline)
--   luajit recipes/linear_eval.lua model.arch=pixels   (raw normalised pixels, the other baseline)
--   luajit recipes/linear_eval.lua model.init=torch.safetensors model.init_remove_prefix=module.
--
-- A crescent checkpoint's config gives the trunk (model.arch, model.width, model.stem);
-- for other files, set them to match.
-- The last line on stdout is one JSON object: linear_top1, linear_top5, knn_top1, ...; the
-- run folder runs/<run.name, default linear_eval> keeps config.lua, log.txt and results.json.
local root = (debug.getinfo(1, 'S').source:match('^@(.*)/recipes/[^/]*$') or '.')
package.path = root .. '/lua/?.lua;' .. root .. '/lua/?/init.lua;' .. package.path
local cr = require 'crescent'
local util = require 'crescent.util'
local recipe = cr.recipe.ssl

-- the frozen-feature keys (the probe trains train.epochs, 30 here), then the probe's own
local cfg = cr.config.parse(arg, cr.config.schema(recipe.frozen_schema():with { train = { epochs = 30 } },
  cr.config.options('optim', {
    { 'name', { 'sgd' }, 'sgd', 'the probe is SGD on standardised features' },
    { 'lr', 'number', 0.1, "the probe's peak learning rate", min = 0 },
    { 'momentum', 'number', 0.9, "the probe's SGD momentum", min = 0 },
    { 'weight_decay', 'number', 0, "the probe's weight decay", min = 0 },
    { 'batch_size', 'integer', 256, "the probe's batch", min = 1 },
  }),
  cr.config.options('knn', {
    { 'enabled', 'boolean', true, 'also a kNN on the same features' },
    { 'k', 'integer', 200, 'its neighbours', min = 1 },
    { 'temperature', 'number', 0.1, 'its vote temperature, exp(similarity / T)', above = 0 },
  })))

cr.recipe.run.main(function()
  local device = recipe.setup(cfg)
  -- the run folder: config.lua, env.txt, log.txt (what this prints) and results.json
  local run_dir = cr.recipe.run.prepare(cfg, cr.recipe.run.dir(cfg, 'linear_eval'))
  cr.recipe.run.keep_log(cfg, run_dir)
  local train_set, test_set, eval_name = recipe.datasets(cfg)   -- eval_name 'val' with data.val_split
  if not test_set then error('linear_eval: the data set has no test split (image_folder: add a val/ folder)', 0) end
  local forward, trunk = recipe.frozen_trunk(cfg, train_set, device)
  recipe.frozen_dry_run(cfg, trunk, train_set, test_set, eval_name, {
    string.format('would extract the features of both sets, %s, then train the linear probe for %d epochs (SGD, ' ..
      'lr %g, batch %d)', cfg.knn.enabled and 'run a kNN on them' or 'no kNN', cfg.train.epochs, cfg.optim.lr,
      cfg.optim.batch_size),
    'run folder: ' .. run_dir })
  local t0 = cr.engine.loop.now()
  local opts = { batch_size = cfg.data.batch_size, forward = forward, device = device }
  local ftr, ytr = cr.ssl.extract_features(trunk, train_set, opts)
  local fte, yte = cr.ssl.extract_features(trunk, test_set, opts)
  local extract_seconds = cr.engine.loop.now() - t0
  print(string.format('linear_eval: %s features [%d, %d] train, [%d, %d] %s in %.1fs',
    cfg.model.arch, ftr.shape[1], ftr.shape[2], fte.shape[1], fte.shape[2], eval_name, extract_seconds))

  local knn_top1
  if cfg.knn.enabled then
    knn_top1 = cr.ssl.knn_classify(ftr, ytr, fte, yte, { k = cfg.knn.k, temperature = cfg.knn.temperature })
    print(string.format('knn: top1 %.2f%% on %s (k %d, T %g)', knn_top1, eval_name, cfg.knn.k, cfg.knn.temperature))
  end

  local classes = math.max(ytr:max():item(), yte:max():item()) + 1
  local task = cr.ssl.linear_probe.task {
    train_features = ftr, train_labels = ytr, test_features = fte, test_labels = yte, num_classes = classes,
    epochs = cfg.train.epochs, batch_size = cfg.optim.batch_size, lr = cfg.optim.lr, momentum = cfg.optim.momentum,
    weight_decay = cfg.optim.weight_decay, seed = cfg.train.seed, log_every = 100000, split = eval_name,
  }
  cr.train(task)
  local m = task.metrics
  local results = { recipe = 'linear_eval', model = cfg.model.arch, init = cfg.model.init, epochs = task.epoch,
                    linear_top1 = m.test_top1, linear_top5 = m.test_top5, knn_top1 = knn_top1, evaluated_on = eval_name,
                    seconds = cr.engine.loop.now() - t0 }
  print(util.json(results))
  cr.recipe.run.write_results(cfg, run_dir, results)
end)
