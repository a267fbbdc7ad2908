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
require('crescent').recipe.ssl.main('simsiam', {
  train = { epochs = 3 },
  crops = { size = { 28 }, num = { 2 }, min_scale = { 0.2 }, max_scale = { 1 } },
  model = { hidden_dim = 512, out_dim = 512 },
  optim = { lr = 0.2, weight_decay = 5e-4, warmup_epochs = 0, final_lr = 0 },
})
