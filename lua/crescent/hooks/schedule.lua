-- crescent.hooks.schedule — applies the task's schedules: before each train step (per
-- = 'step', the default) or at the start of each train epoch (per = 'epoch'), through
-- cr.schedule bindings (crescent/optim/schedule.lua: progress = iterations done /
-- max_iterations, or epoch / epochs). task.schedules holds any of:
--   lr = sched                       shorthand: every optimizer group's lr (times lr_mult)
--   momentum = sched, weight_decay = sched        (likewise, times <field>_mult)
--   cr.schedule.apply{schedule = s, target = obj, field = 'name', per = 'step'|'epoch'}
--   {schedule = s, target = obj, field = 'name', per = ...}   (made into the above)
-- Each applied value goes into the storage under the binding's name (the field).
-- With gradient accumulation (task.accum_steps = k) progress counts optimizer steps,
-- floor(iteration / k) of max_iterations / k, so k batches of b follow the schedule of
-- one batch of k*b.
local util = require 'crescent.util'

local Schedule = {}
Schedule.__index = Schedule

local function bindings(task)
  local S = require('crescent').schedule
  local out = {}
  for _, k in ipairs(util.sorted_keys(task.schedules)) do
    if not task.optimizer then
      error("schedule: task.schedules." .. k .. " targets the optimizer, but the task has none", 0)
    end
    out[#out + 1] = S.apply { schedule = task.schedules[k], target = task.optimizer, field = k }
  end
  for i, b in ipairs(task.schedules) do
    if type(b) ~= 'table' then
      error('schedule: task.schedules[' .. i .. '] must be cr.schedule.apply{schedule =, target =, field =, per =}', 0)
    end
    if getmetatable(b) ~= S.Binding then
      b = S.apply { schedule = b.schedule, target = b.target or task.optimizer, field = b.field,
                    per = b.per, group = b.group, name = b.name }
    end
    out[#out + 1] = b
  end
  return out
end

local function apply(b, task)
  local k = task.accum_steps or 1
  local iteration, max_iterations = task.iteration, task.max_iterations
  if k > 1 then iteration, max_iterations = math.floor(iteration / k), math.floor(max_iterations / k) end
  local v = b:update(iteration, max_iterations, task.epoch, task.epochs)
  task.storage:put_scalar(b.name, v, { smoothing_hint = false })
end

function Schedule:before_train(task)
  self.bindings = bindings(task)
end

function Schedule:before_phase(task)
  if task.phase_name ~= 'train' then return end
  for _, b in ipairs(self.bindings) do
    if b.per == 'epoch' then apply(b, task) end
  end
end

function Schedule:before_step(task)
  if task.phase_name ~= 'train' then return end
  for _, b in ipairs(self.bindings) do
    if b.per == 'step' then apply(b, task) end
  end
end

-- cr.hooks.schedule{priority = 10}
return function(opts)
  opts = opts or {}
  return setmetatable({ name = 'schedule', priority = opts.priority or 10 }, Schedule)
end
