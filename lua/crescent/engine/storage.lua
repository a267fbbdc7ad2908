-- crescent.engine.storage — the event storage (detectron2's EventStorage): hooks and
-- train steps put scalars here, writers (console, JSONL, TensorBoard) read them back,
-- smoothed over a window when the writer of the value asked for it.
local Storage = {}
Storage.__index = Storage

-- One scalar's history: parallel arrays of values and iterations, capped at max_len
-- (the oldest half is dropped when full), plus running count/sum for the global mean.
local History = {}
History.__index = History

local function new_history(max_len)
  return setmetatable({ values = {}, iterations = {}, n = 0, count = 0, sum = 0,
                        max_len = max_len }, History)
end

function History:put(value, iteration)
  local n = self.n
  if n >= self.max_len then
    local half = math.floor(n / 2)
    table.move(self.values, half + 1, n, 1)
    table.move(self.iterations, half + 1, n, 1)
    for i = n - half + 1, n do self.values[i] = nil; self.iterations[i] = nil end
    n = n - half
  end
  n = n + 1
  self.values[n], self.iterations[n] = value, iteration
  self.n = n
  self.count, self.sum = self.count + 1, self.sum + value
end

function History:latest() return self.values[self.n], self.iterations[self.n] end

-- the last `window` values (all when window is nil)
local function last(self, window)
  local n = self.n
  local w = math.min(window or n, n)
  return n - w + 1, n, w
end

function History:avg(window)
  local a, b, w = last(self, window)
  if w == 0 then return nil end
  local s = 0
  for i = a, b do s = s + self.values[i] end
  return s / w
end

function History:median(window)
  local a, b, w = last(self, window)
  if w == 0 then return nil end
  local tmp = {}
  for i = a, b do tmp[#tmp + 1] = self.values[i] end
  table.sort(tmp)
  if w % 2 == 1 then return tmp[(w + 1) / 2] end
  return 0.5 * (tmp[w / 2] + tmp[w / 2 + 1])
end

function History:global_avg() return self.count > 0 and self.sum / self.count or nil end

-- Storage.new{window = 20, max_len = 10000, iteration = function() return it end}
function Storage.new(opts)
  opts = opts or {}
  return setmetatable({ window = opts.window or 20, max_len = opts.max_len or 10000,
                        iteration = opts.iteration, histories = {}, hints = {}, order = {} },
                      Storage)
end

-- put_scalar(name, value, {smoothing_hint = true, iteration = n}). smoothing_hint (the
-- default) tells writers to show the windowed median rather than the latest value.
function Storage:put_scalar(name, value, opts)
  if type(name) ~= 'string' then error('put_scalar: name must be a string, got ' .. type(name), 2) end
  if type(value) ~= 'number' then
    if type(value) == 'cdata' and value.item then value = value:item()
    else error("put_scalar('" .. name .. "'): value must be a number, got " .. type(value), 2) end
  end
  local h = self.histories[name]
  local hint = true
  local it
  if opts then
    if opts.smoothing_hint ~= nil then hint = opts.smoothing_hint and true or false end
    it = opts.iteration
  end
  if not h then
    h = new_history(self.max_len)
    self.histories[name] = h
    self.hints[name] = hint
    self.order[#self.order + 1] = name
  elseif self.hints[name] ~= hint then
    error("put_scalar('" .. name .. "'): smoothing_hint changed from " .. tostring(self.hints[name]) ..
          ' to ' .. tostring(hint) .. '; a scalar keeps one hint', 2)
  end
  h:put(value, it or (self.iteration and self.iteration() or 0))
end

function Storage:put_scalars(tbl, opts)
  for k, v in pairs(tbl) do self:put_scalar(k, v, opts) end
end

function Storage:history(name) return self.histories[name] end
function Storage:has(name) return self.histories[name] ~= nil end

function Storage:latest(name)
  local h = self.histories[name]
  if not h then return nil end
  return h:latest()
end

-- What a writer shows: the windowed median when the value was put with smoothing_hint,
-- else the latest value.
function Storage:smoothed(name, window)
  local h = self.histories[name]
  if not h then return nil end
  if self.hints[name] then return h:median(window or self.window) end
  return (h:latest())
end

-- name -> {value, iteration} for every scalar, smoothed where hinted (detectron2's
-- latest_with_smoothing_hint).
function Storage:latest_with_smoothing_hint(window)
  local out = {}
  for _, name in ipairs(self.order) do
    local _, it = self.histories[name]:latest()
    out[name] = { self:smoothed(name, window), it }
  end
  return out
end

function Storage:names()
  local out = {}
  for i, n in ipairs(self.order) do out[i] = n end
  return out
end

Storage.History = History
return Storage
