-- recipes/simclr.lua — SimCLR self-supervised pre-training of a ResNet-18 (CIFAR stem,
-- width 16) on Fashion-MNIST: two 28 px views through one forward, NT-Xent at temperature
-- 0.5 over the 2B projections; then a kNN evaluation of the features on the test set.
-- About 15 minutes on 2 cores.
--
--   luajit recipes/simclr.lua
--   luajit recipes/simclr.lua train.epochs=20 simclr.temperature=0.2 data.batch_size=512
--   luajit recipes/simclr.lua --help
--
-- The trained model is saved to runs/<run.name>/checkpoints/latest.safetensors; the last
-- line on stdout is one JSON object with the final figures (knn_top1, ...).
local root = (debug.getinfo(1, 'S').source:match('^@(.*)/recipes/[^/]*$') or '.')
package.path = root .. '/lua/?.lua;' .. root .. '/lua/?/init.lua;' .. package.path
local cr = require 'crescent'
local recipe = cr.recipe.ssl
-- the keys every SSL recipe has, simclr's section, these defaults, then the command line
local cfg = recipe.config('simclr', arg, {
  train = { epochs = 3 },
  crops = { size = { 28 }, num = { 2 }, min_scale = { 0.2 }, max_scale = { 1 } },
  optim = { lr = 0.5, weight_decay = 1e-6, warmup_epochs = 0.5, final_lr = 0 },
})

cr.recipe.run.main(function()
  -- threads, seed, device and ranks; the data sets and the multi-crop views
  local device = recipe.setup(cfg)
  local data = recipe.data(cfg, 'simclr')
  -- the method, built on the cpu (the same initial weights for a seed on any device)
  local method = cr.ssl.simclr.build(cfg, recipe.parts(cfg, data)):to(device)
  -- the loader, optimizer and lr schedule, the ranks' wrapping, the hooks, the run folder
  local task = recipe.assemble('simclr', cfg, method, data)
  recipe.keep_log(task)   -- log.txt in the run folder from here on
  print(recipe.banner(task))
  cr.train(task)
  recipe.finish(task)     -- the final figures and the JSON last line
end)
