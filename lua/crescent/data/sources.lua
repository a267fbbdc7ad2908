-- crescent.data.sources (cr.data.sources) — the data sets a recipe's config names, for
-- every recipe (the SSL ones through crescent.recipe.ssl, recipes/supervised.lua and the
-- frozen evaluations): the keys data.name, root, limit, size, list, test_list,
-- test_root, skip_bad and val_split, declared (M.options), and the train and test sets
-- they give.
--
--   local train, test, eval_name = cr.data.sources.datasets(cfg)   -- test nil: no test split
--   local channels, h, w = cr.data.sources.image_shape(train)
local util = require 'crescent.util'
local fashion_mnist = require 'crescent.data.fashion_mnist'
local cifar = require 'crescent.data.cifar'
local synthetic = require 'crescent.data.synthetic'
local image_folder = require('crescent.data.image_folder').image_folder
local file_list = require 'crescent.data.file_list'
local tar_shards = require 'crescent.data.tar_shards'

local M = {}

local function fail(msg) error(msg, 0) end

-- The data keys, for every recipe.
M.options = require('crescent.config').options('data', {
  { 'name', { 'fashion_mnist', 'cifar10', 'cifar100', 'synthetic', 'image_folder', 'file_list', 'tar_shards' },
    'fashion_mnist', "the data set (image_folder: data.root with class folders; file_list: data.list's files; " ..
    "tar_shards: data.root a pattern of webdataset shards, 'train-{000..143}.tar')" },
  { 'root', 'string', '', "where the data set is ('': its own search order)" },
  { 'batch_size', 'integer', 256, 'images per batch (per rank)', min = 1 },
  { 'workers', 'integer', 0, 'loader threads that assemble batches ahead (0: inline)', min = 0 },
  { 'limit', 'integer', 0, 'use only the first N samples of each split (0: all)', min = 0 },
  { 'test_root', 'string', '', "tar_shards: the test shards' pattern ('': no test set)" },
  { 'list', 'string', '', "file_list: a text file of '<path> <label>' lines (paths relative to data.root), the " ..
    'training images' },
  { 'test_list', 'string', '', "file_list: the test images' list ('': no test set)" },
  { 'size', 'integer', 32, 'image side for synthetic images, and the side streamed images (image_folder, file_list, ' ..
    'tar_shards) are resized to in whole-image batches: evaluation, supervised training (SSL crops are cut from ' ..
    'each file at its own size)', min = 1 },
  { 'skip_bad', 'boolean', false, 'image_folder, file_list: replace a file that does not decode by the next ' ..
    'readable one, with a warning, instead of stopping' },
  { 'shuffle_buffer', 'integer', 1000, 'tar_shards: each shard is read front to back and the samples leave ' ..
    'through a shuffle buffer of this many (0: a full shuffle, every image read on its own)', min = 0 },
  { 'val_split', 'number', 0, 'hold out this fraction (< 1) or number of training images and evaluate on them ' ..
    'instead of the test set', min = 0 },
})

-- A streamed source's train set (opts[key] = train) and test set (opts[key] = test;
-- none when test is '').
local function train_and_test(make, opts, key, train, test)
  opts[key] = train
  local train_set = make(opts)
  if test == '' then return train_set, nil end
  opts[key] = test
  return train_set, make(opts)
end

-- The data sets cfg.data names: train, and test (nil when the source has none).
local function source_datasets(cfg)
  local d = cfg.data
  local limit = d.limit > 0 and d.limit or nil
  local root = d.root ~= '' and d.root or nil
  if d.name == 'fashion_mnist' then
    return fashion_mnist { root = root, split = 'train', limit = limit },
           fashion_mnist { root = root, split = 'test', limit = limit }
  elseif d.name == 'cifar10' or d.name == 'cifar100' then
    return cifar[d.name] { root = root, split = 'train', limit = limit },
           cifar[d.name] { root = root, split = 'test', limit = limit }
  elseif d.name == 'synthetic' then
    local n = limit or 4096
    return synthetic { n = n, shape = { 3, d.size, d.size }, seed = cfg.train.seed },
           synthetic { n = math.max(1, math.floor(n / 4)), shape = { 3, d.size, d.size }, seed = cfg.train.seed + 1 }
  elseif d.name == 'image_folder' then
    if not root then fail("data.name=image_folder needs data.root=<folder with train/ (and val/) class sub-folders>") end
    local exists = util.file_exists
    local tr = exists(root .. '/train') and root .. '/train' or root
    -- streamed: the loader's workers decode each file when batched
    local opts = { root = tr, size = { d.size, d.size }, skip_bad = d.skip_bad, stream = true }
    local train = image_folder(opts)
    local test
    if exists(root .. '/val') then
      opts.root = root .. '/val'
      test = image_folder(opts)
    end
    return train, test
  elseif d.name == 'file_list' then
    if d.list == '' then fail("data.name=file_list needs data.list=<a text file of '<path> <label>' lines>") end
    return train_and_test(file_list, { root = root, size = { d.size, d.size }, skip_bad = d.skip_bad },
      'list', d.list, d.test_list)
  elseif d.name == 'tar_shards' then
    if not root then fail("data.name=tar_shards needs data.root=<the shards, e.g. 'train-{000000..000143}.tar'>") end
    return train_and_test(tar_shards, { size = { d.size, d.size }, skip_bad = d.skip_bad,
      shuffle_buffer = d.shuffle_buffer }, 'urls', root, d.test_root)
  end
  fail("data.name='" .. tostring(d.name) .. "' is not a data set this recipe knows")
end

-- The train and test data sets of cfg.data (test may be nil: no kNN monitor then), and
-- the name of the second ('test', or 'val' when data.val_split holds out part of train).
function M.datasets(cfg)
  local train, test = source_datasets(cfg)
  local v = cfg.data.val_split or 0
  if v == 0 then return train, test, 'test' end
  local n = v < 1 and math.floor(v * #train + 0.5) or v
  if n ~= math.floor(n) or n < 1 or n >= #train then
    fail(string.format('data.val_split = %g holds out %s of the %d training samples; give a fraction in (0, 1) or a ' ..
      'count in [1, %d)', v, tostring(n), #train, #train))
  end
  local rest, held_out = train:hold_out(n, 0)
  return rest, held_out, 'val'
end

-- The channels, height and width of a data set's images: its tensor's, or for a streamed
-- set (files decoded when batched) its channels and the size its plain batches take.
function M.image_shape(ds)
  if ds.streamed then return ds.channels, ds.size[1], ds.size[2] end
  local im = ds.images
  return im.ndim == 4 and im.shape[2] or 1, im.shape[im.ndim - 1], im.shape[im.ndim]
end

return M
