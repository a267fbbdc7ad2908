-- crescent.data.file_list — a streamed data set from a text file that lists image files,
-- one per line, as VISSL's disk_filelist: "<path> <label>" (an integer class), or
-- "<path>" alone on every line for unlabelled data. Paths are relative to `root` unless
-- they start with '/'; blank lines and lines starting with '#' are skipped. Nothing is
-- decoded here: the Loader's workers read each file when it is batched (see
-- crescent.data.dataset's StreamedDataset).
--
--   cr.data.file_list{list = 'train.txt', root = '/data/imagenet', channels = 3,
--                     size = {h, w} | n, mean =, std =, skip_bad = false, warn = function(msg)}
-- skip_bad: StreamedDataset's (a file that does not decode is replaced, with a warning).
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local dataset = require 'crescent.data.dataset'
local util = require 'crescent.util'

local OPTS = { list = true, root = true, channels = true, size = true, mean = true, std = true, skip_bad = true,
               warn = true }

local function fail(msg) error('file_list: ' .. msg, 3) end

-- The entries of the list file: paths and labels (nil when the lines carry none).
local function read_list(file, root)
  local f, err = io.open(file, 'r')
  if not f then fail(string.format("cannot open the list '%s' (%s); pass list = <a text file of '<path> <label>' lines>",
    file, tostring(err))) end
  local paths, labels, lineno, labelled = {}, {}, 0, nil
  for line in f:lines() do
    lineno = lineno + 1
    line = line:gsub('\r$', '')
    if line:match('%S') and not line:match('^%s*#') then
      local p, rest = line:match('^%s*(%S+)%s*(.-)%s*$')
      local has_label = rest ~= ''
      if labelled == nil then labelled = has_label end
      if has_label ~= labelled then
        f:close()
        fail(string.format("%s:%d: '%s' %s a label but the first entry %s; give every line a label or none",
          file, lineno, line, has_label and 'has' or 'lacks', labelled and 'has one' or 'has none'))
      end
      if has_label then
        local v = tonumber(rest)
        if not v or v ~= math.floor(v) or v < 0 or not rest:match('^%d+$') then
          f:close()
          fail(string.format("%s:%d: the label '%s' is not a class number (0, 1, ...)", file, lineno, rest))
        end
        labels[#labels + 1] = v
      end
      paths[#paths + 1] = (p:sub(1, 1) == '/' or not root) and p or (root .. '/' .. p)
    end
  end
  f:close()
  if #paths == 0 then fail(string.format("the list '%s' names no file", file)) end
  return paths, labelled and labels or nil
end

return function(opts)
  if type(opts) ~= 'table' then error('file_list: expected an options table {list = ..., root = ...}', 2) end
  for k in pairs(opts) do
    if not OPTS[k] then
      error("file_list: unknown option '" .. tostring(k) .. "'; options are " .. table.concat(util.sorted_keys(OPTS), ', '), 2)
    end
  end
  if type(opts.list) ~= 'string' or opts.list == '' then error('file_list: list must be the name of a text file', 2) end
  local root = opts.root
  if root ~= nil and (type(root) ~= 'string' or root == '') then error('file_list: root must be a folder name', 2) end
  if root then root = root:gsub('/+$', '') end
  local file = opts.list
  if root and file:sub(1, 1) ~= '/' and not util.file_exists(file) then file = root .. '/' .. file end
  local nc = opts.channels or 3
  if nc ~= 1 and nc ~= 3 then error('file_list: channels must be 1 (grey) or 3 (RGB), got ' .. tostring(nc), 2) end
  local size = opts.size
  if type(size) == 'number' then size = { size, size } end
  local paths, labels = read_list(file, root)
  local label_t, num_classes
  if labels then
    local box = util.box
    util.check(C.cr_tensor_from_data(box, ffi.new('int64_t[?]', #labels, labels), 1, ffi.new('int64_t[1]', #labels),
      C.CR_DT_I64))
    label_t = util.own(box[0])
    num_classes = 0
    for _, v in ipairs(labels) do num_classes = math.max(num_classes, v + 1) end
  end
  local mean, std = dataset.photo_stats(nc, opts.mean, opts.std)
  return dataset.StreamedDataset {
    mean = mean, std = std,
    paths = paths, labels = label_t, channels = nc, size = size, num_classes = num_classes, name = 'file_list',
    root = root, skip_bad = opts.skip_bad == true, warn = opts.warn,
  }
end
