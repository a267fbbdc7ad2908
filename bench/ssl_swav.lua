-- bench/ssl_swav.lua — SwAV training images/s (samples of 2x28 + 4x14 crops per second)
-- through the whole engine (cr.train: the C step loop, the standard step, the method's
-- hooks: prototype normalisation after each step), in f32 and in train.amp=bf16 (where the
-- cpu computes bf16 natively), beside the same SwAV step in PyTorch
-- (bench/ssl_swav_torch.py --bench on build/torchenv's current PyTorch, `make torchenv`, or
-- CRESCENT_TORCH_PYTHON) in each of its speed modes (eager, channels_last, torch.compile,
-- and bf16 autocast with channels_last, also compiled, where the CPU has AVX512-BF16): the
-- ratio is crescent's fastest mode against PyTorch's fastest. ResNet-18 CIFAR stem width
-- 16, 1 channel, head 128-512-128, 100 prototypes, Sinkhorn 3 iterations, SGD momentum
-- 0.9, batch 256. Crops are fixed synthetic tensors on both sides (augmentation is measured
-- by bench/data_pipeline.lua). Figures are medians of timed windows after warm-up steps.
-- Also the step's GFLOP/s (PyTorch's FLOP count of the step, 0.53 GFLOP per image) and
-- its fraction of the machine's measured matrix-product peak in the mode's dtype (the
-- faster of crescent's and PyTorch's 2048^2 mm, each the best of several runs).
-- Threads: env CRESCENT_THREADS, default the machine's core count, for both libraries.
--   luajit bench/ssl_swav.lua [batch=256] [windows=3] [steps=2] [warmup=2] [amp=off,bf16]
--                             [modes=eager,channels_last,compile,bf16,bf16_compile]
-- Last line: {"bench": "ssl_swav", "crescent": x, "crescent_mode", "crescent_modes", "torch": y,
-- "torch_mode", "torch_modes", "ratio": x/y, "gflop_per_img", "peak_gflops": {f32, bf16}, "unit": "img/s"}
package.path = 'lua/?.lua;lua/?/init.lua;' .. package.path
local cjson = require 'cjson'
local cr = require 'crescent'
package.path = 'bench/?.lua;' .. package.path
local harness = require 'harness'

local args = harness.args('bench/ssl_swav.lua', { { 'batch', 256 }, { 'windows', 3 }, { 'steps', 2 }, { 'warmup', 2 },
  { 'amp', 'off,bf16' }, { 'modes', 'eager,channels_last,compile,bf16,bf16_compile' } })

local threads = harness.threads()
local python = os.getenv('CRESCENT_TORCH_PYTHON') or 'build/torchenv/bin/python'

local function crescent_rate(amp)
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
    model = method, optimizer = opt, epochs = 1, test_every = 0, train_loader = loader, amp = amp,
    handle_signals = false, loss = function(out) return method:loss(out) end,
  }
  for _, h in ipairs(method:hooks()) do task:add_hook(h) end
  local window, rates = harness.window_hook(args.warmup, args.steps, B)
  task:add_hook(window)
  cr.train(task)
  return harness.median(rates), rates
end

local amps = {}
for a in args.amp:gmatch('[^,]+') do
  if a ~= 'off' and a ~= 'bf16' then error('ssl_swav: amp=' .. a .. ' is not a CPU mode; use off, bf16 or off,bf16', 0) end
  if a == 'off' or cr.cpu_bf16_native() then amps[#amps + 1] = a end
end
local peak = { f32 = harness.matmul_peak('f32'), bf16 = harness.matmul_peak('bf16') }
local c_modes, c, c_mode = {}, nil, nil
for _, a in ipairs(amps) do
  local rate, windows = crescent_rate(a)
  c_modes[a] = rate
  if not c or rate > c then c, c_mode = rate, a end
  local wl = {}
  for i, r in ipairs(windows) do wl[i] = string.format('%.0f', r) end
  print(string.format('crescent %s threads %d batch %d amp %s: windows [%s] img/s', cr.version, threads, args.batch, a,
    table.concat(wl, ', ')))
end

local figures = harness.run_twin('bench/ssl_swav_torch.py', threads, string.format(
  '--bench --batch %d --steps %d --warmup %d --modes %s', args.batch, args.windows * args.steps, args.warmup, args.modes),
  python)
local gflop = figures.swav_step_gflop_per_img
-- the machine's peak: the better of the two libraries' 2048^2 products
local peak_of = { crescent = { f32 = peak.f32, bf16 = peak.bf16 }, torch = { f32 = figures.matmul_2048_f32,
                  bf16 = figures.matmul_2048_bf16 } }
for _, dt in ipairs { 'f32', 'bf16' } do
  local t = peak_of.torch[dt]
  if t and (not peak[dt] or t > peak[dt]) then peak[dt] = t end
end
figures.swav_step_gflop_per_img, figures.swav_augment_samples_per_s = nil, nil
figures.matmul_2048_f32, figures.matmul_2048_bf16 = nil, nil
local t, t_mode
for mode, v in pairs(figures) do
  if not t or v > t then t, t_mode = v, mode end
end
local ratio = t and t > 0 and c / t or nil

-- GFLOP/s of a rate and its share of the peak of the dtype the mode computes in
local function share(rate, bf16)
  if not gflop then return '' end
  local p = bf16 and peak.bf16 or peak.f32
  return string.format(' (%.0f GFLOP/s%s)', rate * gflop, p and string.format(', %.0f%% of peak', 100 * rate * gflop / p) or '')
end
local function gf(v) return v and string.format('%.0f', v) or '-' end
print(string.format('matmul peak (2048^2 mm, the better library): f32 %s GFLOP/s (crescent %s, torch %s), ' ..
  'bf16 %s GFLOP/s (crescent %s, torch %s)', gf(peak.f32), gf(peak_of.crescent.f32), gf(peak_of.torch.f32),
  gf(peak.bf16), gf(peak_of.crescent.bf16), gf(peak_of.torch.bf16)))
for _, a in ipairs(amps) do
  print(string.format('  crescent %-14s %7.1f img/s%s', a == 'off' and 'f32' or a, c_modes[a], share(c_modes[a], a == 'bf16')))
end
local names = {}
for mode in pairs(figures) do names[#names + 1] = mode end
table.sort(names)
for _, mode in ipairs(names) do
  print(string.format('  torch    %-14s %7.1f img/s%s', mode, figures[mode], share(figures[mode], mode:find('bf16') ~= nil)))
end
print(string.format('ssl_swav (resnet18 width 16, 2x28+4x14 crops, batch %d, %d threads): crescent %.1f img/s (%s), ' ..
  'torch %s img/s (%s), ratio %s', args.batch, threads, c, c_mode == 'off' and 'f32' or c_mode,
  t and string.format('%.1f', t) or '-', t_mode or '-', ratio and string.format('%.2f', ratio) or '-'))
print(cjson.encode { bench = 'ssl_swav', crescent = c, crescent_mode = c_mode, crescent_modes = c_modes,
                     torch = t or cjson.null, torch_mode = t_mode or cjson.null,
                     torch_modes = next(figures) and figures or cjson.null, ratio = ratio or cjson.null,
                     gflop_per_img = gflop or cjson.null, peak_gflops = { f32 = peak.f32, bf16 = peak.bf16 or cjson.null },
                     peak_crescent = peak_of.crescent, peak_torch = peak_of.torch,
                     unit = 'img/s', threads = threads, batch = args.batch })
