-- bench/ssl_methods.lua — train-step images/s of every SSL method through the engine
-- (cr.train: the C step loop, the standard step, the method's hooks), beside the same step
-- of its PyTorch twin where one exists (bench/ssl_reference_torch.py --bench: MoCo v2,
-- SwAV, SimCLR, BYOL, Barlow Twins) in each of its modes (eager, channels_last,
-- torch.compile, and where the CPU has AVX512-BF16 bf16 autocast with channels_last, also
-- compiled); the ratio is of crescent's fastest mode against the twin's fastest. DINO's
-- twin (bench/dino_torch.py --bench, timm's ViT) runs the same modes but channels_last.
-- The settings: a method with a twin runs the parity settings on both sides
-- (bench/parity_settings.lua over the recipe's defaults: the same resolved config goes to
-- the twin as JSON), the others their recipe's defaults. Crops are fixed synthetic
-- tensors of the config's sizes (augmentation is bench/data_pipeline.lua's); NPID and
-- DeepCluster-v2 take batch indices into the full training set, and DeepCluster-v2 starts
-- with its memory marked filled (its one-off fill pass is not a step). Figures are
-- medians of timed windows after warm-up steps.
--   luajit bench/ssl_methods.lua [methods=all|byol,npid,...] [batch=256] [windows=3] [steps=2] [warmup=2]
--                               [modes=eager,channels_last,compile,bf16,bf16_compile] [amp=off,bf16]
-- `amp` lists crescent's modes (train.amp; bf16 only where the CPU has AVX512-BF16); its best
-- is the figure of the row, and each mode's figure is printed beside it.
-- Threads: env CRESCENT_THREADS (default the core count), for both libraries. The twin runs
-- on build/torchenv's PyTorch (`make torchenv`), or CRESCENT_TORCH_PYTHON.
-- Last line: {"bench": "ssl_methods", "threads", "batch", "rows": [{"method", "crescent", "torch",
-- "torch_mode", "ratio"}]}
package.path = 'lua/?.lua;lua/?/init.lua;' .. package.path
local cjson = require 'cjson'
local cr = require 'crescent'
package.path = 'bench/?.lua;' .. package.path
local harness = require 'harness'
local settings = dofile('bench/parity_settings.lua')
local R = cr.recipe.ssl

local ALL = cr.ssl.METHODS

local args = harness.args('bench/ssl_methods.lua', { { 'methods', 'all' },
  { 'modes', 'eager,channels_last,compile,bf16,bf16_compile' }, { 'amp', 'off,bf16' }, { 'batch', 256 }, { 'windows', 3 },
  { 'steps', 2 }, { 'warmup', 2 } })
local methods, modes = ALL, args.modes
if args.methods ~= 'all' then
  methods = {}
  for m in args.methods:gmatch('[^,]+') do methods[#methods + 1] = m end
end
for _, m in ipairs(methods) do
  if not cr.ssl[m] or not cr.ssl[m].build then
    io.stderr:write('ssl_methods: unknown method ', m, '; methods are ', table.concat(ALL, ', '), '\n')
    os.exit(2)
  end
end
local threads = harness.threads()
local python = os.getenv('CRESCENT_TORCH_PYTHON') or 'build/torchenv/bin/python'

-- The resolved config of a method: the parity settings where a twin exists.
local function config_of(name)
  local over = settings.PARITY[name] and settings.overrides(name) or {}
  over = cr.config.merge(over, { data = { batch_size = args.batch }, train = { threads = threads } })
  return cr.config.load('recipes/' .. name .. '.lua', over)
end

-- Crescent's img/s for one method: the recipe's module, optimizer and hooks on cycled
-- synthetic batches.
local function crescent_rate(name, cfg, amp)
  cr.manual_seed(0)
  local mod = cr.ssl[name]
  local train_set = R.datasets(cfg)
  local views = R.views(cfg, train_set, mod.view_options and mod.view_options(cfg))
  local nchan, _, side = R.image_shape(train_set)
  local make_trunk, feat_dim = R.trunk_factory(cfg, nchan, side)
  local method = mod.build(cfg, { trunk = make_trunk, feat_dim = feat_dim, nchan = nchan, views = views,
                                  num_samples = #train_set, train_set = train_set })
  if method.memory_filled == false then method.memory_filled = true end   -- DeepCluster-v2: no fill pass
  local params = R.trainable(method)
  if method.param_groups then params = method:param_groups(params) end
  local opt = cr.optim.from_config.build(params, cfg.optim, cfg.optim.lr, R.schema(name).defaults.optim)
  local B, batches = args.batch, {}
  for i = 1, 2 do
    local crops = {}
    for g, s in ipairs(cfg.crops.size) do
      for _ = 1, cfg.crops.num[g] do crops[#crops + 1] = cr.randn(B, nchan, s, s) end
    end
    batches[i] = { input = crops, size = B, index = cr.randperm(#train_set):narrow(0, (i - 1) * B, B):contiguous() }
  end
  local task = cr.engine.Task {
    model = method, optimizer = opt, epochs = 1, test_every = 0, handle_signals = false, amp = amp,
    train_loader = harness.cycled_loader(batches, args.warmup + args.windows * args.steps),
    loss = function(out, batch) return method:loss(out, batch) end,
  }
  for _, h in ipairs(method:hooks()) do task:add_hook(h) end
  local window, rates = harness.window_hook(args.warmup, args.steps, B)
  task:add_hook(window)
  cr.train(task)
  return harness.median(rates)
end

-- The twin's img/s per mode ({} without a twin or a PyTorch).
local function twin_rates(name, cfg)
  if not settings.PARITY[name] then return {} end
  local path = os.tmpname()
  local f = assert(io.open(path, 'w'))
  f:write(cjson.encode(cfg))
  f:close()
  local figures
  if name == 'dino' then
    figures = harness.run_twin('bench/dino_torch.py', threads, string.format('--config %s --bench --batch %d --steps %d ' ..
      '--windows %d --modes %s', path, args.batch, args.steps, args.windows, modes), python)
  else
    figures = harness.run_twin('bench/ssl_reference_torch.py', threads, string.format(
      '--method %s --config %s --bench --batch %d --steps %d --windows %d --warmup 1 --modes %s', name, path, args.batch,
      args.steps, args.windows, modes), python)
  end
  os.remove(path)
  return figures
end

print(string.format('%-15s %12s %12s %-14s %7s   (img/s, batch %d, %d threads)', 'method', 'crescent', 'torch',
  'torch mode', 'ratio', args.batch, threads))
local amps = {}
for a in args.amp:gmatch('[^,]+') do
  if a ~= 'off' and a ~= 'bf16' then
    io.stderr:write('ssl_methods: amp=', a, ' is not a CPU mode; use off, bf16 or off,bf16\n')
    os.exit(2)
  end
  if a == 'off' or harness.cpu_has('avx512_bf16') then amps[#amps + 1] = a end
end
local rows = {}
for _, name in ipairs(methods) do
  local cfg = config_of(name)
  local c, c_amp, c_modes = nil, nil, {}
  for _, a in ipairs(amps) do
    c_modes[a] = crescent_rate(name, cfg, a)
    if not c or c_modes[a] > c then c, c_amp = c_modes[a], a end
  end
  local best, best_mode = nil, nil
  local figures = twin_rates(name, cfg)
  for mode, v in pairs(figures) do
    if not best or v > best then best, best_mode = v, mode end
  end
  local ratio = best and c / best or nil
  print(string.format('%-15s %12.1f %12s %-14s %7s   crescent %s; torch %s', name, c,
    best and string.format('%.1f', best) or '-', best_mode or '-', ratio and string.format('%.2f', ratio) or '-',
    harness.figures_line(c_modes), harness.figures_line(figures)))
  rows[#rows + 1] = { method = name, crescent = c, crescent_amp = c_amp, crescent_modes = c_modes,
                      torch = best or cjson.null, torch_mode = best_mode or cjson.null,
                      torch_modes = next(figures) and figures or cjson.null, ratio = ratio or cjson.null }
end
print(cjson.encode { bench = 'ssl_methods', threads = threads, batch = args.batch, rows = rows })
