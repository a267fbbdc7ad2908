-- crescent.engine.meters — running measures over a phase: the top-k accuracy of
-- logits against labels, and a (weighted) average of scalars.
local M = {}

-- ---- AverageMeter: avg of values, weighted by n (e.g. a batch mean with its batch size)
local Average = {}
Average.__index = Average
function M.AverageMeter(name)
  return setmetatable({ name = name, sum = 0, count = 0, last = nil }, Average)
end
function Average:reset() self.sum, self.count, self.last = 0, 0, nil end
function Average:update(v, n)
  n = n or 1
  if type(v) ~= 'number' then v = v:item() end
  self.sum, self.count, self.last = self.sum + v * n, self.count + n, v
end
function Average:value() return self.count > 0 and self.sum / self.count or nil end

-- ---- AccuracyMeter{topk = {1, 5}}: percentage of samples whose label is among the k
-- highest logits. update(logits [B, C], target [B] i64).
local Accuracy = {}
Accuracy.__index = Accuracy
function M.AccuracyMeter(opts)
  opts = opts or {}
  local topk = opts.topk or { 1, 5 }
  for _, k in ipairs(topk) do
    if type(k) ~= 'number' or k < 1 or k ~= math.floor(k) then
      error('AccuracyMeter: topk entries must be positive integers, got ' .. tostring(k), 2)
    end
  end
  local maxk = 0
  for _, k in ipairs(topk) do maxk = math.max(maxk, k) end
  local self = setmetatable({ topk = topk, maxk = maxk, correct = {}, count = 0 }, Accuracy)
  self:reset()
  return self
end
function Accuracy:reset()
  for _, k in ipairs(self.topk) do self.correct[k] = 0 end
  self.count = 0
end
function Accuracy:update(logits, target)
  local shape = logits.shape
  if #shape ~= 2 then
    error('AccuracyMeter: logits must be [batch, classes], got [' .. table.concat(shape, ', ') .. ']', 2)
  end
  local b, c = shape[1], shape[2]
  if #target ~= b then
    error(string.format('AccuracyMeter: %d logits rows but %d targets', b, #target), 2)
  end
  local k = math.min(self.maxk, c)
  local _, idx = logits:topk(k, 1)                 -- [B, k], best first
  local hit = idx:eq(target:view(b, 1))            -- [B, k] bool
  for _, kk in ipairs(self.topk) do
    local n = math.min(kk, c)
    self.correct[kk] = self.correct[kk] + hit:narrow(1, 0, n):sum():item()
  end
  self.count = self.count + b
end
-- {top1 = percent, top5 = percent} (nil before any update)
function Accuracy:value()
  if self.count == 0 then return nil end
  local out = {}
  for _, k in ipairs(self.topk) do out['top' .. k] = 100 * self.correct[k] / self.count end
  return out
end

return M
