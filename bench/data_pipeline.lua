-- bench/data_pipeline.lua — the data pipeline alone: augmented samples/s of
-- cr.data.transforms on batches of random u8 28x28 images (mc:apply(images, index, seed,
-- epoch), a new epoch each call so the draws change), at 1 thread and at all threads,
-- beside the batched torch augmentation of bench/ssl_swav_torch.py
-- (bench/data_pipeline_torch.py). Pipelines, with the SwAV recipe's per-crop ops (flip
-- 0.5, jitter p 0.8 brightness/contrast 0.4, blur p 0.5 sigma (0.1, 1), normalise):
--   swav_multicrop  2 x 28 px scale (0.25, 1) + 4 x 14 px scale (0.08, 0.25)
--   moco_two_views  2 x 28 px scale (0.2, 1)
-- Figures are medians of timed repeats after warm-up calls; "per core" = samples/s /
-- threads. Threads: env CRESCENT_THREADS, default the machine's core count.
--   luajit bench/data_pipeline.lua [batch=256] [repeats=7] [warmup=2]
-- Last line: {"bench": "data_pipeline", "unit": "samples/s", "results": [{pipeline,
-- threads, crescent, torch, ratio}, ...], ...}
--
-- source=jpeg [root=data/photos]: the streamed pipeline on JPEG photographs instead, from
-- file to augmented crops at ImageNet's sizes, beside torchvision + PIL in DataLoader
-- workers (bench/data_pipeline_jpeg.lua; the twin needs `make torchenv`, the folder
-- `build/torchenv/bin/python tools/make_photo_folder.py data/photos`):
--   luajit bench/data_pipeline.lua source=jpeg [root=data/photos] [batch=32] [batches=12] [decode_files=200]
package.path = 'lua/?.lua;lua/?/init.lua;' .. package.path
local cjson = require 'cjson'
local cr = require 'crescent'
package.path = 'bench/?.lua;' .. package.path
local harness = require 'harness'

local T = cr.data.transforms

-- source= and root= (words), then the numeric key=N arguments
local source, root, numeric = 'synthetic', 'data/photos', {}
for _, a in ipairs(arg or {}) do
  local k, v = a:match('^(%w+)=(.+)$')
  if k == 'source' then source = v elseif k == 'root' then root = v else numeric[#numeric + 1] = a end
end
if source ~= 'synthetic' and source ~= 'jpeg' then
  error("data_pipeline: source must be 'synthetic' or 'jpeg', got '" .. source .. "'", 0)
end

if source == 'jpeg' then
  local args = harness.args('bench/data_pipeline.lua source=jpeg', { { 'batch', 32 }, { 'batches', 12 },
                                                                     { 'decode_files', 200 } }, numeric)
  if args.batch < 1 or args.batches < 1 or args.decode_files < 1 then
    error('data_pipeline: batch, batches and decode_files must be >= 1', 0)
  end
  require('data_pipeline_jpeg')(root, args, harness.threads())
  return
end

local args = harness.args('bench/data_pipeline.lua', { { 'batch', 256 }, { 'repeats', 7 }, { 'warmup', 2 } },
                          numeric)
if args.batch < 1 or args.repeats < 1 then error('data_pipeline: batch and repeats must be >= 1', 0) end

local threads = harness.threads()

-- The per-crop ops of the SwAV recipe (a fresh table per pipeline).
local function crop_ops()
  return { flip = 0.5, color_jitter = { p = 0.8, brightness = 0.4, contrast = 0.4 },
           blur = { p = 0.5, sigma = { 0.1, 1 } }, mean = 0.2860, std = 0.3530 }
end

local pipelines = {
  { name = 'swav_multicrop', build = function()
    local o = crop_ops()
    o.size_crops, o.num_crops, o.crop_scales = { 28, 14 }, { 2, 4 }, { { 0.25, 1 }, { 0.08, 0.25 } }
    return T.multicrop(o)
  end },
  { name = 'moco_two_views', build = function()
    local o = crop_ops()
    o.size, o.scale = 28, { 0.2, 1 }
    return T.two_views(o)
  end },
}

local thread_counts = threads == 1 and { 1 } or { 1, threads }

cr.manual_seed(0)
local B = args.batch
local images = cr.randint(0, 256, { B, 28, 28 }, { dtype = 'u8' })
local index = cr.arange(0, B)

local crescent = {}
for _, p in ipairs(pipelines) do
  local mc = p.build()
  for _, t in ipairs(thread_counts) do
    cr.set_num_threads(t)
    local epoch = 0
    local sec = harness.median_time(function()
      epoch = epoch + 1
      mc:apply(images, index, 0, epoch)
    end, args.repeats, args.warmup)
    crescent[p.name .. '@' .. t] = B / sec
  end
end
cr.set_num_threads(threads)

local torch = harness.run_twin('bench/data_pipeline_torch.py', threads,
  string.format('--batch %d --repeats %d --warmup %d', B, args.repeats, args.warmup))

print(string.format('data pipeline, batch %d of random u8 28x28 images, median of %d (crescent %s)', B,
  args.repeats, cr.version))
local results = harness.ratio_table(pipelines, thread_counts, crescent, torch, 0)
print(cjson.encode { bench = 'data_pipeline', unit = 'samples/s', batch = B, threads = threads, results = results })
