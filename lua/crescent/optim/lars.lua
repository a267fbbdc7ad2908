-- crescent.optim.LARS — layer-wise adaptive rate scaling in apex's LARC form, as SwAV and
-- VISSL train with it (apex.parallel.LARC wrapping torch.optim.SGD), run by one fused C
-- call (cr_optim_lars_step in csrc/optim/sgd.c). For each adapted parameter with grad g,
-- norms accumulated in f64:
--   ratio = trust_coefficient * ||p|| / (||g|| + weight_decay * ||p|| + eps)
--   clip = true (LARC clip mode): ratio = min(ratio / lr, 1)
--   d = ratio * (g + weight_decay * p)          -- the weight decay sits inside the ratio
--   (when ||p|| or ||g|| is 0: d = g, apex's behaviour: neither ratio nor weight decay)
-- then SGD's momentum step with weight decay 0: buf = d on the first step, else
-- buf = momentum * buf + (1 - dampening) * d; d = nesterov and d + momentum * buf or buf;
-- p = p - lr * d.
-- exclude_bias_norm = true (default): tensors with ndim <= 1 (biases, norm weights) are
-- not adapted; they get plain SGD with momentum, d = g + weight_decay * p. Their weight
-- decay is the group's: add no_decay_bias_norm = true to drop it as well.
--   cr.optim.LARS(named_params, {lr = 4.8, momentum = 0.9, weight_decay = 1e-6,
--                 trust_coefficient = 0.001, clip = false, exclude_bias_norm = true, eps = 1e-8})
-- Defaults: momentum 0.9 (LARS is always run with it), trust_coefficient 0.001 (SwAV),
-- clip false, eps 1e-8 (apex). State per parameter: step, momentum_buffer.
-- opt.last_trust_ratio[name] holds the ratio applied at the last step (1 when none).
local C = require('crescent.ffi').C
local Optimizer = require 'crescent.optim.optimizer'
local check = require 'crescent.optim.checks'
local util = require 'crescent.util'

local NESTEROV, ADAPT, CLIP = C.CR_OPTIM_NESTEROV, C.CR_OPTIM_LARS_ADAPT, C.CR_OPTIM_LARS_CLIP

local function validate(what, g)
  check.number(what, g, 'momentum', 0)
  check.number(what, g, 'dampening', nil)
  check.number(what, g, 'trust_coefficient', 0)
  check.number(what, g, 'eps', 0)
  if g.nesterov and (g.momentum <= 0 or g.dampening ~= 0) then
    error(what .. ': nesterov = true needs momentum > 0 and dampening = 0 (as in PyTorch)', util.user_level())
  end
end

local function fill(s, g, ndim)
  s.momentum = g.momentum
  s.dampening = g.dampening
  s.eps = g.eps
  s.trust_coefficient = g.trust_coefficient
  local flags = g.nesterov and NESTEROV or 0
  if not (g.exclude_bias_norm and ndim <= 1) then flags = flags + ADAPT end
  if g.clip then flags = flags + CLIP end
  s.flags = flags
end

local LARS = Optimizer:extend('LARS', {
  defaults = { momentum = 0.9, dampening = 0, nesterov = false, trust_coefficient = 0.001, clip = false,
               exclude_bias_norm = true, eps = 1e-8 },
  buffers = { 'momentum_buffer' },
  step_fn = C.cr_optim_lars_step,
  validate = validate,
  fill = fill,
})

-- The ratios the last step applied, by parameter name (for logging and specs).
function LARS:step(opts)
  local n = Optimizer.step(self, opts)
  local r = {}
  for k = 0, self._n - 1 do
    if self._slots[k].stepped ~= 0 then r[self._slot_names[k]] = self._slots[k].trust_ratio end
  end
  self.last_trust_ratio = r
  return n
end

return LARS
