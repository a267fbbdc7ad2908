-- crescent.data.dataset — the IDX reader, in-memory u8 image data sets and streamed
-- image-file data sets (what the Loader assembles batches from). Fashion-MNIST builds an
-- in-memory one, as can any caller holding images as a u8 tensor; image_folder{stream =
-- true} a streamed one, whose files the Loader's workers decode.
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local util = require 'crescent.util'

local M = {}

-- Reads an IDX file (.gz or plain): u8 [N, 28, 28] images, u8 [N] labels, or any other
-- IDX type/shape (i8/i16/i32 -> i32, f32, f64).
function M.read_idx(path)
  if type(path) ~= 'string' then
    error('read_idx: expected a file name, got ' .. type(path), 2)
  end
  local box = util.box
  if C.cr_data_read_idx(box, path) ~= 0 then util.raise() end
  return util.own(box[0])
end

-- A data set of u8 images held in memory: images [N, H, W] or [N, C, H, W], labels i64
-- [N] (or nil), mean/std (a number, or one per channel), num_classes and a name.
-- A data set is a userdata proxy, not a table: LuaJIT (Lua 5.1 semantics) ignores
-- __len on tables, and `#ds` must give the number of samples. Fields live in a table
-- behind it; reading and writing ds.field work as on a table.
local Dataset = {}   -- methods
local fields = setmetatable({}, { __mode = 'k' })
local proto = newproxy(true)
local mt = getmetatable(proto)
mt.__index = function(p, k)
  local v = fields[p][k]
  if v ~= nil then return v end
  return Dataset[k]
end
mt.__newindex = function(p, k, v) fields[p][k] = v end
mt.__len = function(p) return fields[p].n end
mt.__tostring = function(p)
  local ds = fields[p]
  if ds.streamed then
    return string.format('%s: %d image files (streamed, %d channels), %s classes', ds.name, ds.n, ds.channels,
      tostring(ds.num_classes))
  end
  return string.format('%s: %d images [%s], %s classes', ds.name, ds.n,
    table.concat(ds.images.shape, ', ', 2), tostring(ds.num_classes))
end
M.Dataset = Dataset

function M.is_dataset(x) return type(x) == 'userdata' and fields[x] ~= nil end

local function wrap(t)
  local p = newproxy(proto)
  fields[p] = t
  return p
end

local tensor_ptr_ct = ffi.typeof('cr_tensor*') -- made once: see tensor.lua on C type strings
local function is_tensor(x) return type(x) == 'cdata' and ffi.istype(tensor_ptr_ct, x) end

-- mean/std as one number per channel.
local function per_channel(v, what, default, nchan, who)
  if v == nil then v = default end
  if type(v) == 'number' then
    local t = {}
    for c = 1, nchan do t[c] = v end
    return t
  end
  if type(v) ~= 'table' or #v ~= nchan then
    error(string.format('%s: %s must be a number or a list of %d numbers (one per channel)', who, what, nchan), 4)
  end
  return v
end

function M.TensorDataset(o)
  if type(o) ~= 'table' then error('TensorDataset: expected a table {images = , labels = , ...}', 2) end
  local images, labels = o.images, o.labels
  if not is_tensor(images) or images.dtype ~= 'u8' or (images:dim() ~= 3 and images:dim() ~= 4) then
    error('TensorDataset: images must be a u8 tensor [N, H, W] or [N, C, H, W], got ' ..
      (is_tensor(images) and (images.dtype .. ' [' .. table.concat(images.shape, ', ') .. ']') or type(images)), 2)
  end
  if not images:is_contiguous() then images = images:contiguous() end   -- C gathers whole rows
  local n = images:size(0)
  if labels ~= nil then
    if not is_tensor(labels) or labels:dim() ~= 1 or labels:size(0) ~= n then
      error(string.format('TensorDataset: labels must be a tensor [%d] (one per image)', n), 2)
    end
    if labels.dtype ~= 'i64' then labels = labels:long() end
  end
  local nchan = images:dim() == 4 and images:size(1) or 1
  local ds = wrap {
    images = images, labels = labels, n = n,
    mean = o.mean or 0, std = o.std or 1,
    num_classes = o.num_classes, name = o.name or 'tensors',
    classes = o.classes, split = o.split, root = o.root,
  }
  ds._mean = per_channel(o.mean, 'mean', 0, nchan, 'TensorDataset')
  ds._std = per_channel(o.std, 'std', 1, nchan, 'TensorDataset')
  return ds
end

-- The usual normalisation of photographs with nc channels: ImageNet's per-channel mean
-- and std (torchvision's Normalize) for RGB, their grey equivalents for one channel;
-- mean and std given win.
local IMAGENET_MEAN, IMAGENET_STD = { 0.485, 0.456, 0.406 }, { 0.229, 0.224, 0.225 }
function M.photo_stats(nc, mean, std)
  if mean == nil then mean = nc == 3 and IMAGENET_MEAN or 0.449 end
  if std == nil then std = nc == 3 and IMAGENET_STD or 0.226 end
  return mean, std
end

-- The C path table (csrc/data/paths.c) of a list of file names, or of archive members
-- {files =, names =, offsets =, lengths =} (lists as long as paths).
local function path_table(paths, members)
  local box, n = ffi.new('cr_data_paths*[1]'), #paths
  if members then
    local m = members
    util.check(C.cr_data_paths_new_members(box, ffi.new('const char *[?]', n, m.files), ffi.new('const char *[?]', n, m.names),
      ffi.new('int64_t[?]', n, m.offsets), ffi.new('int64_t[?]', n, m.lengths), n))
  else
    util.check(C.cr_data_paths_new(box, ffi.new('const char *[?]', n, paths), n))
  end
  return ffi.gc(box[0], C.cr_data_paths_free)
end

-- A data set of image files that are read when batched: nothing is decoded here, and
-- memory holds the paths only. The Loader's worker threads decode each sample's file
-- (JPEG or PNG, csrc/data/pipeline.c) to `channels` channels: crops (multi-crop views)
-- are cut from the image at its own size, plain batches resize it to size = {h, w}.
--   StreamedDataset{paths = {...}, labels = i64 [N] | nil, channels = 3, size = {h, w} | nil,
--                   mean =, std =, num_classes =, name =, classes =, root =,
--                   skip_bad = false, warn = function(msg), members = nil, shuffle_buffer = 0}
-- members = {files =, names =, offsets =, lengths =}: the samples are archive members (tar
-- shards), sample i the lengths[i] bytes at offsets[i] of files[i]; paths then name them.
-- shuffle_buffer = N > 0 (members only): the Loader reads each archive front to back and
-- orders an epoch through a shuffle buffer of N samples (crescent.data.shard_order)
-- instead of a full shuffle with a read per sample.
-- skip_bad: a file that does not decode is replaced by the next readable one (the rows
-- after it, wrapping round; its label goes with it, the draws stay keyed by the row),
-- and the Loader warns (warn, default: stderr) after each epoch; else it stops the loader.
function M.StreamedDataset(o)
  if type(o) ~= 'table' then error('StreamedDataset: expected a table {paths = , labels = , ...}', 2) end
  local paths, labels = o.paths, o.labels
  if type(paths) ~= 'table' or #paths == 0 then
    error('StreamedDataset: paths must be a non-empty list of file names', 2)
  end
  for i, pth in ipairs(paths) do
    if type(pth) ~= 'string' then error(string.format('StreamedDataset: paths[%d] is a %s, not a file name', i, type(pth)), 2) end
  end
  local n = #paths
  if labels ~= nil then
    if not is_tensor(labels) or labels:dim() ~= 1 or labels:size(0) ~= n then
      error(string.format('StreamedDataset: labels must be a tensor [%d] (one per file)', n), 2)
    end
    if labels.dtype ~= 'i64' then labels = labels:long() end
  end
  local nchan = o.channels or 3
  if nchan ~= 1 and nchan ~= 3 then error('StreamedDataset: channels must be 1 or 3, got ' .. tostring(nchan), 2) end
  local size = o.size
  if size ~= nil and (type(size) ~= 'table' or #size ~= 2) then
    error('StreamedDataset: size must be {height, width} (what plain batches resize to) or nil', 2)
  end
  local m = o.members
  if m ~= nil then
    for _, k in ipairs({ 'files', 'names', 'offsets', 'lengths' }) do
      if type(m[k]) ~= 'table' or #m[k] ~= n then
        error(string.format('StreamedDataset: members.%s must list %d entries (one per path)', k, n), 2)
      end
    end
  end
  local buffer = o.shuffle_buffer or 0
  if type(buffer) ~= 'number' or buffer ~= math.floor(buffer) or buffer < 0 or buffer >= 2 ^ 32 then
    error('StreamedDataset: shuffle_buffer must be an integer in [0, 2^32) (samples; 0: a full shuffle), got ' ..
      tostring(buffer), 2)
  end
  if buffer > 0 and m == nil then
    error('StreamedDataset: shuffle_buffer orders sequential reads of archive members (tar shards); these are ' ..
      'files, read one by one in any order: leave it 0', 2)
  end
  local ds = wrap {
    streamed = true, paths = paths, members = m, _paths = path_table(paths, m), labels = labels, n = n,
    channels = nchan, size = size, mean = o.mean or 0, std = o.std or 1,
    num_classes = o.num_classes, name = o.name or 'files',
    classes = o.classes, split = o.split, root = o.root, skip_bad = o.skip_bad == true, warn = o.warn,
    shuffle_buffer = buffer,
  }
  ds._mean = per_channel(o.mean, 'mean', 0, nchan, 'StreamedDataset')
  ds._std = per_channel(o.std, 'std', 1, nchan, 'StreamedDataset')
  return ds
end

-- A copy of the data set's fields holding only the rows idx (an i64 tensor, sorted) or
-- first .. first + count - 1: views for in-memory images, a new path table for files.
local function subset(self, idx, first, count, name)
  local o = {}
  for k, v in pairs(fields[self]) do o[k] = v end
  local n = idx and idx.shape[1] or count
  if self.streamed then
    local rows = idx and idx:totable() or nil
    local function pick(list)
      local out = {}
      for i = 1, n do out[i] = list[(rows and rows[i] or first + i - 1) + 1] end
      return out
    end
    local m = self.members
    o.paths = pick(self.paths)
    o.members = m and { files = pick(m.files), names = pick(m.names), offsets = pick(m.offsets),
                        lengths = pick(m.lengths) } or nil
    o._paths = path_table(o.paths, o.members)
  else
    o.images = idx and self.images:index_select(0, idx) or self.images:narrow(0, first, count)
  end
  if self.labels then o.labels = idx and self.labels:index_select(0, idx) or self.labels:narrow(0, first, count) end
  o.n, o.name = n, name or self.name
  return wrap(o)
end

-- ds:hold_out(n_val, seed) -> rest, held_out: n_val samples chosen at random (Philox words
-- keyed by seed, not the global stream, so the same seed holds out the same samples in
-- every run), and the others; both keep their original order. For a validation set
-- carved from a training set.
function Dataset:hold_out(n_val, seed)
  local n = self.n
  if type(n_val) ~= 'number' or n_val ~= math.floor(n_val) or n_val < 1 or n_val >= n then
    error(string.format('hold_out: the held-out count must be an integer in [1, %d), got %s', n, tostring(n_val)), 2)
  end
  if type(seed) ~= 'number' or seed < 0 or seed ~= math.floor(seed) then
    error('hold_out: seed must be a non-negative integer, got ' .. tostring(seed), 2)
  end
  local cr = require 'crescent'
  local words = ffi.new('uint32_t[?]', n)
  C.cr_rng_philox_words(words, n, seed, 0)
  local keys = cr.empty({ n }, { dtype = 'i64' })
  local kp = ffi.cast('int64_t *', keys:data_ptr())
  for i = 0, n - 1 do kp[i] = words[i] end
  local order = keys:argsort()
  local function part(idx, name) return subset(self, idx:sort(), nil, nil, name) end
  return part(order:narrow(0, n_val, n - n_val), self.name), part(order:narrow(0, 0, n_val), self.name .. ' (held out)')
end

-- The first n samples, as views (no copy).
function Dataset:head(n)
  if n >= self.n then return self end
  return self:range(0, n)
end

-- Samples first .. first + count - 1 (0-based), as views (no copy): a rank's share.
function Dataset:range(first, count)
  if type(first) ~= 'number' or type(count) ~= 'number' or first < 0 or count < 1 or first + count > self.n or
      first ~= math.floor(first) or count ~= math.floor(count) then
    error(string.format('range: samples %s .. %s + %s - 1 are not within the %d samples', tostring(first),
      tostring(first), tostring(count), self.n), 2)
  end
  return subset(self, nil, first, count)
end

return M
