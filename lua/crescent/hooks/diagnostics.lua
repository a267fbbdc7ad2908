-- crescent.hooks.diagnostics — the training diagnostics big_vision writes, every `every`
-- train steps, into the event storage (so TensorBoard and metrics.jsonl get them):
--   grad_norm      global L2 norm of the gradients, before clipping (unscaled under f16)
--   param_norm     global L2 norm of the trainable parameters, after the step
--   update_norm    L2 norm of what the step changed in them
--   lr/<i>         the lr of optimizer group i (1-based), as the schedule set it
--   memory/peak_host_mb, memory/peak_gpu_mb   the process's peak RSS; the GPU's peak
--                                             allocated memory (on a GPU run)
--   time/data, time/forward_backward, time/optimizer, time/hooks   milliseconds of this
--                  step (hooks: the step before, whose hooks have all run)
-- Measuring copies the trainable parameters once before the step, on the logged steps only.
--
--   task:add_hook(cr.hooks.diagnostics{every = 50})
local ffi = require 'ffi'
local cr = require 'crescent'

pcall(ffi.cdef, [[
struct crescent_rusage { long utime[2]; long stime[2]; long maxrss; long more[14]; };
int getrusage(int who, struct crescent_rusage *usage);
]])

local Diagnostics = {}
Diagnostics.__index = Diagnostics

-- The process's peak resident memory in MB (Linux reports ru_maxrss in KB).
local function peak_host_mb()
  local u = ffi.new('struct crescent_rusage')
  if ffi.C.getrusage(0, u) ~= 0 then return nil end
  return tonumber(u.maxrss) / 1024
end

local function trainable(task)
  local out = {}
  for _, np in ipairs(task.model:named_parameters()) do
    if np[2].requires_grad then out[#out + 1] = np[2] end
  end
  return out
end

local function l2(tensors, f)
  local s = 0
  for _, t in ipairs(tensors) do
    local v = f(t)
    if v then s = s + v:double():pow(2):sum():item() end
  end
  return math.sqrt(s)
end

function Diagnostics:logged(task) return (task.iteration + 1) % self.every == 0 end

function Diagnostics:after_backward(task)
  if task.phase_name ~= 'train' or not self:logged(task) or not task.model then return end
  local params = trainable(task)
  local scale = task.scaler and task.scaler.scale_value or 1
  task.storage:put_scalar('grad_norm', l2(params, function(p) return p.grad end) / scale)
  self.before = {}
  cr.no_grad(function()
    for i, p in ipairs(params) do self.before[i] = p:detach():clone() end
  end)
  self.params = params
end

function Diagnostics:after_step(task)
  if task.phase_name ~= 'train' or not self.before then return end
  local s, params, before = task.storage, self.params, self.before
  self.before, self.params = nil, nil
  cr.no_grad(function()
    s:put_scalar('param_norm', l2(params, function(p) return p:detach() end))
    local i = 0
    s:put_scalar('update_norm', l2(params, function(p)
      i = i + 1
      return p:detach() - before[i]
    end))
  end)
  local groups = task.optimizer and task.optimizer.param_groups or {}
  for g, group in ipairs(groups) do s:put_scalar('lr/' .. g, group.lr, { smoothing_hint = false }) end
  local host = peak_host_mb()
  if host then s:put_scalar('memory/peak_host_mb', host, { smoothing_hint = false }) end
  local dev = tostring(task.device or 'cpu')
  if dev:sub(1, 4) == 'cuda' then
    local ok, st = pcall(cr.cuda.memory_stats, tonumber(dev:match(':(%d+)')) or 0)
    if ok then s:put_scalar('memory/peak_gpu_mb', st.peak_allocated_bytes / 2 ^ 20, { smoothing_hint = false }) end
  end
  local t = task.timing or {}
  for _, k in ipairs { 'data', 'forward_backward', 'optimizer', 'hooks' } do
    if t[k] then s:put_scalar('time/' .. k, t[k] * 1000) end
  end
end

-- cr.hooks.diagnostics{every = 50, priority = 85}
return function(opts)
  opts = opts or {}
  local every = opts.every or 50
  if type(every) ~= 'number' or every < 1 or every ~= math.floor(every) then
    error('diagnostics: every must be a positive integer number of steps, got ' .. tostring(every), 2)
  end
  return setmetatable({ name = 'diagnostics', priority = opts.priority or 85, every = every }, Diagnostics)
end
