-- crescent.data.synthetic — a deterministic, learnable image data set for tests and
-- benchmarks that need no download:
--
--   cr.data.synthetic{n = 1024, shape = {3, 32, 32}, num_classes = 10, seed = 0, noise = 24}
--
-- gives a Dataset like Fashion-MNIST's (images u8 [n, C, H, W], or [n, H, W] for a shape
-- {H, W}; labels i64 [n]; mean/std per channel measured on the images), usable with
-- cr.data.Loader. Sample i has label i % num_classes (balanced, so any prefix is too).
-- Each class has its own colour (a per-channel offset, spread evenly over the classes)
-- and its own oriented cosine grating; each sample shifts the grating's phase and its
-- brightness, and adds per-pixel noise. A nearest-class-mean classifier separates the
-- classes (the spec checks it); a convnet does better.
--
-- Colour of class k, channel c: with C >= 2, 80 cos(2 pi (k / K + c / max(C, 3))) (for
-- RGB a circle of hues around grey); with C = 1, -80 + 160 k / (K - 1) (0 when K = 1).
-- Word layout (Philox4x32-10 through cr_rng_philox_words, key = seed XOR 0x53796e7468657431
-- = ASCII "Synthet1"; "words at counter c" = the words of counters c, c+1, ...):
--   class k: the 4 words of counter 2^62 + k: w[0] -> orientation theta = pi w / 2^32;
--            w[1] -> frequency f = 1 + (w >> 30) cycles over max(H, W).
--   sample i: the 4 + C H W words at counter i 2^20: w[0] -> phase = 2 pi w / 2^32;
--            w[1] -> brightness 4 (w >> 24 - 127.5) / 127.5; w[4 + (c H + y) W + x] ->
--            noise (w >> 24 - 127.5) / 127.5 * noise for pixel (c, y, x).
--   pixel = clamp(floor(128 + colour[c] + brightness + 40 cos(2 pi f (x cos theta +
--            y sin theta) / max(H, W) + phase) + noise_term + 0.5), 0, 255).
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local util = require 'crescent.util'
local dataset = require 'crescent.data.dataset'

local TAG = 0x53796e7468657431ULL
local CLASS_BASE = 0x4000000000000000ULL   -- 2^62
local OPTS = { n = true, shape = true, num_classes = true, seed = true, noise = true }
local MAX_WORDS = 4 * 2 ^ 20 - 4   -- one sample's counters: 2^20

local function is_count(v, min) return type(v) == 'number' and v == math.floor(v) and v >= min end

return function(opts)
  opts = opts or {}
  if type(opts) ~= 'table' then error('synthetic: expected an options table', 2) end
  for k in pairs(opts) do
    if not OPTS[k] then
      error("synthetic: unknown option '" .. tostring(k) .. "'; options are n, noise, num_classes, seed, shape", 2)
    end
  end
  local n, K, seed, noise = opts.n or 1024, opts.num_classes or 10, opts.seed or 0, opts.noise or 24
  local shape = opts.shape or { 3, 32, 32 }
  if not is_count(n, 0) then error('synthetic: n must be a non-negative integer, got ' .. tostring(n), 2) end
  if not is_count(K, 1) then error('synthetic: num_classes must be a positive integer, got ' .. tostring(K), 2) end
  if not is_count(seed, 0) then error('synthetic: seed must be a non-negative integer, got ' .. tostring(seed), 2) end
  if type(noise) ~= 'number' or noise < 0 or noise ~= noise then
    error('synthetic: noise must be a number >= 0, got ' .. tostring(noise), 2)
  end
  if type(shape) ~= 'table' or (#shape ~= 2 and #shape ~= 3) then
    error('synthetic: shape must be {C, H, W} or {H, W}', 2)
  end
  for i = 1, #shape do
    if not is_count(shape[i], 1) then error('synthetic: shape sizes must be positive integers', 2) end
  end
  local nc = #shape == 3 and shape[1] or 1
  local H, W = shape[#shape - 1], shape[#shape]
  local plane = H * W
  local npix = nc * plane
  if npix > MAX_WORDS then error('synthetic: at most ' .. MAX_WORDS .. ' pixels per image, got ' .. npix, 2) end

  local key = bit.bxor(ffi.cast('uint64_t', seed), TAG)
  local cw = ffi.new('uint32_t[4]')
  local colour, fx, fy = {}, {}, {}
  local S = math.max(H, W)
  for k = 0, K - 1 do
    C.cr_rng_philox_words(cw, 4, key, CLASS_BASE + k)
    local col = {}
    for c = 0, nc - 1 do
      if nc >= 2 then
        col[c] = 80 * math.cos(2 * math.pi * (k / K + c / math.max(nc, 3)))
      else
        col[c] = K > 1 and -80 + 160 * k / (K - 1) or 0
      end
    end
    colour[k] = col
    local theta = math.pi * cw[0] / 2 ^ 32
    local f = 1 + bit.rshift(cw[1], 30)
    fx[k], fy[k] = 2 * math.pi * f * math.cos(theta) / S, 2 * math.pi * f * math.sin(theta) / S
  end

  local dims = #shape == 3 and { n, nc, H, W } or { n, H, W }
  local box = util.box
  local sh = ffi.new('int64_t[4]', dims)
  util.check(C.cr_tensor_empty(box, #dims, sh, C.CR_DT_U8, C.CR_DEV_CPU, 0))
  local images = util.own(box[0])
  local px = ffi.cast('uint8_t *', images:data_ptr())
  local lab = {}
  local w = ffi.new('uint32_t[?]', 4 + npix)
  local wave = ffi.new('double[?]', plane)
  local sum, sumsq = {}, {}
  for c = 0, nc - 1 do sum[c], sumsq[c] = 0, 0 end
  local floor = math.floor
  for i = 0, n - 1 do
    local k = i % K
    lab[i + 1] = k
    C.cr_rng_philox_words(w, 4 + npix, key, i * 2 ^ 20)
    local phase = 2 * math.pi * w[0] / 2 ^ 32
    local bright = 4 * (bit.rshift(w[1], 24) - 127.5) / 127.5
    local ax, ay = fx[k], fy[k]
    for y = 0, H - 1 do
      for x = 0, W - 1 do wave[y * W + x] = 40 * math.cos(ax * x + ay * y + phase) end
    end
    local col = colour[k]
    local base = i * npix
    for c = 0, nc - 1 do
      local off = 128 + col[c] + bright
      local s, s2 = 0, 0
      for p = 0, plane - 1 do
        local q = c * plane + p
        local v = floor(off + wave[p] + noise * (bit.rshift(w[4 + q], 24) - 127.5) / 127.5 + 0.5)
        if v < 0 then v = 0 elseif v > 255 then v = 255 end
        px[base + q] = v
        s, s2 = s + v, s2 + v * v
      end
      sum[c], sumsq[c] = sum[c] + s, sumsq[c] + s2
    end
  end
  local mean, std = {}, {}
  local count = math.max(n * plane, 1)
  for c = 0, nc - 1 do
    local m = sum[c] / count
    mean[c + 1] = m / 255
    std[c + 1] = math.max(math.sqrt(math.max(sumsq[c] / count - m * m, 0)) / 255, 1e-3)
  end
  local labels
  if n > 0 then
    util.check(C.cr_tensor_from_data(box, ffi.new('int64_t[?]', n, lab), 1, ffi.new('int64_t[1]', n), C.CR_DT_I64))
  else
    util.check(C.cr_tensor_empty(box, 1, ffi.new('int64_t[1]', 0), C.CR_DT_I64, C.CR_DEV_CPU, 0))
  end
  labels = util.own(box[0])
  local classes = {}
  for k = 1, K do classes[k] = 'class ' .. (k - 1) end
  return dataset.TensorDataset {
    images = images, labels = labels, mean = #shape == 3 and mean or mean[1], std = #shape == 3 and std or std[1],
    num_classes = K, name = 'synthetic', classes = classes, split = 'train',
  }
end
