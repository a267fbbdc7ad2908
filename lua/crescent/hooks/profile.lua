-- crescent.hooks.profile — profiles `count` train steps from step `first` (counted from 1)
-- with cr.profiler: every op, backward rule and region (step N, forward, backward,
-- optimizer) those steps ran. Then it writes <dir>/profile-<first>-<count>.json (a Chrome
-- trace: chrome://tracing or https://ui.perfetto.dev) and .txt (the table of the ops with
-- the most self time), and prints the table's top rows. On a GPU task the times are the
-- GPU's (cr.profiler.start{gpu = i}).
--
--   task:add_hook(cr.hooks.profile{first = 10, count = 3, dir = 'runs/exp1'})
--   luajit recipes/swav.lua train.profile=10:3
local profiler = require 'crescent.profiler'

local Profile = {}
Profile.__index = Profile

-- The index of a task's GPU ('cuda', 'cuda:1'), nil on the cpu.
local function gpu_index(device)
  local i = type(device) == 'string' and device:match('^cuda:?(%d*)$')
  if not i then return nil end
  return tonumber(i) or 0
end

function Profile:before_step(task)
  if task.phase_name ~= 'train' then return end
  local step = task.iteration + 1
  if step == self.first then profiler.start({ gpu = gpu_index(task.device) }) end
  if step >= self.first and step < self.first + self.count then self.region = profiler.begin('step ' .. step) end
end

function Profile:after_step(task)
  if task.phase_name ~= 'train' or not self.region then return end
  profiler.finish(self.region)
  self.region = nil
  if task.iteration == self.first + self.count - 1 then self:write() end
end

function Profile:write()
  profiler.stop()
  local events = profiler.events()
  local base = string.format('%s/profile-%d-%d', self.dir, self.first, self.count)
  profiler.chrome_trace(base .. '.json', events)
  local text = profiler.table(40, events)
  local f, err = io.open(base .. '.txt', 'w')
  if not f then error(string.format("profile: cannot write '%s.txt' (%s)", base, tostring(err)), 0) end
  f:write(text, '\n')
  f:close()
  local top = {}
  for line in text:gmatch('[^\n]+') do
    if #top < self.show + 1 then top[#top + 1] = line end
  end
  self.out:write(string.format('profile of steps %d-%d: %s.json (chrome://tracing), %s.txt\n%s\n', self.first,
    self.first + self.count - 1, base, base, table.concat(top, '\n')))
  self.out:flush()
  self.done = true
end

-- A run that ends (or stops) inside the window still gets its profile.
function Profile:after_train(_)
  if profiler.active() and not self.done then self:write() end
end

-- "first:count" (train.profile) -> first, count; '' -> nil.
local function parse(spec)
  if spec == nil or spec == '' then return nil end
  local a, b = tostring(spec):match('^(%d+):(%d+)$')
  if not a or tonumber(a) < 1 or tonumber(b) < 1 then
    error("train.profile must be '<first step>:<count>' such as '10:3' (steps counted from 1), got '" ..
      tostring(spec) .. "'", 0)
  end
  return tonumber(a), tonumber(b)
end

-- cr.hooks.profile{first =, count = 1, dir = '.', show = 15, out = io.stdout}
local function new(opts)
  opts = opts or {}
  local first, count = opts.first, opts.count or 1
  if type(first) ~= 'number' or first < 1 or first ~= math.floor(first) then
    error('profile: first must be the step to start at (from 1), got ' .. tostring(first), 2)
  end
  if type(count) ~= 'number' or count < 1 or count ~= math.floor(count) then
    error('profile: count must be a positive number of steps, got ' .. tostring(count), 2)
  end
  return setmetatable({ name = 'profile', priority = opts.priority or 1, first = first, count = count,
                        dir = opts.dir or '.', show = opts.show or 15, out = opts.out or io.stdout }, Profile)
end

return setmetatable({ parse = parse }, { __call = function(_, opts) return new(opts) end })
