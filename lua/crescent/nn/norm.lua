-- crescent.nn.norm — BatchNorm1d and BatchNorm2d with PyTorch's parameters and buffers
-- (weight, bias, running_mean, running_var, num_batches_tracked) and its train/eval rules:
-- batch statistics in training (running stats updated in place by the C op), running
-- statistics in eval, batch statistics always when track_running_stats is false.
local C = require('crescent.ffi').C
local util = require 'crescent.util'

return function(cr, nn)
  local Module = nn.Module
  local call = cr.Tensor._wrap.call
  local check_input, options, int = nn._check_input, nn._options, nn._int
  local bn_op, bn_relu_op, add_op, ndim = C.cr_op_batch_norm, C.cr_op_batch_norm_relu, C.cr_op_add_,
    C.cr_tensor_ndim
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
    if type(eps) ~= 'number' or eps < 0 then nn._error(what .. ': eps must be a non-negative number') end
    if momentum ~= false and (type(momentum) ~= 'number' or momentum < 0 or momentum > 1) then
      nn._error(what .. ': momentum must be a number in [0, 1], or false for a cumulative average; got '
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
      nn._error(string.format('%s: expected a %s input, got %d dims [%s]', self.__name, self._expect, nd,
        table.concat(x.shape, ', ')))
    end
    if not (self.training and self.track_running_stats) then return nil end
    local nbt = self.num_batches_tracked
    check(add_op(nbt, one, 1))
    if self.momentum == false then return 1 / nbt:item() end
    return self.momentum
  end

  -- forward(x, relu): relu = true fuses relu(bn(x)) into one pass (ResNet blocks use it).
  function BatchNorm:forward(x, relu)
    local factor = self:_begin(x)
    -- running stats are nil when not tracked: the op then normalises with batch stats
    return call(relu and bn_relu_op or bn_op, x, self.weight, self.bias, self.running_mean,
      self.running_var, self.training, factor or 0, self.eps)
  end

  function BatchNorm:extra_repr()
    return string.format('%d, eps=%g, momentum=%s, affine=%s, track_running_stats=%s', self.num_features,
      self.eps, tostring(self.momentum), tostring(self.affine), tostring(self.track_running_stats))
  end

  local BatchNorm1d = BatchNorm:extend('BatchNorm1d')
  BatchNorm1d._ndim_a, BatchNorm1d._ndim_b, BatchNorm1d._expect = 2, 3, '2-D [N, C] or 3-D [N, C, L]'
  nn.BatchNorm1d = BatchNorm1d

  local BatchNorm2d = BatchNorm:extend('BatchNorm2d')
  BatchNorm2d._ndim_a, BatchNorm2d._ndim_b, BatchNorm2d._expect = 4, 4, '4-D [N, C, H, W]'
  nn.BatchNorm2d = BatchNorm2d
end
