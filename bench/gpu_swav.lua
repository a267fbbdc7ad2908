-- bench/gpu_swav.lua — training images/s on a CUDA GPU beside PyTorch on the same GPU
-- (bench/gpu_swav_torch.py): SwAV with a ResNet-50 trunk, head 2048-2048-128, 3000
-- prototypes, Sinkhorn 3 iterations, multi-crop 2 x 224 + 6 x 96, batch 64; and supervised
-- ResNet-50 at 224 px, batch 256, 1000 classes. SGD momentum 0.9 on both sides, synthetic
-- inputs already on the GPU (the data pipeline is bench/data_pipeline.lua's business).
-- Each step: forward, loss, backward, optimizer step (and SwAV's prototype
-- normalisation); timed over `steps` steps after `warmup`, with the device synchronised
-- at both ends. crescent runs f32 (cuDNN may use TF32 in convolutions, as PyTorch's
-- default allows); the twin reports bf16 autocast with channels_last and f32, and the
-- model FLOPs behind the model-FLOPs utilisation (MFU, against the GPU's dense bf16 peak).
--   luajit bench/gpu_swav.lua [batch=64] [sup_batch=256] [steps=20] [warmup=5]
-- Last line: {"bench": "gpu_swav", "crescent": x, "torch_bf16": y, "torch_f32": z, ...}
package.path = 'lua/?.lua;lua/?/init.lua;' .. package.path
local cjson = require 'cjson'
local cr = require 'crescent'
package.path = 'bench/?.lua;' .. package.path
local harness = require 'harness'

local args = { batch = 64, sup_batch = 256, steps = 20, warmup = 5 }
for _, a in ipairs(arg) do
  local k, v = a:match('^([%w_]+)=(%d+)$')
  if not k or args[k] == nil then
    error('usage: luajit bench/gpu_swav.lua [batch=64] [sup_batch=256] [steps=20] [warmup=5]', 0)
  end
  args[k] = tonumber(v)
end

if not cr.cuda.is_available() then
  local why = cr.cuda.why_not()
  print('gpu_swav: skipped, no usable GPU: ' .. why)
  print(cjson.encode { bench = 'gpu_swav', skipped = why })
  return
end

local function rate(step, images)
  for _ = 1, args.warmup do step() end
  cr.cuda.synchronize()
  local t0 = harness.now()
  for _ = 1, args.steps do step() end
  cr.cuda.synchronize()
  return args.steps * images / (harness.now() - t0)
end

local function swav_rate()
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
    crops[v] = cr.randn(B, 3, s, s):cuda()
  end
  return rate(function()
    local loss = method:loss(method:forward(crops))
    opt:zero_grad()
    loss:backward()
    opt:step()
    method:normalize_prototypes()
  end, B)
end

local function supervised_rate()
  cr.manual_seed(0)
  local B = args.sup_batch
  local model = cr.nn.models.resnet50 { num_classes = 1000 }:cuda()
  local opt = cr.optim.SGD(model:named_parameters(), { lr = 0.1, momentum = 0.9, weight_decay = 1e-4 })
  local x = cr.randn(B, 3, 224, 224):cuda()
  local onehot = cr.one_hot(cr.randint(0, 1000, { B }), 1000):float():cuda()
  return rate(function()
    local loss = -(model:forward(x):log_softmax(1) * onehot):sum(1):mean()
    opt:zero_grad()
    loss:backward()
    opt:step()
  end, B)
end

local ok_s, swav = pcall(swav_rate)
if not ok_s then print('crescent SwAV step failed: ' .. tostring(swav)); swav = nil end
local ok_p, sup = pcall(supervised_rate)
if not ok_p then print('crescent supervised step failed: ' .. tostring(sup)); sup = nil end
local mem = cr.cuda.memory_stats(0)
print(string.format('crescent %s: swav %s img/s, supervised %s img/s; peak GPU memory %.2f GiB', cr.version,
  swav and string.format('%.1f', swav) or '-', sup and string.format('%.1f', sup) or '-',
  mem.peak_allocated_bytes / 2 ^ 30))

local python = os.getenv('CRESCENT_TORCH_PYTHON') or 'python3'
local p = io.popen(string.format('%s bench/gpu_swav_torch.py --batch %d --sup-batch %d --steps %d --warmup %d 2>&1',
  python, args.batch, args.sup_batch, args.steps, args.warmup))
local t = {}
for line in p:lines() do
  local ok, obj = pcall(cjson.decode, line)
  if ok and type(obj) == 'table' and obj.value ~= nil then t[obj.bench] = obj.value else print('torch: ' .. line) end
end
p:close()

local function ratio(a, b) return (a and b and b > 0) and a / b or nil end
local function mfu(r, flops) return (r and flops and t.peak_bf16_flops) and r * flops / t.peak_bf16_flops or nil end
local function fmt(x, f) return x and string.format(f or '%.1f', x) or '-' end
print(string.format('gpu_swav (resnet50, 2x224+6x96, batch %d): crescent %s img/s (MFU %s), torch bf16 %s ' ..
  '(MFU %s), torch f32 %s; ratio vs bf16 %s, vs f32 %s', args.batch, fmt(swav), fmt(mfu(swav, t.swav_flops_per_img), '%.3f'),
  fmt(t.swav_bf16), fmt(mfu(t.swav_bf16, t.swav_flops_per_img), '%.3f'), fmt(t.swav_f32),
  fmt(ratio(swav, t.swav_bf16), '%.2f'), fmt(ratio(swav, t.swav_f32), '%.2f')))
print(string.format('gpu_resnet50 supervised (224 px, batch %d): crescent %s img/s, torch bf16 %s, torch f32 %s; ' ..
  'ratio vs bf16 %s, vs f32 %s', args.sup_batch, fmt(sup), fmt(t.supervised_bf16), fmt(t.supervised_f32),
  fmt(ratio(sup, t.supervised_bf16), '%.2f'), fmt(ratio(sup, t.supervised_f32), '%.2f')))
local null = cjson.null
print(cjson.encode {
  bench = 'gpu_swav', unit = 'img/s', batch = args.batch, crescent = swav or null,
  torch_bf16 = t.swav_bf16 or null, torch_f32 = t.swav_f32 or null,
  ratio_bf16 = ratio(swav, t.swav_bf16) or null, ratio_f32 = ratio(swav, t.swav_f32) or null,
  mfu = mfu(swav, t.swav_flops_per_img) or null, torch_bf16_mfu = mfu(t.swav_bf16, t.swav_flops_per_img) or null,
  supervised = { batch = args.sup_batch, crescent = sup or null, torch_bf16 = t.supervised_bf16 or null,
                 torch_f32 = t.supervised_f32 or null },
})
