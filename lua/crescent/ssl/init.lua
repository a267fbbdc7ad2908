-- crescent.ssl — the numerical core of the self-supervised methods (SwAV, MoCo v2,
-- SimCLR, BYOL-style targets) and their evaluation:
--   ssl.sinkhorn(scores, {epsilon = 0.05, iterations = 3, reduce = nil}) -> codes [B, K]
--   ssl.ema_update(target, source, m)       target = m * target + (1 - m) * source
--   ssl.copy_tensors(target, source)        exact copies (buffers, any dtype)
--   ssl.cosine_momentum(m0, progress)       1 - (1 - m0) * (cos(pi * progress) + 1) / 2
--   ssl.swav_loss, ssl.infonce, ssl.nt_xent, ssl.cosine_prediction, ssl.barlow_twins_loss
--   (crescent.ssl.losses)
--   ssl.Queue (crescent.ssl.queue), ssl.knn_classify (crescent.ssl.knn),
--   ssl.extract_features (crescent.ssl.features)
--   ssl.swav / moco / simclr / simsiam / byol / barlow_twins / npid / deepcluster_v2 / dino:
--   the methods as modules, each with build(cfg, parts) (cr.recipe.ssl.task(name, cfg)
--   makes a task around one)
-- The Sinkhorn and EMA kernels are C (csrc/ssl/, declared in csrc/include/crescent_ssl.h);
-- the losses are composed from differentiable ops.
local momentum = require 'crescent.ssl.momentum'

local M = {}

M.sinkhorn = require 'crescent.ssl.sinkhorn'
M.ema_update = momentum.ema_update
M.copy_tensors = momentum.copy_tensors
M.cosine_momentum = momentum.cosine_momentum
local losses = require 'crescent.ssl.losses'
M.swav_loss = losses.swav_loss
M.infonce = losses.infonce
M.nt_xent = losses.nt_xent
M.cosine_prediction = losses.cosine_prediction
M.barlow_twins_loss = losses.barlow_twins
M.Queue = require 'crescent.ssl.queue'
M.knn_classify = require('crescent.ssl.knn').classify
M.extract_features = require('crescent.ssl.features').extract

-- The methods and the linear probe load on first use (they need cr.nn):
-- ssl.swav.SwAV, ssl.moco.MoCo, ssl.simclr.SimCLR, ssl.simsiam.SimSiam, ssl.byol.BYOL,
-- ssl.barlow_twins.BarlowTwins, ssl.npid.NPID, ssl.deepcluster_v2.DeepClusterV2, ssl.dino.DINO,
-- ssl.linear_probe.
-- The self-supervised methods, each a module crescent.ssl.<name> and a recipe
-- recipes/<name>.lua: the one list recipes, specs, tools, benchmarks, the report and
-- --help read (adding a method is its file, its recipe and a name here).
M.METHODS = { 'swav', 'moco', 'simclr', 'byol', 'simsiam', 'barlow_twins', 'npid', 'deepcluster_v2', 'dino' }

-- Each method, and the linear probe, loads on first use: cr.ssl.swav is crescent.ssl.swav.
local LAZY = { linear_probe = true }
for _, name in ipairs(M.METHODS) do LAZY[name] = true end
return setmetatable(M, { __index = function(t, k)
  if not LAZY[k] then return nil end
  local v = require('crescent.ssl.' .. k)
  rawset(t, k, v)
  return v
end })
