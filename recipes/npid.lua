-- recipes/npid.lua — NPID (instance discrimination with a memory bank) pre-training of a
-- ResNet-18 (CIFAR stem, width 16) on Fashion-MNIST, 5 epochs: one augmented 24 px view
-- per sample, an L2-normalised 128-d embedding, a softmax over the sample's own
-- memory-bank entry and 4096 drawn ones at temperature 0.07, the bank started from the
-- untrained network's embeddings (npid.bank_init=noise starts it as the paper's noise), updated
-- with momentum 0.5; then a kNN evaluation of the features on the test set.
--
--   luajit recipes/npid.lua
--   luajit recipes/npid.lua train.epochs=20 npid.negatives=8192 npid.temperature=0.1
--   luajit recipes/npid.lua --help
--
-- The memory bank is saved with the checkpoints; the last line on stdout is one JSON
-- object with the final figures (knn_top1, ...).
local root = (debug.getinfo(1, 'S').source:match('^@(.*)/recipes/[^/]*$') or '.')
package.path = root .. '/lua/?.lua;' .. root .. '/lua/?/init.lua;' .. package.path
local cr = require 'crescent'
local recipe = cr.recipe.ssl
-- the keys every SSL recipe has, npid's section, these defaults, then the command line
local cfg = recipe.config('npid', arg, {
  train = { epochs = 5 },
  crops = { size = { 24 }, num = { 1 }, min_scale = { 0.2 }, max_scale = { 1 } },
  model = { out_dim = 128 },
  npid = { bank_init = 'features' },   -- the bank starts from the untrained network's embeddings
  optim = { lr = 0.03, weight_decay = 5e-4, warmup_epochs = 0, final_lr = 0 },
})

cr.recipe.run.main(function()
  -- threads, seed, device and ranks; the data sets and the multi-crop views
  local device = recipe.setup(cfg)
  local data = recipe.data(cfg, 'npid')
  -- the method, built on the cpu (the same initial weights for a seed on any device)
  local method = cr.ssl.npid.build(cfg, recipe.parts(cfg, data)):to(device)
  -- the loader, optimizer and lr schedule, the ranks' wrapping, the hooks, the run folder
  local task = recipe.assemble('npid', cfg, method, data)
  recipe.keep_log(task)   -- log.txt in the run folder from here on
  print(recipe.banner(task))
  cr.train(task)
  recipe.finish(task)     -- the final figures and the JSON last line
end)
