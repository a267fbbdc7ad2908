-- crescent.optim.SGD — stochastic gradient descent with momentum, Nesterov and weight
-- decay, torch.optim.SGD's update exactly, run by one fused C call over every parameter
-- (cr_optim_sgd_step in csrc/optim/sgd.c). For each parameter with a grad g:
--   d = g + weight_decay * p
--   momentum m > 0: buf = d on the first step, else buf = m * buf + (1 - dampening) * d
--                   d = nesterov and d + m * buf or buf
--   p = p - lr * d
--   cr.optim.SGD(model:named_parameters(), {lr = 0.1, momentum = 0.9, nesterov = false,
--                dampening = 0, weight_decay = 5e-4, no_decay_bias_norm = true, lr_mult = {...}})
-- State per parameter name: step, momentum_buffer (absent when momentum is 0).
local C = require('crescent.ffi').C
local Optimizer = require 'crescent.optim.optimizer'
local check = require 'crescent.optim.checks'
local util = require 'crescent.util'

local NESTEROV = C.CR_OPTIM_NESTEROV

local function validate(what, g)
  check.number(what, g, 'momentum', 0)
  check.number(what, g, 'dampening', nil)
  if g.nesterov and (g.momentum <= 0 or g.dampening ~= 0) then
    error(what .. ': nesterov = true needs momentum > 0 and dampening = 0 (as in PyTorch)', util.user_level())
  end
end

local function fill(s, g)
  s.momentum = g.momentum
  s.dampening = g.dampening
  s.flags = g.nesterov and NESTEROV or 0
end

return Optimizer:extend('SGD', {
  defaults = { momentum = 0, dampening = 0, nesterov = false },
  buffers = { 'momentum_buffer' },
  step_fn = C.cr_optim_sgd_step,
  validate = validate,
  fill = fill,
})
