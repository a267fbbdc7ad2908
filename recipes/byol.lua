-- recipes/byol.lua — BYOL self-supervised pre-training of a ResNet-18 (CIFAR stem, width
-- 16) on Fashion-MNIST for 5 epochs: two 24 px views, an online network (trunk,
-- projector, predictor) regressing the projections of a target network that follows it by
-- EMA (momentum 0.9 raised to 1 along a cosine: the paper's 0.996 is for hundreds of
-- epochs, and in a few hundred steps a slower target held the kNN back), LARS without
-- adaptation or decay for biases and norm weights, at solo-learn's CIFAR settings (lr 1.0,
-- trust coefficient 0.02 with the lr clipped, weight decay 1e-5); then a kNN evaluation of
-- the features on the test set.
--
--   luajit recipes/byol.lua
--   luajit recipes/byol.lua train.epochs=20 byol.momentum=0.996 optim.name=sgd optim.lr=0.05
--   luajit recipes/byol.lua --help
--
-- The trained model is saved to runs/<run.name>/checkpoints/latest.safetensors; the last
-- line on stdout is one JSON object with the final figures (knn_top1, ...).
local root = (debug.getinfo(1, 'S').source:match('^@(.*)/recipes/[^/]*$') or '.')
package.path = root .. '/lua/?.lua;' .. root .. '/lua/?/init.lua;' .. package.path
local cr = require 'crescent'
local recipe = cr.recipe.ssl
-- the keys every SSL recipe has, byol's section, these defaults, then the command line
local cfg = recipe.config('byol', arg, {
  train = { epochs = 5 },
  crops = { size = { 24 }, num = { 2 }, min_scale = { 0.2 }, max_scale = { 1 } },
  model = { hidden_dim = 1024, out_dim = 256 },
  byol = { momentum = 0.9 },
  optim = { name = 'lars', lr = 1.0, weight_decay = 1e-5, warmup_epochs = 0.5, final_lr = 0,
            trust_coefficient = 0.02, lars_clip = true, exclude_bias_norm = true, no_decay_bias_norm = true },
})

cr.recipe.run.main(function()
  -- threads, seed, device and ranks; the data sets and the multi-crop views
  local device = recipe.setup(cfg)
  local data = recipe.data(cfg, 'byol')
  -- the method, built on the cpu (the same initial weights for a seed on any device)
  local method = cr.ssl.byol.build(cfg, recipe.parts(cfg, data)):to(device)
  -- the loader, optimizer and lr schedule, the ranks' wrapping, the hooks, the run folder
  local task = recipe.assemble('byol', cfg, method, data)
  recipe.keep_log(task)   -- log.txt in the run folder from here on
  print(recipe.banner(task))
  cr.train(task)
  recipe.finish(task)     -- the final figures and the JSON last line
end)
