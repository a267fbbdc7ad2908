-- bench/optim_step.lua — one optimizer step over ResNet-18's parameters (11.7M f32 values
-- in 62 tensors) beside PyTorch's foreach optimizers (bench/optim_step_torch.py, run from
-- here on the same thread count): fused SGD (momentum 0.9, weight decay 5e-4), fused
-- AdamW, and clip_grad_norm. Medians of 11 steps after 2 warm-up steps. One JSON line per
-- measurement {"bench", "crescent", "torch", "unit", "ratio"} (ratio > 1: crescent is
-- better), then a summary {"bench": "optim_step", ...}.
-- Threads: env CRESCENT_THREADS, default the machine's core count, for both libraries.
-- Run from the repository root: luajit bench/optim_step.lua
package.path = 'lua/?.lua;lua/?/init.lua;' .. package.path
local cjson = require 'cjson'
local cr = require 'crescent'
local optim = require 'crescent.optim'
package.path = 'bench/?.lua;' .. package.path
local harness = require 'harness'

local REPEATS = 11
local function median_time(fn) return harness.median_time(fn, REPEATS, 2) end

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

local function main()
  local threads = harness.threads()
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
  local torch = harness.run_twin('bench/optim_step_torch.py', threads)
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
