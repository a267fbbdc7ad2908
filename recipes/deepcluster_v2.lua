-- recipes/deepcluster_v2.lua — DeepCluster-v2 self-supervised pre-training of a ResNet-18
-- (CIFAR stem, width 16) on Fashion-MNIST: 2x24 + 4x12 multi-crop, three prototype heads
-- of 300 whose weights are, at each epoch's start, k-means centroids (10 rounds) of the
-- memory of the two global crops' embeddings, each crop classified into its sample's
-- clusters (temperature 0.1); then a kNN evaluation of the features on the test set.
--
--   luajit recipes/deepcluster_v2.lua
--   luajit recipes/deepcluster_v2.lua train.epochs=10 'deepcluster_v2.num_prototypes={1000,1000}'
--   luajit recipes/deepcluster_v2.lua --help
--
-- The memory and the assignments are saved with the checkpoints; the last line on stdout
-- is one JSON object with the final figures (knn_top1, ...).
local root = (debug.getinfo(1, 'S').source:match('^@(.*)/recipes/[^/]*$') or '.')
package.path = root .. '/lua/?.lua;' .. root .. '/lua/?/init.lua;' .. package.path
local cr = require 'crescent'
local recipe = cr.recipe.ssl
-- the keys every SSL recipe has, deepcluster_v2's section, these defaults, then the command line
local cfg = recipe.config('deepcluster_v2', arg, {
  train = { epochs = 3 },
  -- 24 + 12 px crops of the 28 px images: 28 + 14 px took 24 minutes alone for 3 epochs,
  -- these 10 (2 threads, tools/ssl_table.lua, 2026-11-27)
  crops = { size = { 24, 12 } },
  optim = { lr = 0.6, weight_decay = 1e-6, warmup_epochs = 1, final_lr = 0.0006 },
})

cr.recipe.run.main(function()
  -- threads, seed, device and ranks; the data sets and the multi-crop views
  local device = recipe.setup(cfg)
  local data = recipe.data(cfg, 'deepcluster_v2')
  -- the method, built on the cpu (the same initial weights for a seed on any device)
  local method = cr.ssl.deepcluster_v2.build(cfg, recipe.parts(cfg, data)):to(device)
  -- the loader, optimizer and lr schedule, the ranks' wrapping, the hooks, the run folder
  local task = recipe.assemble('deepcluster_v2', cfg, method, data)
  recipe.keep_log(task)   -- log.txt in the run folder from here on
  print(recipe.banner(task))
  cr.train(task)
  recipe.finish(task)     -- the final figures and the JSON last line
end)
