-- bench/data_pipeline_jpeg.lua — `luajit bench/data_pipeline.lua source=jpeg`: the
-- streamed input pipeline on a folder of JPEG photographs (tools/make_photo_folder.py),
-- beside bench/data_pipeline_jpeg_torch.py (torchvision transforms on PIL images in
-- DataLoader workers, as SwAV's and MoCo's own code do). Each side reads, decodes and
-- augments every sample of its batches in its loader's workers:
--   swav_multicrop   2 x 224 px scale (0.14, 1) + 6 x 96 px scale (0.05, 0.14); flip 0.5,
--                    colour jitter p 0.8 (0.8, 0.8, 0.8, 0.2), grayscale 0.2, blur p 0.5
--                    sigma (0.1, 2) (SwAV's main_swav.py)
--   moco_two_views   2 x 224 px scale (0.2, 1); flip 0.5, jitter p 0.8 (0.4, 0.4, 0.4,
--                    0.1), grayscale 0.2, blur p 0.5 sigma (0.1, 2) (MoCo v2's aug_plus)
-- at 1 thread (one worker) and at all threads (a worker per thread), in samples/s and per
-- core; then the decode alone, one thread: crescent's (libturbojpeg, the whole image)
-- against PIL's; then how far a reduced-DCT decode could shrink each sample's decode.
-- Both sides time their first batches from the start of the epoch (worker
-- start-up included, as a training epoch pays it); the loaders shuffle.
local cjson = require 'cjson'
local cr = require 'crescent'
local harness = require 'harness'

local T = cr.data.transforms
local MEAN, STD = { 0.485, 0.456, 0.406 }, { 0.229, 0.224, 0.225 }

local function swav()
  return T.multicrop { size_crops = { 224, 96 }, num_crops = { 2, 6 }, crop_scales = { { 0.14, 1 }, { 0.05, 0.14 } },
                       flip = 0.5, color_jitter = { p = 0.8, brightness = 0.8, contrast = 0.8, saturation = 0.8, hue = 0.2 },
                       grayscale = 0.2, blur = { p = 0.5, sigma = { 0.1, 2 } }, mean = MEAN, std = STD }
end

local function moco()
  return T.two_views { size = 224, scale = { 0.2, 1 }, flip = 0.5,
                       color_jitter = { p = 0.8, brightness = 0.4, contrast = 0.4, saturation = 0.4, hue = 0.1 },
                       grayscale = 0.2, blur = { p = 0.5, sigma = { 0.1, 2 } }, mean = MEAN, std = STD }
end

local PIPELINES = { { name = 'swav_multicrop', build = swav, sizes = { 224, 224, 96, 96, 96, 96, 96, 96 } },
                    { name = 'moco_two_views', build = moco, sizes = { 224, 224 } } }

-- samples/s of the first `batches` batches of B with `workers` threads, timed from the
-- start of the epoch (with workers, batches built ahead into the ring would flatter a
-- clock started later; the start-up is amortised over the batches)
local function loader_rate(ds, views, B, batches, workers)
  local loader = cr.data.Loader(ds, { batch_size = B, shuffle = true, drop_last = true, seed = 0, views = views,
                                      workers = workers })
  local got, t0 = 0, harness.now()
  for _ in loader:iter(0) do
    got = got + 1
    if got == batches then break end
  end
  local sec = harness.now() - t0
  loader:close()
  if got < batches then
    error(string.format('data_pipeline: the folder holds fewer than %d batches of %d', batches, B), 0)
  end
  return batches * B / sec
end

-- files/s of decoding n of the files whole (spread over the classes), on this thread,
-- after one untimed pass (so that both sides read them from the page cache)
local function decode_rate(paths, n)
  local step = math.max(1, math.floor(#paths / n))
  for i = 1, n do cr.data.images.read(paths[1 + (i - 1) * step]) end
  local t0 = harness.now()
  for i = 1, n do cr.data.images.read(paths[1 + (i - 1) * step]) end
  return n / (harness.now() - t0)
end

-- How far a reduced-DCT decode could go: per sample (every 4th file), the smallest of
-- libjpeg-turbo's scales k/8 at which no crop of the sample would be upsampled; the
-- share of samples at each k, as '8/8 85.4%, 7/8 8.1%, ...'.
local function dct_scales(paths, views, sizes)
  local count, n = {}, 0
  for i = 1, #paths, 4 do
    local info = cr.data.images.probe(paths[i])
    local need = 0
    for c = 1, #sizes do
      local d = views:draw(info.height, info.width, 0, 0, i - 1, c - 1)
      need = math.max(need, sizes[c] / d.width, sizes[c] / d.height)
    end
    local k = math.max(1, math.min(8, math.ceil(8 * need - 1e-9)))
    count[k], n = (count[k] or 0) + 1, n + 1
  end
  local parts = {}
  for k = 8, 1, -1 do
    if count[k] then parts[#parts + 1] = string.format('%d/8 %.1f%%', k, 100 * count[k] / n) end
  end
  return table.concat(parts, ', ')
end

return function(root, args, threads)
  local folder = root .. '/train'
  local ds = cr.data.image_folder { root = folder, stream = true }
  local bytes, n_probe = 0, math.min(#ds.paths, 200)
  for i = 1, n_probe do
    local f = assert(io.open(ds.paths[i], 'rb'))
    bytes = bytes + f:seek('end')
    f:close()
  end
  local B, batches = args.batch, args.batches
  local thread_counts = threads == 1 and { 1 } or { 1, threads }
  local c = {}
  cr.set_num_threads(1) -- the loader's workers are the threads here
  for _, p in ipairs(PIPELINES) do
    for _, t in ipairs(thread_counts) do c[p.name .. '@' .. t] = loader_rate(ds, p.build(), B, batches, t) end
  end
  c.decode = decode_rate(ds.paths, math.min(#ds.paths, args.decode_files))
  cr.set_num_threads(threads)

  local py = os.getenv('CRESCENT_TORCH_PYTHON') or 'build/torchenv/bin/python'
  local torch = harness.run_twin('bench/data_pipeline_jpeg_torch.py', threads,
    string.format("--root '%s' --batch %d --batches %d --decode-files %d", folder, B, batches, args.decode_files), py)

  local function fmt(v, pattern) return v and string.format(pattern, v) or '-' end
  print(string.format('data pipeline on %d JPEG photographs in %s (%.0f KB a file), batch %d, %d batches timed ' ..
    '(crescent %s; twin: torchvision + PIL in DataLoader workers, %s)', #ds.paths, folder, bytes / n_probe / 1e3, B,
    batches, cr.version, py))
  local results = harness.ratio_table(PIPELINES, thread_counts, c, torch, 1)
  local td = torch.decode
  print(string.format('decode alone, 1 thread, files/s: crescent (libturbojpeg) %.1f, PIL %s, ratio %s', c.decode,
    fmt(td, '%.1f'), fmt(td and c.decode / td, '%.2f')))
  for _, p in ipairs(PIPELINES) do
    print(string.format('%s: the decode scales its samples allow (reduced DCT, no crop upsampled): %s', p.name,
      dct_scales(ds.paths, p.build(), p.sizes)))
  end
  print(cjson.encode { bench = 'data_pipeline', source = 'jpeg', unit = 'samples/s', batch = B, threads = threads,
                       results = results, decode = { crescent = c.decode, torch = td or cjson.null } })
end
