-- crescent.ssl.linear_probe — linear evaluation of frozen features: the trunk runs once
-- over the train and test sets (cr.ssl.extract_features: un-augmented, eval mode), the
-- features are standardised with the train set's per-dimension mean and std, and a
-- Linear layer is trained on them with cross-entropy by cr.train (SGD, cosine lr, the
-- eval hook measuring test top-1/top-5 after each epoch). Training on stored features is
-- the same as training a linear head on a frozen trunk without augmentation, hundreds
-- of times cheaper.
--
--   local task = cr.ssl.linear_probe.task{train_features = f, train_labels = y,
--       test_features = g, test_labels = z, num_classes = 10, epochs = 30, batch_size = 256,
--       lr = 0.1, momentum = 0.9, weight_decay = 0, seed = 0, split = 'test'}
--   cr.train(task)   -- task.metrics.test_top1
--
-- FeatureLoader{features =, labels =, batch_size =, shuffle =, seed =} is the loader over
-- tensors it uses: the order of epoch e is a Philox permutation keyed by (seed, e), as
-- cr.data.Loader's.
local cr = require 'crescent'
local C = require('crescent.ffi').C
local util = require 'crescent.util'

local M = {}

local FeatureLoader = {}
FeatureLoader.__index = FeatureLoader
M.FeatureLoader = FeatureLoader

function M.loader(o)
  local n = o.features.shape[1]
  return setmetatable({ features = o.features, labels = o.labels, n = n, batch_size = o.batch_size,
                        shuffle = o.shuffle ~= false, seed = o.seed or 0,
                        drop_last = o.drop_last == true }, FeatureLoader)
end

function FeatureLoader:num_batches()
  if self.drop_last then return math.floor(self.n / self.batch_size) end
  return math.ceil(self.n / self.batch_size)
end

function FeatureLoader:iter(epoch)
  local box = util.box
  if C.cr_data_permutation(box, self.n, self.seed, epoch or 0, self.shuffle) ~= 0 then util.raise() end
  local order = util.own(box[0])
  if order.device ~= self.features.device then order = order:to(self.features.device) end
  local nb, bs, b = self:num_batches(), self.batch_size, 0
  return function()
    if b >= nb then return nil end
    local first = b * bs
    local idx = order:narrow(0, first, math.min(bs, self.n - first))
    b = b + 1
    return { input = self.features:index_select(0, idx), target = self.labels:index_select(0, idx), index = idx }
  end
end

-- Standardises train and test features with the train set's mean and std per dimension.
function M.standardize(train, test)
  local mean = train:mean(0, true)
  local std = (train - mean):pow(2):mean(0, true):sqrt() + 1e-6
  return (train - mean) / std, (test - mean) / std
end

local function check(o, key, lo)
  local v = o[key]
  if type(v) ~= 'number' or v < lo then
    error(string.format('linear_probe: %s must be a number >= %g, got %s', key, lo, tostring(v)), 0)
  end
  return v
end

-- task{...} -> a Task training the linear layer (see the top).
function M.task(o)
  for _, k in ipairs { 'train_features', 'test_features' } do
    if not cr.is_tensor(o[k]) or o[k].ndim ~= 2 then error('linear_probe: ' .. k .. ' must be a tensor [N, D]', 0) end
  end
  local D = o.train_features.shape[2]
  local classes = check(o, 'num_classes', 2)
  local epochs, bs = check(o, 'epochs', 0), check(o, 'batch_size', 1)
  local lr = check(o, 'lr', 0)
  local train_x, test_x = o.train_features, o.test_features
  if o.standardize ~= false then train_x, test_x = M.standardize(train_x, test_x) end
  local head = cr.nn.Linear(D, classes):to(train_x.device)  -- where the features are
  local opt = cr.optim.SGD(head:named_parameters(), { lr = lr, momentum = o.momentum or 0.9,
                                                       weight_decay = o.weight_decay or 0 })
  local task = cr.engine.Task {
    model = head, optimizer = opt, epochs = epochs, test_every = 1, name = 'linear_probe',
    schedules = { lr = cr.schedule.cosine { from = lr, to = 0 } },
    loss = function(out, batch) return cr.cross_entropy(out, batch.target) end,
    train_loader = M.loader { features = train_x, labels = o.train_labels, batch_size = bs, seed = o.seed,
                              drop_last = true },
    test_loader = M.loader { features = test_x, labels = o.test_labels, batch_size = 1000, shuffle = false },
  }
  task:add_hook(cr.hooks.schedule())
  task:add_hook(cr.hooks.timer())
  task:add_hook(cr.hooks.eval { topk = { 1, 5 } })
  if o.log ~= false then task:add_hook(cr.hooks.console { every = o.log_every or 1000, split = o.split }) end
  return task
end

return M
