-- bench/gpu_swav.lua — training images/s on a CUDA GPU beside PyTorch on the same GPU
-- (bench/gpu_swav_torch.py): SwAV with a ResNet-50 trunk, head 2048-2048-128, 3000
-- prototypes, Sinkhorn 3 iterations, multi-crop 2 x 224 + 6 x 96, batch 64; and supervised
-- ResNet-50 at 224 px, batch 256, 1000 classes. SGD momentum 0.9 on both sides, synthetic
-- inputs already on the GPU (the data pipeline is bench/data_pipeline.lua's business).
-- Each step: forward, loss, backward, optimizer step (and SwAV's prototype
-- normalisation); timed over `steps` steps after `warmup`, with the device synchronised
-- at both ends. Both sides run f32 (cuDNN may use TF32 in convolutions, as PyTorch's
-- default allows) and bf16 autocast (crescent's activations are channels-last anyway;
-- the twin converts to channels_last); the twin also gives the model FLOPs behind the
-- model-FLOPs utilisation (MFU, against the GPU's dense bf16 peak).
--   luajit bench/gpu_swav.lua [batch=64] [sup_batch=256] [steps=20] [warmup=5] [compile=0] [profile=0] [only=]
-- compile=1: the twin also times its bf16 steps under torch.compile (minutes of compiling).
-- profile=1: no timing and no twin; crescent's steps profiled over `steps` steps after
-- `warmup` with GPU times (cr.profiler.start{gpu = 0}: the GPU work each op queued), the
-- ops that took the most time printed as a table, beside the twin's
-- (gpu_swav_torch.py --profile):
--   luajit bench/gpu_swav.lua profile=1 steps=3
-- only=swav_bf16 (or swav_f32, supervised_bf16, supervised_f32; comma-separated): those
-- runs of crescent alone, no twin (for a kernel profiler such as ncu around it).
-- Last line: {"bench": "gpu_swav", "crescent": {...}, "torch": {...}, "ratio_swav_bf16": r, ...}
package.path = 'lua/?.lua;lua/?/init.lua;' .. package.path
local cjson = require 'cjson'
local cr = require 'crescent'
package.path = 'bench/?.lua;' .. package.path
local harness = require 'harness'

local args = harness.args('bench/gpu_swav.lua', { { 'batch', 64 }, { 'sup_batch', 256 }, { 'steps', 20 }, { 'warmup', 5 },
                                                    { 'compile', 0 }, { 'profile', 0 }, { 'only', '' } })
local only = {}
for key in args.only:gmatch('[^,]+') do
  if not ({ swav_bf16 = 1, swav_f32 = 1, supervised_bf16 = 1, supervised_f32 = 1 })[key] then
    error('only=' .. key .. ': the runs are swav_bf16, swav_f32, supervised_bf16 and supervised_f32', 0)
  end
  only[key] = true
end
local crescent_alone = next(only) ~= nil or args.profile == 1

if not cr.cuda.is_available() then
  local why = cr.cuda.why_not()
  print('gpu_swav: skipped, no usable GPU: ' .. why)
  print(cjson.encode { bench = 'gpu_swav', skipped = why })
  return
end

local timed_mallocs -- cudaMalloc calls in the timed steps of the last rate()

local function rate(step, images)
  for _ = 1, args.warmup do step() end
  if args.profile == 1 then
    cr.cuda.synchronize()
    cr.profiler.start({ gpu = 0 })
    for _ = 1, args.steps do step() end
    cr.profiler.stop()
    print(cr.profiler.table(30))
    return nil
  end
  cr.cuda.synchronize()
  local m0 = cr.cuda.memory_stats(0).device_mallocs
  local t0 = harness.now()
  for _ = 1, args.steps do step() end
  cr.cuda.synchronize()
  local r = args.steps * images / (harness.now() - t0)
  timed_mallocs = cr.cuda.memory_stats(0).device_mallocs - m0
  return r
end

local function swav_rate(amp)
  cr.manual_seed(0)
  local B = args.batch
  local trunk = cr.nn.models.resnet50 { num_classes = 0 }
  local method = cr.ssl.swav.SwAV { trunk = trunk, feat_dim = 2048, hidden_dim = 2048, out_dim = 128,
                                    num_prototypes = 3000, num_crops = 8 }
  method:cuda()
  local opt = cr.optim.SGD(method:named_parameters(), { lr = 0.1, momentum = 0.9, weight_decay = 1e-6 })
  local crops = {}
  for v = 1, 8 do
    local s = v <= 2 and 224 or 96
    crops[v] = cr.randn(B, 3, s, s, { device = 'cuda' })
  end
  return rate(function()
    local loss = cr.autocast(amp, function() return method:loss(method:forward(crops)) end)
    opt:zero_grad()
    loss:backward()
    opt:step()
    method:normalize_prototypes()
  end, B)
end

local function supervised_rate(amp)
  cr.manual_seed(0)
  local B = args.sup_batch
  local model = cr.nn.models.resnet50 { num_classes = 1000 }:cuda()
  local opt = cr.optim.SGD(model:named_parameters(), { lr = 0.1, momentum = 0.9, weight_decay = 1e-4 })
  local x = cr.randn(B, 3, 224, 224, { device = 'cuda' })
  local y = cr.randint(0, 1000, { B }, { device = 'cuda' })
  return rate(function()
    local loss = cr.autocast(amp, function() return cr.cross_entropy(model:forward(x), y) end)
    opt:zero_grad()
    loss:backward()
    opt:step()
  end, B)
end

local figures = {}
for _, run in ipairs({ { 'swav', swav_rate }, { 'supervised', supervised_rate } }) do
  for _, amp in ipairs({ 'bf16', 'off' }) do
    local key = run[1] .. (amp == 'off' and '_f32' or '_bf16')
    if next(only) and not only[key] then goto next_run end
    if args.profile == 1 then print(string.format('--- profile of %d %s steps', args.steps, key)) end
    collectgarbage('collect')
    cr.cuda.reset_peak_memory_stats(0)
    local m0 = cr.cuda.memory_stats(0)
    local ok, r = pcall(run[2], amp)
    if ok then figures[key] = r else print(string.format('crescent %s failed: %s', key, tostring(r))) end
    local m1 = cr.cuda.memory_stats(0)
    print(string.format('crescent %s: %s img/s; peak GPU memory %.2f GiB, %d cudaMalloc calls (%s in the timed steps), ' ..
      '%d out-of-memory retries', key, ok and r and string.format('%.1f', r) or '-', m1.peak_allocated_bytes / 2 ^ 30,
      m1.device_mallocs - m0.device_mallocs, timed_mallocs and tostring(timed_mallocs) or '-', m1.oom_retries - m0.oom_retries))
    timed_mallocs = nil
    ::next_run::
  end
end
if crescent_alone then return end

-- the GPU machine's PyTorch (CRESCENT_TORCH_PYTHON), not Debian's CPU one
local t = harness.run_twin('bench/gpu_swav_torch.py', cr.get_num_threads(),
  string.format('--batch %d --sup-batch %d --steps %d --warmup %d%s', args.batch, args.sup_batch, args.steps, args.warmup,
    args.compile == 1 and ' --compile' or ''),
  os.getenv('CRESCENT_TORCH_PYTHON') or 'python3')

local function ratio(a, b) return (a and b and b > 0) and a / b or nil end
local function mfu(r, flops) return (r and flops and t.peak_bf16_flops) and r * flops / t.peak_bf16_flops or nil end
local function fmt(x, f) return x and string.format(f or '%.1f', x) or '-' end
local c = figures
for _, w in ipairs({ { 'swav', 'gpu_swav (resnet50, 2x224+6x96, batch ' .. args.batch .. ')', t.swav_flops_per_img },
                     { 'supervised', 'gpu_resnet50 supervised (224 px, batch ' .. args.sup_batch .. ')',
                       t.supervised_flops_per_img } }) do
  local k = w[1]
  print(string.format('%s: bf16 crescent %s img/s (MFU %s), torch %s (MFU %s), ratio %s; f32 crescent %s, torch %s, ' ..
    'ratio %s', w[2], fmt(c[k .. '_bf16']), fmt(mfu(c[k .. '_bf16'], w[3]), '%.3f'), fmt(t[k .. '_bf16']),
    fmt(mfu(t[k .. '_bf16'], w[3]), '%.3f'), fmt(ratio(c[k .. '_bf16'], t[k .. '_bf16']), '%.2f'), fmt(c[k .. '_f32']),
    fmt(t[k .. '_f32']), fmt(ratio(c[k .. '_f32'], t[k .. '_f32']), '%.2f')))
  if t[k .. '_bf16_compile'] then
    print(string.format('%s: torch.compile bf16 %s img/s (MFU %s), crescent bf16 over it %s', w[2],
      fmt(t[k .. '_bf16_compile']), fmt(mfu(t[k .. '_bf16_compile'], w[3]), '%.3f'),
      fmt(ratio(c[k .. '_bf16'], t[k .. '_bf16_compile']), '%.2f')))
  end
end
local null = cjson.null
print(cjson.encode {
  bench = 'gpu_swav', unit = 'img/s', batch = args.batch, sup_batch = args.sup_batch,
  crescent = { swav_bf16 = c.swav_bf16 or null, swav_f32 = c.swav_f32 or null,
               supervised_bf16 = c.supervised_bf16 or null, supervised_f32 = c.supervised_f32 or null },
  torch = { swav_bf16 = t.swav_bf16 or null, swav_f32 = t.swav_f32 or null,
            supervised_bf16 = t.supervised_bf16 or null, supervised_f32 = t.supervised_f32 or null,
            swav_bf16_compile = t.swav_bf16_compile or null, supervised_bf16_compile = t.supervised_bf16_compile or null },
  ratio_swav_bf16 = ratio(c.swav_bf16, t.swav_bf16) or null,
  mfu_swav_bf16 = mfu(c.swav_bf16, t.swav_flops_per_img) or null,
})
