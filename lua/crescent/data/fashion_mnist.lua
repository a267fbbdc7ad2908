-- crescent.data.fashion_mnist — Zalando's Fashion-MNIST (70,000 28x28 grey images of
-- clothes in 10 classes) from its four IDX .gz files. Where the files are looked for,
-- first match wins:
--   1. opts.root (a recipe's data.root), used alone: a folder you name must hold them;
--   2. $CRESCENT_DATA, or $CRESCENT_DATA/fashion-mnist;
--   3. ./data/fashion-mnist;
--   4. /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist; `make deps`).
-- Uncompressed copies (the same names without .gz) are read too.
local ffi = require 'ffi'
local dataset = require 'crescent.data.dataset'

local FILES = {
  train = { 'train-images-idx3-ubyte', 'train-labels-idx1-ubyte' },
  test = { 't10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte' },
}
local CLASSES = { 'T-shirt/top', 'Trouser', 'Pullover', 'Dress', 'Coat', 'Sandal', 'Shirt',
                  'Sneaker', 'Bag', 'Ankle boot' }
-- Per-pixel mean and std of the training images, scaled to [0, 1] (the usual figures).
local MEAN, STD = 0.2860, 0.3530
local SYSTEM_ROOT = '/usr/share/datasets/fashion-mnist'
local OPTS = { root = true, split = true, limit = true }

local exists = require('crescent.util').file_exists

-- The file's path under dir (.gz first), or nil.
local function locate(dir, base)
  for _, name in ipairs { base .. '.gz', base } do
    local p = dir .. '/' .. name
    if exists(p) then return p end
  end
end

local function candidates(root)
  if root then return { { dir = root, why = 'root' } } end
  local list = {}
  local env = os.getenv('CRESCENT_DATA')
  if env and env ~= '' then
    list[#list + 1] = { dir = env, why = '$CRESCENT_DATA' }
    list[#list + 1] = { dir = env .. '/fashion-mnist', why = '$CRESCENT_DATA' }
  end
  list[#list + 1] = { dir = './data/fashion-mnist', why = 'the working directory' }
  list[#list + 1] = { dir = SYSTEM_ROOT, why = "Debian's dataset-fashion-mnist" }
  return list
end

local function find(root, split)
  local looked = {}
  for _, c in ipairs(candidates(root)) do
    local imgs, labs = locate(c.dir, FILES[split][1]), locate(c.dir, FILES[split][2])
    if imgs and labs then return imgs, labs, c.dir end
    local missing = {}
    if not imgs then missing[#missing + 1] = FILES[split][1] .. '.gz' end
    if not labs then missing[#missing + 1] = FILES[split][2] .. '.gz' end
    looked[#looked + 1] = string.format('  %s (%s): no %s', c.dir, c.why, table.concat(missing, ', '))
  end
  error(string.format(
    'fashion_mnist: the %s split was not found. Looked in:\n%s\n' ..
    'Get it with `sudo apt-get install dataset-fashion-mnist` (or `make deps`), or put the ' ..
    'four IDX .gz files from https://github.com/zalandoresearch/fashion-mnist in a folder and ' ..
    'set CRESCENT_DATA (or data.root / opts.root) to it.',
    split, table.concat(looked, '\n')), 0)
end

-- cr.data.fashion_mnist{root = nil, split = 'train' | 'test', limit = nil}: a Dataset
-- with images u8 [N, 28, 28], labels i64 [N], num_classes 10, mean/std, name.
-- limit (nil or 0 = all) keeps the first `limit` samples, as views.
return function(opts)
  opts = opts or {}
  if type(opts) ~= 'table' then error('fashion_mnist: expected an options table', 2) end
  for k in pairs(opts) do
    if not OPTS[k] then
      error("fashion_mnist: unknown option '" .. tostring(k) .. "'; options are root, split, limit", 2)
    end
  end
  local split = opts.split or 'train'
  if not FILES[split] then
    error("fashion_mnist: split must be 'train' or 'test', got " .. tostring(split), 2)
  end
  local limit = opts.limit
  if limit ~= nil and (type(limit) ~= 'number' or limit < 0 or limit ~= math.floor(limit)) then
    error('fashion_mnist: limit must be a non-negative integer (0 or nil = all), got ' .. tostring(limit), 2)
  end
  local root = opts.root
  if root == '' then root = nil end
  if root ~= nil and type(root) ~= 'string' then error('fashion_mnist: root must be a folder name', 2) end

  local ipath, lpath, dir = find(root, split)
  local images, labels = dataset.read_idx(ipath), dataset.read_idx(lpath)
  local n = images:size(0)
  if images.dtype ~= 'u8' or images:dim() ~= 3 or images:size(1) ~= 28 or images:size(2) ~= 28 then
    error(string.format("fashion_mnist: '%s' holds %s [%s], expected u8 [N, 28, 28]", ipath,
      images.dtype, table.concat(images.shape, ', ')), 2)
  end
  if labels.dtype ~= 'u8' or labels:dim() ~= 1 or labels:size(0) ~= n then
    error(string.format("fashion_mnist: '%s' holds %s [%s], expected u8 [%d] (one label per image in '%s')",
      lpath, labels.dtype, table.concat(labels.shape, ', '), n, ipath), 2)
  end
  local p = ffi.cast('const uint8_t *', labels:data_ptr())
  for i = 0, n - 1 do
    if p[i] > 9 then
      error(string.format("fashion_mnist: '%s': label %d of sample %d is outside 0..9", lpath, p[i], i), 2)
    end
  end
  local ds = dataset.TensorDataset {
    images = images, labels = labels:long(), mean = MEAN, std = STD, num_classes = 10,
    name = 'fashion_mnist', classes = CLASSES, split = split, root = dir,
  }
  if limit and limit > 0 then ds = ds:head(limit) end
  return ds
end
