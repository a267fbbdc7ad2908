-- crescent.data.shard_order — the epoch order of a data set read front to back from tar
-- shards (a StreamedDataset with shuffle_buffer > 0), as webdataset reads them:
--
--   1. the shards are visited in an order shuffled per (seed, epoch) (cr_data_permutation
--      over the shard count; in archive order without shuffle);
--   2. sharded over w ranks, the shards are dealt out in that order, each to the rank
--      holding the fewest samples so far (ties: the lowest rank), so every rank reads
--      only its own shards and the ranks' shares differ by at most one shard;
--   3. a rank's stream is its shards' samples in archive order, and its order is that
--      stream through a shuffle buffer (cr_data_buffer_shuffle, keyed by seed and epoch);
--   4. every rank then takes the same number of samples, the Loader's size (the
--      DistributedSampler's ceil(n / w), or floor with pad = false): a rank with fewer
--      repeats the start of its order, one with more leaves its last samples for an epoch
--      that deals the shards differently.
--
-- With one rank an epoch visits every sample once. A shard is a run of consecutive rows
-- from one archive (so subsets such as a held-out split keep the grouping).
--
--   local order, stream = shard_order.epoch(ds, {seed =, epoch =, shuffle =, shard =, size =})
--   -- order i64 [size], stream i64 [M] (the rows in the order they are read)
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local util = require 'crescent.util'

local M = {}

local i64_array, i64_ptr = ffi.typeof('int64_t[?]'), ffi.typeof('const int64_t *')

-- The data set's shards: {first = 0-based row, count = n} per run of one archive's rows.
function M.shards(ds)
  local files, out = ds.members.files, {}
  for i, f in ipairs(files) do
    local last = out[#out]
    if last and files[i - 1] == f then last.count = last.count + 1
    else out[#out + 1] = { first = i - 1, count = 1 } end
  end
  return out
end

-- An i64 tensor [n] of the n values in a C array.
local function tensor_of(values, n)
  local box = util.box
  util.check(C.cr_tensor_from_data(box, values, 1, i64_array(1, n), C.CR_DT_I64))
  return util.own(box[0])
end

-- The shards (indices into `shards`, 1-based) that `rank` reads this epoch.
local function dealt(shards, perm, rank, world_size)
  local held, mine = {}, {}
  for r = 0, world_size - 1 do held[r] = 0 end
  for k = 0, #shards - 1 do
    local s = tonumber(perm[k]) + 1
    local to = 0
    for r = 1, world_size - 1 do
      if held[r] < held[to] then to = r end
    end
    held[to] = held[to] + shards[s].count
    if to == rank then mine[#mine + 1] = s end
  end
  return mine
end

function M.epoch(ds, o)
  local shards = o.shards or M.shards(ds)
  local box = util.box
  if C.cr_data_permutation(box, #shards, o.seed, o.epoch, o.shuffle) ~= 0 then util.raise() end
  local perm = util.own(box[0])
  local pp = ffi.cast(i64_ptr, perm:data_ptr())
  local shard = o.shard
  local picked
  if shard then
    picked = dealt(shards, pp, shard.rank, shard.world_size)
  else
    picked = {}
    for k = 0, #shards - 1 do picked[k + 1] = tonumber(pp[k]) + 1 end
  end
  local m = 0
  for _, s in ipairs(picked) do m = m + shards[s].count end
  if m == 0 then
    error(string.format('Loader: %d tar shards for %d ranks: rank %d reads none this epoch; write at least one ' ..
      'shard per rank, or read by sample (shuffle_buffer = 0)', #shards, shard.world_size, shard.rank), 0)
  end
  local rows, t = i64_array(m), 0
  for _, s in ipairs(picked) do
    local first = shards[s].first
    for j = 0, shards[s].count - 1 do rows[t + j] = first + j end
    t = t + shards[s].count
  end
  local stream = tensor_of(rows, m)
  local order = stream
  if o.shuffle then
    if C.cr_data_buffer_shuffle(box, stream, ds.shuffle_buffer, o.seed, o.epoch) ~= 0 then util.raise() end
    order = util.own(box[0])
  end
  local size = o.size
  if size == m then return order, stream end
  local src, out = ffi.cast(i64_ptr, order:data_ptr()), i64_array(size)
  for k = 0, size - 1 do out[k] = src[k % m] end
  return tensor_of(out, size), stream
end

return M
