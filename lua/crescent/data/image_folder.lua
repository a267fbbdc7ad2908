-- crescent.data.image_folder — class sub-folders of JPEG/PNG files, as torchvision's
-- ImageFolder: the class names are the sub-folder names sorted (byte order), class i is
-- the i-th (0-based); each class folder is walked recursively, folders in path order and
-- files sorted by name; files ending .jpg, .jpeg or .png (any case) are samples, other
-- files are ignored. Decoding is csrc/data/image.c (libturbojpeg, libpng).
--
--   cr.data.image_folder{root = 'data/flowers', size = {h, w} | n, channels = 3,
--                        skip_bad = false, warn = function(msg) ... end, mean = , std = }
--
-- By default the whole folder is decoded when the data set is built (threaded over the
-- files), into images u8 [N, C, h, w] that cr.data.Loader batches like any other data
-- set. Without `size`, every image must have the same size (the headers are probed
-- first); with it, each image is resized to h x w (bilinear, crescent_images.h).
-- stream = true lists the files only (a streamed data set, crescent.data.dataset): the
-- Loader's worker threads decode each sample when it is batched, so memory holds paths,
-- not pixels; crops are cut from each image at its own size, and plain batches resize to
-- `size` (then required by the Loader). cr.data.images.decode(paths, {size =}) decodes any
-- list of files into one batch.
-- A corrupt or truncated file is an error naming its path; with skip_bad = true it is a
-- warning naming it (through opts.warn, default: stderr) and the sample is dropped
-- (ds.skipped lists {path =, error =}); streamed, it is found when batched and replaced
-- by the next readable file, and the Loader warns after the epoch.
--
-- The helpers (cr.data.images): read, decode, probe, resize, write_jpeg, write_png, list_dir.
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local util = require 'crescent.util'
local dataset = require 'crescent.data.dataset'

local M = {}
local ERRCAP = 512
local CHUNK = 1024
local MAX_BYTES = 2 ^ 34   -- 16 GiB of decoded pixels: beyond this, decode per batch
-- ImageNet's per-channel statistics, torchvision's usual Normalize for photographs.
local EXTENSIONS = { jpg = true, jpeg = true, png = true }
local FORMATS = { [1] = 'jpeg', [2] = 'png' }

local function c_error() return ffi.string(C.cr_last_error()) end

M.list_dir = util.list_dir   -- cr.data.images.list_dir

-- {format = 'jpeg'|'png', height, width, channels} from the file's header.
function M.probe(path)
  if type(path) ~= 'string' then error('probe_image: expected a file name, got ' .. type(path), 2) end
  local info = ffi.new('cr_image_info')
  if C.cr_image_probe(info, path) ~= 0 then util.raise() end
  return { format = FORMATS[info.format], height = info.height, width = info.width, channels = info.channels }
end

local function size_arg(what, size, level)
  if size == nil then return 0, 0 end
  if type(size) == 'number' then size = { size, size } end
  if type(size) ~= 'table' or #size ~= 2 then
    error(what .. ': size must be {height, width} or one number (square)', level + 1)
  end
  for i = 1, 2 do
    local v = size[i]
    if type(v) ~= 'number' or v ~= math.floor(v) or v < 1 then
      error(what .. ': size must hold two positive integers, got ' .. tostring(v), level + 1)
    end
  end
  return size[1], size[2]
end

local function channels_arg(what, c, level)
  c = c or 3
  if c ~= 1 and c ~= 3 then error(what .. ': channels must be 1 (grey) or 3 (RGB), got ' .. tostring(c), level + 1) end
  return c
end

-- One file as u8 [C, H, W] (its own size, or opts.size), C = opts.channels (default 3).
function M.read(path, opts)
  opts = opts or {}
  if type(path) ~= 'string' then error('read_image: expected a file name, got ' .. type(path), 2) end
  local h, w = size_arg('read_image', opts.size, 2)
  local box = util.box
  if C.cr_image_read(box, path, channels_arg('read_image', opts.channels, 2), h, w) ~= 0 then util.raise() end
  return util.own(box[0])
end

-- Bilinear resize of u8 [C, H, W] or [N, C, H, W] (crescent_images.h gives the formula).
function M.resize(img, size)
  local h, w = size_arg('resize_image', size, 2)
  if h == 0 then error('resize_image: give a size {height, width}', 2) end
  local box = util.box
  if C.cr_image_resize(box, img, h, w) ~= 0 then util.raise() end
  return util.own(box[0])
end

-- Encoders (u8 [C, H, W]): JPEG C = 1 or 3 (quality default 95, 4:4:4); PNG C = 1..4,
-- palette = true for a palette PNG of an RGB image.
function M.write_jpeg(img, path, quality)
  if C.cr_image_write_jpeg(img, path, quality or 95) ~= 0 then util.raise() end
end
function M.write_png(img, path, palette)
  if C.cr_image_write_png(img, path, palette and 1 or 0) ~= 0 then util.raise() end
end

-- Decodes rows [row0, row0 + #paths) of the u8 [N, C, h, w] tensor `out`. Returns nil
-- when every file decoded, else the list of {i = (1-based in paths), error =} when
-- skip_bad; without skip_bad the first bad file raises an error (naming it).
local function decode_into(out, row0, paths, skip_bad)
  local n = #paths
  local cpaths = ffi.new('const char *[?]', n, paths)
  local ok = skip_bad and ffi.new('uint8_t[?]', n) or nil
  local errs = skip_bad and ffi.new('char[?]', n * ERRCAP) or nil
  if C.cr_image_decode_files(out, row0, cpaths, n, ok, errs, ERRCAP) ~= 0 then return false, c_error() end
  local bad
  if ok then
    for i = 0, n - 1 do
      if ok[i] == 0 then
        bad = bad or {}
        bad[#bad + 1] = { i = i + 1, error = ffi.string(errs + i * ERRCAP) }
      end
    end
  end
  return true, bad
end

-- Decodes a list of files into one batch u8 [#paths, C, h, w] (threaded over the files).
-- opts: size = {h, w} (default: the first file's size, read from its header; any other
-- size is resized to it), channels = 3, skip_bad = false. Returns the batch and, with skip_bad, the list of
-- {i =, error =} for the files that failed (their rows are zeros).
function M.decode(paths, opts)
  opts = opts or {}
  if type(paths) ~= 'table' or #paths == 0 then error('decode_images: expected a non-empty list of file names', 2) end
  local h, w = size_arg('decode_images', opts.size, 2)
  local c = channels_arg('decode_images', opts.channels, 2)
  if h == 0 then
    local info = M.probe(paths[1])
    h, w = info.height, info.width
  end
  local box = util.box
  if C.cr_tensor_empty(box, 4, ffi.new('int64_t[4]', #paths, c, h, w), C.CR_DT_U8, C.CR_DEV_CPU, 0) ~= 0 then
    util.raise()
  end
  local out = util.own(box[0])
  local done, bad = decode_into(out, 0, paths, opts.skip_bad)
  if not done then error(bad, util.user_level()) end
  return out, bad or {}
end

-- ---- the data set -----------------------------------------------------------------------

local OPTS = { root = true, size = true, channels = true, skip_bad = true, warn = true, mean = true, std = true,
               stream = true }

local function is_image_name(name)
  local ext = name:match('%.([^.]+)$')
  return ext ~= nil and EXTENSIONS[ext:lower()] == true
end

-- Every image file under dir: folders visited in path order, files sorted by name
-- (torchvision: sorted(os.walk(dir)), then sorted(fnames)).
local function walk(dir)
  local dirs, stack = {}, { dir }
  while #stack > 0 do
    local d = table.remove(stack)
    dirs[#dirs + 1] = d
    for _, e in ipairs(M.list_dir(d)) do
      if e.dir then stack[#stack + 1] = d .. '/' .. e.name end
    end
  end
  table.sort(dirs)
  local files = {}
  for _, d in ipairs(dirs) do
    for _, e in ipairs(M.list_dir(d)) do
      if not e.dir and is_image_name(e.name) then files[#files + 1] = d .. '/' .. e.name end
    end
  end
  return files
end

local function default_warn(msg)
  util.end_live_line()
  io.stderr:write('crescent: warning: ', msg, '\n')
end

function M.image_folder(opts)
  if type(opts) ~= 'table' then error('image_folder: expected an options table {root = ...}', 2) end
  for k in pairs(opts) do
    if not OPTS[k] then
      error("image_folder: unknown option '" .. tostring(k) ..
        "'; options are channels, mean, root, size, skip_bad, std, stream, warn", 2)
    end
  end
  local root = opts.root
  if type(root) ~= 'string' or root == '' then error('image_folder: root must be a folder name', 2) end
  root = root:gsub('/+$', '')
  local h, w = size_arg('image_folder', opts.size, 2)
  local nc = channels_arg('image_folder', opts.channels, 2)
  local skip_bad = opts.skip_bad == true
  local warn = opts.warn or default_warn
  if type(warn) ~= 'function' then error('image_folder: warn must be a function(message)', 2) end

  local ok, entries = pcall(M.list_dir, root)
  if not ok then error('image_folder: ' .. tostring(entries):gsub('^.-list_dir: ', ''), 2) end
  local classes = {}
  for _, e in ipairs(entries) do
    if e.dir then classes[#classes + 1] = e.name end
  end
  if #classes == 0 then
    error(string.format("image_folder: no class folder in '%s'; put each class's images in its own " ..
      'sub-folder (root/<class>/<image>.jpg)', root), 2)
  end
  local paths, labels, empty = {}, {}, {}
  local class_to_idx = {}
  for k, name in ipairs(classes) do
    class_to_idx[name] = k - 1
    local files = walk(root .. '/' .. name)
    if #files == 0 then empty[#empty + 1] = name end
    for _, f in ipairs(files) do
      paths[#paths + 1] = f
      labels[#labels + 1] = k - 1
    end
  end
  if #empty > 0 then
    error(string.format("image_folder: no .jpg, .jpeg or .png file in the class folder%s %s of '%s'",
      #empty > 1 and 's' or '', table.concat(empty, ', '), root), 2)
  end
  local mean, std = dataset.photo_stats(nc, opts.mean, opts.std)
  local box = util.box

  if opts.stream then -- the paths only: the Loader's workers decode each file when batched
    util.check(C.cr_tensor_from_data(box, ffi.new('int64_t[?]', #labels, labels), 1,
      ffi.new('int64_t[1]', #labels), C.CR_DT_I64))
    local ds = dataset.StreamedDataset {
      paths = paths, labels = util.own(box[0]), channels = nc, size = h > 0 and { h, w } or nil,
      mean = mean, std = std, num_classes = #classes, name = 'image_folder', classes = classes, root = root,
      skip_bad = skip_bad, warn = opts.warn,
    }
    ds.class_to_idx, ds.skipped = class_to_idx, {}
    return ds
  end

  local skipped = {}
  local function skip(i, msg)
    skipped[#skipped + 1] = { path = paths[i], error = msg }
    warn('image_folder: skipping ' .. msg)
  end
  local keep = {}
  for i = 1, #paths do keep[i] = true end

  -- without a size, every image must have the first one's: probe the headers
  if h == 0 then
    local first
    for i, p in ipairs(paths) do
      local pok, info = pcall(M.probe, p)
      if not pok then
        local msg = tostring(info):gsub('^.-probe_image: ', '')
        if not skip_bad then
          error('image_folder: ' .. msg .. '; pass skip_bad = true to skip bad files with a warning', 2)
        end
        skip(i, msg)
        keep[i] = false
      elseif not first then
        first = { path = p, h = info.height, w = info.width }
      elseif info.height ~= first.h or info.width ~= first.w then
        error(string.format("image_folder: images differ in size ('%s' is %dx%d, '%s' is %dx%d); " ..
          'pass size = {height, width} to resize them on load', first.path, first.h, first.w, p,
          info.height, info.width), 2)
      end
    end
    if not first then error("image_folder: no image in '" .. root .. "' could be read", 2) end
    h, w = first.h, first.w
  end
  local kept_paths, kept_labels = {}, {}
  for i = 1, #paths do
    if keep[i] then
      kept_paths[#kept_paths + 1] = paths[i]
      kept_labels[#kept_labels + 1] = labels[i]
    end
  end
  paths, labels = kept_paths, kept_labels
  local n = #paths
  if n * nc * h * w > MAX_BYTES then
    error(string.format('image_folder: %d images of %dx%dx%d would take %.1f GiB decoded; decode them per ' ..
      'batch with cr.data.images.decode instead, or pass a smaller size', n, nc, h, w, n * nc * h * w / 2 ^ 30), 2)
  end

  if C.cr_tensor_empty(box, 4, ffi.new('int64_t[4]', n, nc, h, w), C.CR_DT_U8, C.CR_DEV_CPU, 0) ~= 0 then
    util.raise()
  end
  local images = util.own(box[0])
  keep = {}
  local nbad = 0
  for row0 = 0, n - 1, CHUNK do
    local chunk = {}
    for i = row0 + 1, math.min(row0 + CHUNK, n) do chunk[#chunk + 1] = paths[i] end
    local done, bad = decode_into(images, row0, chunk, skip_bad)
    if not done then
      error('image_folder: ' .. bad:gsub('^decode_images: ', ''):gsub(' %(file %d+ of %d+%)$', '') ..
        '; pass skip_bad = true to skip bad files with a warning', 2)
    end
    for _, b in ipairs(bad or {}) do
      keep[row0 + b.i] = false
      nbad = nbad + 1
      skip(row0 + b.i, b.error)
    end
  end
  if nbad > 0 then
    local rows, kp, kl = {}, {}, {}
    for i = 1, n do
      if keep[i] ~= false then
        rows[#rows + 1] = i - 1
        kp[#kp + 1], kl[#kl + 1] = paths[i], labels[i]
      end
    end
    if #rows == 0 then error("image_folder: no image in '" .. root .. "' could be read", 2) end
    util.check(C.cr_tensor_from_data(box, ffi.new('int64_t[?]', #rows, rows), 1, ffi.new('int64_t[1]', #rows), C.CR_DT_I64))
    images = images:index_select(0, util.own(box[0]))
    paths, labels, n = kp, kl, #rows
  end
  util.check(C.cr_tensor_from_data(box, ffi.new('int64_t[?]', n, labels), 1, ffi.new('int64_t[1]', n), C.CR_DT_I64))
  local label_t = util.own(box[0])
  local ds = dataset.TensorDataset {
    images = images, labels = label_t, mean = mean, std = std, num_classes = #classes,
    name = 'image_folder', classes = classes, root = root,
  }
  ds.paths, ds.class_to_idx, ds.skipped = paths, class_to_idx, skipped
  return ds
end

return M
