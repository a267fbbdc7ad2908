-- examples/train_loop.lua — the whole of supervised training in one file, with raw cr ops
-- and a plain for loop: no Task, no hooks, no nn modules, no optimizer object. A ResNet-18
-- (CIFAR stem, width 16) learns Fashion-MNIST with the settings of recipes/supervised.lua:
-- SGD with Nesterov momentum 0.9, lr 0.1 with a linear warm-up over 0.3 epochs then cosine
-- to 0, weight decay 5e-4 on conv and fc weights only, batch 128, 4 epochs. Read it to see
-- what the engine does for you; copy it to try an idea without it.
--
--   luajit examples/train_loop.lua                    (about 25 minutes on 2 cores)
--   luajit examples/train_loop.lua epochs=1 limit=4096 threads=1
local root = (debug.getinfo(1, 'S').source:match('^@(.*)/examples/[^/]*$') or '.')
package.path = root .. '/lua/?.lua;' .. root .. '/lua/?/init.lua;' .. package.path
local cr = require 'crescent'

-- ---- settings: key=value on the command line ------------------------------------------
local opt = { epochs = 4, batch = 128, lr = 0.1, momentum = 0.9, weight_decay = 5e-4, warmup_epochs = 0.3,
              width = 16, limit = 0, seed = 0, threads = 0 }
for _, a in ipairs(arg or {}) do
  local k, v = a:match('^([%w_]+)=(.+)$')
  if not k or opt[k] == nil or not tonumber(v) then
    io.stderr:write('train_loop: arguments are key=number with key one of epochs, batch, lr, momentum, ' ..
      'weight_decay, warmup_epochs, width, limit, seed, threads; got ' .. a .. '\n')
    os.exit(2)
  end
  opt[k] = tonumber(v)
end
cr.manual_seed(opt.seed)
if opt.threads > 0 then cr.set_num_threads(opt.threads) end   -- 0: all cores

-- ---- data: all of Fashion-MNIST in memory as u8, normalised per batch -----------------
local function load(split)
  local ds = cr.data.fashion_mnist { split = split, limit = opt.limit > 0 and opt.limit or nil }
  return ds.images, ds.labels, ds.mean, ds.std   -- mean and std of the training pixels in [0, 1]
end
local train_x, train_y, mean, std = load('train')
local test_x, test_y = load('test')
local function batch_of(images, labels, idx)
  local x = images:index_select(0, idx):float():unsqueeze(1)   -- [B, 1, 28, 28]
  return (x / 255 - mean) / std, labels:index_select(0, idx)
end

-- ---- parameters: every weight a plain tensor, initialised as torchvision does ---------
local params, decay = {}, {}   -- decay[p]: gets weight decay (conv and fc weights)
local function param(t, decays)
  t:requires_grad_()
  params[#params + 1] = t
  decay[t] = decays
  return t
end
local function conv_weight(cout, cin, k)   -- kaiming normal, fan_out, relu gain
  return param(cr.randn(cout, cin, k, k) * math.sqrt(2 / (cout * k * k)), true)
end
local function bn(c)   -- gamma 1, beta 0, and running statistics (not parameters)
  return { weight = param(cr.ones(c), false), bias = param(cr.zeros(c), false),
           mean = cr.zeros(c), var = cr.ones(c) }
end
local function block(cin, cout, stride)   -- BasicBlock: two 3x3 convs and the shortcut
  local b = { stride = stride, conv1 = conv_weight(cout, cin, 3), bn1 = bn(cout),
              conv2 = conv_weight(cout, cout, 3), bn2 = bn(cout) }
  if stride ~= 1 or cin ~= cout then b.down, b.down_bn = conv_weight(cout, cin, 1), bn(cout) end
  return b
end
local w = opt.width
local net = { stem = conv_weight(w, 1, 3), stem_bn = bn(w), blocks = {} }
local cin = w
for stage, cout in ipairs { w, 2 * w, 4 * w, 8 * w } do
  for i = 1, 2 do
    net.blocks[#net.blocks + 1] = block(cin, cout, (stage > 1 and i == 1) and 2 or 1)
    cin = cout
  end
end
local bound = 1 / math.sqrt(cin)   -- PyTorch's Linear init: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
net.fc_w = param(cr.rand(10, cin) * (2 * bound) - bound, true)
net.fc_b = param(cr.rand(10) * (2 * bound) - bound, false)

-- ---- the forward pass -------------------------------------------------------------------
local training = true
local function norm(x, p, relu)   -- batch statistics in training (running stats updated), else running ones
  return cr.batch_norm(x, p.mean, p.var, { weight = p.weight, bias = p.bias, training = training,
                                           momentum = 0.1, eps = 1e-5, relu = relu })
end
local function forward(x)
  local h = norm(cr.conv2d(x, net.stem, nil, { padding = 1 }), net.stem_bn, true)
  for _, b in ipairs(net.blocks) do
    local out = norm(cr.conv2d(h, b.conv1, nil, { stride = b.stride, padding = 1 }), b.bn1, true)
    out = norm(cr.conv2d(out, b.conv2, nil, { padding = 1 }), b.bn2, false)
    local shortcut = b.down and norm(cr.conv2d(h, b.down, nil, { stride = b.stride }), b.down_bn, false) or h
    h = (out + shortcut):relu()
  end
  local pooled = h:mean({ 2, 3 })   -- global average pool: [B, C]
  return cr.linear(pooled, net.fc_w, net.fc_b)
end

-- ---- SGD with Nesterov momentum, as torch.optim.SGD computes it -----------------------
local velocity = {}
local function sgd_step(lr)
  cr.no_grad(function()
    for _, p in ipairs(params) do
      local g = p.grad
      if decay[p] then g = g + p * opt.weight_decay end
      local v = velocity[p]
      if v then v:mul_(opt.momentum):add_(g) else v = g:clone(); velocity[p] = v end
      p:add_(g + v * opt.momentum, -lr)   -- nesterov: step along g + momentum * v
      p.grad = nil
    end
  end)
end

-- ---- training ----------------------------------------------------------------------------
local n = train_x:size(0)
local steps_per_epoch = math.floor(n / opt.batch)   -- the last partial batch is dropped
local total = steps_per_epoch * opt.epochs
local warmup = math.min(opt.warmup_epochs * steps_per_epoch, total)
local function lr_at(step)   -- step: steps done so far
  if step < warmup then return opt.lr * step / warmup end
  return opt.lr * 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))
end

local function test_accuracy()
  training = false
  local correct = 0
  cr.no_grad(function()
    for s = 0, test_x:size(0) - 1, 500 do
      local idx = cr.arange(s, math.min(s + 500, test_x:size(0)))
      local x, y = batch_of(test_x, test_y, idx)
      correct = correct + forward(x):argmax(1):eq(y):sum():item()
    end
  end)
  training = true
  return 100 * correct / test_x:size(0)
end

local now = require('crescent.engine.loop').now
print(string.format('train_loop: ResNet-18 width %d, %d train / %d test images, %d epochs of %d steps, batch %d, %d threads',
  w, n, test_x:size(0), opt.epochs, steps_per_epoch, opt.batch, cr.get_num_threads()))
local step, t0 = 0, now()
for epoch = 1, opt.epochs do
  local order = cr.randperm(n)
  local loss_sum = 0
  for i = 0, steps_per_epoch - 1 do
    local x, y = batch_of(train_x, train_y, order:narrow(0, i * opt.batch, opt.batch))
    local loss = cr.cross_entropy(forward(x), y)
    loss:backward()
    sgd_step(lr_at(step))
    step = step + 1
    loss_sum = loss_sum + loss:item()
  end
  print(string.format('epoch %d/%d  loss %.4f  test top-1 %.2f%%  %.0f s', epoch, opt.epochs,
    loss_sum / steps_per_epoch, test_accuracy(), now() - t0))
end
