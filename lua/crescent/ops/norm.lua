-- crescent.ops.norm — normalisation layers and dropout in functional form, with
-- PyTorch's argument order and defaults: batch_norm, layer_norm, dropout, normalize.
local C = require('crescent.ffi').C
local Tensor = require 'crescent.tensor'
local W = Tensor.op_helpers

local M = {}   -- what this family adds to cr: cr.<name> is M.<name>

local function opts_table(opts, what)
  if opts == nil then return {} end
  if type(opts) ~= 'table' then
    error(string.format('%s: options must be a table, got %s', what, type(opts)), 3)
  end
  return opts
end
local function opt_tensor(v, what, name)
  if v ~= nil and not W.is_tensor(v) then
    error(string.format("%s: '%s' must be a tensor or nil, got %s", what, name, type(v)), 3)
  end
  return v
end
local function opt_number(v, default, what, name)
  if v == nil then return default end
  if type(v) ~= 'number' then
    error(string.format("%s: '%s' must be a number, got %s", what, name, type(v)), 3)
  end
  return v
end

-- cr.batch_norm(x, running_mean, running_var, {weight, bias, training = false,
-- momentum = 0.1, eps = 1e-5, relu = false, splits = 1}); running stats are updated in
-- place when training; relu = true fuses a relu into the same pass, forward and
-- backward; splits = S (training) normalises each of S equal groups of consecutive
-- samples with its own statistics (split batch norm), the running stats updated by
-- the mean of the groups' statistics.
function M.batch_norm(x, running_mean, running_var, opts)
  W.check_tensor(x, 'batch_norm', 'input')
  opt_tensor(running_mean, 'batch_norm', 'running_mean')
  opt_tensor(running_var, 'batch_norm', 'running_var')
  opts = opts_table(opts, 'batch_norm')
  local weight = opt_tensor(opts.weight, 'batch_norm', 'weight')
  local bias = opt_tensor(opts.bias, 'batch_norm', 'bias')
  local momentum = opt_number(opts.momentum, 0.1, 'batch_norm', 'momentum')
  local eps = opt_number(opts.eps, 1e-5, 'batch_norm', 'eps')
  local splits = opt_number(opts.splits, 1, 'batch_norm', 'splits')
  if splits % 1 ~= 0 then error(string.format("batch_norm: 'splits' must be an integer >= 1, got %s", splits), 2) end
  -- splits = 1 is the plain batch norm (and relu = true its fused form)
  return W.call(C.cr_op_batch_norm_split, x, weight, bias, running_mean, running_var,
                opts.training and true or false, momentum, eps, opts.relu and true or false, splits)
end

-- cr.layer_norm(x, normalized_shape, {weight, bias, eps = 1e-5}); normalized_shape is a
-- number or a table naming the trailing dims of x.
function M.layer_norm(x, normalized_shape, opts)
  W.check_tensor(x, 'layer_norm', 'input')
  local ns = normalized_shape
  if type(ns) == 'number' then ns = { ns } end
  if type(ns) ~= 'table' or #ns == 0 then
    error('layer_norm: normalized_shape must be a number or a non-empty table of sizes, got '
          .. tostring(normalized_shape), 2)
  end
  local shape = x.shape
  local ok = #ns <= #shape
  for i = 1, #ns do
    if type(ns[i]) ~= 'number' then ok = false; break end
    if ok and ns[i] ~= shape[#shape - #ns + i] then ok = false end
  end
  if not ok then
    local strs = {}
    for i = 1, #ns do strs[i] = tostring(ns[i]) end
    error(string.format('layer_norm: normalized_shape [%s] is not the trailing dims of the input '
                        .. '[%s]; pass the sizes of the last dims to normalise over',
                        table.concat(strs, ', '), table.concat(shape, ', ')), 2)
  end
  opts = opts_table(opts, 'layer_norm')
  local weight = opt_tensor(opts.weight, 'layer_norm', 'weight')
  local bias = opt_tensor(opts.bias, 'layer_norm', 'bias')
  local eps = opt_number(opts.eps, 1e-5, 'layer_norm', 'eps')
  return W.call(C.cr_op_layer_norm, x, #ns, weight, bias, eps)
end

-- cr.dropout(x, p = 0.5, training = true): zeroes with probability p, scales by 1/(1-p).
function Tensor.dropout(x, p, training)
  W.check_tensor(x, 'dropout', 'input')
  p = opt_number(p, 0.5, 'dropout', 'p')
  if training == nil then training = true end
  return W.call(C.cr_op_dropout, x, p, training and true or false)
end
M.dropout = Tensor.dropout

-- cr.normalize(x, {p = 2, dim = 1, eps = 1e-12}): x / max(||x||_p along dim, eps).
function Tensor.normalize(x, opts)
  W.check_tensor(x, 'normalize', 'input')
  opts = opts_table(opts, 'normalize')
  local p = opt_number(opts.p, 2, 'normalize', 'p')
  if p ~= 2 then
    error(string.format('normalize: only p = 2 is supported, got p = %g', p), 2)
  end
  local dim = opt_number(opts.dim, 1, 'normalize', 'dim')
  if dim ~= math.floor(dim) then error(string.format('normalize: dim must be an integer, got %g', dim), 2) end
  local eps = opt_number(opts.eps, 1e-12, 'normalize', 'eps')
  return W.call(C.cr_op_normalize, x, dim, eps)
end
M.normalize = Tensor.normalize

return M
