-- bench/optim_step.lua — one optimizer step over ResNet-18's parameters (11.7M f32 values
-- in 62 tensors) beside PyTorch's foreach optimizers (bench/optim_step_torch.py, run from
-- here on the same thread count): fused SGD (momentum 0.9, weight decay 5e-4), fused
-- AdamW, and clip_grad_norm. Medians of 11 steps after 2 warm-up steps. One JSON line per
-- measurement {"bench", "crescent", "torch", "unit", "ratio"} (ratio > 1: crescent is
-- better), then a summary {"bench": "optim_step", ...}.
-- Threads: env CRESCENT_THREADS, default the machine's core count, for both libraries.
-- Run from the repository root: luajit bench/optim_step.lua
package.path = 'lua/?.lua;lua/?/init.lua;' .. package.path
local ffi = require 'ffi'
local cjson = require 'cjson'
local cr = require 'crescent'
local optim = require 'crescent.optim'

ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } cr_bench_timespec;
int clock_gettime(int clk, cr_bench_timespec *ts);
]]
local ts = ffi.new('cr_bench_timespec')
local function now()
  ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

local REPEATS = 11

-- torchvision's resnet18 parameter shapes (ImageNet stem, 1000 classes), in order
local function resnet18_shapes()
  local shapes = { { 64, 3, 7, 7 }, { 64 }, { 64 } }
  local cin = 64
  for _, ws in ipairs { { 64, 1 }, { 128, 2 }, { 256, 2 }, { 512, 2 } } do
    local width, stride = ws[1], ws[2]
    for block = 0, 1 do
      local s = block == 0 and stride or 1
      for _, sh in ipairs { { width, cin, 3, 3 }, { width }, { width }, { width, width, 3, 3 }, { width }, { width } } do
        shapes[#shapes + 1] = sh
      end
      if s ~= 1 or cin ~= width then
        for _, sh in ipairs { { width, cin, 1, 1 }, { width }, { width } } do shapes[#shapes + 1] = sh end
      end
      cin = width
    end
  end
  shapes[#shapes + 1] = { 1000, 512 }
  shapes[#shapes + 1] = { 1000 }
  return shapes
end

local function median_time(fn)
  fn()
  fn()
  local times = {}
  for i = 1, REPEATS do
    local t0 = now()
    fn()
    times[i] = now() - t0
  end
  table.sort(times)
  return times[(REPEATS + 1) / 2]
end

local function core_count()
  local p = io.popen('nproc 2>/dev/null')
  local n = p and tonumber(p:read('*l'))
  if p then p:close() end
  return n or cr.get_num_threads()
end

local function run_torch(threads)
  local p = io.popen(string.format('CRESCENT_THREADS=%d /usr/bin/python3 bench/optim_step_torch.py 2>&1', threads))
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

local function main()
  local threads = tonumber(os.getenv('CRESCENT_THREADS')) or core_count()
  cr.set_num_threads(threads)
  cr.manual_seed(0)
  local named, numel = {}, 0
  for i, sh in ipairs(resnet18_shapes()) do
    local p = cr.randn(sh):requires_grad_(true)
    p.grad = cr.randn(sh) * 1e-3
    named[i] = { 'p' .. i, p }
    numel = numel + p:numel()
  end
  local sgd = optim.SGD(named, { lr = 0.1, momentum = 0.9, weight_decay = 5e-4 })
  local adamw = optim.AdamW(named, { lr = 1e-3, weight_decay = 0.01 })
  local mine = {
    sgd_step_resnet18 = median_time(function() sgd:step() end) * 1e3,
    adamw_step_resnet18 = median_time(function() adamw:step() end) * 1e3,
    clip_grad_norm_resnet18 = median_time(function() optim.clip_grad_norm(sgd, 1e9) end) * 1e3,
  }
  local torch = run_torch(threads)
  local summary = { bench = 'optim_step', threads = threads, numel = numel, crescent = {}, torch = {}, unit = {},
                    ratios = {} }
  local logsum, n = 0, 0
  for _, name in ipairs { 'sgd_step_resnet18', 'adamw_step_resnet18', 'clip_grad_norm_resnet18' } do
    local v, t = mine[name], torch[name]
    local ratio = t and t / v or cjson.null
    print(string.format('%-26s crescent %9.2f  torch %9s  ms/step  ratio %s', name, v,
      t and string.format('%.2f', t) or '-', ratio ~= cjson.null and string.format('%.2f', ratio) or '-'))
    print(cjson.encode({ bench = name, crescent = v, torch = t or cjson.null, unit = 'ms/step', ratio = ratio }))
    summary.crescent[name], summary.torch[name], summary.unit[name], summary.ratios[name] = v, t or cjson.null,
      'ms/step', ratio
    if ratio ~= cjson.null then logsum, n = logsum + math.log(ratio), n + 1 end
  end
  summary.ratio = n > 0 and math.exp(logsum / n) or cjson.null
  print(cjson.encode(summary))
end

main()
