-- crescent.hooks.timer — iteration time, data time, images/s and the ETA, put into the
-- event storage for writers (smoothed: the median of the last `window` iterations). The
-- ETA counts the steps left at the median step time plus, for each epoch end still to
-- come, the time the last one took between its last train step and the next epoch's
-- first (the kNN monitor, the test phase, checkpoints).
-- Also totals of this cr.train call (a resumed run counts from where it resumed):
-- task.metrics.seconds, train_seconds, train_samples and train_img_per_s (train phases only).
-- task.started_at is when the call began (loop.now()): the hooks of a later priority
-- still run after this one's after_train (the last kNN, the last checkpoint's write), so a
-- recipe's final wall time is loop.now() - task.started_at once cr.train has returned.
local loop = require 'crescent.engine.loop'
local now = loop.now

local Timer = {}
Timer.__index = Timer

function Timer:before_train(task)
  self.t0 = now()
  task.started_at = self.t0
  self.train_seconds = 0
  self.samples0 = task.samples_seen   -- > 0 when the run resumed from a checkpoint
end

function Timer:before_phase(task)
  if task.phase_name ~= 'train' then return end
  self.t_last = now()
  if self.t_train_end then self.epoch_end_seconds = self.t_last - self.t_train_end end
end

function Timer:after_phase(task)
  if task.phase_name == 'train' then self.t_train_end = now() end
end

function Timer:after_step(task)
  if task.phase_name ~= 'train' then return end
  local t = now()
  local dt = t - self.t_last
  self.t_last = t
  self.train_seconds = self.train_seconds + dt
  local s = task.storage
  s:put_scalar('time', dt)
  s:put_scalar('data_time', task.timing.data)
  s:put_scalar('img_per_s', task:batch_size(task.batch) / dt)
  local med = s:history('time'):median(self.window)
  task.eta_seconds = math.max(0, task.max_iterations - task.iteration) * med +
                     (self.epoch_end_seconds or 0) * math.max(0, task.epochs - task.epoch)
end

function Timer:after_train(task)
  task.metrics.seconds = now() - (self.t0 or now())
  task.metrics.train_seconds = self.train_seconds
  task.metrics.train_samples = task.samples_seen - (self.samples0 or 0)
  if self.train_seconds > 0 then
    task.metrics.train_img_per_s = task.metrics.train_samples / self.train_seconds
  end
end

-- cr.hooks.timer{window = 20, priority = 20}
return function(opts)
  opts = opts or {}
  return setmetatable({ name = 'timer', priority = opts.priority or 20, window = opts.window or 20,
                        train_seconds = 0 }, Timer)
end
