-- bench/ops.lua — op benchmarks beside PyTorch (bench/ops_torch.py, run from here so one
-- run gives both figures on the same machine and thread count):
--   * per-op overhead of add on 1-element tensors, without and with grad recording;
--   * 1024x1024 f32 matmul throughput, and the machine's matrix-product peak: 2048x2048 in
--     f32 and, where the cpu computes bf16 natively (AVX512-BF16), in bf16, the best of 7
--     runs (harness.matmul_peak);
--   * conv2d forward+backward on three ResNet-shaped layers;
--   * fused scaled dot-product attention forward+backward at ViT shapes (ViT-tiny on 28 px
--     images with 4 px patches, ViT-small at 224 px), against torch's
--     scaled_dot_product_attention, and crescent's plain composite beside it (no twin row).
-- Figures are medians of several repeats. One JSON line per measurement
-- {"bench", "crescent", "torch", "unit", "ratio"} (ratio > 1: crescent is better), then
-- a summary line {"bench": "ops", ...} holding them all.
-- Threads: env CRESCENT_THREADS, default the machine's core count, for both libraries.
-- The twin runs on a current PyTorch: CRESCENT_TORCH_PYTHON, else build/torchenv/bin/python
-- (`make torchenv`), else Debian's /usr/bin/python3.
-- Run from the repository root: luajit bench/ops.lua
package.path = 'lua/?.lua;lua/?/init.lua;' .. package.path
local cjson = require 'cjson'
local cr = require 'crescent'
package.path = 'bench/?.lua;' .. package.path
local harness = require 'harness'
local median_time = harness.median_time

local REPEATS = 7
local CONV_LAYERS = { -- name, input shape, out channels, kernel, padding (as in ops_torch.py)
  { 'conv_64x56x56_3x3', { 8, 64, 56, 56 }, 64, 3, 1 },
  { 'conv_128x28x28_3x3', { 8, 128, 28, 28 }, 128, 3, 1 },
  { 'conv_256x14x14_1x1_to_1024', { 8, 256, 14, 14 }, 1024, 1, 0 },
}

local ATTENTION_SHAPES = { -- name, B, heads, tokens, head dim (as in ops_torch.py)
  { 'attention_b64_h3_t50_d64', 64, 3, 50, 64 },
  { 'attention_b8_h6_t197_d64', 8, 6, 197, 64 },
}

local function filled(shape)
  if cr.randn then return cr.randn(shape) end
  return cr.full(shape, 0.1)
end

local function bench_add(requires_grad, n)
  n = n or 100000
  local a = cr.tensor({ 1.5 }):requires_grad_(requires_grad)
  local b = cr.tensor({ 2.5 })
  local function loop()
    for _ = 1, n do local _ = a + b end
  end
  collectgarbage()
  return median_time(loop, REPEATS) / n * 1e6
end

local function bench_matmul(size)
  size = size or 1024
  local a, b = filled({ size, size }), filled({ size, size })
  local t = median_time(function() return cr.mm(a, b) end, 11)
  return 2 * size ^ 3 / t / 1e9
end

local function bench_conv(shape, cout, k, pad)
  local x = filled(shape):requires_grad_(true)
  local w = filled({ cout, shape[2], k, k }):requires_grad_(true)
  local opts = { padding = pad }
  local gy = filled(cr.conv2d(x, w, nil, opts).shape)
  local function step()
    x.grad = nil
    w.grad = nil
    cr.conv2d(x, w, nil, opts):backward(gy)
  end
  return median_time(step, 11) * 1e3
end

-- plain = true: crescent's composite (matmul, softmax, matmul: the [T, T] scores held)
local function bench_attention(B, Hh, T, D, plain)
  local q, k, v = filled({ B, Hh, T, D }), filled({ B, Hh, T, D }), filled({ B, Hh, T, D })
  q:requires_grad_(true)
  k:requires_grad_(true)
  v:requires_grad_(true)
  local gy = filled({ B, Hh, T, D })
  local function step()
    q.grad, k.grad, v.grad = nil, nil, nil
    if plain then
      ((q:matmul(k:transpose(2, 3)) * (1 / math.sqrt(D))):softmax(3):matmul(v)):backward(gy)
    else
      cr.scaled_dot_product_attention(q, k, v):backward(gy)
    end
  end
  return median_time(step, 11) * 1e3
end

local function main()
  local threads = harness.threads()
  print(string.format('crescent %s vs PyTorch, %d threads (features: %s)', cr.version, threads, cr.features()))
  local py = os.getenv('CRESCENT_TORCH_PYTHON')
  if not py then
    local f = io.open('build/torchenv/bin/python')
    if f then f:close(); py = 'build/torchenv/bin/python' end
  end
  local torch = harness.run_twin('bench/ops_torch.py', threads, nil, py)

  -- the summary keeps DESIGN's keys: crescent/torch/unit map each measurement, ratio is
  -- the geometric mean of the per-measurement ratios (ratios has each one)
  local summary = { bench = 'ops', threads = threads, crescent = {}, torch = {}, unit = {}, ratios = {} }
  -- higher: true when a larger figure is better (throughput), false for times
  local function report(name, value, unit, higher)
    local t = torch[name]
    local ratio = cjson.null
    if t and value and value > 0 and t > 0 then ratio = higher and value / t or t / value end
    local line = { bench = name, crescent = value, torch = t or cjson.null, unit = unit, ratio = ratio }
    summary.crescent[name], summary.torch[name], summary.unit[name] = value, line.torch, unit
    summary.ratios[name] = ratio
    print(string.format('%-28s crescent %10.3f  torch %10s  %-8s ratio %s', name, value,
                        t and string.format('%.3f', t) or '-', unit,
                        ratio ~= cjson.null and string.format('%.2f', ratio) or '-'))
    print(cjson.encode(line))
  end

  report('add_overhead_nograd', bench_add(false), 'us/op', false)
  report('add_overhead_grad', bench_add(true), 'us/op', false)
  report('matmul_1024_f32', bench_matmul(1024), 'GFLOP/s', true)
  report('matmul_2048_f32', harness.matmul_peak('f32'), 'GFLOP/s', true)
  if cr.cpu_bf16_native() then report('matmul_2048_bf16', harness.matmul_peak('bf16'), 'GFLOP/s', true) end
  if cr.conv2d then
    for _, l in ipairs(CONV_LAYERS) do
      local ok, ms = pcall(bench_conv, l[2], l[3], l[4], l[5])
      if ok then
        report(l[1], ms, 'ms/iter', false)
      else
        print(string.format('%s: skipped, conv2d failed: %s', l[1], tostring(ms)))
      end
    end
  else
    print('conv2d: skipped, cr.conv2d is not available in this build yet')
  end
  for _, a in ipairs(ATTENTION_SHAPES) do
    report(a[1], bench_attention(a[2], a[3], a[4], a[5]), 'ms/iter', false)
    report(a[1] .. '_plain', bench_attention(a[2], a[3], a[4], a[5], true), 'ms/iter', false)   -- crescent only
  end
  local logsum, n = 0, 0
  for _, r in pairs(summary.ratios) do
    if r ~= cjson.null then logsum, n = logsum + math.log(r), n + 1 end
  end
  summary.ratio = n > 0 and math.exp(logsum / n) or cjson.null
  print(cjson.encode(summary))
end

main()
