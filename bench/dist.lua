-- bench/dist.lua — scaling efficiency of data-parallel training on cpu ranks: training
-- images/s of the supervised step (ResNet-18, CIFAR stem, base width W, 1 input channel,
-- 10 classes; SGD momentum 0.9 nesterov, weight decay 5e-4; 8 synthetic [B, 1, 28, 28]
-- batches per rank, cycled) on 1 rank and on 2 ranks (`mpirun -np 2`), through cr.train as
-- bench/train_supervised.lua runs it, and on 2 ranks through DDP (cr.dist.setup.model
-- with dist.sync_bn off: 25 MB gradient buckets all-reduced over MPI from the
-- post-accumulate grad hooks) and cr.dist.setup.task (the ranks agree on stopping after
-- each step, as a recipe does). The same in PyTorch (bench/dist_torch.py:
-- DistributedDataParallel over gloo, 2 processes from torch.multiprocessing.spawn).
--
-- Every rank runs ONE thread, and so does the 1-rank run: the efficiency
--   (2-rank global img/s) / (2 x 1-rank img/s)
-- then compares like with like (2 ranks use 2 cores, 1 rank 1 core), and what it loses
-- below 1 is the all-reduce, the waits for the slower rank and the ranks' contention for
-- memory bandwidth, not a different thread count. B is per rank (the global batch of 2
-- ranks is 2B); a window's time is its slowest rank's; figures are the medians of timed
-- windows after warm-up steps. The 1-rank runs have no process group and no DDP (as
-- a recipe alone). mpirun binds each rank to a core of its own (its default for 2 ranks),
-- and the twin binds its 2 ranks the same way. Run it on an otherwise idle machine with at
-- least 2 cores.
-- Still to write, when a GPU is lent: NCCL all_reduce bandwidth (and DDP scaling) on GPUs.
--
--   luajit bench/dist.lua [width=16] [batch=64] [windows=5] [steps=5] [warmup=3]
-- (the script re-invokes itself as `luajit bench/dist.lua worker ...` alone and under
-- `mpirun --oversubscribe -np 2`). Where mpirun or build/libcrescent_mpi.so is missing, or
-- torch.distributed / gloo is unavailable, that side prints one line and is skipped.
-- Last line: {"bench": "dist", "crescent": {"1": x1, "2": x2, "efficiency": e}, "torch": {...},
--             "ratio": crescent 2-rank / torch 2-rank img/s, "unit": "img/s", ...}
package.path = 'lua/?.lua;lua/?/init.lua;' .. package.path
local cjson = require 'cjson'
local cr = require 'crescent'
package.path = 'bench/?.lua;' .. package.path
local harness = require 'harness'

local script = arg and arg[0] or 'bench/dist.lua'
local is_worker = arg and arg[1] == 'worker'
if is_worker then table.remove(arg, 1) end

local args = harness.args('bench/dist.lua',
  { { 'width', 16 }, { 'batch', 64 }, { 'windows', 5 }, { 'steps', 5 }, { 'warmup', 3 }, { 'bucket_mb', 25, 'fraction' } })
local arg_line = string.format('width=%d batch=%d windows=%d steps=%d warmup=%d bucket_mb=%g', args.width,
  args.batch, args.windows, args.steps, args.warmup, args.bucket_mb)

-- One rank's training (alone or under mpirun); rank 0 prints a JSON line
-- {"bench": "dist_worker", "ranks": k, "value": global img/s, "windows": [...], ...}.
local function worker()
  local cfg = { train = { threads = 1 }, dist = { sync_bn = false, timeout = 300, bucket_mb = args.bucket_mb } }
  cr.set_num_threads(1)
  cr.dist.setup.init(cfg, 'cpu')
  local W, B = cr.dist.world_size(), args.batch
  local ddp
  local task, rates = harness.supervised_task { width = args.width, batch = B, warmup = args.warmup,
    windows = args.windows, steps = args.steps, data_seed = 1 + cr.dist.rank(),   -- each rank its own data
    wrap = function(model) ddp = cr.dist.setup.model(cfg, model) end }          -- DDP; nil alone
  cr.dist.setup.task(task)
  cr.train(task)
  -- the slowest rank's time per window
  local times = {}
  for i, r in ipairs(rates) do times[i] = args.steps * B / r end
  if W > 1 then times = cr.dist.all_reduce(cr.tensor(times, { dtype = 'f64' }), 'max'):totable() end
  local global = {}
  for i, t in ipairs(times) do global[i] = W * args.steps * B / t end
  local tm = task.timing
  if cr.dist.is_main() then
    print(cjson.encode { bench = 'dist_worker', ranks = W, value = harness.median(global), windows = global,
                         ddp = ddp and ddp:describe() or cjson.null,
                         forward_backward_ms = 1e3 * tm.forward_backward_total / tm.steps,
                         optimizer_ms = 1e3 * tm.optimizer_total / tm.steps, hooks_ms = 1e3 * tm.hooks_total / tm.steps })
    io.stdout:flush()
  end
  cr.dist.shutdown()
end

if is_worker then
  worker()
  return
end

-- Runs cmd; returns the decoded JSON line whose bench is `name` (nil if none) and the output.
local function run_json(cmd, name)
  local p = io.popen(cmd .. ' 2>&1')
  local lines, found = {}, nil
  for line in p:lines() do
    lines[#lines + 1] = line
    if line:sub(1, 1) == '{' then
      local ok, obj = pcall(cjson.decode, line)
      if ok and type(obj) == 'table' and obj.bench == name then found = obj end
    end
  end
  p:close()
  return found, lines
end

local function tail(lines, n)
  local t = {}
  for i = math.max(1, #lines - (n or 6) + 1), #lines do t[#t + 1] = lines[i] end
  return table.concat(t, ' | ')
end

local function fmt_windows(ws)
  local t = {}
  for i, r in ipairs(ws or {}) do t[i] = string.format('%.0f', r) end
  return '[' .. table.concat(t, ', ') .. ']'
end

local function exists(path) local f = io.open(path) if f then f:close() return true end return false end

local MPIRUN = 'OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 900 mpirun --oversubscribe -np 2 '

-- crescent: {['1'] = img/s, ['2'] = img/s} or nil, with the reason printed
local function crescent_side()
  local why = os.execute('command -v mpirun >/dev/null 2>&1') ~= 0 and 'mpirun is not installed (apt-get install openmpi-bin)'
    or not exists('build/libcrescent_mpi.so') and 'build/libcrescent_mpi.so is missing (make with libopenmpi-dev)'
    or nil
  if why then
    print('dist: crescent side skipped, ' .. why)
    return nil
  end
  local out = {}
  for _, k in ipairs { 1, 2 } do
    local cmd = (k == 1 and 'timeout 900 ' or MPIRUN) .. 'luajit ' .. script .. ' worker ' .. arg_line
    local obj, lines = run_json(cmd, 'dist_worker')
    if not obj then
      print(string.format('dist: crescent %d-rank run gave no figure (%s): %s', k, cmd, tail(lines)))
      return nil
    end
    print(string.format('crescent %s %d rank(s) x 1 thread: windows %s; per step forward+backward %.1f ms, ' ..
      'optimizer %.2f ms, hooks %.2f ms%s', cr.version, k, fmt_windows(obj.windows), obj.forward_backward_ms,
      obj.optimizer_ms, obj.hooks_ms, obj.ddp ~= cjson.null and (', DDP ' .. tostring(obj.ddp)) or ''))
    out[k] = obj.value
  end
  return out
end

-- torch: the same, or nil with the reason printed
local function torch_side()
  local out = {}
  for _, k in ipairs { 1, 2 } do
    local cmd = string.format('timeout 900 /usr/bin/python3 bench/dist_torch.py nproc=%d %s', k, arg_line)
    local obj, lines = run_json(cmd, 'dist_torch')
    if obj and obj.skipped then
      print('dist: torch side skipped, ' .. tostring(obj.skipped))
      return nil
    end
    if not obj then
      print(string.format('dist: torch %d-rank run gave no figure (is python3-torch installed?): %s', k, tail(lines)))
      return nil
    end
    print(string.format('torch %d rank(s) x 1 thread: windows %s', k, fmt_windows(obj.windows)))
    out[k] = obj.value
  end
  return out
end

local c = crescent_side()
local t = torch_side()

local function eff(s) return s and s[2] / (2 * s[1]) or nil end
local function f(x, p) return x and string.format(p or '%.1f', x) or '-' end
local ratio = (c and t) and c[2] / t[2] or nil
print(string.format('dist (resnet18 cifar stem, width %d, batch %d per rank, 1 thread per rank, cpu):',
  args.width, args.batch))
print(string.format('  %-9s %12s %12s %11s', '', '1 rank', '2 ranks', 'efficiency'))
print(string.format('  %-9s %12s %12s %11s', 'crescent', f(c and c[1]), f(c and c[2]), f(eff(c), '%.2f')))
print(string.format('  %-9s %12s %12s %11s', 'torch', f(t and t[1]), f(t and t[2]), f(eff(t), '%.2f')))
print(string.format('  img/s; ratio crescent/torch at 2 ranks %s', f(ratio, '%.2f')))

local function side(s)
  if not s then return cjson.null end
  return { ['1'] = s[1], ['2'] = s[2], efficiency = eff(s) }
end
print(cjson.encode { bench = 'dist', crescent = side(c), torch = side(t), ratio = ratio or cjson.null, unit = 'img/s',
                     ranks = 2, threads_per_rank = 1, width = args.width, batch = args.batch })
