-- crescent.hooks.console — progress on stdout. On a terminal one live line, rewritten
-- with \r (crescent.hooks.live_line: cut to the terminal's width, ended before any other
-- hook's output): epoch, iteration, loss, lr, img/s, data time, ETA, and during a test
-- phase the batches done. Elsewhere (a log file, a pipe) the same fields as plain lines
-- every `every` iterations, each after the local date and time (timestamps, default: not
-- a terminal). After each test phase a line with the eval metrics found in the storage
-- (test/top1, test/top5, test/loss), named by `split` ('test', or 'val' when the test
-- phase reads a held-out part of the training set).
local loop = require 'crescent.engine.loop'
local live_line = require 'crescent.hooks.live_line'


local Console = {}
Console.__index = Console

local function fmt_time(s)
  if not s or s ~= s or s == math.huge then return '?' end
  s = math.floor(s + 0.5)
  if s >= 3600 then return string.format('%dh%02dm', math.floor(s / 3600), math.floor(s % 3600 / 60)) end
  if s >= 60 then return string.format('%dm%02ds', math.floor(s / 60), s % 60) end
  return string.format('%ds', s)
end
Console.fmt_time = fmt_time

-- The progress fields as one line. With `width` (a terminal's columns) the least needed
-- fields are left out until the line fits: data time first, then lr, img/s, the ETA and
-- the loss, so a narrow window still shows where the run is.
local DROP_ORDER = { 'data', 'lr', 'img/s', 'eta', 'loss' }

function Console:line(task, width)
  local st = task.storage
  local fields = { { 'epoch', string.format('epoch %d/%d', task.epoch + 1, task.epochs) } }
  local per = task.iterations_per_epoch
  if per and per > 0 then
    fields[#fields + 1] = { 'iter', string.format('iter %d/%d', task.phase_iteration, per) }
  else
    fields[#fields + 1] = { 'iter', string.format('iter %d', task.phase_iteration) }
  end
  local loss = st:smoothed('loss', self.window)
  if loss then fields[#fields + 1] = { 'loss', string.format('loss %.4f', loss) } end
  local lr = task:lr()
  if lr then fields[#fields + 1] = { 'lr', string.format('lr %.4g', lr) } end
  local ips = st:smoothed('img_per_s', self.window)
  if ips then fields[#fields + 1] = { 'img/s', string.format('img/s %.0f', ips) } end
  local dt = st:smoothed('data_time', self.window)
  if dt then fields[#fields + 1] = { 'data', string.format('data %.1fms', dt * 1000) } end
  if task.eta_seconds then fields[#fields + 1] = { 'eta', 'eta ' .. fmt_time(task.eta_seconds) } end
  local function joined()
    local parts = {}
    for _, f in ipairs(fields) do if f[2] then parts[#parts + 1] = f[2] end end
    return table.concat(parts, '  ')
  end
  local text = joined()
  for _, name in ipairs(DROP_ORDER) do
    if not width or #text <= width - 1 then break end
    for _, f in ipairs(fields) do if f[1] == name then f[2] = nil end end
    text = joined()
  end
  return text
end

-- On a terminal the test phase moves the live line too: its batch count so far.
function Console:test_step(task)
  local t = loop.now()
  if self.t_last and t - self.t_last < self.refresh then return end
  self.t_last = t
  local loader, total = task.test_loader, nil
  if type(loader) == 'table' and type(loader.num_batches) == 'function' then total = loader:num_batches() end
  live_line.show(self.out, string.format('epoch %d/%d  test batch %d%s', task.epoch + 1, task.epochs,
    task.phase_iteration, total and ('/' .. total) or ''))
end

-- A plain line, after the date and time when timestamps are on.
function Console:print(text)
  if self.timestamps then self.out:write(os.date('%Y-%m-%d %H:%M:%S  '), text, '\n')
  else self.out:write(text, '\n') end
  self.out:flush()
end

function Console:after_step(task)
  if task.phase_name == 'test' and self.tty then return self:test_step(task) end
  if task.phase_name ~= 'train' then return end
  if self.tty then
    local t = loop.now()
    local last = task.phase_iteration == task.iterations_per_epoch
    if not last and self.t_last and t - self.t_last < self.refresh then return end
    self.t_last = t
    local cols = live_line.columns()
    live_line.show(self.out, self:line(task, cols), cols)
  elseif task.iteration % self.every == 0 or task.phase_iteration == task.iterations_per_epoch then
    self:print(self:line(task))
  end
end

function Console:end_line() live_line.finish(self.out) end

function Console:after_phase(task)
  self:end_line()
  if task.phase_name ~= 'test' then return end
  local st = task.storage
  -- train.epochs = 0: the evaluation-only run's one test phase
  local parts = { task.epochs == 0 and ('eval only: ' .. self.split) or
                  string.format('epoch %d/%d %s', task.epoch + 1, task.epochs, self.split) }
  for _, name in ipairs { 'top1', 'top5' } do
    local v = st:latest('test/' .. name)
    if v then parts[#parts + 1] = string.format('%s %.2f%%', name, v) end
  end
  local l = st:latest('test/loss')
  if l then parts[#parts + 1] = string.format('loss %.4f', l) end
  if self.tty then
    self.out:write(table.concat(parts, '  '), '\n')
    self.out:flush()
  else
    self:print(table.concat(parts, '  '))
  end
end

function Console:on_exception(_) self:end_line() end
function Console:after_train(_) self:end_line() end

-- cr.hooks.console{every = 50, tty = auto, out = io.stdout, window = 20, refresh = 0.2,
--                  timestamps = not tty, split = 'test'}
return function(opts)
  opts = opts or {}
  local every = opts.every or 50
  if type(every) ~= 'number' or every < 1 then
    error('console: every must be a positive number of iterations, got ' .. tostring(every), 2)
  end
  local tty = opts.tty
  if tty == nil then tty = (opts.out == nil or opts.out == io.stdout) and live_line.stdout_is_tty() end
  local timestamps = opts.timestamps
  if timestamps == nil then timestamps = not tty end
  local split = opts.split or 'test'
  if type(split) ~= 'string' then error('console: split must be a string (test or val), got ' .. tostring(split), 2) end
  return setmetatable({ name = 'console', priority = opts.priority or 90, every = every, tty = tty,
                        out = opts.out or io.stdout, window = opts.window or 20,
                        refresh = opts.refresh or 0.2, timestamps = timestamps, split = split }, Console)
end
