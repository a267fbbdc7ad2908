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
require('crescent').recipe.ssl.main('simclr', {
  train = { epochs = 3 },
  crops = { size = { 28 }, num = { 2 }, min_scale = { 0.2 }, max_scale = { 1 } },
  optim = { lr = 0.5, weight_decay = 1e-6, warmup_epochs = 0.5, final_lr = 0 },
})
