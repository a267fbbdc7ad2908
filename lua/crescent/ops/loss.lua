-- crescent.ops.loss — softmax/log_softmax and the classification losses nll_loss and
-- cross_entropy, with PyTorch's options ({reduction = 'mean', ignore_index = -100,
-- label_smoothing = 0}).
local C = require('crescent.ffi').C
local Tensor = require 'crescent.tensor'
local W = Tensor.op_helpers

local M = {}   -- what this family adds to cr: cr.<name> is M.<name>

local function dim_arg(name, dim)
  if type(dim) ~= 'number' or dim ~= math.floor(dim) then
    error(string.format('%s: give the dim to normalise over (an integer), got %s', name, tostring(dim)), 3)
  end
  return dim
end
function Tensor.softmax(t, dim)
  W.check_tensor(t, 'softmax')
  return W.call(C.cr_op_softmax, t, dim_arg('softmax', dim))
end
function Tensor.log_softmax(t, dim)
  W.check_tensor(t, 'log_softmax')
  return W.call(C.cr_op_log_softmax, t, dim_arg('log_softmax', dim))
end

local reductions = { none = C.CR_REDUCTION_NONE, mean = C.CR_REDUCTION_MEAN, sum = C.CR_REDUCTION_SUM }
local function loss_opts(name, opts, allowed)
  if opts ~= nil and type(opts) ~= 'table' then
    error(name .. ': options must be a table, got ' .. type(opts), 3)
  end
  opts = opts or {}
  for k in pairs(opts) do
    if not allowed[k] then error(name .. ": unknown option '" .. tostring(k) .. "'", 3) end
  end
  local red = reductions[opts.reduction or 'mean']
  if red == nil then
    error(name .. ": reduction must be 'none', 'mean' or 'sum', got " .. tostring(opts.reduction), 3)
  end
  local ignore = opts.ignore_index or -100
  if type(ignore) ~= 'number' or ignore ~= math.floor(ignore) then
    error(name .. ': ignore_index must be an integer', 3)
  end
  local eps = opts.label_smoothing or 0
  if type(eps) ~= 'number' then error(name .. ': label_smoothing must be a number', 3) end
  return red, ignore, eps
end

-- cr.nll_loss(logp, target, {reduction = 'mean', ignore_index = -100})
function M.nll_loss(logp, target, opts)
  W.check_tensor(logp, 'nll_loss', 'input')
  W.check_tensor(target, 'nll_loss', 'target')
  local red, ignore = loss_opts('nll_loss', opts, { reduction = true, ignore_index = true })
  return W.call(C.cr_op_nll_loss, logp, target, red, ignore)
end

-- cr.cross_entropy(logits, target, {reduction = 'mean', label_smoothing = 0,
-- ignore_index = -100}); target: class indices (i64) or probabilities (logits' shape).
function M.cross_entropy(logits, target, opts)
  W.check_tensor(logits, 'cross_entropy', 'input')
  W.check_tensor(target, 'cross_entropy', 'target')
  local red, ignore, eps = loss_opts('cross_entropy', opts,
    { reduction = true, ignore_index = true, label_smoothing = true })
  return W.call(C.cr_op_cross_entropy, logits, target, red, eps, ignore)
end

M.softmax = Tensor.softmax
M.log_softmax = Tensor.log_softmax

return M
