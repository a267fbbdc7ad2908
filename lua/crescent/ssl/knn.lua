-- crescent.ssl.knn — the weighted k-nearest-neighbour classifier of InstDisc / DINO, the
-- standard monitor of self-supervised features:
--   knn.classify(train_features [N, D], train_labels [N], test_features [M, D],
--                test_labels [M], {k = 200, temperature = 0.1, num_classes = nil,
--                normalize = true, chunk = nil, predictions = false}) -> top1, top5 (in %)
--                [, the top-1 class of every test row, i64 [M], with predictions = true]
-- For each test row: cosine similarities to every train row (features L2-normalised here
-- unless normalize = false), the k most similar, each voting exp(sim / T) for its label;
-- classes are ranked by their summed votes (ties: lower class id first, a stable sort).
-- top-5 counts the label among the first min(5, C) classes. Test rows go in chunks of
-- `chunk` rows (default: about 32 MiB of similarities each), so memory stays bounded.
-- Everything runs under no_grad with mm and topk (heap selection) doing the heavy work.
local cr = require 'crescent'
local util = require 'crescent.util'

local M = {}

local function fail(msg) error(msg, util.user_level()) end
local function shape_str(t) return '[' .. table.concat(t.shape, ', ') .. ']' end

local function labels_of(what, t, n)
  if not cr.is_tensor(t) then fail(string.format('knn: %s must be a tensor of class ids, got %s', what, type(t))) end
  if t.ndim ~= 1 or t.shape[1] ~= n then
    fail(string.format('knn: %s is %s but there are %d feature rows', what, shape_str(t), n))
  end
  return t:long()
end
-- labels on the device of the features they go with
local function on_device(labels, features)
  return labels.device == features.device and labels or labels:to(features.device)
end

function M.classify(train, train_labels, test, test_labels, opts)
  if opts ~= nil and type(opts) ~= 'table' then fail('knn: options must be a table, got ' .. type(opts)) end
  opts = opts or {}
  for name, t in pairs { train_features = train, test_features = test } do
    if not cr.is_tensor(t) or t.ndim ~= 2 or not t:is_floating_point() then
      fail(string.format('knn: %s must be a float tensor [rows, D], got %s', name,
                         cr.is_tensor(t) and (t.dtype .. ' ' .. shape_str(t)) or type(t)))
    end
  end
  local N, D, Mt = train.shape[1], train.shape[2], test.shape[1]
  if test.shape[2] ~= D then
    fail(string.format('knn: train features are %s but test features are %s; the feature dims must match',
                       shape_str(train), shape_str(test)))
  end
  if N == 0 then fail('knn: the train set is empty') end
  local ytr = on_device(labels_of('train_labels', train_labels, N), train)
  local yte = on_device(labels_of('test_labels', test_labels, Mt), train)
  if test.device ~= train.device then test = test:to(train.device) end
  local k = opts.k or 200
  if type(k) ~= 'number' or k < 1 or k ~= math.floor(k) then fail('knn: k must be an integer >= 1, got ' .. tostring(k)) end
  k = math.min(k, N)
  local T = opts.temperature or 0.1
  if type(T) ~= 'number' or T ~= T or T <= 0 then fail('knn: temperature must be a number > 0, got ' .. tostring(T)) end
  local C = opts.num_classes
  if C == nil then
    C = math.max(ytr:max():item(), Mt > 0 and yte:max():item() or 0) + 1
  end
  if ytr:min():item() < 0 or ytr:max():item() >= C then
    fail(string.format('knn: train labels must lie in [0, %d)', C))
  end
  local chunk = opts.chunk or math.max(1, math.floor(2 ^ 23 / N))
  if Mt == 0 then return 0, 0, opts.predictions and cr.empty({ 0 }, { dtype = 'i64' }) or nil end
  local top1, top5, preds = 0, 0, {}
  cr.no_grad(function()
    local tr, te = train, test
    if opts.normalize ~= false then
      tr, te = train:normalize({ dim = 1 }), test:normalize({ dim = 1 })
    end
    if te.dtype ~= tr.dtype then te = te:to(tr.dtype) end
    local trT = tr:t()
    local nt = math.min(5, C)
    for s = 0, Mt - 1, chunk do
      local b = math.min(chunk, Mt - s)
      local sim = te:narrow(0, s, b):mm(trT)                       -- [b, N]
      local vals, idx = sim:topk(k, 1)                             -- [b, k]
      local nbr = ytr:index_select(0, idx:view(-1)):view(b, k)     -- neighbours' labels
      local w = (vals / T):exp()
      local votes = cr.zeros({ b, C }, { dtype = w.dtype, device = w.device }):scatter_add(1, nbr, w)
      local _, pred = votes:topk(nt, 1)                            -- [b, nt]
      if opts.predictions then preds[#preds + 1] = pred:narrow(1, 0, 1):reshape({ b }) end
      local hit = pred:eq(yte:narrow(0, s, b):view(b, 1))
      top1 = top1 + hit:narrow(1, 0, 1):sum():item()
      top5 = top5 + hit:sum():item()
    end
  end)
  if opts.predictions then return 100 * top1 / Mt, 100 * top5 / Mt, cr.cat(preds, 0) end
  return 100 * top1 / Mt, 100 * top5 / Mt
end

return M
