-- recipes/moco.lua — MoCo v2 self-supervised pre-training of a ResNet-18 (CIFAR stem,
-- width 16) on Fashion-MNIST: two 28 px views, a momentum key encoder (EMA 0.99) with
-- shuffle-BN, BatchNorm in 8 groups as on 8 GPUs (moco.bn_splits), a queue of 4096
-- negatives, InfoNCE at temperature 0.2; then a kNN
-- evaluation of the features on the test set. About 15 minutes on 2 cores.
--
--   luajit recipes/moco.lua
--   luajit recipes/moco.lua train.epochs=20 moco.queue_length=8192 moco.cosine_momentum=true
--   luajit recipes/moco.lua --help
--
-- The trained model is saved to runs/<run.name>/checkpoints/latest.safetensors; the last
-- line on stdout is one JSON object with the final figures (knn_top1, ...).
local root = (debug.getinfo(1, 'S').source:match('^@(.*)/recipes/[^/]*$') or '.')
package.path = root .. '/lua/?.lua;' .. root .. '/lua/?/init.lua;' .. package.path
local cr = require 'crescent'
local recipe = cr.recipe.ssl
-- the keys every SSL recipe has, moco's section, these defaults, then the command line
local cfg = recipe.config('moco', arg, {
  train = { epochs = 5 },
  crops = { size = { 28 }, num = { 2 }, min_scale = { 0.2 }, max_scale = { 1 } },
  optim = { lr = 0.06, weight_decay = 5e-4, warmup_epochs = 0, final_lr = 0 },
  model = { head_bn = false },   -- MoCo v2's head
  -- a faster key encoder for 5 short epochs; BatchNorm as on 8 GPUs (shuffle-BN)
  moco = { momentum = 0.99, bn_splits = 8 },
  dist = { sync_bn = false },    -- per-rank BatchNorm, as MoCo's: SyncBN would undo shuffle-BN
})

cr.recipe.run.main(function()
  -- threads, seed, device and ranks; the data sets and the multi-crop views
  local device = recipe.setup(cfg)
  local data = recipe.data(cfg, 'moco')
  -- the method, built on the cpu (the same initial weights for a seed on any device)
  local method = cr.ssl.moco.build(cfg, recipe.parts(cfg, data)):to(device)
  -- the loader, optimizer and lr schedule, the ranks' wrapping, the hooks, the run folder
  local task = recipe.assemble('moco', cfg, method, data)
  recipe.keep_log(task)   -- log.txt in the run folder from here on
  print(recipe.banner(task))
  cr.train(task)
  recipe.finish(task)     -- the final figures and the JSON last line
end)
