-- crescent.engine.Task — everything a training run holds: config, model, loss, optimizer,
-- schedules, loaders, meters, hooks, counters (iteration, epoch, phase_name, samples_seen),
-- the event storage and the loop's timings. cr.train(task) runs it (trainer.lua).
--
--   local task = cr.engine.Task{config = cfg, model = m, loss = fn(output, batch) -> loss,
--                               optimizer = opt, schedules = {lr = sched},
--                               train_loader = tl, test_loader = vl}
--   task:add_hook(cr.hooks.console{every = 50})
--   cr.train(task)
--
-- Fields taken from the config when not given: epochs (train.epochs), test_every
-- (train.test_every, default 1), accum_steps (optim.accum_steps), clip_norm
-- (optim.clip_norm), clip_value (optim.clip_value), gc_step_kb (train.gc_step_kb), amp
-- (train.amp: 'off', 'bf16', 'f16' or 'auto', bf16 where the device computes it natively
-- and else off; f16 also makes a GradScaler, or pass scaler).
-- Also: malloc_keep_mb (32), name (run.name), device: where batches go, the model's
-- device by default (model:device()); move the model first (model:to('cuda')) and build
-- the optimizer after. Batch tensors (input, a list of crops, target) are moved there as
-- the loop takes them, so steps, hooks and meters see them on the model's device; on a GPU
-- a cr.data.Loader hands them over in pinned memory (its pin_memory option) and the
-- copies are asynchronous.
local Storage = require 'crescent.engine.storage'
local steps = require 'crescent.engine.steps'
local loop = require 'crescent.engine.loop'
local trainer = require 'crescent.engine.trainer'

local Task = {}
Task.__index = Task

local KNOWN = {
  config = true, model = true, loss = true, optimizer = true, schedules = true,
  train_loader = true, test_loader = true, meters = true, hooks = true, train_step = true,
  eval_step = true, epochs = true, test_every = true, accum_steps = true, clip_norm = true,
  clip_value = true, gc_step_kb = true, malloc_keep_mb = true, name = true, handle_signals = true,
  repl_on_signal = true,
  amp = true, scaler = true, device = true,
}
local AMP = { off = true, bf16 = true, f16 = true, auto = true }

-- Whether `device` computes bf16 natively, which amp = 'auto' turns into bf16: a GPU (the
-- CUDA build targets compute capability 8.0 and later, which all do) or a CPU with
-- AVX512-BF16 (cr.cpu_bf16_native); elsewhere bf16 would run on f32 copies, slower than f32.
local function native_bf16(device)
  if device ~= 'cpu' then return true end
  return require('crescent.ffi').C.cr_cpu_bf16_native()
end

-- cfg.section.key when the config has it: an optional field, not a key every config
-- must declare (raw reads: recipe_keys_spec notes reads of undeclared keys).
local function cfg_get(cfg, section, key)
  if type(cfg) ~= 'table' then return nil end
  local s = rawget(cfg, section)
  if type(s) ~= 'table' then return nil end
  return rawget(s, key)
end

local util = require 'crescent.util'
local is_tensor = require('crescent').is_tensor
local suggest = util.nearest

-- The batch with its tensors on `device`: input (a tensor or a list of crops) and target.
-- From pinned memory the copies are asynchronous: the GPU runs them in order with the
-- step's kernels, and the host goes on at once.
local ASYNC = { non_blocking = true }
local function batch_to(batch, device)
  local function move(t)
    if is_tensor(t) and t.device ~= device then return t:to(device, t:is_pinned() and ASYNC or nil) end
    return t
  end
  if type(batch) ~= 'table' then return batch end
  local x = batch.input
  if type(x) == 'table' then
    local moved = {}
    for i, v in ipairs(x) do moved[i] = move(v) end
    batch.input = moved
  else
    batch.input = move(x)
  end
  batch.target = move(batch.target)
  return batch
end

local function new(_, args)
  if type(args) ~= 'table' then error('Task{...}: expected a table of fields', 2) end
  for k in pairs(args) do
    if type(k) == 'string' and not KNOWN[k] then
      local s = suggest(k, KNOWN)
      error("Task{...}: unknown field '" .. k .. "'" .. (s and ("; did you mean '" .. s .. "'?") or ''), 2)
    end
  end
  local cfg = args.config or {}
  local self = setmetatable({}, Task)
  self.config = cfg
  self.name = args.name or cfg_get(cfg, 'run', 'name')
  self.model, self.loss, self.optimizer = args.model, args.loss, args.optimizer
  local model_device = type(self.model) == 'table' and type(self.model.device) == 'function'
                       and self.model:device() or nil
  self.device = args.device and util.device_string(args.device, 2) or model_device or 'cpu'
  if model_device and model_device ~= self.device then
    error(string.format("Task{...}: device is '%s' but the model is on %s; move the model first " ..
      "(model:to('%s')) and build the optimizer after", self.device, model_device, self.device), 2)
  end
  self.schedules = args.schedules or {}
  self.train_loader, self.test_loader = args.train_loader, args.test_loader
  self.meters = args.meters or {}
  self.train_step = args.train_step or steps.standard
  self.eval_step = args.eval_step or steps.eval
  self.epochs = args.epochs or cfg_get(cfg, 'train', 'epochs') or 1
  self.test_every = args.test_every or cfg_get(cfg, 'train', 'test_every') or 1
  self.accum_steps = args.accum_steps or cfg_get(cfg, 'optim', 'accum_steps') or 1
  self.clip_norm = args.clip_norm or cfg_get(cfg, 'optim', 'clip_norm')
  self.clip_value = args.clip_value or cfg_get(cfg, 'optim', 'clip_value')
  if self.clip_norm == 0 then self.clip_norm = nil end
  if self.clip_value == 0 then self.clip_value = nil end
  -- mixed precision: the standard step runs forward and loss under cr.autocast(amp); f16
  -- scales the loss (dynamic loss scaling) and skips steps whose grads overflow
  self.amp = args.amp or cfg_get(cfg, 'train', 'amp') or 'off'
  if not AMP[self.amp] then
    error("Task{...}: amp must be 'off', 'bf16', 'f16' or 'auto', got " .. tostring(self.amp), 2)
  end
  if self.amp == 'auto' then self.amp = native_bf16(self.device) and 'bf16' or 'off' end
  self.scaler = args.scaler or (self.amp == 'f16' and require('crescent.optim.scaler')() or nil)
  -- KiB of incremental GC work per iteration: the step's tensor handles
  -- are finalised steadily rather than in one long pause.
  self.gc_step_kb = args.gc_step_kb or cfg_get(cfg, 'train', 'gc_step_kb') or 256
  -- blocks up to this many MiB stay in glibc's heap between steps instead of being
  -- mmapped and page-faulted in again every step (csrc/loop/loop.c); 0: glibc's default
  self.malloc_keep_mb = args.malloc_keep_mb or 32
  -- SIGTERM/SIGINT/SIGUSR1 stop the loop after the current step (train.handle_signals)
  self.handle_signals = args.handle_signals
  if self.handle_signals == nil then self.handle_signals = cfg_get(cfg, 'train', 'handle_signals') end
  if self.handle_signals == nil then self.handle_signals = true end
  -- SIGUSR2 opens the REPL on the terminal at the next step boundary (train.repl_on_signal)
  self.repl_on_signal = args.repl_on_signal
  if self.repl_on_signal == nil then self.repl_on_signal = cfg_get(cfg, 'train', 'repl_on_signal') == true end
  -- counters (the C loop writes them)
  self.iteration, self.epoch, self.phase_name, self.phase_iteration, self.samples_seen = 0, 0, nil, 0, 0
  self.max_iterations = 0
  self.timing = { data = 0, forward_backward = 0, optimizer = 0, step = 0, hooks = 0,
                  data_total = 0, forward_backward_total = 0, optimizer_total = 0,
                  hooks_total = 0, steps = 0 }
  self.metrics = {}        -- final figures hooks report (test_top1, ...)
  self.storage = Storage.new { iteration = function() return self.iteration end }
  self.hooks = {}
  self.stop_requested = false
  for _, h in ipairs(args.hooks or {}) do self:add_hook(h) end
  return self
end
setmetatable(Task, { __call = new })

-- The events a hook may answer, in firing order: the C loop's own list (csrc/loop/loop.c).
Task.EVENTS = loop.events
-- What the trainer checks a task by (it does not load this file: the task drives it).
Task.is_crescent_task = true

-- A hook is a table with any of the event methods (fn(self, task)) and an optional
-- priority: 0 runs first, 100 last, 50 by default; equal priorities keep the order of
-- add_hook. Returns the hook.
function Task:add_hook(hook)
  if type(hook) ~= 'table' then
    error('add_hook: a hook is a table with methods such as after_step(self, task), got ' .. type(hook), 2)
  end
  local p = hook.priority
  if p ~= nil and (type(p) ~= 'number' or p < 0 or p > 100) then
    error('add_hook: priority must be a number from 0 (runs first) to 100 (runs last), got ' .. tostring(p), 2)
  end
  self.hooks[#self.hooks + 1] = hook
  return hook
end

-- Hooks and train steps ask the loop to stop after the current step.
function Task:request_stop(reason)
  self.stop_requested = true
  self.stop_reason = reason
end

-- Samples in a batch: batch.size, else the first dim of batch.input (or of its first
-- crop when input is a list of views), else of batch.target.
function Task.batch_size(_, batch)
  if type(batch) ~= 'table' then return 1 end
  if batch.size then return batch.size end
  local x = batch.input
  if type(x) == 'table' then x = x[1] end
  if x ~= nil then return #x end
  if batch.target ~= nil then return #batch.target end
  return 1
end

-- Parameters that require grad (what clipping and the guards look at); cached.
function Task:trainable_parameters()
  if not self._trainable then
    local ps = {}
    for _, p in ipairs(self.model:parameters()) do
      if p.requires_grad then ps[#ps + 1] = p end
    end
    self._trainable = ps
  end
  return self._trainable
end

-- fn(...) on the weights evaluation uses: the averaged ones when an EMA hook evaluates
-- with them (crescent/hooks/ema.lua), else the model's own.
function Task:with_eval_weights(fn, ...)
  for _, h in ipairs(self.hooks) do
    if type(h.with_weights) == 'function' then return h:with_weights(fn, ...) end
  end
  return fn(...)
end

-- The current learning rate of the first param group (for writers).
function Task:lr()
  local opt = self.optimizer
  if opt and opt.param_groups and opt.param_groups[1] then return opt.param_groups[1].lr end
  return nil
end

-- Called by the loop at the start of each phase (task.phase_name is set): model mode.
function Task:_begin_phase(phase)
  -- a train phase resumed mid-epoch from a checkpoint (engine/checkpoint.lua) goes on
  -- at the saved batch
  self.phase_iteration = phase == 'train' and self._resume_batch or 0
  if self.model and self.model.train then
    if phase == 'train' then self.model:train() else self.model:eval() end
  end
end

-- Called by the loop: the phase's batches as a generic-for triple, on task.device.
function Task:_batches(phase, epoch)
  local f, state, control
  local device = self.device
  local to_gpu = device ~= 'cpu'   -- a cr.data.Loader then pins its batches (pin_memory)
  if phase == 'train' then
    local start = self._resume_batch
    self._resume_batch = nil
    f, state, control = self.train_loader:iter(epoch, start, to_gpu)
  else
    f, state, control = self.test_loader:iter(epoch, nil, to_gpu)
  end
  if device == 'cpu' then return f, state, control end
  return function(s, c) return batch_to(f(s, c), device) end, state, control
end

-- Runs n train steps (default 1) by hand, firing the same hooks in the same order as
-- cr.train: the first call starts the run (before_train), a test phase that falls due on
-- the way runs whole, and the run's end fires after_train. cr.train(task) or further
-- steps go on from here. A SIGINT pauses it after the current step. Returns the number
-- of train steps run (fewer than n when the run ended or was paused).
function Task:step(n)
  n = n or 1
  if type(n) ~= 'number' or n < 1 or n ~= math.floor(n) then
    error('task:step(n): n must be a positive integer, got ' .. tostring(n), 2)
  end
  return trainer.step(self, 'steps', n)
end

-- Runs the rest of the current phase (or the next phase, between two) by hand, through
-- its after_phase hooks. Returns the phase's name ('train' or 'test'), or nil when the
-- run ended without one.
function Task:phase()
  local ran = trainer.step(self, 'phase')
  return ran > 0 and self.phase_name or nil
end

-- Called by the loop between two steps after a SIGUSR2 (train.repl_on_signal): the REPL
-- on the terminal that started the run, with `task` bound; the run goes on when it ends.
function Task:_attach()
  require('crescent.repl').attach(self)
end

-- Fires an event's hooks from inside a custom train step (after_forward, after_backward).
function Task:fire(event)
  if self._loop then loop.fire(self._loop, loop[event]) end
end

-- Seconds per hook and event so far: array of {label, event, seconds, calls}.
function Task:hook_times()
  if not self._loop then return {} end
  return loop.hook_times(self._loop)
end

return Task
