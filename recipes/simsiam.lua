-- recipes/simsiam.lua — SimSiam self-supervised pre-training of a ResNet-18 (CIFAR stem,
-- width 16) on Fashion-MNIST: two 28 px views, each through the encoder, a predictor that
-- regresses the other view's detached projection (negative cosine), SGD with the
-- predictor's lr held at the peak; then a kNN evaluation of the features on the test set.
--
--   luajit recipes/simsiam.lua
--   luajit recipes/simsiam.lua train.epochs=20 simsiam.proj_layers=3 simsiam.fix_pred_lr=false
--   luajit recipes/simsiam.lua --help
--
-- The trained model is saved to runs/<run.name>/checkpoints/latest.safetensors; the last
-- line on stdout is one JSON object with the final figures (knn_top1, ...).
local root = (debug.getinfo(1, 'S').source:match('^@(.*)/recipes/[^/]*$') or '.')
package.path = root .. '/lua/?.lua;' .. root .. '/lua/?/init.lua;' .. package.path
local cr = require 'crescent'
local recipe = cr.recipe.ssl
-- the keys every SSL recipe has, simsiam's section, these defaults, then the command line
local cfg = recipe.config('simsiam', arg, {
  train = { epochs = 3 },
  crops = { size = { 28 }, num = { 2 }, min_scale = { 0.2 }, max_scale = { 1 } },
  model = { hidden_dim = 512, out_dim = 512 },
  simsiam = { pred_dim = 128, proj_layers = 2 },   -- the paper's CIFAR projector
  optim = { lr = 0.2, weight_decay = 5e-4, warmup_epochs = 0, final_lr = 0 },
})

cr.recipe.run.main(function()
  -- threads, seed, device and ranks; the data sets and the multi-crop views
  local device = recipe.setup(cfg)
  local data = recipe.data(cfg, 'simsiam')
  -- the method, built on the cpu (the same initial weights for a seed on any device)
  local method = cr.ssl.simsiam.build(cfg, recipe.parts(cfg, data)):to(device)
  -- the loader, optimizer and lr schedule, the ranks' wrapping, the hooks, the run folder
  local task = recipe.assemble('simsiam', cfg, method, data)
  recipe.keep_log(task)   -- log.txt in the run folder from here on
  print(recipe.banner(task))
  cr.train(task)
  recipe.finish(task)     -- the final figures and the JSON last line
end)
