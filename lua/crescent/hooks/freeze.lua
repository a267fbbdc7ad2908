-- crescent.hooks.freeze — keeps named parameters fixed for the first N iterations by
-- dropping their grads after the backward (the optimizer skips a parameter without a
-- grad), as SwAV does with its prototypes: cr.hooks.freeze{pattern = '^prototypes', iterations = 313}
-- With modes = true the modules all of whose parameters match also stay in eval mode
-- for those iterations (a frozen trunk's BatchNorm keeps its running statistics), and go
-- back to training mode after them (model.freeze with model.freeze_iters in a recipe).
local Freeze = {}
Freeze.__index = Freeze

function Freeze:before_train(task)
  self.params = {}
  local names, matched = {}, {}
  for _, np in ipairs(task.model:named_parameters()) do
    if np[1]:match(self.pattern) then
      self.params[#self.params + 1] = np[2]
      matched[np[1]] = true
    end
    if #names < 4 then names[#names + 1] = "'" .. np[1] .. "'" end
  end
  if #self.params == 0 then
    error("freeze: no parameter name matches the Lua pattern '" .. self.pattern .. "'; names look like " ..
          table.concat(names, ', '), 0)
  end
  self.modules = {}
  if self.modes then
    for _, nm in ipairs(task.model:named_modules()) do
      local ps, all = nm[2]:named_parameters(), true
      for _, p in ipairs(ps) do all = all and matched[(nm[1] ~= '' and nm[1] .. '.' or '') .. p[1]] == true end
      if #ps > 0 and all then self.modules[#self.modules + 1] = nm[2] end
    end
  end
end

function Freeze:before_phase(task)
  if task.phase_name ~= 'train' or task.iteration >= self.iterations then return end
  for _, m in ipairs(self.modules) do m:eval() end
end

function Freeze:before_step(task)
  -- the window is over: the frozen modules train again
  if task.phase_name == 'train' and task.iteration == self.iterations and #self.modules > 0 then task.model:train() end
end

function Freeze:after_backward(task)
  if task.phase_name ~= 'train' or task.iteration >= self.iterations then return end
  for _, p in ipairs(self.params) do p.grad = nil end
end

-- cr.hooks.freeze{pattern = 'lua pattern on parameter names', iterations = N, modes = false}
return function(opts)
  opts = opts or {}
  if type(opts.pattern) ~= 'string' then
    error("freeze: give pattern = a Lua pattern on parameter names, e.g. '^prototypes%.'", 2)
  end
  if type(opts.iterations) ~= 'number' or opts.iterations < 0 then
    error('freeze: iterations must be a non-negative number, got ' .. tostring(opts.iterations), 2)
  end
  return setmetatable({ name = 'freeze', priority = opts.priority or 30, pattern = opts.pattern,
                        iterations = opts.iterations, modes = opts.modes == true }, Freeze)
end
