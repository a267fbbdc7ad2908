-- crescent.optim — optimizers (SGD, LARS, AdamW) over parameter groups, each step one
-- fused C call over every parameter; gradient clipping; schedules (also cr.schedule).
--   local opt = cr.optim.SGD(model:named_parameters(), {lr = 0.1, momentum = 0.9})
--   opt:zero_grad(); loss:backward(); cr.optim.clip_grad_norm(opt, 1.0); opt:step()
local clip = require 'crescent.optim.clip'

local optim = {}
optim.Optimizer = require 'crescent.optim.optimizer'
optim.SGD = require 'crescent.optim.sgd'
optim.LARS = require 'crescent.optim.lars'
optim.AdamW = require 'crescent.optim.adamw'
optim.clip_grad_norm = clip.clip_grad_norm
optim.clip_grad_value = clip.clip_grad_value
optim.grad_norm = clip.grad_norm
optim.scale_grads = clip.scale_grads
optim.zero_grads = clip.zero_grads
optim.GradScaler = require 'crescent.optim.scaler'
optim.schedule = require 'crescent.optim.schedule'
optim.from_config = require 'crescent.optim.from_config' -- the optimizer a recipe's optim section names

return optim
