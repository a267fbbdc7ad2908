-- crescent.hooks.jsonl — metrics.jsonl: one JSON object per logged step, appended and
-- flushed line by line, so a crash loses nothing and a resumed run goes on in the same
-- file. Logged are the train steps that the TensorBoard writer logs (every `every`
-- iterations and the last of each epoch), with the scalars put since the last line
-- (smoothed where hinted), and after each phase and at the end of training a line with
-- the new unsmoothed ones (test/top1, knn/top1, ...):
--
--   {"iteration":120,"epoch":0,"phase":"train","loss":0.61,"lr":0.1,"img_per_s":850,...}
--
-- epoch is task.epoch (0-based); NaN and infinite values are written as null.
--
--   task:add_hook(cr.hooks.jsonl{path = 'runs/exp1/metrics.jsonl', every = 20})
local util = require 'crescent.util'
local tensorboard = require 'crescent.hooks.tensorboard'

local Jsonl = {}
Jsonl.__index = Jsonl

function Jsonl:before_train(_)
  if not self.file then
    local folder = self.path:match('^(.*)/[^/]*$')
    if folder and folder ~= '' then util.mkdir_p(folder) end
    local f, err = io.open(self.path, 'a')
    if not f then
      error("jsonl: cannot open '" .. self.path .. "' for appending (" .. tostring(err) ..
        '); check the folder and its permissions', 0)
    end
    self.file = f
  end
  self.seen = {}
end

local json = util.json   -- 'test/top1' stays so; NaN and infinities are null

-- One line with the new scalars; nothing when there are none (a phase that put nothing).
function Jsonl:write(task, unsmoothed_only)
  local f = self.file
  if not f then return end
  local parts = {}
  tensorboard.new_scalars(task, self.seen, unsmoothed_only, self.window, function(name, v)
    parts[#parts + 1] = json(name) .. ':' .. json(v)
  end)
  if #parts == 0 then return end
  local line = string.format('{"iteration":%d,"epoch":%d,"phase":%s,%s}\n', task.iteration, task.epoch,
    json(task.phase_name or 'train'), table.concat(parts, ','))
  local ok, err = f:write(line)
  if ok then ok, err = f:flush() end
  if not ok then error("jsonl: writing '" .. self.path .. "' failed: " .. tostring(err), 0) end
end

function Jsonl:after_step(task)
  if tensorboard.is_log_step(task, self.every) then self:write(task, false) end
end

function Jsonl:after_phase(task) self:write(task, true) end

function Jsonl:close()
  local f = self.file
  self.file = nil
  if f then f:close() end
end

function Jsonl:after_train(task)
  self:write(task, true)   -- the final kNN figures
  self:close()
end

function Jsonl:on_exception(_) self:close() end

local KNOWN = { path = true, every = true, window = true, priority = true }

-- cr.hooks.jsonl{path = 'runs/x/metrics.jsonl', every = 20, window = (the storage's),
--                priority = 95}
return function(opts)
  if type(opts) ~= 'table' then error("jsonl: give {path = 'runs/name/metrics.jsonl', every = 20}", util.user_level()) end
  for k in pairs(opts) do
    if not KNOWN[k] then error("jsonl: unknown option '" .. tostring(k) .. "'", util.user_level()) end
  end
  if type(opts.path) ~= 'string' or opts.path == '' or opts.path:sub(-1) == '/' then
    error("jsonl: path must be a file name such as 'runs/exp1/metrics.jsonl', got " .. tostring(opts.path),
      util.user_level())
  end
  local every = opts.every or 20
  if type(every) ~= 'number' or every < 1 or every ~= math.floor(every) then
    error('jsonl: every must be a positive integer number of iterations, got ' .. tostring(every), util.user_level())
  end
  return setmetatable({ name = 'jsonl', priority = opts.priority or 95, path = opts.path, every = every,
                        window = opts.window }, Jsonl)
end
