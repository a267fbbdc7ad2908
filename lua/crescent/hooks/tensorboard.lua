-- crescent.hooks.tensorboard — TensorBoard scalars. The event files are written in C
-- (csrc/io/tfevents.c; the format in csrc/include/crescent_io.h). After train steps (every
-- `every` iterations and at the last step of each epoch) the storage's scalars that are
-- new since the last write (loss, lr, img_per_s, data_time, time, ...; smoothed where
-- their writer asked for it); after each phase and at the end of training the new
-- unsmoothed ones (test/top1, knn/top1, ...). At the start, the task's config as text
-- (TensorBoard's Text tab, tag 'config') and as hyper-parameters (the HParams tab: every
-- config key, lists as text, beside the run's scalars as metrics), so runs compare there
-- too; at the end, the run's status (success, or failure after an error). Flushed after
-- every phase, closed at the end of training or on an error.
--
--   task:add_hook(cr.hooks.tensorboard{dir = 'runs/exp1', every = 20})
--   local w = cr.hooks.tensorboard.Writer.open('runs/exp1')   -- direct writes
--   w:add_scalar('loss', 0.5, 100); w:add_text('notes', '**markdown**', 0); w:flush(); w:close()
--   w:add_hparams({['optim.lr'] = 0.1, arch = 'resnet18', nesterov = true}); w:end_session('success')
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local util = require 'crescent.util'


-- ---- the writer: one event file -------------------------------------------------------
local Writer = {}
Writer.__index = Writer
local writer_box_ct = ffi.typeof('cr_tb_writer*[1]')
local hparams_ct = ffi.typeof('cr_tb_hparam[?]')
local STATUS = { success = C.CR_TB_STATUS_SUCCESS, failure = C.CR_TB_STATUS_FAILURE, running = C.CR_TB_STATUS_RUNNING }

-- Writer.open(dir): a new event file in dir (created when missing).
function Writer.open(dir)
  if type(dir) ~= 'string' or dir == '' then
    error("tensorboard: dir must be a folder name such as 'runs/exp1', got " .. tostring(dir), util.user_level())
  end
  util.mkdir_p(dir)
  local box = writer_box_ct()
  util.check(C.cr_tb_open(box, dir))
  local p = ffi.gc(box[0], C.cr_tb_close)
  return setmetatable({ ptr = p, dir = dir, path = ffi.string(C.cr_tb_path(p)) }, Writer)
end

-- w:add_scalar(tag, value, step, wall_time): wall_time in unix seconds (default: now).
function Writer:add_scalar(tag, value, step, wall_time)
  if not self.ptr then error('tensorboard: add_scalar on a closed writer', util.user_level()) end
  if type(tag) ~= 'string' then error('tensorboard: the tag must be a string, got ' .. type(tag), util.user_level()) end
  if type(value) ~= 'number' then
    error("tensorboard: the value of '" .. tag .. "' must be a number, got " .. type(value), util.user_level())
  end
  step = step or 0
  if type(step) ~= 'number' or step ~= math.floor(step) or math.abs(step) >= 2 ^ 53 then
    error("tensorboard: the step of '" .. tag .. "' must be an integer, got " .. tostring(step), util.user_level())
  end
  util.check(C.cr_tb_add_scalar(self.ptr, tag, value, step, wall_time or 0))
end

-- w:add_text(tag, markdown, step, wall_time): for TensorBoard's text plugin (<= 32 KiB).
function Writer:add_text(tag, text, step, wall_time)
  if not self.ptr then error('tensorboard: add_text on a closed writer', util.user_level()) end
  if type(tag) ~= 'string' or type(text) ~= 'string' then
    error('tensorboard: add_text takes a tag and a text (strings), got ' .. type(tag) .. ', ' .. type(text),
      util.user_level())
  end
  step = step or 0
  if type(step) ~= 'number' or step ~= math.floor(step) then
    error("tensorboard: the step of '" .. tag .. "' must be an integer, got " .. tostring(step), util.user_level())
  end
  util.check(C.cr_tb_add_text(self.ptr, tag, text, step, wall_time or 0))
end

-- w:add_hparams({name = value, ...}, start_time): the run's hyper-parameters for the
-- HParams plugin; values are numbers, strings or booleans. start_time in unix seconds
-- (default: now).
function Writer:add_hparams(hparams, start_time)
  if not self.ptr then error('tensorboard: add_hparams on a closed writer', util.user_level()) end
  if type(hparams) ~= 'table' then
    error('tensorboard: add_hparams takes a table of name = value, got ' .. type(hparams), util.user_level())
  end
  local names = {}
  for k, v in pairs(hparams) do
    local t = type(v)
    if type(k) ~= 'string' or (t ~= 'number' and t ~= 'string' and t ~= 'boolean') then
      error(string.format("tensorboard: hyper-parameter '%s' must be a number, string or boolean under a string " ..
        'name, got %s', tostring(k), t), util.user_level())
    end
    names[#names + 1] = k
  end
  table.sort(names)
  local hp = hparams_ct(math.max(1, #names))
  for i, name in ipairs(names) do
    local v, e = hparams[name], hp[i - 1]
    e.name = name -- the Lua strings outlive the call: `hparams` and `names` hold them
    if type(v) == 'number' then e.kind, e.number = C.CR_TB_HPARAM_NUMBER, v
    elseif type(v) == 'boolean' then e.kind, e.number = C.CR_TB_HPARAM_BOOL, v and 1 or 0
    else e.kind, e.string = C.CR_TB_HPARAM_STRING, v end
  end
  util.check(C.cr_tb_add_hparams(self.ptr, hp, #names, start_time or 0))
end

-- w:end_session(status): 'success' (default), 'failure' or 'running'.
function Writer:end_session(status)
  if not self.ptr then error('tensorboard: end_session on a closed writer', util.user_level()) end
  local code = STATUS[status or 'success']
  if not code then
    error("tensorboard: end_session's status is 'success', 'failure' or 'running', got " .. tostring(status),
      util.user_level())
  end
  util.check(C.cr_tb_end_session(self.ptr, code, 0))
end

function Writer:flush()
  if self.ptr then util.check(C.cr_tb_flush(self.ptr)) end
end

-- Flushes and closes; closing twice is fine.
function Writer:close()
  local p = self.ptr
  if not p then return end
  self.ptr = nil
  ffi.gc(p, nil)
  util.check(C.cr_tb_close(p))
end

-- ---- what writers write -----------------------------------------------------------------
-- Calls emit(name, value) for each scalar of task.storage put since the last call with
-- this `seen` table (name -> count written), smoothed where hinted; `unsmoothed_only`
-- skips the hinted ones. At train logs, task:lr() stands in for a missing 'lr' scalar.
local function new_scalars(task, seen, unsmoothed_only, window, emit)
  local st = task.storage
  for _, name in ipairs(st:names()) do
    local h = st:history(name)
    if h.count > (seen[name] or 0) and not (unsmoothed_only and st.hints[name]) then
      seen[name] = h.count
      emit(name, st:smoothed(name, window))
    end
  end
  if not unsmoothed_only and not st:has('lr') then
    local lr = task:lr()
    if type(lr) == 'number' then emit('lr', lr) end
  end
end

-- A train step that writers log: every `every` iterations and the last of each epoch.
local function is_log_step(task, every)
  return task.phase_name == 'train' and
    (task.iteration % every == 0 or task.phase_iteration == task.iterations_per_epoch)
end

-- ---- the hook -------------------------------------------------------------------------
local Hook = {}
Hook.__index = Hook

function Hook:before_train(task)
  if not self.writer then
    self.writer = Writer.open(self.dir)
    self.path = self.writer.path   -- the event file, kept after closing
    local cfg = task.config
    if type(cfg) == 'table' and next(cfg) ~= nil then
      local ok, text = pcall(require('crescent.config').dump, cfg)
      -- four spaces: Markdown's code block, so the text plugin shows the Lua as written
      if ok and #text < 30000 then self.writer:add_text('config', '    ' .. text:gsub('\n', '\n    '), task.iteration) end
      local hparams = {}
      for k, v in pairs(require('crescent.config').flatten(cfg)) do
        local t = type(v)
        if t == 'number' or t == 'string' or t == 'boolean' then hparams[k] = v end
      end
      self.writer:add_hparams(hparams)
    end
  end
  self.seen = {}
end

function Hook:write(task, unsmoothed_only)
  local w, step = self.writer, task.iteration
  if not w then return end
  new_scalars(task, self.seen, unsmoothed_only, self.window, function(name, v) w:add_scalar(name, v, step) end)
end

function Hook:after_step(task)
  if is_log_step(task, self.every) then self:write(task, false) end
end

function Hook:after_phase(task)
  self:write(task, true)
  if self.writer then self.writer:flush() end
end

function Hook:close()
  local w = self.writer
  self.writer = nil
  if w then w:close() end
end

function Hook:after_train(task)
  self:write(task, true)   -- the final kNN figures
  if self.writer then self.writer:end_session('success') end
  self:close()
end

function Hook:on_exception(_)
  if self.writer then pcall(self.writer.end_session, self.writer, 'failure') end
  self:close()
end

local KNOWN = { dir = true, every = true, window = true, priority = true }

-- cr.hooks.tensorboard{dir = 'runs/x', every = 20, window = (the storage's), priority = 95}
local function new(opts)
  if type(opts) ~= 'table' then error("tensorboard: give {dir = 'runs/name', every = 20}", util.user_level()) end
  for k in pairs(opts) do
    if not KNOWN[k] then error("tensorboard: unknown option '" .. tostring(k) .. "'", util.user_level()) end
  end
  if type(opts.dir) ~= 'string' or opts.dir == '' then
    error("tensorboard: dir must be a folder name such as 'runs/exp1', got " .. tostring(opts.dir), util.user_level())
  end
  local every = opts.every or 20
  if type(every) ~= 'number' or every < 1 or every ~= math.floor(every) then
    error('tensorboard: every must be a positive integer number of iterations, got ' .. tostring(every), util.user_level())
  end
  return setmetatable({ name = 'tensorboard', priority = opts.priority or 95, dir = opts.dir, every = every,
                        window = opts.window }, Hook)
end

return setmetatable({ Writer = Writer, new_scalars = new_scalars, is_log_step = is_log_step },
                    { __call = function(_, opts) return new(opts) end })
