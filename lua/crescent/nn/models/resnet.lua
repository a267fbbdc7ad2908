-- crescent.nn.models.resnet — ResNet-18/34/50 as torchvision builds them (BasicBlock and
-- Bottleneck v1.5, stride on the 3x3 conv), with the same parameter and buffer names
-- (conv1.weight, bn1.running_mean, layer1.0.conv1.weight, layer1.0.downsample.0.weight,
-- fc.weight, ...) so PyTorch checkpoints load by name. Options: the ImageNet stem
-- (7x7/2 conv + 3x3/2 max pool) or the CIFAR stem (3x3/1 conv, no pool), a base width,
-- in_channels, num_classes (0: no fc, the pooled features come out) and zero_init_residual.
local checks = require 'crescent.checks'
local cr = require 'crescent'
local Module = require 'crescent.nn.module'
local init = require 'crescent.nn.initializers'
local common = require 'crescent.nn.common'
local container = require 'crescent.nn.container'
local layers = require 'crescent.nn.layers'
local norm = require 'crescent.nn.norm'

local M = {}   -- the classes and functions of this file, which crescent.nn carries

local C = cr.C
local call = cr.Tensor.op_helpers.call
local add_relu_op, flatten_op = C.cr_op_add_relu, C.cr_op_flatten

local function conv3x3(cin, cout, stride)
  return layers.Conv2d(cin, cout, 3, { stride = stride, padding = 1, bias = false })
end
local function conv1x1(cin, cout, stride)
  return layers.Conv2d(cin, cout, 1, { stride = stride, bias = false })
end

-- Two 3x3 convs; out = relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)).
local BasicBlock = Module:extend('BasicBlock')
BasicBlock.expansion = 1
function BasicBlock:init(inplanes, planes, stride, downsample)
  self.conv1 = conv3x3(inplanes, planes, stride)
  self.bn1 = norm.BatchNorm2d(planes)
  self.relu = layers.ReLU()
  self.conv2 = conv3x3(planes, planes, 1)
  self.bn2 = norm.BatchNorm2d(planes)
  if downsample then self.downsample = downsample end
  self.stride = stride
end
function BasicBlock:forward(x)
  local out = self.bn1:forward(self.conv1:forward(x), true) -- relu fused into bn1
  out = self.bn2:forward(self.conv2:forward(out))
  local ds = self.downsample
  return call(add_relu_op, out, ds and ds:forward(x) or x) -- relu(out + identity), one pass
end
BasicBlock.last_bn = 'bn2'

-- 1x1 reduce, 3x3 (strided), 1x1 expand by 4.
local Bottleneck = Module:extend('Bottleneck')
Bottleneck.expansion = 4
function Bottleneck:init(inplanes, planes, stride, downsample)
  self.conv1 = conv1x1(inplanes, planes, 1)
  self.bn1 = norm.BatchNorm2d(planes)
  self.conv2 = conv3x3(planes, planes, stride)
  self.bn2 = norm.BatchNorm2d(planes)
  self.conv3 = conv1x1(planes, planes * 4, 1)
  self.bn3 = norm.BatchNorm2d(planes * 4)
  self.relu = layers.ReLU()
  if downsample then self.downsample = downsample end
  self.stride = stride
end
function Bottleneck:forward(x)
  local out = self.bn1:forward(self.conv1:forward(x), true) -- relu fused into the bn
  out = self.bn2:forward(self.conv2:forward(out), true)
  out = self.bn3:forward(self.conv3:forward(out))
  local ds = self.downsample
  return call(add_relu_op, out, ds and ds:forward(x) or x) -- relu(out + identity), one pass
end
Bottleneck.last_bn = 'bn3'

local ResNet = Module:extend('ResNet')
local known = { stem = true, width = true, in_channels = true, num_classes = true, zero_init_residual = true }

-- ResNet(block, blocks_per_stage, options): block BasicBlock or Bottleneck, blocks_per_stage
-- {2, 2, 2, 2} for a ResNet-18
function ResNet:init(block, blocks_per_stage, opts, what)
  what = what or 'ResNet'
  opts = checks.options(what, opts, known)
  local stem = opts.stem or 'imagenet'
  if stem ~= 'imagenet' and stem ~= 'cifar' then
    checks.fail(string.format("%s: stem must be 'imagenet' or 'cifar', got '%s'", what, tostring(stem)))
  end
  local width = checks.int(what, 'width', opts.width or 64, 1)
  local in_channels = checks.int(what, 'in_channels', opts.in_channels or 3, 1)
  local num_classes = checks.int(what, 'num_classes', opts.num_classes or 1000, 0)
  self.stem, self.width, self.num_classes = stem, width, num_classes
  -- every conv and the fc are written below: skip their default init while building
  common.deferring_init(function()
    if stem == 'imagenet' then
      self.conv1 = layers.Conv2d(in_channels, width, 7, { stride = 2, padding = 3, bias = false })
    else
      self.conv1 = layers.Conv2d(in_channels, width, 3, { stride = 1, padding = 1, bias = false })
    end
    self.bn1 = norm.BatchNorm2d(width)
    self.relu = layers.ReLU()
    self.maxpool = stem == 'imagenet' and layers.MaxPool2d(3, { stride = 2, padding = 1 }) or layers.Identity()
    local inplanes = width
    for i = 1, 4 do
      local planes, stride = width * 2 ^ (i - 1), i == 1 and 1 or 2
      local blocks = container.Sequential()
      for b = 1, blocks_per_stage[i] do
        local s = b == 1 and stride or 1
        local downsample
        if s ~= 1 or inplanes ~= planes * block.expansion then
          downsample = container.Sequential(conv1x1(inplanes, planes * block.expansion, s),
                                            norm.BatchNorm2d(planes * block.expansion))
        end
        blocks:add(block(inplanes, planes, s, downsample))
        inplanes = planes * block.expansion
      end
      self['layer' .. i] = blocks
    end
    self.avgpool = layers.AdaptiveAvgPool2d(1)
    self.num_features = inplanes
    if num_classes > 0 then self.fc = layers.Linear(inplanes, num_classes) end

  end)

  -- torchvision's init: convs kaiming_normal_(fan_out, relu), BN gamma 1 and beta 0
  -- (already so), the fc Linear's default; zero_init_residual zeroes the last BN gamma
  -- of each block so every residual branch starts as the identity.
  for _, m in ipairs(self:modules()) do
    if m.__name == 'Conv2d' then
      init.kaiming_normal_(m.weight, { mode = 'fan_out', nonlinearity = 'relu' })
    end
  end
  if self.fc then init.default_linear_(self.fc.weight, self.fc.bias) end
  if opts.zero_init_residual then
    for _, m in ipairs(self:modules()) do
      if m.__name == 'BasicBlock' or m.__name == 'Bottleneck' then init.zeros_(m[m.last_bn].weight) end
    end
  end
end

-- [N, C, H, W] -> logits [N, num_classes], or pooled features [N, num_features] when
-- num_classes = 0.
function ResNet:forward(x)
  common.check_input(self, x)
  x = self.maxpool:forward(self.bn1:forward(self.conv1:forward(x), true))
  x = self.layer1:forward(x)
  x = self.layer2:forward(x)
  x = self.layer3:forward(x)
  x = self.layer4:forward(x)
  x = call(flatten_op, self.avgpool:forward(x), 1, -1)
  local fc = self.fc
  if fc then x = fc:forward(x) end
  return x
end

M.ResNet = ResNet
M.BasicBlock = BasicBlock
M.Bottleneck = Bottleneck

local function builder(name, block, blocks_per_stage)
  return function(opts)
    if opts ~= nil and (type(opts) ~= 'table' or Module.is_module(opts)) then
      checks.fail(string.format('%s: give an options table, e.g. nn.models.%s{stem = \'cifar\', num_classes = 10}',
        name, name))
    end
    return ResNet(block, blocks_per_stage, opts, name)
  end
end
M.resnet18 = builder('resnet18', BasicBlock, { 2, 2, 2, 2 })
M.resnet34 = builder('resnet34', BasicBlock, { 3, 4, 6, 3 })
M.resnet50 = builder('resnet50', Bottleneck, { 3, 4, 6, 3 })

return M
