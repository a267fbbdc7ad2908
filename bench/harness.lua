-- bench/harness.lua — what every benchmark shares: a monotonic clock, medians of timed
-- repeats, the thread count both libraries use (env CRESCENT_THREADS, default the core
-- count), and running a PyTorch twin that prints JSON lines {"bench": name, "value": x}.
local ffi = require 'ffi'
local cjson = require 'cjson'
local cr = require 'crescent'

local H = {}

ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } cr_bench_timespec;
int clock_gettime(int clk, cr_bench_timespec *ts);
]]
local ts = ffi.new('cr_bench_timespec')
function H.now()
  ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

function H.median(xs)
  local t = {}
  for i, x in ipairs(xs) do t[i] = x end
  table.sort(t)
  local n = #t
  if n % 2 == 1 then return t[(n + 1) / 2] end
  return (t[n / 2] + t[n / 2 + 1]) / 2
end

-- Median seconds of fn() over `repeats` runs after `warmup` untimed ones (JIT traces,
-- oneDNN primitives, allocator).
function H.median_time(fn, repeats, warmup)
  for _ = 1, warmup or 1 do fn() end
  local times = {}
  for i = 1, repeats or 7 do
    local t0 = H.now()
    fn()
    times[i] = H.now() - t0
  end
  return H.median(times)
end

-- A matrix-product peak: GFLOP/s of crescent's n x n mm (default 2048) in dtype ('f32' or
-- 'bf16'), the fastest of `repeats` (default 7) after warm-ups: a peak, so the best run,
-- not the median, on machines whose speed drifts. nil for bf16 where the cpu does not
-- multiply bf16 natively.
function H.matmul_peak(dtype, n, repeats)
  if dtype == 'bf16' and not cr.cpu_bf16_native() then return nil end
  n = n or 2048
  local a, b = cr.randn(n, n):to(dtype), cr.randn(n, n):to(dtype)
  for _ = 1, 2 do a:mm(b) end
  local best = math.huge
  for _ = 1, repeats or 7 do
    local t0 = H.now()
    a:mm(b)
    best = math.min(best, H.now() - t0)
  end
  return 2 * n ^ 3 / best / 1e9
end

-- The thread count for both libraries; also applies it to crescent.
function H.threads()
  local n = tonumber(os.getenv('CRESCENT_THREADS'))
  if not n then
    local p = io.popen('nproc 2>/dev/null')
    n = p and tonumber(p:read('*l'))
    if p then p:close() end
  end
  n = n or cr.get_num_threads()
  cr.set_num_threads(n)
  return n
end

-- The script's key=N arguments over defaults given in order ({{'batch', 256}, ...}; a
-- third element 'fraction' allows one, as {'bucket_mb', 25, 'fraction'}; a string default,
-- as {'only', ''}, takes any text): returns {batch = 256, ...}; an unknown key, or a value
-- that is not a non-negative integer (or number, where fractions are allowed), is an error
-- that prints the usage line. argv: the arguments to read (default the script's).
function H.args(script, defaults, argv)
  local args, usage, fraction = {}, {}, {}
  for i, kv in ipairs(defaults) do
    args[kv[1]], fraction[kv[1]] = kv[2], kv[3] == 'fraction'
    usage[i] = string.format(type(kv[2]) == 'string' and '[%s=%s]' or '[%s=%g]', kv[1], kv[2])
  end
  for _, a in ipairs(argv or arg or {}) do
    local k, text = a:match('^([%w_]+)=(.*)$')
    local v = type(args[k]) == 'string' and text or tonumber(text)
    if not k or args[k] == nil or v == nil or (type(v) == 'number' and (v < 0 or (v % 1 ~= 0 and not fraction[k]))) then
      error('usage: luajit ' .. script .. ' ' .. table.concat(usage, ' '), 0)
    end
    args[k] = v
  end
  return args
end

-- A loader (iter / num_batches) handing out `total` batches by cycling through a fixed
-- list: the engine benchmarks measure the step, not the data.
function H.cycled_loader(batches, total)
  return {
    iter = function()
      local i = 0
      return function()
        i = i + 1
        if i <= total then return batches[(i - 1) % #batches + 1] end
      end
    end,
    num_batches = function() return total end,
  }
end

-- A hook timing windows of `steps` iterations after `warmup` ones: wall time between
-- after_step marks, so everything the loop does counts. Returns the hook and the list
-- it fills with samples/s per window.
function H.window_hook(warmup, steps, batch_size)
  local loop = require 'crescent.engine.loop'
  local rates, t0 = {}, nil
  return { name = 'bench', priority = 100, after_step = function(_, t)
    local k = t.iteration - warmup
    if k == 0 then t0 = loop.now()
    elseif k > 0 and k % steps == 0 then
      local t1 = loop.now()
      rates[#rates + 1] = steps * batch_size / (t1 - t0)
      t0 = t1
    end
  end }, rates
end

-- The supervised training task the training benchmarks time: ResNet-18 (CIFAR stem, base
-- width `width`, 1 input channel, 10 classes), SGD momentum 0.9 nesterov, weight decay
-- 5e-4, or with arch = 'vit_tiny' a ViT-tiny with `patch` px patches (DropPath 0.1) and
-- AdamW (lr 1e-3, weight decay 0.05); a cosine lr, 8 synthetic [batch, 1, 28, 28] batches
-- cycled, the schedule and timer hooks and a window hook. `wrap(model)` (optional) runs before the optimizer takes
-- the parameters (DDP), and `data_seed` seeds the batches (default: the model's seed 0
-- stream goes on). `amp` is the task's train.amp ('off' or nil, 'bf16'). Returns the task
-- and the list the window hook fills with samples/s.
function H.supervised_task(o, amp)
  cr.manual_seed(0)
  local B = o.batch
  local vit = (o.arch or 'resnet18') == 'vit_tiny'
  if not vit and (o.arch or 'resnet18') ~= 'resnet18' then
    error('supervised_task: arch=' .. tostring(o.arch) .. ' is not benchmarked; use resnet18 or vit_tiny', 0)
  end
  local model = vit and cr.nn.models.vit_tiny { img_size = 28, patch = o.patch or 7, in_channels = 1, num_classes = 10,
                                                drop_path = 0.1 }
    or cr.nn.models.resnet18 { stem = 'cifar', width = o.width, in_channels = 1, num_classes = 10 }
  if o.wrap then o.wrap(model) end
  local lr = vit and 1e-3 or 0.1
  local opt = vit and cr.optim.AdamW(model:named_parameters(), { lr = lr, weight_decay = 0.05 })
    or cr.optim.SGD(model:named_parameters(), { lr = lr, momentum = 0.9, nesterov = true, weight_decay = 5e-4 })
  if o.data_seed then cr.manual_seed(o.data_seed) end
  local data = {}
  for i = 1, 8 do data[i] = { input = cr.randn(B, 1, 28, 28), target = cr.randint(0, 10, { B }) } end
  local task = cr.engine.Task {
    model = model, optimizer = opt, epochs = 1, test_every = 0, amp = amp,
    train_loader = H.cycled_loader(data, o.warmup + o.windows * o.steps),
    loss = function(out, batch) return cr.cross_entropy(out, batch.target) end,
    schedules = { lr = cr.schedule.cosine { from = lr, to = 0 } },
  }
  task:add_hook(cr.hooks.schedule())
  task:add_hook(cr.hooks.timer())
  local window, rates = H.window_hook(o.warmup, o.steps, B)
  task:add_hook(window)
  return task, rates
end

-- Runs <python> <script> [args] on `threads` (python: /usr/bin/python3, Debian's CPU
-- PyTorch, unless given); returns {bench = value} from its JSON lines (empty, with a
-- printed reason, when the twin could not run).
-- Prints a pipelines x thread counts table of samples/s, crescent's and the twin's
-- (figures keyed '<pipeline>@<threads>'), per core and their ratio, with `digits`
-- decimals; returns the rows for the JSON line ({pipeline, threads, crescent, torch, ratio}).
function H.ratio_table(pipelines, thread_counts, crescent, torch, digits)
  local function fmt(v, pattern) return v and string.format(pattern, v) or '-' end
  local num = '%.' .. digits .. 'f'
  print(string.format('%-16s %7s %14s %10s %14s %10s %7s', 'pipeline', 'threads', 'crescent /s', 'per core',
    'torch /s', 'per core', 'ratio'))
  local rows = {}
  for _, p in ipairs(pipelines) do
    for _, t in ipairs(thread_counts) do
      local key = p.name .. '@' .. t
      local c, tv = crescent[key], torch[key]
      local ratio = tv and tv > 0 and c / tv or nil
      print(string.format('%-16s %7d %14s %10s %14s %10s %7s', p.name, t, fmt(c, num), fmt(c / t, num), fmt(tv, num),
        fmt(tv and tv / t, num), fmt(ratio, '%.2f')))
      rows[#rows + 1] = { pipeline = p.name, threads = t, crescent = c, torch = tv or cjson.null, ratio = ratio or cjson.null }
    end
  end
  return rows
end

-- Whether the CPU reports the /proc/cpuinfo flag (avx512_bf16, amx_bf16, ...); false where
-- there is no /proc/cpuinfo.
function H.cpu_has(flag)
  local f = io.open('/proc/cpuinfo')
  if not f then return false end
  local text = f:read('*a')
  f:close()
  return text:find('%f[%w_]' .. flag .. '%f[^%w_]') ~= nil
end

-- 'a 123.4, b 56.7': a mode -> figure table, modes sorted by name; '-' when empty.
function H.figures_line(figures)
  local names = {}
  for k in pairs(figures) do names[#names + 1] = k end
  table.sort(names)
  for i, k in ipairs(names) do names[i] = string.format('%s %.1f', k, figures[k]) end
  return #names > 0 and table.concat(names, ', ') or '-'
end

function H.run_twin(script, threads, args, python)
  local p = io.popen(string.format('CRESCENT_THREADS=%d %s %s %s 2>&1', threads, python or '/usr/bin/python3', script,
    args or ''))
  local figures, raw = {}, {}
  for line in p:lines() do
    raw[#raw + 1] = line
    local ok, obj = pcall(cjson.decode, line)
    if ok and type(obj) == 'table' and obj.value ~= nil then figures[obj.bench] = obj.value end
  end
  p:close()
  if next(figures) == nil then
    print('torch twin gave no figures (is python3-torch installed?): ' .. table.concat(raw, ' | '))
  end
  return figures
end

return H
