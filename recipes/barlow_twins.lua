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
require('crescent').recipe.ssl.main('barlow_twins', {
  train = { epochs = 3 },
  crops = { size = { 28 }, num = { 2 }, min_scale = { 0.2 }, max_scale = { 1 } },
  model = { hidden_dim = 1024, out_dim = 1024 },
  optim = { name = 'lars', lr = 0.2, weight_decay = 1.5e-6, warmup_epochs = 0.5, final_lr = 0,
            exclude_bias_norm = true, no_decay_bias_norm = true },
})
