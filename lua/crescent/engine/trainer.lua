-- crescent.engine.trainer — cr.train(task): a pre-flight check of the whole task with
-- messages that name the field and the fix, then the C step loop (csrc/loop/loop.c).
local ffi = require 'ffi'
local cr = require 'crescent'
local loop = require 'crescent.engine.loop'
local steps = require 'crescent.engine.steps'
local util = require 'crescent.util'
local dry_run = require 'crescent.engine.dry_run'

local EVENT_SET = {}
for _, e in ipairs(loop.events) do EVENT_SET[e] = true end

local M = {}

local function fail(msg) error('cr.train: ' .. msg, 0) end

local function is_callable(f)
  if type(f) == 'function' then return true end
  local mt = (type(f) == 'table' or type(f) == 'userdata') and getmetatable(f)
  return mt and mt.__call ~= nil
end

local function ptr_key(t) return tonumber(ffi.cast('intptr_t', t)) end

-- The optimizer's tensors, from its param groups ({params = {t...} or {{name, t}...}}).
local function optimizer_tensors(opt)
  local out = {}
  for _, g in ipairs(opt.param_groups or {}) do
    for _, p in ipairs(g.params or {}) do
      if type(p) == 'table' then p = p[2] or p.tensor or p.param end
      if cr.is_tensor(p) then out[#out + 1] = p end
    end
  end
  return out
end

local function check_loader(loader, field)
  if type(loader) ~= 'table' and type(loader) ~= 'userdata' then
    fail('task.' .. field .. ' must be a loader (cr.data.Loader), got ' .. type(loader))
  end
  if not is_callable(loader.iter) then
    fail('task.' .. field .. ' has no iter(epoch) method; build it with cr.data.Loader(dataset, {...})')
  end
  if loader.num_batches then
    local n = loader:num_batches()
    if n == 0 then
      fail('task.' .. field .. ' yields no batches: the dataset is smaller than data.batch_size ' ..
           '(or data.limit is too small); lower data.batch_size or raise data.limit')
    end
    return n
  end
  return nil
end

-- Validates the task; returns the number of train batches per epoch (or nil if unknown).
function M.check(task)
  if type(task) ~= 'table' or task.is_crescent_task ~= true then
    fail('expected a task built by cr.engine.Task{...}, got ' .. type(task))
  end
  local epochs = task.epochs
  if type(epochs) ~= 'number' or epochs < 0 or epochs ~= math.floor(epochs) then
    fail('train.epochs must be a non-negative integer, got ' .. tostring(epochs))
  end
  local te = task.test_every
  if type(te) ~= 'number' or te < 0 or te ~= math.floor(te) then
    fail('train.test_every must be a non-negative integer (0: never test), got ' .. tostring(te))
  end
  local k = task.accum_steps
  if type(k) ~= 'number' or k < 1 or k ~= math.floor(k) then
    fail('optim.accum_steps must be a positive integer, got ' .. tostring(k))
  end
  for _, f in ipairs { 'clip_norm', 'clip_value' } do
    local v = task[f]
    if v ~= nil and (type(v) ~= 'number' or v <= 0) then
      fail('optim.' .. f .. ' must be a positive number (or 0 for none), got ' .. tostring(v))
    end
  end
  if not is_callable(task.train_step) then
    fail('task.train_step must be a function(task, batch), got ' .. type(task.train_step))
  end
  if task.test_loader and not is_callable(task.eval_step) then
    fail('task.eval_step must be a function(task, batch), got ' .. type(task.eval_step))
  end
  local nb = check_loader(task.train_loader, 'train_loader')
  if task.test_loader then check_loader(task.test_loader, 'test_loader') end

  local std = task.train_step == steps.standard
  if std then
    local m = task.model
    if m == nil then fail('task.model is missing; give Task{model = ...}') end
    if not is_callable(m) and not (type(m) == 'table' and m.forward) then
      fail('task.model must be a module (callable), got ' .. type(m))
    end
    if not is_callable(task.loss) then
      fail('task.loss must be a function(output, batch) -> scalar tensor, got ' .. type(task.loss))
    end
    local opt = task.optimizer
    if opt == nil then fail('task.optimizer is missing; e.g. cr.optim.SGD(model:named_parameters(), {lr = 0.1})') end
    if not is_callable(opt.step) or not is_callable(opt.zero_grad) then
      fail('task.optimizer must have step() and zero_grad() (a cr.optim optimizer)')
    end
    -- model/optimizer mismatch: every optimized tensor must be one of the model's
    if type(m) == 'table' and m.parameters then
      local mine = {}
      for _, p in ipairs(m:parameters()) do mine[ptr_key(p)] = true end
      local ts = optimizer_tensors(opt)
      local foreign = 0
      for _, p in ipairs(ts) do if not mine[ptr_key(p)] then foreign = foreign + 1 end end
      if foreign > 0 then
        fail(string.format('%d of the optimizer\'s %d parameters are not parameters of task.model; ' ..
          'build the optimizer from this model: cr.optim.SGD(model:named_parameters(), {...})', foreign, #ts))
      end
      if #ts == 0 and opt.param_groups then
        fail('the optimizer has no parameters; build it from model:named_parameters()')
      end
    end
  end

  -- hooks: known event names (a typo would silently never run), priorities
  for i, h in ipairs(task.hooks) do
    for key, v in pairs(h) do
      if type(v) == 'function' and type(key) == 'string' and not EVENT_SET[key]
         and (key:match('^before_') or key:match('^after_') or key:match('^on_')) then
        local s = util.nearest(key, EVENT_SET)
        fail(string.format("hook %d (%s) has a method '%s' that is no event%s; events: %s", i,
          tostring(h.name or '?'), key, s and ("; did you mean '" .. s .. "'?") or '', table.concat(loop.events, ', ')))
      end
    end
  end
  for _, h in ipairs(task.hooks) do
    if h.check then h:check(task) end
  end
  return nb
end

-- Hooks sorted by priority (0 first), then registration order; per event the array of
-- {hook, method, label} that the C loop caches.
function M.events(task)
  local order = {}
  for i, h in ipairs(task.hooks) do order[i] = { h = h, i = i, p = h.priority or 50 } end
  table.sort(order, function(a, b)
    if a.p ~= b.p then return a.p < b.p end
    return a.i < b.i
  end)
  local events = {}
  for _, e in ipairs(loop.events) do
    local list = {}
    for _, o in ipairs(order) do
      local fn = o.h[e]
      if type(fn) == 'function' then
        list[#list + 1] = { o.h, fn, tostring(o.h.name or ('hook' .. o.i)) }
      end
    end
    events[e] = list
  end
  return events
end

-- The loop's options for a run of task; nb: train batches per epoch (or nil).
local function loop_options(task, nb)
  return {
    epochs = task.epochs, test_every = task.test_every, has_test = task.test_loader ~= nil,
    gc_step_kb = task.gc_step_kb, malloc_keep_mb = task.malloc_keep_mb,
    -- SIGTERM/SIGINT/SIGUSR1: finish the step, let the hooks checkpoint, stop (loop.c)
    handle_signals = task.handle_signals ~= false, train_batches = nb,
    -- SIGUSR2: the REPL at the next step boundary (train.repl_on_signal)
    attach = task.repl_on_signal == true,
  }
end

-- A run that starts: check, the hooks' setup, a fresh loop context.
local function start(task)
  task.iterations_per_epoch = M.check(task)
  -- hooks' setup(task): once, before the loop and every before_train (the checkpoint
  -- hook restores a run there, so the other hooks start from the resumed counters)
  for _, h in ipairs(task.hooks) do
    if type(h.setup) == 'function' then h:setup(task) end
  end
  task._loop = loop.new(task, M.events(task))
  if task.optimizer and task.optimizer.zero_grad and task.train_step == steps.standard then
    task.optimizer:zero_grad()
  end
  task.stop_requested, task.stop_reason = false, nil
end

local function in_progress(task)
  return type(task) == 'table' and task._loop ~= nil and loop.state(task._loop) ~= 'idle'
end

-- Drives the loop with f(ctx, opts, ...) (loop.run or loop.step); restores grad mode.
-- The options are the task's as they are now: a run stepped by hand may have changed them.
local function drive(task, f, ...)
  local nb = task.iterations_per_epoch
  task.max_iterations = nb and nb * task.epochs or 0
  local grad_mode = cr.is_grad_enabled()
  local ok, res = pcall(f, task._loop, loop_options(task, nb), ...)
  cr.set_grad_enabled(grad_mode)
  if not ok then error(res, 0) end
  return res
end

-- cr.train(task): check, then run the C loop (run.dry_run: report and exit 0 instead,
-- crescent/engine/dry_run.lua). Errors propagate with their message after
-- on_exception and after_train hooks ran. Returns the task. A SIGTERM, SIGINT or SIGUSR1
-- during the run (unless task.handle_signals is false) stops it after the current step
-- with task.stop_reason = 'signal' and task.signal = its name; cr.train returns normally.
-- A run stepped by hand (task:step, task:phase) goes on from where it paused.
function M.train(task)
  if not in_progress(task) and dry_run.requested(task) then
    task.iterations_per_epoch = M.check(task)
    dry_run.finish(task) -- prints what the run would be and exits 0
  end
  if not in_progress(task) then start(task) end
  drive(task, loop.run)
  return task
end

-- task:step(n) and task:phase() (engine/task.lua): the same loop, driven by hand. A run
-- that is not in progress starts (before_train); one that ends fires after_train.
function M.step(task, what, n)
  if not in_progress(task) then
    if task.epoch >= task.epochs then
      fail(string.format('the training is finished (epoch %d of train.epochs = %d); raise task.epochs ' ..
        'to train on', task.epoch, task.epochs))
    end
    start(task)
  end
  return drive(task, loop.step, what, n)
end

return M
