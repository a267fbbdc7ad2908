-- crescent.schedule (also cr.optim.schedule) — parameter schedules as functions of
-- training progress, after VISSL's param schedulers (classy_vision's), and bindings that
-- write a schedule's value into an optimizer field or any table field.
--
-- A schedule is an object with s:value(p), p = progress in [0, 1] (0 = start of training,
-- 1 = its end); s(p) is the same, and s:at(step, total) = s:value(step / total).
--   constant{value = v}
--   linear{from = a, to = b}               a + p * (b - a)
--   cosine{from = a, to = b}               b + (a - b) * (1 + cos(pi * p)) / 2
--   step{base = v, gamma = g, milestones = {m1, m2, ...}, total = nil}
--        v * g^k, k = how many milestones have been reached. Milestones are progress
--        fractions, or units (epochs/steps) when total is given: with total = 90 and
--        milestones {30, 60}, unit u = floor(p * 90) reaches 30 at p = 1/3.
--   step{values = {v1, v2, ...}}           VISSL's StepParamScheduler: equal spans
--   multistep{values = {v1, ..., vk+1}, milestones = {m1, ..., mk}, total = nil}
--        VISSL's MultiStepParamScheduler: v(i+1) once milestone i is reached
--   warmup_cosine{warmup = f, from = a, peak = b, to = c}
--        linear a -> b over progress [0, f], then cosine b -> c over [f, 1] (SwAV's lr)
--   compose{{until_ = 0.1, s1}, {until_ = 1, s2}, scaling = 'rescaled'}
--        VISSL's CompositeParamScheduler: s_i runs on [until_(i-1), until_i]; 'rescaled'
--        (default) feeds it the progress within its own interval (0..1), 'fixed' the
--        global progress. An entry may set its own scaling = 'fixed'. The last until_ is 1.
-- A plain number is a constant schedule and a function f(p) a custom one, wherever a
-- schedule is expected. Progress a hair before a boundary (1e-6, VISSL's WHERE_EPSILON)
-- counts as the boundary, so p = 0.1 computed as 1/10 lands in the second interval.
--
-- Binding: apply{schedule = s, target = opt_or_table, field = 'lr', per = 'step' | 'epoch',
-- group = nil | i}:update(step, total_steps, epoch, total_epochs) sets the field and
-- returns the value. per = 'step': p = step / total_steps, step = steps done so far
-- (0-based); per = 'epoch': p = epoch / total_epochs, epoch 0-based (the value holds for
-- the whole epoch). Schedules hold no state: resuming calls update with the restored
-- counters and gets the same value.
-- Targets: an optimizer (has param_groups) writes group[field] = value * group[field ..
-- '_mult'] (1 when absent) into every group, so lr multipliers and no-decay groups (whose
-- weight_decay_mult is 0) survive, except the lr of groups with fix_lr = true; group = i
-- writes the value as is into group i only.
-- Any other table: target[field] = value, where field may be a dotted path ('loss.temp').
-- A function target is called with the value.
local util = require 'crescent.util'

local S = {}

local EPS = 1e-6 -- VISSL's WHERE_EPSILON

-- errors point at the user's line (the first caller outside lua/crescent/)
local function fail(msg) error(msg, util.user_level()) end

local Schedule = {}
Schedule.__index = Schedule
Schedule.__call = function(s, p) return s:value(p) end
function Schedule:at(step, total)
  if type(total) ~= 'number' or total <= 0 then
    fail('schedule:at(step, total): total must be a positive number, got ' .. tostring(total))
  end
  return self:value(step / total)
end
function Schedule:__tostring() return 'schedule ' .. self.kind end

local function new(kind, fn, fields)
  local s = setmetatable(fields or {}, Schedule)
  s.kind = kind
  s.value = function(_, p) return fn(p) end
  return s
end

local function is_schedule(x) return getmetatable(x) == Schedule end
S.is_schedule = is_schedule

-- A schedule from a schedule, a number or a function.
function S.wrap(x, what)
  if is_schedule(x) then return x end
  if type(x) == 'number' then return S.constant { value = x } end
  if type(x) == 'function' then return new('function', x) end
  if type(x) == 'table' and type(x.value) == 'function' then
    return new('custom', function(p) return x:value(p) end)
  end
  fail((what or 'schedule') .. ': expected a schedule (cr.schedule.cosine{...}), a number or a function, got ' ..
    type(x))
end

local function num(args, kind, key, default)
  local v = args[key]
  if v == nil then v = default end
  if type(v) ~= 'number' or v ~= v then
    fail(string.format('schedule.%s: %s must be a number, got %s', kind, key, tostring(v)))
  end
  return v
end

local function check_args(kind, args, known)
  if type(args) ~= 'table' then fail('schedule.' .. kind .. ': give a table of options, e.g. {from = 0.1, to = 0}') end
  for k in pairs(args) do
    if type(k) == 'string' and not known[k] then
      local list = {}
      for n in pairs(known) do list[#list + 1] = n end
      table.sort(list)
      fail(string.format("schedule.%s: unknown option '%s'; options: %s", kind, k, table.concat(list, ', ')))
    end
  end
end

function S.constant(args)
  if type(args) == 'number' then args = { value = args } end
  check_args('constant', args, { value = true })
  local v = num(args, 'constant', 'value')
  return new('constant', function() return v end, { value_ = v })
end

function S.linear(args)
  check_args('linear', args, { from = true, to = true })
  local a, b = num(args, 'linear', 'from'), num(args, 'linear', 'to')
  return new('linear', function(p) return a + p * (b - a) end)
end

function S.cosine(args)
  check_args('cosine', args, { from = true, to = true })
  local a, b = num(args, 'cosine', 'from'), num(args, 'cosine', 'to')
  return new('cosine', function(p) return b + 0.5 * (a - b) * (1 + math.cos(math.pi * p)) end)
end

-- How many milestones p has reached (bisect_right of VISSL's MultiStep).
local function milestone_counter(kind, args)
  local ms = args.milestones
  if type(ms) ~= 'table' or #ms == 0 then
    fail('schedule.' .. kind .. ': milestones must be a non-empty list, e.g. {0.5, 0.75} (or epochs with total = N)')
  end
  local total = args.total
  if total ~= nil and (type(total) ~= 'number' or total <= 0) then
    fail('schedule.' .. kind .. ': total must be a positive number (epochs or steps the milestones count in)')
  end
  for i, m in ipairs(ms) do
    if type(m) ~= 'number' or (i > 1 and m <= ms[i - 1]) then
      fail('schedule.' .. kind .. ': milestones must be increasing numbers')
    end
    if not total and (m <= 0 or m >= 1) then
      fail(string.format('schedule.%s: milestone %g is not a progress fraction in (0, 1); give total = <epochs> ' ..
        'to use epoch or step milestones', kind, m))
    end
  end
  return function(p)
    local x = total and math.floor((p + EPS) * total) or (p + EPS)
    local k = 0
    for _, m in ipairs(ms) do
      if x >= m then k = k + 1 else break end
    end
    return k
  end
end

function S.step(args)
  check_args('step', args, { base = true, gamma = true, milestones = true, total = true, values = true })
  if args.values ~= nil then
    local vs = args.values
    if type(vs) ~= 'table' or #vs == 0 then fail('schedule.step: values must be a non-empty list of numbers') end
    return new('step', function(p)
      local i = math.floor((p + EPS) * #vs) + 1
      return vs[math.max(1, math.min(#vs, i))]
    end)
  end
  local base, gamma = num(args, 'step', 'base'), num(args, 'step', 'gamma', 0.1)
  local count = milestone_counter('step', args)
  return new('step', function(p) return base * gamma ^ count(p) end)
end

function S.multistep(args)
  check_args('multistep', args, { values = true, milestones = true, total = true })
  local vs = args.values
  if type(vs) ~= 'table' or type(args.milestones) ~= 'table' or #vs ~= #args.milestones + 1 then
    fail('schedule.multistep: give values = {v1, ..., vk+1} and milestones = {m1, ..., mk} (one more value than ' ..
      'milestones)')
  end
  local count = milestone_counter('multistep', args)
  return new('multistep', function(p) return vs[count(p) + 1] end)
end

function S.compose(args)
  if type(args) ~= 'table' or #args == 0 then
    fail('schedule.compose: give a list of entries {{until_ = 0.1, s1}, {until_ = 1, s2}}')
  end
  local default_scaling = args.scaling or 'rescaled'
  local parts, prev = {}, 0
  for i, e in ipairs(args) do
    if type(e) ~= 'table' or type(e.until_) ~= 'number' then
      fail(string.format('schedule.compose: entry %d must be {until_ = <progress end>, <schedule>}', i))
    end
    if e.until_ <= prev or e.until_ > 1 + EPS then
      fail(string.format('schedule.compose: until_ values must increase within (0, 1]; entry %d has %g after %g',
        i, e.until_, prev))
    end
    local scaling = e.scaling or default_scaling
    if scaling ~= 'rescaled' and scaling ~= 'fixed' then
      fail("schedule.compose: scaling must be 'rescaled' or 'fixed', got " .. tostring(scaling))
    end
    parts[i] = { start = prev, length = e.until_ - prev, s = S.wrap(e[1] or e.schedule, 'schedule.compose entry ' .. i),
                 rescaled = scaling == 'rescaled' }
    prev = e.until_
  end
  if math.abs(prev - 1) > EPS then
    fail(string.format('schedule.compose: the last entry must end at until_ = 1 (it ends at %g)', prev))
  end
  return new('compose', function(p)
    -- VISSL: advance while p (+eps) is past the running total, except from the last part
    local i, running = 1, parts[1].length
    while p + EPS > running and i < #parts do
      i = i + 1
      running = running + parts[i].length
    end
    local part = parts[i]
    local q = part.rescaled and (p - part.start) / part.length or p
    return part.s:value(q)
  end, { parts = parts })
end

function S.warmup_cosine(args)
  check_args('warmup_cosine', args, { warmup = true, from = true, peak = true, to = true })
  local w = num(args, 'warmup_cosine', 'warmup')
  local peak, to = num(args, 'warmup_cosine', 'peak'), num(args, 'warmup_cosine', 'to', 0)
  local from = num(args, 'warmup_cosine', 'from', 0)
  if w < 0 or w >= 1 then
    fail('schedule.warmup_cosine: warmup is the fraction of training spent warming up, in [0, 1), got ' .. w)
  end
  if w == 0 then return S.cosine { from = peak, to = to } end
  local s = S.compose { { until_ = w, S.linear { from = from, to = peak } },
                        { until_ = 1, S.cosine { from = peak, to = to } } }
  s.kind = 'warmup_cosine'
  return s
end

-- A schedule from a config table: {name = 'cosine', from = .., to = ..}; a number is a
-- constant. What recipes use for `optim.lr_schedule = {...}` style keys.
function S.build(cfg)
  if type(cfg) == 'number' or is_schedule(cfg) then return S.wrap(cfg) end
  if type(cfg) ~= 'table' or type(cfg.name) ~= 'string' then
    fail("schedule.build: expected {name = 'cosine' | 'linear' | 'constant' | 'step' | 'multistep' | " ..
      "'warmup_cosine', ...}")
  end
  local kinds = { constant = true, linear = true, cosine = true, step = true, multistep = true,
                  warmup_cosine = true, compose = true }
  local ctor = kinds[cfg.name] and S[cfg.name]
  if not ctor then
    fail("schedule.build: unknown schedule '" .. cfg.name .. "'; use constant, linear, cosine, step, multistep, " ..
      'warmup_cosine or compose')
  end
  local args = {}
  for k, v in pairs(cfg) do if k ~= 'name' then args[k] = v end end
  return ctor(args)
end

-- ---- bindings --------------------------------------------------------------------------

local Binding = {}
Binding.__index = Binding

local function is_optimizer(t) return type(t) == 'table' and type(t.param_groups) == 'table' end

-- target table and final key for a dotted path
local function resolve(target, field)
  local t, key = target, field
  for part, rest in field:gmatch('([^.]+)(%.?)') do
    if rest == '.' then
      t = t[part]
      if type(t) ~= 'table' then return nil, part end
    else
      key = part
    end
  end
  return t, key
end

function S.apply(args)
  if type(args) ~= 'table' then fail('schedule.apply: give {schedule = s, target = opt_or_table, field = ...}') end
  for k in pairs(args) do
    if not ({ schedule = true, target = true, field = true, per = true, group = true, name = true })[k] then
      fail("schedule.apply: unknown option '" .. tostring(k) .. "'; options: schedule, target, field, per, group, name")
    end
  end
  local b = setmetatable({}, Binding)
  b.schedule = S.wrap(args.schedule, 'schedule.apply')
  b.target = args.target
  b.field = args.field or 'lr'
  b.per = args.per or 'step'
  b.group = args.group
  b.name = args.name or b.field
  if b.per ~= 'step' and b.per ~= 'epoch' then
    fail("schedule.apply: per must be 'step' or 'epoch', got " .. tostring(b.per))
  end
  if type(b.field) ~= 'string' then fail('schedule.apply: field must be a string, e.g. "lr"') end
  local tgt = b.target
  if is_optimizer(tgt) then
    local groups = tgt.param_groups
    if b.group ~= nil and (type(b.group) ~= 'number' or not groups[b.group]) then
      fail(string.format('schedule.apply: group %s does not exist (the optimizer has %d groups)', tostring(b.group), #groups))
    end
    for i, g in ipairs(groups) do
      if type(g[b.field]) ~= 'number' then
        local known = {}
        for k, v in pairs(g) do if type(v) == 'number' then known[#known + 1] = k end end
        table.sort(known)
        fail(string.format("schedule.apply: optimizer group %d has no number field '%s'; schedulable fields: %s",
          i, b.field, table.concat(known, ', ')))
      end
    end
  elseif type(tgt) == 'table' then
    local t, key = resolve(tgt, b.field)
    if t == nil or type(t[key]) ~= 'number' then
      fail(string.format("schedule.apply: the target has no number field '%s'; a hook should set its parameters " ..
        'before a schedule is bound to them', b.field))
    end
  elseif type(tgt) ~= 'function' then
    fail('schedule.apply: target must be an optimizer, a table or a function, got ' .. type(tgt))
  end
  return b
end

-- Progress for the binding's unit; errors when the totals are missing.
function Binding:progress(step, total_steps, epoch, total_epochs)
  local n, total
  if self.per == 'step' then n, total = step, total_steps else n, total = epoch, total_epochs end
  if type(n) ~= 'number' or type(total) ~= 'number' or total <= 0 then
    fail(string.format("schedule '%s' (per %s): update needs the %s count and a positive total, got %s / %s",
      self.name, self.per, self.per, tostring(n), tostring(total)))
  end
  local p = n / total
  if p < 0 then p = 0 elseif p > 1 then p = 1 end
  return p
end

function Binding:update(step, total_steps, epoch, total_epochs)
  local v = self.schedule:value(self:progress(step, total_steps, epoch, total_epochs))
  self:set(v)
  return v
end

-- Writes v into the target (see the header for the rules).
function Binding:set(v)
  local tgt, f = self.target, self.field
  self.value = v
  if is_optimizer(tgt) then
    if self.group then
      tgt.param_groups[self.group][f] = v
    else
      local mk = f .. '_mult'
      local skip_fixed = f == 'lr'
      for _, g in ipairs(tgt.param_groups) do
        if not (skip_fixed and g.fix_lr) then g[f] = v * (g[mk] or 1) end
      end
    end
  elseif type(tgt) == 'function' then
    tgt(v)
  else
    local t, key = resolve(tgt, f)
    t[key] = v
  end
end

S.Binding = Binding
S.Schedule = Schedule
return S
