-- crescent.data.cifar — CIFAR-10 and CIFAR-100 (60,000 32x32 colour images; 10 classes,
-- or 100 fine / 20 coarse) from the official binary version (csrc/data/cifar.c reads and
-- checks it). Where the files are looked for, first match wins:
--   1. opts.root alone (a recipe's data.root): the folder itself, or its
--      cifar-10-batches-bin / cifar-100-binary sub-folder;
--   2. $CRESCENT_DATA, or $CRESCENT_DATA/cifar-10-batches-bin (cifar-100-binary);
--   3. ./data/cifar-10-batches-bin (./data/cifar-100-binary).
-- crescent never downloads: fetch the tarball elsewhere and extract it (see the error
-- message of a missing data set).
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local util = require 'crescent.util'
local dataset = require 'crescent.data.dataset'

local URL = 'https://www.cs.toronto.edu/~kriz/cifar.html'

local SPECS = {
  cifar10 = {
    kind = 10, dir = 'cifar-10-batches-bin', tarball = 'cifar-10-binary.tar.gz',
    files = {
      train = { 'data_batch_1.bin', 'data_batch_2.bin', 'data_batch_3.bin', 'data_batch_4.bin',
                'data_batch_5.bin' },
      test = { 'test_batch.bin' },
    },
    -- per-channel mean and std of the training images in [0, 1] (the usual figures)
    mean = { 0.4914, 0.4822, 0.4465 }, std = { 0.2470, 0.2435, 0.2616 },
    classes = { 'airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse', 'ship',
                'truck' },
  },
  cifar100 = {
    kind = 100, dir = 'cifar-100-binary', tarball = 'cifar-100-binary.tar.gz',
    files = { train = { 'train.bin' }, test = { 'test.bin' } },
    mean = { 0.5071, 0.4865, 0.4409 }, std = { 0.2673, 0.2564, 0.2762 },
  },
}
local OPTS = { cifar10 = { root = true, split = true, limit = true },
               cifar100 = { root = true, split = true, limit = true, labels = true } }

local exists = require('crescent.util').file_exists

local function candidates(root, sub)
  if root then
    return { { dir = root, why = 'root' }, { dir = root .. '/' .. sub, why = 'root' } }
  end
  local list = {}
  local env = os.getenv('CRESCENT_DATA')
  if env and env ~= '' then
    list[#list + 1] = { dir = env, why = '$CRESCENT_DATA' }
    list[#list + 1] = { dir = env .. '/' .. sub, why = '$CRESCENT_DATA' }
  end
  list[#list + 1] = { dir = './data/' .. sub, why = 'the working directory' }
  return list
end

-- The split's file paths and their folder, or an error saying where it looked.
local function find(name, spec, root, split)
  local looked = {}
  for _, c in ipairs(candidates(root, spec.dir)) do
    local paths, missing = {}, {}
    for _, f in ipairs(spec.files[split]) do
      local p = c.dir .. '/' .. f
      if exists(p) then paths[#paths + 1] = p else missing[#missing + 1] = f end
    end
    if #missing == 0 then return paths, c.dir end
    looked[#looked + 1] = string.format('  %s (%s): no %s', c.dir, c.why, table.concat(missing, ', '))
  end
  error(string.format(
    '%s: the %s split was not found. Looked in:\n%s\n' ..
    'crescent does not download data sets (and this machine may have no internet access): on a ' ..
    'machine that has it, download %s (the binary version) from %s, extract it with `tar xzf %s` ' ..
    'into ./data (giving ./data/%s), or anywhere and set CRESCENT_DATA (or data.root / opts.root) ' ..
    'to the folder that holds %s.',
    name, split, table.concat(looked, '\n'), spec.tarball, URL, spec.tarball, spec.dir, spec.dir), 0)
end

-- Class names from the tarball's text files (one per line), when present.
local function read_names(path)
  local f = io.open(path, 'r')
  if not f then return nil end
  local names = {}
  for line in f:lines() do
    line = line:gsub('%s+$', '')
    if line ~= '' then names[#names + 1] = line end
  end
  f:close()
  return names
end

local function load(name, opts)
  opts = opts or {}
  if type(opts) ~= 'table' then error(name .. ': expected an options table', 3) end
  for k in pairs(opts) do
    if not OPTS[name][k] then
      local list = {}
      for o in pairs(OPTS[name]) do list[#list + 1] = o end
      table.sort(list)
      error(string.format("%s: unknown option '%s'; options are %s", name, tostring(k),
        table.concat(list, ', ')), 3)
    end
  end
  local spec = SPECS[name]
  local split = opts.split or 'train'
  if not spec.files[split] then
    error(string.format("%s: split must be 'train' or 'test', got %s", name, tostring(split)), 3)
  end
  local limit = opts.limit or 0
  if type(limit) ~= 'number' or limit < 0 or limit ~= math.floor(limit) then
    error(name .. ': limit must be a non-negative integer (0 or nil = all), got ' .. tostring(limit), 3)
  end
  local which = opts.labels or 'fine'
  if which ~= 'fine' and which ~= 'coarse' then
    error("cifar100: labels must be 'fine' (100 classes) or 'coarse' (20), got " .. tostring(which), 3)
  end
  local root = opts.root
  if root == '' then root = nil end
  if root ~= nil and type(root) ~= 'string' then error(name .. ': root must be a folder name', 3) end

  local paths, dir = find(name, spec, root, split)
  local cpaths = ffi.new('const char *[?]', #paths, paths)
  local box = util.box
  box[0], box[1], box[2] = nil, nil, nil
  local st = C.cr_cifar_read(box, box + 1, spec.kind == 100 and box + 2 or nil, cpaths, #paths, spec.kind, limit)
  if st ~= 0 then util.raise() end
  local images, fine = util.own(box[0]), util.own(box[1])
  local coarse = spec.kind == 100 and util.own(box[2]) or nil
  local labels, num_classes, classes = fine, spec.kind, spec.classes
  if spec.kind == 100 then
    classes = read_names(dir .. '/fine_label_names.txt')
    if which == 'coarse' then
      labels, num_classes = coarse, 20
      classes = read_names(dir .. '/coarse_label_names.txt')
    end
  end
  local ds = dataset.TensorDataset {
    images = images, labels = labels, mean = spec.mean, std = spec.std, num_classes = num_classes,
    name = name, classes = classes, split = split, root = dir,
  }
  if coarse then ds.fine_labels, ds.coarse_labels = fine, coarse end
  return ds
end

return {
  -- cr.data.cifar10{root = nil, split = 'train' | 'test', limit = nil}: images u8 [N, 3,
  -- 32, 32] (channel-major, as stored), labels i64 [N], num_classes 10, mean/std per
  -- channel, classes. limit (nil or 0 = all) reads only the first `limit` records.
  cifar10 = function(opts) return load('cifar10', opts) end,
  -- cr.data.cifar100{..., labels = 'fine' | 'coarse'}: labels the fine (100 classes) or
  -- coarse (20) ones; both are kept as ds.fine_labels and ds.coarse_labels.
  cifar100 = function(opts) return load('cifar100', opts) end,
}
