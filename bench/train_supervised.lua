-- bench/train_supervised.lua — training images/s of ResNet-18 (CIFAR stem, base width W,
-- 1 input channel, 10 classes; SGD momentum 0.9 nesterov, weight decay 5e-4) through the
-- whole engine (cr.train: the C step loop, the standard step, the schedule and timer
-- hooks), beside the same model, batch, data and threads in PyTorch
-- (bench/train_supervised_torch.py). Data: 8 synthetic [B, 1, 28, 28] batches, cycled,
-- on both sides (the loader is not what is measured). Figures are the medians of several
-- timed windows after warm-up steps.
-- Threads: env CRESCENT_THREADS, default the machine's core count, for both libraries.
--   luajit bench/train_supervised.lua [width=16] [batch=128] [windows=5] [steps=5] [warmup=3]
-- Last line: {"bench": "train_supervised", "crescent": x, "torch": y, "unit": "img/s", "ratio": x/y}
package.path = 'lua/?.lua;lua/?/init.lua;' .. package.path
local cjson = require 'cjson'
local cr = require 'crescent'
package.path = 'bench/?.lua;' .. package.path
local harness = require 'harness'

local args = harness.args('bench/train_supervised.lua',
  { { 'width', 16 }, { 'batch', 128 }, { 'windows', 5 }, { 'steps', 5 }, { 'warmup', 3 } })

local threads = harness.threads()
local median = harness.median

local function crescent_rate()
  local task, rates = harness.supervised_task(args)
  cr.train(task)
  local tm = task.timing
  local n = tm.steps
  return median(rates), rates, {
    data_ms = 1e3 * tm.data_total / n, forward_backward_ms = 1e3 * tm.forward_backward_total / n,
    optimizer_ms = 1e3 * tm.optimizer_total / n, hooks_ms = 1e3 * tm.hooks_total / n,
  }
end

local function torch_rate()
  local cmd = string.format('CRESCENT_THREADS=%d /usr/bin/python3 bench/train_supervised_torch.py width=%d batch=%d ' ..
    'windows=%d steps=%d warmup=%d 2>&1', threads, args.width, args.batch, args.windows, args.steps, args.warmup)
  local p = io.popen(cmd)
  local out = p:read('*a')
  p:close()
  local v = tonumber(out:match('torch_img_per_s ([%d.]+)'))
  if not v then print('torch twin gave no figure (is python3-torch installed?): ' .. out:gsub('\n', ' | ')) end
  return v, out:match('[^\n]*windows[^\n]*')
end

local c, windows, split = crescent_rate()
local wl = {}
for i, r in ipairs(windows) do wl[i] = string.format('%.0f', r) end
print(string.format('crescent %s threads %d width %d batch %d: windows [%s]', cr.version, threads, args.width,
  args.batch, table.concat(wl, ', ')))
print(string.format('  per step: data %.2f ms, forward+backward %.1f ms, optimizer %.2f ms, hooks %.3f ms',
  split.data_ms, split.forward_backward_ms, split.optimizer_ms, split.hooks_ms))
local t, tline = torch_rate()
if tline then print(tline) end
local ratio = (t and t > 0) and c / t or nil
print(string.format('train_supervised (resnet18 cifar stem, width %d, batch %d, %d threads): crescent %.1f img/s, ' ..
  'torch %s img/s, ratio %s', args.width, args.batch, threads, c, t and string.format('%.1f', t) or '-',
  ratio and string.format('%.2f', ratio) or '-'))
print(cjson.encode { bench = 'train_supervised', crescent = c, torch = t or cjson.null, unit = 'img/s',
                     ratio = ratio or cjson.null, threads = threads, width = args.width, batch = args.batch })
