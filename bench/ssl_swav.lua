-- bench/ssl_swav.lua — SwAV training images/s (samples of 2x28 + 4x14 crops per second)
-- through the whole engine (cr.train: the C step loop, the standard step, the method's
-- hooks: prototype normalisation after each step), beside the same SwAV step in PyTorch
-- (bench/ssl_swav_torch.py --bench): ResNet-18 CIFAR stem width 16, 1 channel, head
-- 128-512-128, 100 prototypes, Sinkhorn 3 iterations, SGD momentum 0.9, batch 256.
-- Crops are fixed synthetic tensors on both sides (augmentation is measured by
-- bench/data_pipeline.lua). Figures are medians of timed windows after warm-up steps.
-- Threads: env CRESCENT_THREADS, default the machine's core count, for both libraries.
--   luajit bench/ssl_swav.lua [batch=256] [windows=3] [steps=2] [warmup=2]
-- Last line: {"bench": "ssl_swav", "crescent": x, "torch": y, "unit": "img/s", "ratio": x/y}
package.path = 'lua/?.lua;lua/?/init.lua;' .. package.path
local cjson = require 'cjson'
local cr = require 'crescent'
package.path = 'bench/?.lua;' .. package.path
local harness = require 'harness'

local args = harness.args('bench/ssl_swav.lua', { { 'batch', 256 }, { 'windows', 3 }, { 'steps', 2 }, { 'warmup', 2 } })

local threads = harness.threads()

local function crescent_rate()
  cr.manual_seed(0)
  local B = args.batch
  local trunk = cr.nn.models.resnet18 { stem = 'cifar', width = 16, in_channels = 1, num_classes = 0 }
  local method = cr.ssl.swav.SwAV { trunk = trunk, feat_dim = 128, hidden_dim = 512, out_dim = 128, num_prototypes = 100,
                                    num_crops = 6 }
  local opt = cr.optim.SGD(method:named_parameters(), { lr = 0.1, momentum = 0.9, weight_decay = 1e-6 })
  local batches = {}
  for i = 1, 2 do
    local crops = {}
    for v = 1, 6 do crops[v] = cr.randn(B, 1, v <= 2 and 28 or 14, v <= 2 and 28 or 14) end
    batches[i] = { input = crops, size = B }
  end
  local loader = harness.cycled_loader(batches, args.warmup + args.windows * args.steps)
  local task = cr.engine.Task {
    model = method, optimizer = opt, epochs = 1, test_every = 0, train_loader = loader,
    loss = function(out) return method:loss(out) end,
  }
  for _, h in ipairs(method:hooks()) do task:add_hook(h) end
  local window, rates = harness.window_hook(args.warmup, args.steps, B)
  task:add_hook(window)
  cr.train(task)
  local tm = task.timing
  return harness.median(rates), rates, {
    forward_backward_ms = 1e3 * tm.forward_backward_total / tm.steps, optimizer_ms = 1e3 * tm.optimizer_total / tm.steps,
  }
end

local c, windows, split = crescent_rate()
local wl = {}
for i, r in ipairs(windows) do wl[i] = string.format('%.0f', r) end
print(string.format('crescent %s threads %d batch %d: windows [%s] img/s; per step forward+backward %.0f ms, ' ..
  'optimizer %.1f ms', cr.version, threads, args.batch, table.concat(wl, ', '), split.forward_backward_ms,
  split.optimizer_ms))
local figures = harness.run_twin('bench/ssl_swav_torch.py', threads, string.format('--bench --batch %d --steps %d --warmup %d',
  args.batch, args.windows * args.steps, args.warmup))
local t = figures.swav_step_img_per_s
local ratio = (t and t > 0) and c / t or nil
print(string.format('ssl_swav (resnet18 width 16, 2x28+4x14 crops, batch %d, %d threads): crescent %.1f img/s, ' ..
  'torch %s img/s, ratio %s', args.batch, threads, c, t and string.format('%.1f', t) or '-',
  ratio and string.format('%.2f', ratio) or '-'))
print(cjson.encode { bench = 'ssl_swav', crescent = c, torch = t or cjson.null, unit = 'img/s', ratio = ratio or cjson.null,
                     threads = threads, batch = args.batch })
