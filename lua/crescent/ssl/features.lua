-- crescent.ssl.features — the feature extraction engine: a frozen network run over a
-- whole data set (un-augmented, normalised images, in order, eval mode, no graph), giving
-- the features and labels that kNN monitoring, linear probes and recipes/extract.lua use.
--
--   local feats, labels = cr.ssl.extract_features(trunk, dataset, {batch_size = 500})
--   -- feats f32 [N, D] (D = the trunk's output features), labels i64 [N] (nil if none)
--
-- The network's train/eval mode is restored afterwards. `forward = fn(x)` replaces
-- trunk(x) (e.g. to take a method's backbone); data sets are those of cr.data. Batches
-- go to `device` (default: the trunk's, trunk:device()), where the features stay.
-- `progress = fn(done, total)` is called after every batch (samples so far, all).
local cr = require 'crescent'
local util = require 'crescent.util'

local M = {}

local function fail(msg) error(msg, util.user_level()) end

function M.extract(trunk, ds, opts)
  if opts ~= nil and type(opts) ~= 'table' then fail('extract_features: options must be a table, got ' .. type(opts)) end
  opts = opts or {}
  local forward = opts.forward
  if forward == nil then
    if type(trunk) ~= 'table' or type(trunk.forward) ~= 'function' then
      fail('extract_features: the first argument must be a module (the trunk), got ' .. type(trunk))
    end
    forward = function(x) return trunk(x) end
  elseif type(forward) ~= 'function' then
    fail('extract_features: forward must be a function(x) -> features, got ' .. type(forward))
  end
  if not cr.data.is_dataset(ds) then
    fail('extract_features: the second argument must be a data set (cr.data.fashion_mnist{...}, ...), got ' .. type(ds))
  end
  local progress = opts.progress
  if progress ~= nil and type(progress) ~= 'function' then
    fail('extract_features: progress must be a function(done, total), got ' .. type(progress))
  end
  local bs = opts.batch_size or 500
  if type(bs) ~= 'number' or bs < 1 or bs ~= math.floor(bs) then
    fail('extract_features: batch_size must be a positive integer, got ' .. tostring(bs))
  end
  local n = #ds
  if n == 0 then fail('extract_features: the data set ' .. tostring(ds.name) .. ' is empty') end
  local device = opts.device or (type(trunk) == 'table' and trunk.device and trunk:device()) or 'cpu'
  local loader = cr.data.Loader(ds, { batch_size = bs, shuffle = false, drop_last = false })
  local was_training = type(trunk) == 'table' and trunk.training
  if type(trunk) == 'table' and trunk.eval then trunk:eval() end
  local feats, labels, row = nil, nil, 0
  local ok, err = pcall(cr.no_grad, function()
    for batch in loader:iter(0) do
      local x = batch.input
      local f = forward(x.device == device and x or x:to(device))
      if not cr.is_tensor(f) or f.ndim ~= 2 or f.shape[1] ~= #batch.index then
        error(string.format('extract_features: the network must return features [B, D] for a batch of %d, got %s',
          #batch.index, cr.is_tensor(f) and ('[' .. table.concat(f.shape, ', ') .. ']') or type(f)), 0)
      end
      if not feats then
        feats = cr.empty({ n, f.shape[2] }, { dtype = 'f32', device = f.device })
        labels = batch.target and cr.empty({ n }, { dtype = 'i64', device = f.device }) or nil
      end
      local b = f.shape[1]
      feats:narrow(0, row, b):copy_(f)
      if labels then labels:narrow(0, row, b):copy_(batch.target) end
      row = row + b
      if progress then progress(row, n) end
    end
  end)
  if was_training and trunk.train then trunk:train() end
  if not ok then error(err, 0) end
  return feats, labels
end

return M
