-- crescent.data.transforms (cr.data.transforms) — the crops of self-supervised
-- training, built in C (csrc/data/augment.c): RandomResizedCrop, horizontal flip, colour
-- jitter, grayscale, gaussian blur, solarize and normalize, with torchvision's semantics,
-- and VISSL's multi-crop (ImgPilToMultiCrop). Every draw comes from Philox keyed by
-- (seed, epoch, sample index, crop index) (layout in csrc/include/crescent_data.h), so
-- the crops do not depend on the thread count or on the batch a sample lands in.
--
--   local T = cr.data.transforms
--   local mc = T.multicrop{
--     size_crops = {28, 14}, num_crops = {2, 4}, crop_scales = {{0.4, 1}, {0.1, 0.4}},
--     ratio = {3/4, 4/3},                         -- RandomResizedCrop's (the default)
--     flip = 0.5,
--     color_jitter = {p = 0.8, brightness = 0.4, contrast = 0.4, saturation = 0.4, hue = 0.1},
--     grayscale = 0.2, blur = {p = 0.5, sigma = {0.1, 2}},
--     solarize = 0,                               -- or {p = 0.2, threshold = 128}
--     mean = {0.2860}, std = {0.3530},            -- a number or one per channel; nil: the data set's
--     total_num_crops = 6, crops_for_assign = {0, 1},  -- optional, checked (0-based)
--   }
--   local crops = mc:apply(images_u8, index_i64, seed, epoch)  -- {f32 [B, C, 28, 28] x2, [B, C, 14, 14] x4}
--                                               -- images may also be f32 in [0, 1] (read as 255 x value)
--   local groups = mc:apply_groups(images_u8, index_i64, seed, epoch) -- {f32 [2B, C, 28, 28], [4B, C, 14, 14]}
--   local mv = T.two_views{size = 28, scale = {0.2, 1}, ...}       -- 2 global crops (MoCo, SimCLR)
--   cr.data.Loader(ds, {batch_size = 256, views = mc})   -- batch.input = the crops, batch.size = B
--
-- Defaults: ratio {3/4, 4/3}; every op off (flip/grayscale/solarize 0, no color_jitter,
-- no blur); inside color_jitter and blur tables p defaults to 1 (a factor of 0 or a
-- missing one turns that jitter op off, like torchvision's None); blur sigma {0.1, 2};
-- solarize threshold 128; mean 0 / std 1 unless given (the Loader passes the data set's).
-- Order of the ops per crop (fixed): crop + resize (+ flip), color jitter (its four ops
-- in a random order per crop), grayscale, blur, solarize, normalize. Crop k of a batch
-- uses crop index k (global crops first), so two specs sharing a seed still differ.
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local util = require 'crescent.util'

local M = {}

local KEYS = {
  size_crops = true, num_crops = true, crop_scales = true, total_num_crops = true, crops_for_assign = true,
  ratio = true, flip = true, color_jitter = true, grayscale = true, blur = true, solarize = true,
  mean = true, std = true,
}
local JITTER_KEYS = { p = true, brightness = true, contrast = true, saturation = true, hue = true }

local function fail(where, msg) error('transforms.' .. where .. ': ' .. msg, util.user_level()) end

local function is_num(v) return type(v) == 'number' and v == v end

local function check_keys(where, t, allowed, what)
  for k in pairs(t) do
    if not allowed[k] then
      fail(where, string.format("unknown %s '%s'; options are %s", what, tostring(k),
                                table.concat(util.sorted_keys(allowed), ', ')))
    end
  end
end

local function prob(where, name, v, default)
  if v == nil then return default end
  if not is_num(v) or v < 0 or v > 1 then
    fail(where, string.format('%s must be a probability in [0, 1], got %s', name, tostring(v)))
  end
  return v
end

local function range(where, name, v, lo_ok, hi_max)
  if type(v) ~= 'table' or #v ~= 2 or not is_num(v[1]) or not is_num(v[2]) then
    fail(where, string.format('%s must be a pair {lo, hi}, got %s', name, tostring(v)))
  end
  if not lo_ok(v[1]) or v[1] > v[2] or (hi_max and v[2] > hi_max) then
    fail(where, string.format('%s {%g, %g} is out of range: need %s', name, v[1], v[2],
      hi_max and ('0 < lo <= hi <= ' .. hi_max) or '0 < lo <= hi'))
  end
  return v
end
local function positive(x) return x > 0 end

-- Per-channel mean/std: nil, a number or a list of 1 or 3 numbers.
local function stats(where, name, v)
  if v == nil or is_num(v) then return v end
  if type(v) ~= 'table' or (#v ~= 1 and #v ~= 3) then
    fail(where, name .. ' must be a number or a list of 1 or 3 numbers (one per channel)')
  end
  for i = 1, #v do
    if not is_num(v[i]) then fail(where, name .. '[' .. i .. '] is not a number') end
  end
  return v
end

-- The per-crop transform options -> the fields of a cr_data_crop_spec (all but sizes).
local function parse_ops(where, o)
  local ops = { ratio = range(where, 'ratio', o.ratio or { 3 / 4, 4 / 3 }, positive) }
  ops.flip = prob(where, 'flip', o.flip, 0)
  local cj = o.color_jitter
  if cj == nil or cj == false then cj = { p = 0 } end
  if type(cj) ~= 'table' then fail(where, 'color_jitter must be a table {p =, brightness =, contrast =, saturation =, hue =}') end
  check_keys(where, cj, JITTER_KEYS, 'color_jitter option')
  ops.jitter_p = prob(where, 'color_jitter.p', cj.p, 1)
  for _, k in ipairs { 'brightness', 'contrast', 'saturation', 'hue' } do
    local v = cj[k] or 0
    if not is_num(v) or v < 0 or (k == 'hue' and v > 0.5) then
      fail(where, string.format('color_jitter.%s must be a number in [0, %s], got %s', k,
        k == 'hue' and '0.5' or 'inf)', tostring(cj[k])))
    end
    ops[k] = v
  end
  ops.gray_p = prob(where, 'grayscale', o.grayscale, 0)
  local bl = o.blur
  if bl == nil or bl == false then bl = { p = 0 } end
  if type(bl) ~= 'table' then fail(where, 'blur must be a table {p =, sigma = {lo, hi}}') end
  check_keys(where, bl, { p = true, sigma = true }, 'blur option')
  ops.blur_p = prob(where, 'blur.p', bl.p, 1)
  ops.sigma = range(where, 'blur.sigma', bl.sigma or { 0.1, 2 }, positive, 40)
  local so = o.solarize
  if so == nil or so == false then so = 0 end
  if type(so) == 'number' then so = { p = so } end
  if type(so) ~= 'table' then fail(where, 'solarize must be a probability or {p =, threshold =}') end
  check_keys(where, so, { p = true, threshold = true }, 'solarize option')
  ops.solarize_p = prob(where, 'solarize.p', so.p, 1)
  ops.threshold = so.threshold or 128
  if not is_num(ops.threshold) then fail(where, 'solarize.threshold must be a number') end
  ops.mean, ops.std = stats(where, 'mean', o.mean), stats(where, 'std', o.std)
  return ops
end

local MultiCrop = {}
MultiCrop.__index = MultiCrop

local function build(where, o)
  if type(o) ~= 'table' then fail(where, 'expected an options table') end
  check_keys(where, o, KEYS, 'option')
  local sizes, nums, scales = o.size_crops, o.num_crops, o.crop_scales
  for _, p in ipairs { { 'size_crops', sizes }, { 'num_crops', nums }, { 'crop_scales', scales } } do
    if type(p[2]) ~= 'table' or #p[2] == 0 then
      fail(where, p[1] .. ' must be a non-empty list, got ' .. (type(p[2]) == 'table' and 'an empty list' or tostring(p[2])))
    end
  end
  if #sizes ~= #nums or #sizes ~= #scales then
    fail(where, string.format('size_crops, num_crops and crop_scales must have the same length, got %d, %d and %d',
      #sizes, #nums, #scales))
  end
  local self = setmetatable({ groups = {}, total = 0 }, MultiCrop)
  self.ops = parse_ops(where, o)
  for g = 1, #sizes do
    local s, n = sizes[g], nums[g]
    local sh, sw
    if type(s) == 'table' then sh, sw = s[1], s[2] else sh, sw = s, s end
    for _, v in ipairs { sh, sw } do
      if not is_num(v) or v ~= math.floor(v) or v < 1 then
        fail(where, string.format('size_crops[%d] must be a positive integer (or {h, w}), got %s', g, tostring(v)))
      end
    end
    if not is_num(n) or n ~= math.floor(n) or n < 1 then
      fail(where, string.format('num_crops[%d] must be a positive integer, got %s', g, tostring(n)))
    end
    local sc = scales[g]
    if type(sc) ~= 'table' or #sc ~= 2 or not is_num(sc[1]) or not is_num(sc[2]) then
      fail(where, string.format('crop_scales[%d] must be a pair {lo, hi}, got %s', g, tostring(sc)))
    end
    if not (sc[1] > 0 and sc[1] <= sc[2] and sc[2] <= 1) then
      fail(where, string.format('crop_scales[%d] = {%g, %g} must satisfy 0 < lo <= hi <= 1 (fractions of the image area)',
        g, sc[1], sc[2]))
    end
    self.groups[g] = { h = sh, w = sw, n = n, scale = sc, first = self.total }
    self.total = self.total + n
  end
  if o.total_num_crops ~= nil and o.total_num_crops ~= self.total then
    fail(where, string.format('total_num_crops = %s but num_crops sums to %d', tostring(o.total_num_crops), self.total))
  end
  if o.crops_for_assign ~= nil then
    local cfa = o.crops_for_assign
    if type(cfa) ~= 'table' or #cfa == 0 then fail(where, 'crops_for_assign must be a non-empty list of crop indices') end
    for i, v in ipairs(cfa) do
      if not is_num(v) or v ~= math.floor(v) or v < 0 or v >= self.total then
        fail(where, string.format('crops_for_assign[%d] = %s is not a crop index in [0, %d) (0-based, global crops first)',
          i, tostring(v), self.total))
      end
    end
    self.crops_for_assign = cfa
  end
  self.num_crops = self.total
  self.mean, self.std = self.ops.mean, self.ops.std
  return self
end

function M.multicrop(o)
  local mc = build('multicrop', o)   -- not a tail call: errors name the caller's line
  return mc
end

-- Two global crops of one size (MoCo v2, SimCLR): {size =, scale = {lo, hi}} plus the
-- transform options of multicrop.
function M.two_views(o)
  if type(o) ~= 'table' then fail('two_views', 'expected an options table') end
  local m = {}
  for k, v in pairs(o) do
    if k ~= 'size' and k ~= 'scale' then m[k] = v end
  end
  if o.size == nil then fail('two_views', 'size is required (the crop side, e.g. 28)') end
  m.size_crops, m.num_crops, m.crop_scales = { o.size }, { 2 }, { o.scale or { 0.2, 1 } }
  local mc = build('two_views', m)
  return mc
end

local tensor_ptr_ct = ffi.typeof('cr_tensor*')
local function is_tensor(x) return type(x) == 'cdata' and ffi.istype(tensor_ptr_ct, x) end

-- Fills a cr_data_crop_spec for group g and nchan channels.
function MultiCrop:_spec(g, nchan, fallback)
  local ops, grp = self.ops, self.groups[g]
  local s = ffi.new('cr_data_crop_spec')
  s.size_h, s.size_w = grp.h, grp.w
  s.scale_lo, s.scale_hi = grp.scale[1], grp.scale[2]
  s.ratio_lo, s.ratio_hi = ops.ratio[1], ops.ratio[2]
  s.flip_p, s.jitter_p = ops.flip, ops.jitter_p
  s.brightness, s.contrast, s.saturation, s.hue = ops.brightness, ops.contrast, ops.saturation, ops.hue
  s.gray_p, s.blur_p = ops.gray_p, ops.blur_p
  s.blur_sigma_lo, s.blur_sigma_hi = ops.sigma[1], ops.sigma[2]
  s.solarize_p, s.solarize_threshold = ops.solarize_p, ops.threshold
  for _, pair in ipairs { { 'mean', 0 }, { 'std', 1 } } do
    local name = pair[1]
    local v = self[name]
    if v == nil and fallback then v = fallback[name] end
    if v == nil then v = pair[2] end
    for c = 0, nchan - 1 do
      local x = v
      if type(v) == 'table' then
        if #v ~= nchan and #v ~= 1 then
          fail('apply', string.format('%s has %d values but the images have %d channel(s)', name, #v, nchan))
        end
        x = v[#v == 1 and 1 or c + 1]
      end
      s[name][c] = x
    end
  end
  return s
end

local function check_inputs(images, index, seed, epoch)
  if not is_tensor(images) then
    fail('apply', 'images must be a u8 (0..255) or f32 (0..1) tensor [N, H, W] or [N, C, H, W]')
  end
  if not is_tensor(index) then fail('apply', 'index must be an i64 tensor [B] of sample indices') end
  for _, p in ipairs { { 'seed', seed }, { 'epoch', epoch } } do
    local v = p[2]
    if not is_num(v) or v ~= math.floor(v) or v < 0 then
      fail('apply', p[1] .. ' must be a non-negative integer, got ' .. tostring(v))
    end
  end
end

-- One f32 tensor [n_g, B, C, h, w] per group (one C call each).
function MultiCrop:_run(images, index, seed, epoch, fallback)
  check_inputs(images, index, seed, epoch)
  local nchan = images:dim() == 4 and images:size(1) or 1
  local box, out = util.box, {}
  for g, grp in ipairs(self.groups) do
    local spec = self:_spec(g, nchan, fallback)
    util.retry(C.cr_data_augment_crops(box, images, index, spec, grp.n, grp.first, seed, epoch),
      C.cr_data_augment_crops, box, images, index, spec, grp.n, grp.first, seed, epoch)
    out[g] = util.own(box[0])
  end
  return out
end

-- The crops of the group tensors [n_g, B, C, h, w] as one list (the Loader's workers
-- build the group tensors in C and split them here).
function MultiCrop._crops(_, groups)
  local crops = {}
  for _, t in ipairs(groups) do
    for k = 0, t:size(0) - 1 do crops[#crops + 1] = t:select(0, k) end
  end
  return crops
end

-- A Lua array of total_num_crops f32 tensors [B, C, h, w], global crops first.
-- fallback = {mean =, std =} is used where the spec has none (the Loader passes the data set's).
function MultiCrop:apply(images, index, seed, epoch, fallback)
  return self:_crops(self:_run(images, index, seed, epoch, fallback))
end

-- One f32 tensor [n_g * B, C, h, w] per crop size: the crops of a group concatenated
-- (crop-major), as a multi-resolution forward wants them.
function MultiCrop:apply_groups(images, index, seed, epoch, fallback)
  local out = self:_run(images, index, seed, epoch, fallback)
  for g, t in ipairs(out) do
    local sh = t.shape
    out[g] = t:view(sh[1] * sh[2], sh[3], sh[4], sh[5])
  end
  return out
end

-- The draws of crop `crop` of sample `index` for an image of h x w (a table, for tests
-- and for looking at a pipeline).
function MultiCrop:draw(h, w, seed, epoch, index, crop)
  local g = #self.groups
  for i, grp in ipairs(self.groups) do
    if crop < grp.first + grp.n then g = i break end
  end
  local d = ffi.new('cr_data_crop_draw')
  util.check(C.cr_data_augment_draw(d, self:_spec(g, 0), h, w, seed, epoch, index, crop))
  return {
    top = tonumber(d.top), left = tonumber(d.left), height = tonumber(d.height), width = tonumber(d.width),
    flip = d.flip ~= 0, jitter = d.jitter ~= 0, gray = d.gray ~= 0, blur = d.blur ~= 0, solarize = d.solarize ~= 0,
    order = { d.order[0], d.order[1], d.order[2], d.order[3] },
    brightness = d.brightness, contrast = d.contrast, saturation = d.saturation, hue = d.hue,
    sigma = d.sigma, ksize = tonumber(d.ksize),
  }
end

function MultiCrop:__tostring()
  local parts = {}
  for _, g in ipairs(self.groups) do
    parts[#parts + 1] = string.format('%dx%dx%d scale {%g, %g}', g.n, g.h, g.w, g.scale[1], g.scale[2])
  end
  return 'multicrop{' .. table.concat(parts, ', ') .. '}'
end

M.MultiCrop = MultiCrop
return M
