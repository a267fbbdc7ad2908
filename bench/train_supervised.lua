-- bench/train_supervised.lua — training images/s of ResNet-18 (CIFAR stem, base width W,
-- 1 input channel, 10 classes; SGD momentum 0.9 nesterov, weight decay 5e-4), or with
-- arch=vit_tiny of a ViT-tiny with `patch` px patches (DropPath 0.1; AdamW, lr 1e-3,
-- weight decay 0.05; timm's VisionTransformer in the twin), through the
-- whole engine (cr.train: the C step loop, the standard step, the schedule and timer
-- hooks), in f32 and in train.amp=bf16 (where the cpu computes bf16 natively), beside the
-- same model, batch, data and threads in PyTorch (bench/train_supervised_torch.py on
-- build/torchenv's current PyTorch, `make torchenv`, or CRESCENT_TORCH_PYTHON) in each of
-- its speed modes (eager, channels_last, torch.compile, and bf16 autocast with
-- channels_last, also compiled, where the CPU has AVX512-BF16): the ratio is crescent's
-- fastest mode against PyTorch's fastest. Data: 8 synthetic [B, 1, 28, 28] batches,
-- cycled, on both sides (the loader is not what is measured). Figures are the medians of
-- several timed windows after warm-up steps.
-- Threads: env CRESCENT_THREADS, default the machine's core count, for both libraries.
--   luajit bench/train_supervised.lua [arch=resnet18|vit_tiny] [width=16] [patch=7] [batch=128] [windows=5]
--                                     [steps=5] [warmup=3] [amp=off,bf16]
--                                     [modes=eager,channels_last,compile,bf16,bf16_compile]
-- (for a ViT the twin's modes default to eager,compile,bf16,bf16_compile: channels_last
-- means nothing for its tokens)
-- Last line: {"bench": "train_supervised", "crescent": x, "crescent_mode", "crescent_modes", "torch": y,
-- "torch_mode", "torch_modes", "unit": "img/s", "ratio": x/y}
package.path = 'lua/?.lua;lua/?/init.lua;' .. package.path
local cjson = require 'cjson'
local cr = require 'crescent'
package.path = 'bench/?.lua;' .. package.path
local harness = require 'harness'

local args = harness.args('bench/train_supervised.lua',
  { { 'arch', 'resnet18' }, { 'width', 16 }, { 'patch', 7 }, { 'batch', 128 }, { 'windows', 5 }, { 'steps', 5 },
    { 'warmup', 3 }, { 'amp', 'off,bf16' }, { 'modes', '' } })
local vit = args.arch == 'vit_tiny'
if args.modes == '' then
  args.modes = vit and 'eager,compile,bf16,bf16_compile' or 'eager,channels_last,compile,bf16,bf16_compile'
end
local model_name = vit and string.format('vit_tiny patch %d', args.patch)
  or string.format('resnet18 cifar stem, width %d', args.width)

local threads = harness.threads()
local python = os.getenv('CRESCENT_TORCH_PYTHON') or 'build/torchenv/bin/python'

local function crescent_rate(amp)
  local task, rates = harness.supervised_task(args, amp)
  cr.train(task)
  local tm = task.timing
  local n = tm.steps
  return harness.median(rates), rates, {
    data_ms = 1e3 * tm.data_total / n, forward_backward_ms = 1e3 * tm.forward_backward_total / n,
    optimizer_ms = 1e3 * tm.optimizer_total / n, hooks_ms = 1e3 * tm.hooks_total / n,
  }
end

local c, c_mode, c_modes = nil, nil, {}
for a in args.amp:gmatch('[^,]+') do
  if a ~= 'off' and a ~= 'bf16' then
    error('train_supervised: amp=' .. a .. ' is not a CPU mode; use off, bf16 or off,bf16', 0)
  end
  if a == 'off' or cr.cpu_bf16_native() then
    local rate, windows, split = crescent_rate(a)
    c_modes[a] = rate
    if not c or rate > c then c, c_mode = rate, a end
    local wl = {}
    for i, r in ipairs(windows) do wl[i] = string.format('%.0f', r) end
    print(string.format('crescent %s threads %d %s batch %d amp %s: windows [%s]', cr.version, threads, model_name,
      args.batch, a, table.concat(wl, ', ')))
    print(string.format('  per step: data %.2f ms, forward+backward %.1f ms, optimizer %.2f ms, hooks %.3f ms',
      split.data_ms, split.forward_backward_ms, split.optimizer_ms, split.hooks_ms))
  end
end
local figures = harness.run_twin('bench/train_supervised_torch.py', threads, string.format(
  'arch=%s width=%d patch=%d batch=%d windows=%d steps=%d warmup=%d modes=%s', args.arch, args.width, args.patch,
  args.batch, args.windows, args.steps, args.warmup, args.modes), python)
local t, t_mode
for mode, v in pairs(figures) do
  if not t or v > t then t, t_mode = v, mode end
end
local ratio = (t and t > 0) and c / t or nil
print(string.format('train_supervised (%s, batch %d, %d threads): crescent %.1f img/s (%s), ' ..
  'torch %s img/s (%s), ratio %s   crescent %s; torch %s', model_name, args.batch, threads, c,
  c_mode == 'off' and 'f32' or c_mode, t and string.format('%.1f', t) or '-', t_mode or '-',
  ratio and string.format('%.2f', ratio) or '-', harness.figures_line(c_modes), harness.figures_line(figures)))
print(cjson.encode { bench = 'train_supervised', crescent = c, crescent_mode = c_mode, crescent_modes = c_modes,
                     torch = t or cjson.null, torch_mode = t_mode or cjson.null,
                     torch_modes = next(figures) and figures or cjson.null, unit = 'img/s',
                     ratio = ratio or cjson.null, threads = threads, arch = args.arch,
                     width = not vit and args.width or nil, patch = vit and args.patch or nil, batch = args.batch })
