-- examples/tour.lua — the tensor and autograd tour from the README, runnable from any
-- folder:
--   luajit examples/tour.lua
local root = (debug.getinfo(1, 'S').source:match('^@(.*)/examples/[^/]*$') or '.')
package.path = root .. '/lua/?.lua;' .. root .. '/lua/?/init.lua;' .. package.path
local cr = require 'crescent'

cr.manual_seed(0)
local x = cr.randn({ 64, 1, 28, 28 })
local w = cr.randn({ 16, 1, 3, 3 }, { requires_grad = true })
local y = cr.conv2d(x, w, nil, { stride = 1, padding = 1 }):relu():mean()
y:backward()
print(w.grad)

-- a small classifier step, by hand
local W = (cr.randn({ 10, 784 }) * 0.01):requires_grad_()
local b = cr.zeros(10, { requires_grad = true })
local images, labels = cr.rand({ 32, 784 }), cr.randint(0, 10, { 32 })
local logits = cr.linear(images, W, b)
local loss = cr.cross_entropy(logits, labels, { label_smoothing = 0.1 })
loss:backward()
print(string.format('loss %.4f  |grad W| %.4f  |grad b| %.4f', loss:item(), W.grad:norm():item(), b.grad:norm():item()))
cr.no_grad(function()
  W:add_(W.grad, -0.1)
  b:add_(b.grad, -0.1)
end)
local after = cr.cross_entropy(cr.linear(images, W, b), labels, { label_smoothing = 0.1 })
print(string.format('loss after one SGD step %.4f', after:item()))
