-- crescent.hooks.checkpoint — checkpoints of the run in a folder, and resuming from them
-- (the file format: crescent/engine/checkpoint.lua).
--
--   task:add_hook(cr.hooks.checkpoint{dir = 'runs/exp1/checkpoints', every_epochs = 1,
--     every_iters = 0, keep = 3, best = 'knn_top1', best_mode = 'max', resume = true,
--     resume_from = nil, init = nil, save = true, seed = nil, async = false})
--
-- Before the loop (setup) the run starts, and one line says how: with resume = true, from
-- the newest valid checkpoint of `dir` (a truncated or corrupt one is skipped with a
-- warning naming it); else from the checkpoint file resume_from (weights, optimizer,
-- counters); else init(task), which loads weights and returns the line to print; else
-- from scratch (said when the hook was given the run's seed). save = false writes nothing. Then a
-- checkpoint ckpt-e<epochs done>-i<iteration>.safetensors is written every `every_epochs`
-- epochs (once the epoch's phases are over), every `every_iters` iterations,
-- after a step that a signal interrupted (SIGTERM/SIGINT/SIGUSR1: the loop stops there),
-- and at the end of training. With async = true a checkpoint is copied at the step
-- boundary and written by a thread of its own while the next steps run (big_vision's
-- async checkpointing); its links and line follow once it is on disk, a failed write
-- stops the run at the next step, and a signal or the end of the run waits for the
-- file. Writes are atomic; latest.safetensors links the newest,
-- best.safetensors the one with the best task.metrics[best] (higher is better, or lower
-- with best_mode = 'min'); the newest `keep` and the best are kept, older ones removed.
local util = require 'crescent.util'
local ckpt = require 'crescent.engine.checkpoint'
local live_line = require 'crescent.hooks.live_line'

local Checkpoint = {}
Checkpoint.__index = Checkpoint

local function say(msg)
  live_line.write(io.stdout, msg, '\n')
  io.stdout:flush()
end

-- Before the first step, what the first save would find out an epoch later: a folder
-- that cannot be written, a link name taken by a folder.
function Checkpoint:check_writable()
  util.mkdir_p(self.dir)
  local probe = string.format('%s/.write-test-%d', self.dir, os.time())
  local f, err = io.open(probe, 'wb')
  if not f then
    error(string.format("checkpoint: cannot write in the folder '%s' (%s); make it writable, or give another " ..
      'run.dir, or checkpoint.save=false', self.dir, tostring(err)), 0)
  end
  f:close()
  os.remove(probe)
  for _, link in ipairs { 'latest.safetensors', 'best.safetensors' } do
    local where = self.dir .. '/' .. link
    local d = io.open(where .. '/.')
    if d then
      d:close()
      error(string.format("checkpoint: '%s' is a folder; the run points that name at its newest (or best) " ..
        'checkpoint: move the folder away', where), 0)
    end
  end
end

function Checkpoint:setup(task)
  if self.writes and not self.read_only then self:check_writable() end
  local path = self.resume and ckpt.newest_valid(self.dir, self.warn)
  if self.resume and not path and #ckpt.list(self.dir) > 0 then
    error(string.format("run.resume: no checkpoint in '%s' could be read (each is named above); start afresh with " ..
      'run.resume=false (the earlier run is moved aside), or put a good checkpoint back', self.dir), 0)
  end
  local how = ''
  if path then
    if self.resume_from or self.init then
      how = ' (the run folder has checkpoints: run.resume_from and model.init are not used)'
    end
  elseif self.resume_from then
    path, how = self.resume_from, ' (run.resume_from)'
    if not util.file_exists(path) then
      error(string.format("run.resume_from: no file '%s'; give a checkpoint of a run " ..
        '(runs/<name>/checkpoints/latest.safetensors, or a ckpt-e*-i*.safetensors there)', path), 0)
    end
  end
  if not path then
    if self.init then say(self.init(task))
    elseif self.seed and self.verbose then
      say(string.format('from scratch (train.seed %d)', self.seed))
    end
    return
  end
  local trainer = ckpt.load(task, path)
  self.best, self.last_saved = trainer.best, task.iteration
  self.saved_metric = self.best_metric and task.metrics[self.best_metric]
  local left = task.epoch >= task.epochs and ' (training already complete)' or ''
  say(string.format("resumed from '%s': epoch %d/%d, iteration %d%s%s", path, task.epoch, task.epochs,
    task.iteration, left, how))
end

-- Whether `value` of the best metric beats the best so far.
function Checkpoint:improves(value)
  if type(value) ~= 'number' or value ~= value then return false end
  local b = self.best
  if not b or b.value == nil then return true end
  if self.best_mode == 'min' then return value < b.value end
  return value > b.value
end

function Checkpoint:save(task, why)
  if self.read_only or not self.writes then return end -- a distributed run's ranks other than 0 resume only
  self:complete() -- the previous write first: one at a time, in order
  util.mkdir_p(self.dir)
  local name = ckpt.file_name(task)
  local value = self.best_metric and task.metrics[self.best_metric]
  local better = self.best_metric and self:improves(value)
  if better then self.best = { metric = self.best_metric, value = value, file = name } end
  local path, extra = self.dir .. '/' .. name, { best = self.best, env = self.env }
  local job
  if self.async then job = ckpt.save_async(task, path, extra) else ckpt.save(task, path, extra) end
  self.pending = { job = job, name = name, better = better, value = value, why = why }
  self.last_saved, self.saved_metric = task.iteration, value
  if not job then self:complete() end
end

-- Once the file of the last save is written (waiting for it when asked): the latest and
-- best links, retention, the line. A failed write is an error here, so the run stops
-- before a later checkpoint can hide it.
function Checkpoint:complete()
  local p = self.pending
  if not p then return end
  self.pending = nil
  if p.job then
    local ok, err = pcall(p.job.wait, p.job)
    if not ok then
      error(string.format("checkpoint: writing %s/%s (%s) failed: %s; the run stops here (its earlier checkpoints " ..
        'are intact)', self.dir, p.name, p.why, tostring(err)), 0)
    end
  end
  ckpt.point(self.dir, 'latest.safetensors', p.name)
  if p.better then ckpt.point(self.dir, 'best.safetensors', p.name) end
  local keep_best = self.best and self.best.file
  for i, c in ipairs(ckpt.list(self.dir)) do
    if i > self.keep and c.name ~= keep_best and c.name ~= p.name then os.remove(c.path) end
  end
  if self.verbose then
    say(string.format("checkpoint %s/%s (%s)%s", self.dir, p.name, p.why,
      p.better and string.format(', best %s %.4g', self.best_metric, p.value) or ''))
  end
end

-- An epoch's checkpoint is taken once all its phases are over, so metrics measured after
-- them (test top-1, kNN) are in it: at the start of the next train phase, or at the end
-- of training (after_train).
function Checkpoint:before_phase(task)
  if task.phase_name ~= 'train' or task.signal or self.every_epochs == 0 then return end
  local done = task.epoch   -- epochs finished
  if done > 0 and done % self.every_epochs == 0 and self.last_saved ~= task.iteration then
    self:save(task, 'epoch ' .. done)
  end
end

function Checkpoint:after_step(task)
  if task.phase_name ~= 'train' then return end
  -- a write that ended meanwhile: links, retention, line (or its error)
  if self.pending and self.pending.job and self.pending.job:done() then self:complete() end
  if task.signal then
    self:save(task, task.signal)
    self:complete() -- the process is about to exit: the file first
  elseif self.every_iters > 0 and task.iteration % self.every_iters == 0 then
    self:save(task, 'every ' .. self.every_iters .. ' iterations')
  end
end

-- The end of training: the final state, unless it is saved already with its metrics. Not
-- after an error (the state may be what went wrong).
function Checkpoint:after_train(task)
  if task.exception ~= nil or task.iteration == 0 then
    pcall(self.complete, self) -- an earlier write still lands (its own error would mask the run's)
    return
  end
  local value = self.best_metric and task.metrics[self.best_metric]
  if self.last_saved ~= task.iteration or value ~= self.saved_metric then self:save(task, 'end of training') end
  self:complete()
end

function Checkpoint:state_dict() return { best = self.best } end
function Checkpoint:load_state_dict(s) self.best = s.best end

local function count(opts, key, default)
  local v = opts[key]
  if v == nil then return default end
  if type(v) ~= 'number' or v < 0 or v ~= math.floor(v) then
    error(string.format('checkpoint: %s must be a non-negative integer, got %s', key, tostring(v)), 3)
  end
  return v
end

-- cr.hooks.checkpoint{dir = , ...}: see the top of this file.
return function(opts)
  opts = opts or {}
  if type(opts.dir) ~= 'string' or opts.dir == '' then
    error("checkpoint: give the folder of the checkpoints, e.g. {dir = 'runs/exp1/checkpoints'}", 2)
  end
  local mode = opts.best_mode or 'max'
  if mode ~= 'max' and mode ~= 'min' then error("checkpoint: best_mode must be 'max' or 'min', got " .. tostring(mode), 2) end
  local best = opts.best
  if best == '' then best = nil end
  if opts.resume_from ~= nil and (type(opts.resume_from) ~= 'string' or opts.resume_from == '') then
    error('checkpoint: resume_from must be the path of a checkpoint file, got ' .. tostring(opts.resume_from), 2)
  end
  if opts.init ~= nil and type(opts.init) ~= 'function' then
    error('checkpoint: init must be a function(task) that loads weights and returns a line to print', 2)
  end
  local keep = count(opts, 'keep', 3)
  if keep < 1 then error('checkpoint: keep must be at least 1 (the newest checkpoint), got ' .. keep, 2) end
  return setmetatable({
    name = 'checkpoint', priority = opts.priority or 98, dir = opts.dir,
    every_epochs = count(opts, 'every_epochs', 1), every_iters = count(opts, 'every_iters', 0), keep = keep,
    best_metric = best, best_mode = mode, resume = opts.resume ~= false, warn = opts.warn,
    verbose = opts.verbose ~= false, env = opts.env, writes = opts.save ~= false, async = opts.async == true,
    resume_from = opts.resume_from, init = opts.init, seed = opts.seed,
  }, Checkpoint)
end
