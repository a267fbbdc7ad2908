-- crescent.nn.mlp — nn.MLP, the projection head of SimCLR/SwAV/MoCo v2: Linear (+BN) +
-- ReLU stacks. It is a Sequential, so its parameter names ('0.weight', '1.running_mean',
-- '3.weight') are those of the nn.Sequential heads in the reference PyTorch code.
local checks = require 'crescent.checks'
local Module = require 'crescent.nn.module'
local container = require 'crescent.nn.container'
local layers = require 'crescent.nn.layers'
local norm = require 'crescent.nn.norm'

local M = {}   -- the classes and functions of this file, which crescent.nn carries

local MLP = container.Sequential:extend('MLP')
local known = { dims = true, bn = true, last_bn = true, last_bn_affine = true, relu_last = true, bias = true }

-- nn.MLP{dims = {2048, 2048, 128}, bn = true, last_bn = false, last_bn_affine = true,
--        relu_last = false, bias = true}
-- Each hidden layer is Linear -> BatchNorm1d (when bn) -> ReLU; the last is a Linear,
-- followed by BatchNorm1d when last_bn (SimCLR v2 / MoCo v3 style, affine or not) and
-- ReLU when relu_last. bias applies to every Linear.
function MLP:init(opts)
  if type(opts) ~= 'table' or Module.is_module(opts) then
    checks.fail('MLP: give an options table, e.g. nn.MLP{dims = {512, 2048, 128}}')
  end
  opts = checks.options('MLP', opts, known)
  local dims = opts.dims
  if type(dims) ~= 'table' or #dims < 2 then
    checks.fail('MLP: dims must list at least an input and an output size, e.g. {512, 2048, 128}')
  end
  for i = 1, #dims do checks.int('MLP', 'dims[' .. i .. ']', dims[i], 1) end
  local bn = opts.bn ~= false
  local bias = opts.bias ~= false
  self.dims = dims
  for i = 1, #dims - 1 do
    self:add(layers.Linear(dims[i], dims[i + 1], { bias = bias }))
    if i < #dims - 1 then
      if bn then self:add(norm.BatchNorm1d(dims[i + 1])) end
      self:add(layers.ReLU())
    else
      if opts.last_bn then self:add(norm.BatchNorm1d(dims[i + 1], { affine = opts.last_bn_affine ~= false })) end
      if opts.relu_last then self:add(layers.ReLU()) end
    end
  end
end
M.MLP = MLP

return M
