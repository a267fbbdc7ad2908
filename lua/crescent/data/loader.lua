-- crescent.data.loader — cr.data.Loader: batches of a data set in an order that is a
-- pure function of (seed, epoch), so a run is reproducible and a resume at (epoch,
-- batch) replays exactly what the interrupted run would have seen. The order and the
-- augmentation draws come from their own Philox keys (csrc/include/crescent_data.h):
-- the global RNG stream (init, dropout) is neither read nor moved by a loader.
--
--   local loader = cr.data.Loader(ds, {batch_size = 256, shuffle = true, drop_last = true,
--                                      seed = 0, augment = false, transform = nil})
--   for batch in loader:iter(epoch) do ... end   -- batch.input f32 [B, C, H, W] normalised,
--                                                -- batch.target i64 [B], batch.index i64 [B]
--   loader:num_batches(); loader:size() (samples per epoch: the shard's with `shard`)
--   loader:state_dict() / load_state_dict{epoch =, batch =}
--
-- views = an object with :apply(images, index, seed, epoch, {mean =, std =}) returning a
-- list of f32 tensors (cr.data.transforms.multicrop / two_views): the batch then holds
-- input = that list of crops (from the images, keyed by the loader's seed), size = B,
-- target and index; augment must be off, mean/std default to the data set's.
-- Images are u8 (0..255) or f32 in [0, 1] (torchvision's float convention).
--
-- A streamed data set (cr.data.image_folder{stream = true}, dataset.StreamedDataset)
-- holds file names, not pixels: the worker threads read and decode each sample's file
-- in turn (workers = 0 counts as 1 there), crop it at its own size for views, or resize
-- it to the data set's size for plain batches; the batches equal those of an in-memory
-- data set holding the same decoded pixels. Views must then come from
-- cr.data.transforms.multicrop or two_views.
--
-- A tar-shard data set with shuffle_buffer > 0 (cr.data.tar_shards' default) is read
-- front to back instead, shard by shard: the epoch's order is crescent.data.shard_order's
-- (shards shuffled per seed and epoch, dealt to the ranks when sharded, samples through
-- the shuffle buffer), and one reader in the pipeline reads each shard sequentially,
-- keeping the samples read ahead of their batch (about shuffle_buffer of them) in memory.
--
-- workers = N >= 1 (default 0: each batch is built on the calling thread when asked for)
-- starts N C threads per iter() that build the epoch's batches ahead, in order, into a
-- ring of `prefetch` slots (default 2 N): at most prefetch batches wait in the ring
-- besides the one handed out, and the batches are bit-identical to workers = 0 (every
-- draw is keyed by seed, epoch, sample and crop). `transform` still runs here, on the
-- consumer's side. The threads stop at the end of the epoch, when the iterator is
-- garbage (a `break`), at the next iter() on the same loader, at loader:close(), and on
-- an error (a worker's error is raised by the iterator for its batch). Views need
-- cr.data.transforms.multicrop / two_views with workers (the crops are built in C).
--
-- pin_memory = true puts every batch's tensors (input or crops, target; not the index) in
-- page-locked host memory, from which a copy to a GPU runs asynchronously (t:to('cuda',
-- {non_blocking = true})); with workers the batches are built there, without, they are
-- copied there. The default, nil, pins when the caller of iter says the batches go to a
-- GPU (a Task on cuda does); false never pins. Pinning needs a usable CUDA GPU.
--
-- shard = {rank = r, world_size = w, pad = true}: distributed sampling as PyTorch's
-- DistributedSampler (crescent.data.sampler). Every rank computes the same epoch order
-- (same seed), extends it to ceil(n / w) w samples by repeating its start (pad = true,
-- the default) or cuts it to floor(n / w) w (pad = false), and takes the positions r,
-- r + w, r + 2 w, ...: that shard is the rank's order, so num_batches, iter, the workers,
-- views and drop_last all work on it, and every rank has the same number of batches.
-- Batch k of rank r then holds the positions k w b + j w + r (j < b): interleaving the
-- ranks' batch k (element j of rank r at j w + r) gives exactly batch k of a one-rank
-- loader with batch_size w b and the same seed and shuffle (the padded tail aside), so a
-- w-rank run sees per step what one rank with a w times larger batch would. state_dict()
-- records rank and world_size; a mid-epoch position (batch > 0) only resumes with the
-- same world_size, an epoch boundary (batch = 0) with any.
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local util = require 'crescent.util'
local sampler = require 'crescent.data.sampler'
local shard_order = require 'crescent.data.shard_order'
local cuda = require 'crescent.cuda'

local Loader = {}
Loader.__index = Loader

local OPTS = { batch_size = 'number', shuffle = 'boolean', drop_last = 'boolean', seed = 'number',
               augment = 'boolean or table', transform = 'function', views = 'table',
               workers = 'number', prefetch = 'number', shard = 'table', pin_memory = 'boolean' }
local SHARD_OPTS = { rank = true, world_size = true, pad = true }
local MAX_WORKERS, MAX_PREFETCH = 64, 1024   -- csrc/data/pipeline.c's limits
-- augment = true: torchvision's RandomCrop(size, padding = 4) + RandomHorizontalFlip.
local AUGMENT_DEFAULT = { pad = 4, flip = true }

local tensor_ptr_ct = ffi.typeof('cr_tensor*') -- made once: see tensor.lua on C type strings
local tensor_vla_ct = ffi.typeof('cr_tensor*[?]')
local job_ct = ffi.typeof('cr_data_pipeline_job')
local groups_ct = ffi.typeof('cr_data_crop_group[?]')
local pipe_box = ffi.new('cr_data_pipeline*[1]')
local function is_tensor(x) return type(x) == 'cdata' and ffi.istype(tensor_ptr_ct, x) end
local function default_warn(msg)
  util.end_live_line()
  io.stderr:write('crescent: warning: ', msg, '\n')
end
local function is_count(v, min) return type(v) == 'number' and v == math.floor(v) and v >= min end

local function aug_from(opt)
  if not opt then return nil end
  local a = opt == true and AUGMENT_DEFAULT or opt
  for k in pairs(a) do
    if k ~= 'pad' and k ~= 'flip' then
      error("Loader: unknown augment option '" .. tostring(k) .. "'; options are pad, flip", 3)
    end
  end
  local pad = a.pad or 0
  if not is_count(pad, 0) then error('Loader: augment.pad must be a non-negative integer, got ' .. tostring(pad), 3) end
  local s = ffi.new('cr_data_augment')
  s.pad, s.hflip = pad, a.flip and 1 or 0
  return s
end

-- The shard option, checked: {rank =, world_size =, pad =} or nil.
local function shard_from(opt)
  if opt == nil then return nil end
  for k in pairs(opt) do
    if not SHARD_OPTS[k] then
      error("Loader: unknown shard option '" .. tostring(k) .. "'; options are pad, rank, world_size", 3)
    end
  end
  if opt.rank == nil or opt.world_size == nil then
    error('Loader: shard needs rank and world_size, e.g. shard = {rank = 0, world_size = 4} ' ..
      '(cr.dist.launcher.detect() gives both)', 3)
  end
  sampler.check(opt.rank, opt.world_size, opt.pad, 'Loader: shard', 3)
  return { rank = opt.rank, world_size = opt.world_size, pad = opt.pad ~= false }
end

-- mean/std as one value per channel (C reads exactly nchan of each).
local function per_channel(v, default, what, nchan)
  if v == nil then v = default end
  if type(v) == 'number' then
    local t = {}
    for c = 1, nchan do t[c] = v end
    return t
  end
  if type(v) ~= 'table' or #v ~= nchan then
    error(string.format('Loader: the data set\'s %s must be a number or %d numbers (one per channel)', what, nchan), 3)
  end
  return v
end

local function new(_, ds, opts)
  opts = opts or {}
  local streamed = (type(ds) == 'table' or type(ds) == 'userdata') and ds.streamed == true
  if not streamed and ((type(ds) ~= 'table' and type(ds) ~= 'userdata') or not is_tensor(ds.images)) then
    error('Loader: expected a data set with .images (a u8 or f32 tensor), e.g. cr.data.fashion_mnist{}, got ' ..
      type(ds), 2)
  end
  local dt = streamed and 'u8' or ds.images.dtype
  if dt ~= 'u8' and dt ~= 'f32' then
    error('Loader: the data set\'s images are ' .. dt .. '; pass u8 images (0..255) or f32 images (0..1), ' ..
      'e.g. images:byte() or images:float()', 2)
  end
  for k, v in pairs(opts) do
    local want = OPTS[k]
    if not want then
      error("Loader: unknown option '" .. tostring(k) .. "'; options are " .. table.concat(util.sorted_keys(OPTS), ', '), 2)
    end
    if not want:find(type(v), 1, true) then
      error(string.format('Loader: option %s must be a %s, got %s', k, want, type(v)), 2)
    end
  end
  local bs = opts.batch_size or 256
  if not is_count(bs, 1) then error('Loader: batch_size must be a positive integer, got ' .. tostring(bs), 2) end
  local seed = opts.seed or 0
  if not is_count(seed, 0) then error('Loader: seed must be a non-negative integer, got ' .. tostring(seed), 2) end
  local shard = shard_from(opts.shard)
  local n, what = #ds, ds.name or 'the data set'
  if shard then
    n = sampler._size(n, shard.world_size, shard.pad, 'Loader: shard of ' .. what, 2)
    what = string.format('the shard of rank %d (%d samples of %s over world_size %d, pad = %s)', shard.rank,
      #ds, what, shard.world_size, tostring(shard.pad))
  end
  if opts.drop_last ~= false and n < bs and n > 0 then
    error(string.format('Loader: %s has %d samples, fewer than batch_size %d, and drop_last is on: ' ..
      'no batch would come out; lower batch_size or pass drop_last = false', what, n, bs), 2)
  end
  local nchan = streamed and ds.channels or ds.images:dim() == 4 and ds.images:size(1) or 1
  local mean, std = per_channel(ds._mean or ds.mean, 0, 'mean', nchan), per_channel(ds._std or ds.std, 1, 'std', nchan)
  if opts.views ~= nil and (type(opts.views.apply) ~= 'function' or opts.augment) then
    error('Loader: views must be a transform with :apply (cr.data.transforms.multicrop{...}) and excludes augment', 2)
  end
  local workers = opts.workers or 0
  if not is_count(workers, 0) or workers > MAX_WORKERS then
    error(string.format('Loader: workers must be an integer in [0, %d] (0: batches built on the calling thread), ' ..
      'got %s', MAX_WORKERS, tostring(workers)), 2)
  end
  if streamed then
    workers = math.max(workers, 1)   -- the files are decoded in C worker threads
    if opts.views == nil and ds.size == nil then
      error('Loader: ' .. what .. ' is streamed and has no size: plain batches resize every image to the ' ..
        "data set's size; pass size = {h, w} to it (image_folder{..., size = }), or views for crops", 2)
    end
  end
  local prefetch = opts.prefetch or math.max(2, 2 * workers)
  if not is_count(prefetch, 1) or prefetch > MAX_PREFETCH then
    error(string.format('Loader: prefetch must be an integer in [1, %d] (batches built ahead by the workers), ' ..
      'got %s', MAX_PREFETCH, tostring(prefetch)), 2)
  end
  if workers > 0 and opts.views ~= nil and (type(opts.views._spec) ~= 'function' or type(opts.views.groups) ~= 'table') then
    error('Loader: with workers' .. (streamed and ' (always, for a streamed data set)' or '') .. ', views must come ' ..
      'from cr.data.transforms.multicrop or two_views (the workers build the crops in C)' ..
      (streamed and '' or '; pass workers = 0 for a custom views object'), 2)
  end
  local self = setmetatable({
    views = opts.views, stats = { mean = mean, std = std },
    ds = ds, batch_size = bs, seed = seed, shard = shard,
    shuffle = opts.shuffle ~= false, drop_last = opts.drop_last ~= false,
    transform = opts.transform, aug = aug_from(opts.augment),
    mean = ffi.new('double[?]', #mean, mean), std = ffi.new('double[?]', #std, std),
    epoch = 0, batch = 0,   -- the sampler position: the next batch to hand out
    workers = workers, prefetch = prefetch, nchan = nchan, pin_memory = opts.pin_memory,
    sequential = streamed and (ds.shuffle_buffer or 0) > 0,   -- tar shards read front to back
    runs = setmetatable({}, { __mode = 'k' }),   -- live worker runs; weak: a dropped iterator is collected
  }, Loader)
  return self
end
setmetatable(Loader, { __call = new })

-- The number of samples per epoch: the data set's, or this rank's shard's.
function Loader:size()
  local n, s = #self.ds, self.shard
  if s then return sampler.shard_size(n, s.world_size, s.pad) end
  return n
end

function Loader:num_batches()
  local n = self:size()
  if self.drop_last then return math.floor(n / self.batch_size) end
  return math.ceil(n / self.batch_size)
end

-- The epoch's sample order, i64 [N] (the identity when shuffle is off); with shard,
-- this rank's part of it, i64 [self:size()]. Read front to back (a data set with
-- shuffle_buffer), also the stream: the rows in the order the reader reads them.
function Loader:order(epoch)
  if self.sequential then
    self.shards = self.shards or shard_order.shards(self.ds)
    return shard_order.epoch(self.ds, { seed = self.seed, epoch = epoch, shuffle = self.shuffle, shard = self.shard,
                                        size = self:size(), shards = self.shards })
  end
  local box = util.box
  if C.cr_data_permutation(box, #self.ds, self.seed, epoch, self.shuffle) ~= 0 then util.raise() end
  local order, s = util.own(box[0]), self.shard
  if s then return sampler.shard(order, s.rank, s.world_size, s.pad) end
  return order
end

-- The batch of the given dataset rows (i64 [B]), assembled (and augmented) in C.
function Loader:make_batch(index, epoch)
  if self.views then
    local ds = self.ds
    local input = self.views:apply(ds.images, index, self.seed, epoch, self.stats)
    local target = ds.labels and ds.labels:index_select(0, index):long() or nil
    return { input = input, target = target, index = index, size = #index }
  end
  local aug = self.aug
  if aug then aug.seed, aug.epoch = self.seed, epoch end
  local box, ds = util.box, self.ds
  box[1] = nil
  local st = C.cr_data_make_batch(box, box + 1, ds.images, ds.labels, index, self.mean, self.std, aug)
  if st ~= 0 then util.raise() end
  local input = util.own(box[0])
  local target = ds.labels and util.own(box[1]) or nil
  return { input = input, target = target, index = index }
end

-- The batch's tensors copied into pinned memory (workers = 0 builds them in plain memory).
local function pin_batch(batch)
  local x = batch.input
  if type(x) == 'table' then
    for i, t in ipairs(x) do x[i] = t:pin_memory() end
  else
    batch.input = x:pin_memory()
  end
  if batch.target then batch.target = batch.target:pin_memory() end
  return batch
end

-- Whether this iteration pins its batches (to_gpu: the caller moves them to a GPU).
function Loader:_pins(to_gpu)
  local pin = self.pin_memory
  if pin == nil then pin = to_gpu == true end
  if pin and not cuda.is_available() then
    error('Loader: pin_memory puts batches in page-locked memory for copies to a GPU, and this machine has ' ..
      'no usable one (' .. tostring(cuda.why_not()) .. '); pass pin_memory = false', 3)
  end
  return pin
end

-- Iterates over the batches of `epoch` (default: the loader's position), starting at
-- batch `start_batch` (default 0, or the saved position when resuming that epoch).
-- Each batch is {input, target, index, epoch, batch}; `transform(batch)` runs last and
-- may return a replacement. to_gpu = true says the batches go to a GPU: with pin_memory
-- left nil, they come in pinned memory.
function Loader:iter(epoch, start_batch, to_gpu)
  if epoch == nil then
    epoch = self.epoch
    if start_batch == nil then start_batch = self.batch end
  end
  start_batch = start_batch or 0
  if not is_count(epoch, 0) then error('Loader:iter: epoch must be a non-negative integer, got ' .. tostring(epoch), 2) end
  local nb = self:num_batches()
  if not is_count(start_batch, 0) or start_batch > nb then
    error(string.format('Loader:iter: start_batch must be an integer in [0, %d], got %s', nb, tostring(start_batch)), 2)
  end
  local pin = self:_pins(to_gpu)
  self:close()
  local order, stream = self:order(epoch)
  local bs = self.batch_size
  local n = order:size(0)   -- the data set's size, or the shard's
  local b = start_batch
  self.epoch, self.batch = epoch, b
  if self.workers > 0 then return self:_iter_workers(order, stream, epoch, b, nb, pin) end
  return function()
    if b >= nb then
      self.epoch, self.batch = epoch + 1, 0
      return nil
    end
    local first = b * bs
    local size = math.min(bs, n - first)
    local batch = self:make_batch(order:narrow(0, first, size), epoch)
    if pin then pin_batch(batch) end
    batch.epoch, batch.batch = epoch, b
    b = b + 1
    self.batch = b
    if self.transform then batch = self.transform(batch) or batch end
    return batch
  end
end

-- ---- workers: the C pipeline (csrc/data/pipeline.c) --------------------------------

local skip_msg = ffi.new('char[?]', 1024)

-- Frees a run's pipeline: joins its threads and drops its batches and references; then,
-- for a streamed data set with skip_bad, warns of the files its workers replaced.
local stats_ct = ffi.typeof('cr_data_stream_stats')

-- The sequential reader's figures of a pipeline, as a table.
local function stream_stats(p)
  local st = ffi.new(stats_ct)
  C.cr_data_pipeline_stream_stats(p, st)
  return { members = tonumber(st.members), bytes = tonumber(st.bytes), backward_seeks = tonumber(st.backward_seeks),
           peak_bytes = tonumber(st.peak_bytes), peak_members = tonumber(st.peak_members) }
end

local function close_run(run)
  local p = run.pipe
  if p ~= nil then
    run.pipe = nil
    ffi.gc(p, nil)
    C.cr_data_pipeline_stop(p)
    if run.loader then run.loader.last_stream_stats = stream_stats(p) end
    local skipped = tonumber(C.cr_data_pipeline_skipped(p, skip_msg, 1024))
    C.cr_data_pipeline_free(p)
    if skipped > 0 and run.warn then
      run.warn(string.format('Loader: %d unreadable file%s replaced by the next readable one this epoch; the first: %s',
        skipped, skipped > 1 and 's were' or ' was', ffi.string(skip_msg)))
    end
  end
end

-- Starts the threads for batches first .. nb - 1 of the epoch with this order (and the
-- rows' read order, stream, or nil), their batches pinned or not.
function Loader:_start(order, stream, epoch, first, nb, pin)
  local ds, job = self.ds, ffi.new(job_ct)
  job.labels, job.order, job.stream = ds.labels, order, stream
  job.pin_memory = pin and 1 or 0
  if ds.streamed then
    job.paths, job.channels, job.skip_bad = ds._paths, ds.channels, ds.skip_bad and 1 or 0
    if ds.size then job.height, job.width = ds.size[1], ds.size[2] end
  else
    job.images = ds.images
  end
  job.batch_size, job.num_batches, job.first_batch = self.batch_size, nb, first
  job.workers, job.prefetch = self.workers, self.prefetch
  job.seed, job.epoch = self.seed, epoch
  local groups -- anchored in this frame until the start call copied it
  if self.views then
    local list = self.views.groups
    groups = ffi.new(groups_ct, #list)
    for g, grp in ipairs(list) do
      groups[g - 1].spec = self.views:_spec(g, self.nchan, self.stats)
      groups[g - 1].ncrops, groups[g - 1].first_crop = grp.n, grp.first
    end
    job.groups, job.ngroups = groups, #list
  else
    local aug = self.aug
    if aug then aug.seed, aug.epoch = self.seed, epoch end
    job.mean, job.std, job.aug = self.mean, self.std, aug
  end
  if C.cr_data_pipeline_start(pipe_box, job) ~= 0 then util.raise() end
  return ffi.gc(pipe_box[0], C.cr_data_pipeline_free), groups  -- groups: kept alive past the call
end

-- The iterator of Loader:iter with workers: batches come from the pipeline in order.
function Loader:_iter_workers(order, stream, epoch, b, nb, pin)
  local run = { warn = self.ds.streamed and self.ds.skip_bad and (self.ds.warn or default_warn) or nil,
                loader = self.sequential and self or nil }
  if b < nb then run.pipe = self:_start(order, stream, epoch, b, nb, pin) end
  self.runs[run] = true
  local views = self.views
  local ngroups = views and #views.groups or 1
  local outs = ffi.new(tensor_vla_ct, ngroups + 2)
  return function()
    if b >= nb then
      close_run(run)
      self.epoch, self.batch = epoch + 1, 0
      return nil
    end
    local p = run.pipe
    if p == nil then
      error(run.failed or ('Loader: this iterator was stopped by loader:close() or a newer loader:iter(); ' ..
        'start a new one with loader:iter()'), run.failed and 0 or 2)
    end
    if C.cr_data_pipeline_next(p, outs) ~= 0 then
      close_run(run)   -- the message stays: freeing sets no error
      run.failed = 'Loader: ' .. ffi.string(C.cr_last_error())
      error(run.failed, util.user_level())
    end
    local input
    if views then
      local groups = {}
      for g = 1, ngroups do groups[g] = util.own(outs[g - 1]) end
      input = views:_crops(groups)
    else
      input = util.own(outs[0])
    end
    local target = outs[ngroups] ~= nil and util.own(outs[ngroups]) or nil
    local index = util.own(outs[ngroups + 1])
    local batch = { input = input, target = target, index = index, size = views and #index or nil,
                    epoch = epoch, batch = b }
    b = b + 1
    self.batch = b
    if b >= nb then close_run(run) end   -- the threads are done: release them now
    if self.transform then batch = self.transform(batch) or batch end
    return batch
  end
end

-- A data set read front to back: what the reader of the latest epoch did, {members =,
-- bytes =, backward_seeks =, peak_bytes =, peak_members =} (peak: read ahead of their
-- batch and waiting), counted until that epoch's iterator finished or was closed; nil
-- before or otherwise.
function Loader:stream_stats()
  for run in pairs(self.runs) do
    if run.pipe ~= nil then return stream_stats(run.pipe) end
  end
  return self.last_stream_stats
end

-- Stops the worker threads of this loader's iterators (a no-op without workers). An
-- iterator stopped this way raises an error if called again; iter() starts afresh.
function Loader:close()
  for run in pairs(self.runs) do
    close_run(run)
    self.runs[run] = nil
  end
end

-- The sampler position for checkpoints: resume with load_state_dict, then iter().
-- Sharded, it also holds rank and world_size.
function Loader:state_dict()
  local s = { epoch = self.epoch, batch = self.batch, seed = self.seed }
  if self.shard then s.rank, s.world_size = self.shard.rank, self.shard.world_size end
  return s
end

function Loader:load_state_dict(s)
  if type(s) ~= 'table' or not is_count(s.epoch, 0) or not is_count(s.batch or 0, 0) then
    error('Loader:load_state_dict: expected {epoch = , batch = } with non-negative integers', 2)
  end
  if s.seed ~= nil and s.seed ~= self.seed then
    error(string.format('Loader:load_state_dict: the state was saved with seed %s, this loader has seed %s; ' ..
      'resuming would visit a different order', tostring(s.seed), tostring(self.seed)), 2)
  end
  -- a state without shard info, and an unsharded loader, are world_size 1
  local saved_w, w = s.world_size or 1, self.shard and self.shard.world_size or 1
  if not is_count(saved_w, 1) then
    error('Loader:load_state_dict: world_size must be a positive integer, got ' .. tostring(s.world_size), 2)
  end
  if saved_w ~= w and (s.batch or 0) > 0 then
    error(string.format('Loader:load_state_dict: the state was saved at batch %d of epoch %d with world_size %d, ' ..
      'this loader has world_size %d; a position within an epoch means other samples with another world size ' ..
      '(each rank takes every world_size-th sample of the epoch\'s order), so resuming here would skip or repeat ' ..
      'samples. Resume at an epoch boundary ({epoch = %d, batch = 0} redoes this epoch, {epoch = %d, batch = 0} ' ..
      'starts the next) or with world_size %d', s.batch, s.epoch, saved_w, w, s.epoch, s.epoch + 1, saved_w), 2)
  end
  local nb = self:num_batches()
  if (s.batch or 0) > nb then
    error(string.format('Loader:load_state_dict: the state is at batch %d of epoch %d, but an epoch of this loader ' ..
      'has %d batches; it was saved with another data set or batch size', s.batch, s.epoch, nb), 2)
  end
  self.epoch, self.batch = s.epoch, s.batch or 0
end

return Loader
