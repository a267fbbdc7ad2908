-- crescent.nn.norm — BatchNorm1d and BatchNorm2d with PyTorch's parameters and buffers
-- (weight, bias, running_mean, running_var, num_batches_tracked) and its train/eval rules:
-- batch statistics in training (running stats updated in place by the C op), running
-- statistics in eval, batch statistics always when track_running_stats is false.
--
-- Split BatchNorm (nn.split_batchnorm(model, S), or bn.splits = S): in training the batch
-- is cut into S equal consecutive groups, each normalised with its own statistics (and
-- the shared weight and bias), as S GPUs with per-GPU BatchNorm would; the running stats
-- take the average of the S groups' updates. MoCo's single-process stand-in for multi-GPU
-- BatchNorm (the MoCo CIFAR demo's SplitBatchNorm). Eval mode is unchanged.
local checks = require 'crescent.checks'
local C = require('crescent.ffi').C
local util = require 'crescent.util'

local cr = require 'crescent'
local Module = require 'crescent.nn.module'
local common = require 'crescent.nn.common'

local M = {}   -- the classes and functions of this file, which crescent.nn carries

local call = cr.Tensor.op_helpers.call
local check_input, options, int = common.check_input, checks.options, checks.int
local bn_op, bn_relu_op, split_op, add_op, ndim = C.cr_op_batch_norm, C.cr_op_batch_norm_relu,
  C.cr_op_batch_norm_split, C.cr_op_add_, C.cr_tensor_ndim
local check = util.check
local one = cr.tensor(1) -- the i64 step added to num_batches_tracked

local known = { eps = true, momentum = true, affine = true, track_running_stats = true }

-- nn.BatchNorm2d(num_features, {eps = 1e-5, momentum = 0.1, affine = true,
-- track_running_stats = true}); momentum = false averages over all batches seen
-- (PyTorch's momentum=None).
local BatchNorm = Module:extend('_BatchNorm')
function BatchNorm:init(num_features, opts)
  local what = self.__name
  opts = options(what, opts, known)
  int(what, 'num_features', num_features, 1)
  local eps, momentum = opts.eps or 1e-5, opts.momentum
  if momentum == nil then momentum = 0.1 end
  if type(eps) ~= 'number' or eps < 0 then checks.fail(what .. ': eps must be a non-negative number') end
  if momentum ~= false and (type(momentum) ~= 'number' or momentum < 0 or momentum > 1) then
    checks.fail(what .. ': momentum must be a number in [0, 1], or false for a cumulative average; got '
      .. tostring(momentum))
  end
  self.num_features, self.eps, self.momentum = num_features, eps, momentum
  self.affine = opts.affine ~= false
  self.track_running_stats = opts.track_running_stats ~= false
  if self.affine then
    self:register_parameter('weight', cr.ones({ num_features }))
    self:register_parameter('bias', cr.zeros({ num_features }))
  end
  if self.track_running_stats then
    self:register_buffer('running_mean', cr.zeros({ num_features }))
    self:register_buffer('running_var', cr.ones({ num_features }))
    self:register_buffer('num_batches_tracked', cr.zeros({}, { dtype = 'i64' }))
  end
end

-- Running stats back to mean 0, variance 1, no batches seen.
function BatchNorm:reset_running_stats()
  if not self.track_running_stats then return self end
  cr.no_grad(function()
    self.running_mean:zero_()
    self.running_var:fill_(1)
    self.num_batches_tracked:zero_()
  end)
  return self
end

-- Checks the input and, in training with running stats, counts the batch; returns the
-- running stats' update factor (nil when they are not updated). SyncBatchNorm shares it.
function BatchNorm:_begin(x)
  check_input(self, x)
  local nd = ndim(x)
  if nd ~= self._ndim_a and nd ~= self._ndim_b then
    checks.fail(string.format('%s: expected a %s input, got %d dims [%s]', self.__name, self._expect, nd,
      table.concat(x.shape, ', ')))
  end
  if not (self.training and self.track_running_stats) then return nil end
  local nbt = self.num_batches_tracked
  check(add_op(nbt, one, 1))
  if self.momentum == false then return 1 / nbt:item() end
  return self.momentum
end

-- Training with splits > 1: one op (cr_op_batch_norm_split) normalises each group of
-- consecutive samples with its own statistics; the running stats take the mean of the
-- groups' updates.
function BatchNorm:_split_forward(x, relu, factor)
  local S, N = self.splits, x.shape[1]
  if N % S ~= 0 then
    checks.fail(string.format('%s: the batch of %d does not divide into splits = %d groups; use a batch size ' ..
      'that is a multiple of %d', self.__name, N, S, S))
  end
  return call(split_op, x, self.weight, self.bias, self.running_mean, self.running_var, true, factor or 0,
    self.eps, relu and true or false, S)
end

-- forward(x, relu): relu = true fuses relu(bn(x)) into one pass (ResNet blocks use it).
function BatchNorm:forward(x, relu)
  local factor = self:_begin(x)
  if self.training and (self.splits or 1) > 1 then return self:_split_forward(x, relu, factor) end
  -- running stats are nil when not tracked: batch stats then, in eval mode too (PyTorch's rule)
  return call(relu and bn_relu_op or bn_op, x, self.weight, self.bias, self.running_mean,
    self.running_var, self.training or self.running_mean == nil, factor or 0, self.eps)
end

function BatchNorm:extra_repr()
  return string.format('%d, eps=%g, momentum=%s, affine=%s, track_running_stats=%s%s', self.num_features,
    self.eps, tostring(self.momentum), tostring(self.affine), tostring(self.track_running_stats),
    (self.splits or 1) > 1 and (', splits=' .. self.splits) or '')
end

local BatchNorm1d = BatchNorm:extend('BatchNorm1d')
BatchNorm1d._ndim_a, BatchNorm1d._ndim_b, BatchNorm1d._expect = 2, 3, '2-D [N, C] or 3-D [N, C, L]'
M.BatchNorm1d = BatchNorm1d

local BatchNorm2d = BatchNorm:extend('BatchNorm2d')
BatchNorm2d._ndim_a, BatchNorm2d._ndim_b, BatchNorm2d._expect = 4, 4, '4-D [N, C, H, W]'
M.BatchNorm2d = BatchNorm2d

-- nn.split_batchnorm(model, S) -> model: every BatchNorm1d/2d in model normalises in S
-- groups in training (see the top of this file); S = 1 turns splitting off.
function M.split_batchnorm(model, S)
  if not Module.is_module(model) then checks.fail('split_batchnorm: the first argument must be a module') end
  int('split_batchnorm', 'splits', S, 1)
  for _, m in ipairs(model:modules()) do
    if m.__name == 'BatchNorm1d' or m.__name == 'BatchNorm2d' then m.splits = S end
  end
  return model
end

return M
