-- crescent.data.sampler — the distributed sampler (PyTorch's DistributedSampler): each
-- of world_size ranks takes its own shard of one epoch order that every rank computes
-- alike (same seed, same epoch), so the ranks together visit the data set once per epoch
-- without talking to each other. cr.data.Loader uses it through its `shard` option:
--
--   cr.data.Loader(ds, {batch_size = b, shard = {rank = r, world_size = w, pad = true}})
--   sampler.shard(order, rank, world_size, pad) -> i64 [L]   (order: i64 [n], e.g. loader:order)
--   sampler.shard_size(n, world_size, pad) -> L               (the same for every rank)
--
-- pad = true (the default): the order is extended to L w samples, L = ceil(n / w), by
-- repeating its start (wrapping as often as needed when n < w), so every sample is seen
-- and the ceil(n / w) w - n first samples of the order are seen twice. pad = false: the
-- order is cut to L w samples, L = floor(n / w) (an error when that is 0), so the last
-- n - L w samples of the order are skipped this epoch. Rank r takes the positions r, r + w,
-- r + 2 w, ... of the extended (or cut) order: strided, not a contiguous block.
--
-- The point of the strided layout: batch k of rank r (batch size b) holds the positions
-- k w b + j w + r, j = 0 .. b - 1, so interleaving the ranks' batch k (element j of rank r
-- at j w + r) gives exactly batch k of a one-rank loader with batch size w b over the same
-- order (same seed and shuffle): a w-rank run sees per step what a one-rank run with a
-- w times larger batch sees, the padded tail aside (the last batch of the one-rank loader
-- stops at n; pad = true adds the repeated start there, pad = false cuts at L w). The
-- batch counts agree too: ceil(L / b) = ceil(n / (w b)) with padding and without
-- drop_last, floor(floor(n / w) / b) = floor(n / (w b)) with drop_last and pad = false.
--
-- Built from tensor ops (an arange of the positions, index_select), so a data set of
-- millions of samples costs no Lua loop; with padding each rank has at most one padded
-- position (the extension is shorter than w), appended with one narrow + cat.
local cr = require 'crescent'

local M = {}

local function is_count(v, min) return type(v) == 'number' and v == math.floor(v) and v >= min end

-- Checks rank and world_size (integers, 0 <= rank < world_size) and pad (nil or a
-- boolean); `what` prefixes the messages, `level` is error()'s level for the caller.
function M.check(rank, world_size, pad, what, level)
  level = (level or 1) + 1
  if not is_count(world_size, 1) then
    error(string.format('%s: world_size must be an integer >= 1 (the number of ranks), got %s', what,
      tostring(world_size)), level)
  end
  if not is_count(rank, 0) or rank >= world_size then
    error(string.format('%s: rank must be an integer in [0, %d] (world_size %d), got %s', what, world_size - 1,
      world_size, tostring(rank)), level)
  end
  if pad ~= nil and type(pad) ~= 'boolean' then
    error(string.format('%s: pad must be a boolean (true: repeat the order\'s start so every rank has ' ..
      'ceil(n / world_size) samples; false: drop the rest), got %s', what, type(pad)), level)
  end
end

-- The shard length for n samples; `what` and `level` as for check.
local function size(n, world_size, pad, what, level)
  if pad == false then
    local len = math.floor(n / world_size)
    if len == 0 and n > 0 then
      error(string.format('%s: %d samples are fewer than world_size %d and pad = false: every shard would be ' ..
        'empty; pass pad = true (the default) or use fewer ranks', what, n, world_size), level + 1)
    end
    return len
  end
  return math.ceil(n / world_size)
end

M._size = size   -- for cr.data.Loader's messages

-- The length of every rank's shard of n samples.
function M.shard_size(n, world_size, pad)
  if not is_count(n, 0) then error('shard_size: n must be a non-negative integer, got ' .. tostring(n), 2) end
  M.check(0, world_size, pad, 'shard_size', 2)
  return size(n, world_size, pad, 'shard_size', 2)
end

-- Rank `rank`'s shard of `order` (i64 [n]): a new i64 tensor [shard_size(n, w, pad)].
function M.shard(order, rank, world_size, pad)
  if not cr.is_tensor(order) or order:dim() ~= 1 or order.dtype ~= 'i64' then
    error('shard: order must be an i64 tensor [n] (the epoch\'s sample order, e.g. loader:order(epoch) or ' ..
      'cr.arange(n)), got ' .. (cr.is_tensor(order) and (order.dtype .. ' with ' .. order:dim() .. ' dims')
      or type(order)), 2)
  end
  M.check(rank, world_size, pad, 'shard', 2)
  local n = order:size(0)
  local len = size(n, world_size, pad, 'shard', 2)
  local opts = { dtype = 'i64', device = order.device }
  -- the positions r, r + w, ... that lie inside the order; with padding the last one
  -- may lie past it (at most one: the extension is shorter than w)
  local last = rank + (len - 1) * world_size
  local inside = order:index_select(0, cr.arange(rank, math.min(n, len * world_size), world_size, opts))
  if len == 0 or last < n then return inside end
  return cr.cat({ inside, order:narrow(0, last % n, 1) })
end

return M
