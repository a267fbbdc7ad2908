-- recipes/barlow_twins.lua — Barlow Twins self-supervised pre-training of a ResNet-18
-- (CIFAR stem, width 16) on Fashion-MNIST: two 28 px views, each through the encoder and
-- a 3-layer projector, their batch-normalised embeddings' cross-correlation pushed to
-- the identity (lambda 0.0051 on the off-diagonal), LARS without adaptation or decay for
-- biases and norm weights; then a kNN evaluation of the features on the test set.
--
--   luajit recipes/barlow_twins.lua
--   luajit recipes/barlow_twins.lua train.epochs=20 barlow_twins.lambda=0.01 model.out_dim=2048
--   luajit recipes/barlow_twins.lua --help
--
-- The trained model is saved to runs/<run.name>/checkpoints/latest.safetensors; the last
-- line on stdout is one JSON object with the final figures (knn_top1, ...).
local root = (debug.getinfo(1, 'S').source:match('^@(.*)/recipes/[^/]*$') or '.')
package.path = root .. '/lua/?.lua;' .. root .. '/lua/?/init.lua;' .. package.path
local cr = require 'crescent'
local recipe = cr.recipe.ssl
-- the keys every SSL recipe has, barlow_twins's section, these defaults, then the command line
local cfg = recipe.config('barlow_twins', arg, {
  train = { epochs = 3 },
  crops = { size = { 28 }, num = { 2 }, min_scale = { 0.2 }, max_scale = { 1 } },
  model = { hidden_dim = 1024, out_dim = 1024 },
  optim = { name = 'lars', lr = 0.2, weight_decay = 1.5e-6, warmup_epochs = 0.5, final_lr = 0,
            exclude_bias_norm = true, no_decay_bias_norm = true },
})

cr.recipe.run.main(function()
  -- threads, seed, device and ranks; the data sets and the multi-crop views
  local device = recipe.setup(cfg)
  local data = recipe.data(cfg, 'barlow_twins')
  -- the method, built on the cpu (the same initial weights for a seed on any device)
  local method = cr.ssl.barlow_twins.build(cfg, recipe.parts(cfg, data)):to(device)
  -- the loader, optimizer and lr schedule, the ranks' wrapping, the hooks, the run folder
  local task = recipe.assemble('barlow_twins', cfg, method, data)
  recipe.keep_log(task)   -- log.txt in the run folder from here on
  print(recipe.banner(task))
  cr.train(task)
  recipe.finish(task)     -- the final figures and the JSON last line
end)
