-- crescent.data.tar_shards — a streamed data set from tar shards in webdataset's layout:
-- a sample is the members sharing a key (a member's name up to the first '.' of its
-- base name), here an image (<key>.jpg, .jpeg or .png) and, for labels, <key>.cls
-- holding the class number as text; other members are ignored. Each shard is indexed
-- when the data set is built, from its headers alone (csrc/data/tar.c). The Loader then
-- reads each shard front to back, as webdataset does: an epoch visits the shards in an
-- order shuffled per seed and epoch (dealt out to the ranks when sharded) and its
-- samples leave through a shuffle buffer of `shuffle_buffer` samples
-- (crescent.data.shard_order), still a pure function of (seed, epoch), so resuming at any
-- batch replays it. shuffle_buffer = 0 gives the Loader's full shuffle instead, every
-- image read at its offset, and a rank its share of every shard.
--
--   cr.data.tar_shards{urls = '/data/shards/train-{000000..000143}.tar' (or a list of files),
--                      channels = 3, size = {h, w} | n, mean =, std =, skip_bad = false, warn =,
--                      shuffle_buffer = 1000}
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local dataset = require 'crescent.data.dataset'
local util = require 'crescent.util'

local OPTS = { urls = true, channels = true, size = true, mean = true, std = true, skip_bad = true, warn = true,
               shuffle_buffer = true }
local DEFAULT_SHUFFLE_BUFFER = 1000   -- webdataset's usual size
local IMAGE = { jpg = true, jpeg = true, png = true }

local function fail(msg) error('tar_shards: ' .. msg, 3) end

-- The file names of a pattern: brace groups {000..143} (zero-padded as written) and
-- {a,b,c} expand, left to right, as in webdataset and bash.
local function expand(pattern)
  local pre, body, post = pattern:match('^(.-){([^{}]*)}(.*)$')
  if not pre then return { pattern } end
  local items = {}
  local a, b = body:match('^(%d+)%.%.(%d+)$')
  if a then
    local lo, hi = tonumber(a), tonumber(b)
    if hi < lo then fail(string.format("the range {%s} in '%s' runs backwards", body, pattern)) end
    local fmt = '%0' .. #a .. 'd'
    for i = lo, hi do items[#items + 1] = string.format(fmt, i) end
  else
    for item in (body .. ','):gmatch('([^,]*),') do items[#items + 1] = item end
  end
  local out = {}
  for _, item in ipairs(items) do
    for _, rest in ipairs(expand(post)) do out[#out + 1] = pre .. item .. rest end
  end
  return out
end

-- The members of one shard: a list of {name =, offset =, length =}.
local function index(file)
  local names, len, ranges, count = ffi.new('char*[1]'), ffi.new('int64_t[1]'), ffi.new('int64_t*[1]'),
    ffi.new('int64_t[1]')
  if C.cr_tar_index(file, names, len, ranges, count) ~= 0 then fail(ffi.string(C.cr_last_error()):gsub('^tar_index: ', '')) end
  local text = len[0] > 0 and ffi.string(names[0], len[0]) or ''
  local out, i = {}, 0
  for name in text:gmatch('([^%z]*)%z') do
    out[#out + 1] = { name = name, offset = tonumber(ranges[0][2 * i]), length = tonumber(ranges[0][2 * i + 1]) }
    i = i + 1
  end
  C.cr_tar_index_free(names[0], ranges[0])
  return out
end

-- The samples of a shard in archive order: {key =, image = member, cls = member or nil}.
local function samples_of(file)
  local by_key, order = {}, {}
  for _, m in ipairs(index(file)) do
    local dir, base = m.name:match('^(.-)([^/]*)$')
    local stem, ext = base:match('^([^.]*)%.(.*)$')
    if stem then
      local key = dir .. stem
      local s = by_key[key]
      if not s then
        s = { key = key }
        by_key[key], order[#order + 1] = s, s
      end
      ext = ext:lower()
      if IMAGE[ext] then
        if s.image then
          fail(string.format("'%s': the sample '%s' has two images (%s and %s)", file, key, s.image.name, m.name))
        end
        s.image = m
      elseif ext == 'cls' then
        s.cls = m
      end
    end
  end
  return order
end

-- The class numbers of the samples' .cls members, read from the shard in one pass.
local function read_labels(file, samples, into)
  local f = assert(io.open(file, 'rb'))
  for _, s in ipairs(samples) do
    f:seek('set', s.cls.offset)
    local text = f:read(s.cls.length) or ''
    local v = tonumber(text:match('^%s*(%d+)%s*$'))
    if not v then
      f:close()
      fail(string.format("'%s': %s holds '%s', not a class number", file, s.cls.name, text:sub(1, 40)))
    end
    into[#into + 1] = v
  end
  f:close()
end

return function(opts)
  if type(opts) ~= 'table' then error('tar_shards: expected an options table {urls = ...}', 2) end
  for k in pairs(opts) do
    if not OPTS[k] then
      error("tar_shards: unknown option '" .. tostring(k) .. "'; options are " .. table.concat(util.sorted_keys(OPTS), ', '), 2)
    end
  end
  local files = opts.urls
  if type(files) == 'string' then files = expand(files) end
  if type(files) ~= 'table' or #files == 0 then
    error("tar_shards: urls must be a file pattern ('train-{000..009}.tar') or a list of tar files", 2)
  end
  local nc = opts.channels or 3
  if nc ~= 1 and nc ~= 3 then error('tar_shards: channels must be 1 (grey) or 3 (RGB), got ' .. tostring(nc), 2) end
  local tars, names, offsets, lengths, labels = {}, {}, {}, {}, {}
  local labelled
  for _, file in ipairs(files) do
    if not util.file_exists(file) then fail(string.format("no shard '%s'", file)) end
    local samples = samples_of(file)
    for _, s in ipairs(samples) do
      if not s.image then fail(string.format("'%s': the sample '%s' has no .jpg, .jpeg or .png member", file, s.key)) end
      local has = s.cls ~= nil
      if labelled == nil then labelled = has end
      if has ~= labelled then
        fail(string.format("'%s': the sample '%s' %s a .cls member but the first sample %s; label every sample or none",
          file, s.key, has and 'has' or 'lacks', labelled and 'has one' or 'has none'))
      end
      tars[#tars + 1], names[#names + 1] = file, s.image.name
      offsets[#offsets + 1], lengths[#lengths + 1] = s.image.offset, s.image.length
    end
    if labelled then read_labels(file, samples, labels) end
  end
  if #tars == 0 then fail('the shards hold no sample') end
  local n = #tars
  local label_t, num_classes
  if labelled then
    local lbox = util.box
    util.check(C.cr_tensor_from_data(lbox, ffi.new('int64_t[?]', n, labels), 1, ffi.new('int64_t[1]', n), C.CR_DT_I64))
    label_t = util.own(lbox[0])
    num_classes = 0
    for _, v in ipairs(labels) do num_classes = math.max(num_classes, v + 1) end
  end
  local display = {}
  for i = 1, n do display[i] = tars[i] .. ':' .. names[i] end
  local size = opts.size
  if type(size) == 'number' then size = { size, size } end
  local mean, std = dataset.photo_stats(nc, opts.mean, opts.std)
  return dataset.StreamedDataset {
    mean = mean, std = std,
    paths = display, labels = label_t,
    members = { files = tars, names = names, offsets = offsets, lengths = lengths },
    channels = nc, size = size, num_classes = num_classes,
    name = 'tar_shards', skip_bad = opts.skip_bad == true, warn = opts.warn,
    shuffle_buffer = opts.shuffle_buffer == nil and DEFAULT_SHUFFLE_BUFFER or opts.shuffle_buffer,
  }
end
