-- crescent.optim.AdamW — Adam with decoupled weight decay, torch.optim.AdamW's update
-- (amsgrad off), run by one fused C call (cr_optim_adamw_step in csrc/optim/adamw.c).
-- For each parameter with grad g, t = its step count after this step:
--   p = p * (1 - lr * weight_decay)
--   m = m + (1 - beta1) * (g - m);  v = beta2 * v + (1 - beta2) * g^2   (both start at 0)
--   p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
--   cr.optim.AdamW(named_params, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0.01})
-- State per parameter name: step, exp_avg, exp_avg_sq.
local C = require('crescent.ffi').C
local Optimizer = require 'crescent.optim.optimizer'
local check = require 'crescent.optim.checks'
local util = require 'crescent.util'

local function validate(what, g)
  if type(g.betas) ~= 'table' or #g.betas ~= 2 then
    error(what .. ': betas must be a pair {beta1, beta2}, e.g. {0.9, 0.999}', util.user_level())
  end
  check.range(what, 'betas[1]', g.betas[1], 0, 1)
  check.range(what, 'betas[2]', g.betas[2], 0, 1)
  check.number(what, g, 'eps', 0)
end

local function fill(s, g)
  local b = g.betas
  s.beta1 = b[1]
  s.beta2 = b[2]
  s.eps = g.eps
  s.flags = 0
end

return Optimizer:extend('AdamW', {
  defaults = { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0.01 },
  buffers = { 'exp_avg', 'exp_avg_sq' },
  step_fn = C.cr_optim_adamw_step,
  validate = validate,
  fill = fill,
})
