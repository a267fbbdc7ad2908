-- recipes/swav.lua — SwAV self-supervised pre-training of a ResNet-18 (CIFAR stem, width
-- 16) on Fashion-MNIST with 2x24 + 4x12 multi-crop, then a kNN evaluation of its features
-- (k = 200, cosine, T = 0.1) on the test set. About 15 minutes on 2 cores. Every default
-- below can be overridden from the command line or a --config file:
--
--   luajit recipes/swav.lua
--   luajit recipes/swav.lua train.epochs=10 swav.prototypes=300 'crops.num={2,6}' knn.every=2
--   luajit recipes/swav.lua --config myrun.lua        (a file returning a table of overrides)
--   luajit recipes/swav.lua --help                    (every key, its type and default)
--
-- The trained model is saved to runs/<run.name>/checkpoints/latest.safetensors, for
-- recipes/linear_eval.lua and recipes/extract.lua. The last line on stdout is one JSON
-- object with the final figures (knn_top1, ...).
local root = (debug.getinfo(1, 'S').source:match('^@(.*)/recipes/[^/]*$') or '.')
package.path = root .. '/lua/?.lua;' .. root .. '/lua/?/init.lua;' .. package.path
require('crescent').ssl.recipe.main('swav', {
  train = { epochs = 3 },
  -- 24 + 12 px crops of the 28 px images: the kNN of 28 + 14 px in two thirds of the time.
  -- An embedding of 32 dims, fewer than the 100 prototypes: with 128, the embeddings can
  -- sit where no prototype reaches (28 dims), every prediction uniform, and the loss stays
  -- at ln 100 (24 px crops stalled there through the first epoch and into the second).
  crops = { size = { 24, 12 } },
  model = { out_dim = 32 },
  optim = { lr = 0.6, weight_decay = 1e-6, warmup_epochs = 1, final_lr = 0.0006 },
})
