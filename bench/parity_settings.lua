-- bench/parity_settings.lua — the settings under which crescent and the independent
-- PyTorch implementations (bench/ssl_reference_torch.py) are compared, as recipe config
-- overrides: what learning_parity.lua trains with and parity_components.lua steps with.
--   local settings = dofile('bench/parity_settings.lua')
--   local overrides = settings.overrides('moco', {train = {epochs = 5}})
local cr = require 'crescent'

local M = {}

-- What both sides share: a CIFAR-style ResNet-18 at width 16 with a
-- 256 (BN, ReLU) -> 128 head, batch 256, SGD momentum 0.9 with one epoch of linear
-- warm-up then cosine to 0, 28 px views of scale (0.35, 1) with flip, brightness and
-- contrast jitter 0.4 (p 0.8, random order), no blur; kNN k 200, T 0.1.
-- The precision each method's figures were measured in: f32, except SwAV and DINO,
-- whose recipes trained in bf16 where the CPU has it (train.amp=auto) before every
-- recipe did.
M.COMMON = {
  train = { amp = 'off' },
  data = { batch_size = 256 },
  model = { arch = 'resnet18', width = 16, hidden_dim = 256, out_dim = 128, head_bn = true },
  optim = { momentum = 0.9, warmup_epochs = 1, final_lr = 0 },
  crops = { size = { 28 }, num = { 2 }, min_scale = { 0.35 }, max_scale = { 1 } },
  augment = { flip = 0.5, jitter = 0.8, brightness = 0.4, contrast = 0.4, saturation = 0, hue = 0, grayscale = 0,
              blur = 0, solarize = 0 },
  knn = { k = 200, temperature = 0.1 },
}

local LARS = { name = 'lars', lr = 0.2, weight_decay = 1.5e-6, trust_coefficient = 0.001, exclude_bias_norm = true,
               no_decay_bias_norm = true }

M.PARITY = {
  moco = { optim = { lr = 0.2, weight_decay = 1e-4 },
           moco = { temperature = 0.2, queue_length = 4096, momentum = 0.99, bn_splits = 8 } },
  swav = { train = { amp = 'auto' }, optim = { lr = 0.6, weight_decay = 1e-6 },
           crops = { size = { 28, 14 }, num = { 2, 4 }, min_scale = { 0.35, 0.1 }, max_scale = { 1, 0.35 } },
           swav = { num_prototypes = 100, temperature = 0.1, epsilon = 0.05, sinkhorn_iterations = 3,
                    freeze_prototypes_iterations = 234, queue_length = 0 } },
  simclr = { optim = { lr = 0.6, weight_decay = 1e-4 }, simclr = { temperature = 0.2 } },
  -- BYOL and Barlow Twins as their recipes train: LARS (biases and norm weights out of
  -- the scaling and the decay) and their own heads
  byol = { optim = LARS, model = { hidden_dim = 1024, out_dim = 256 }, byol = { momentum = 0.99, cosine_momentum = true } },
  barlow_twins = { optim = LARS, model = { hidden_dim = 1024, out_dim = 1024 },
                   barlow_twins = { proj_layers = 3, lambda = 0.0051 } },
  -- DINO as its recipe trains (bench/dino_torch.py is its twin): ViT-tiny/7 without
  -- DropPath, 2 x 28 + 6 x 14 px crops, AdamW with the weight decay rising 0.04 -> 0.4, lr
  -- scaled to the batch (the dino section's defaults are the recipe's: K = 1024, momentum
  -- from 0.99, the last layer never frozen)
  dino = { train = { amp = 'auto' }, model = { arch = 'vit_tiny', patch = 7, drop_path = 0 },
           crops = { size = { 28, 14 }, num = { 2, 6 }, min_scale = { 0.4, 0.05 }, max_scale = { 1, 0.4 } },
           optim = { name = 'adamw', lr = 2e-3, weight_decay = 0.04, weight_decay_end = 0.4, warmup_epochs = 0.1,
                     final_lr = 1e-6, base_batch_size = 256, scaling = 'linear' } },
}

-- The overrides of `method` with `extra` on top.
function M.overrides(method, extra)
  return cr.config.merge(M.COMMON, M.PARITY[method], extra or {})
end

return M
