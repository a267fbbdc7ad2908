-- crescent.hooks.freeze — keeps named parameters fixed for the first N iterations by
-- dropping their grads after the backward (the optimizer skips a parameter without a
-- grad), as SwAV does with its prototypes: cr.hooks.freeze{pattern = '^prototypes', iterations = 313}
local Freeze = {}
Freeze.__index = Freeze

function Freeze:before_train(task)
  self.params = {}
  local names = {}
  for _, np in ipairs(task.model:named_parameters()) do
    if np[1]:match(self.pattern) then self.params[#self.params + 1] = np[2] end
    if #names < 4 then names[#names + 1] = "'" .. np[1] .. "'" end
  end
  if #self.params == 0 then
    error("freeze: no parameter name matches the Lua pattern '" .. self.pattern .. "'; names look like " ..
          table.concat(names, ', '), 0)
  end
end

function Freeze:after_backward(task)
  if task.phase_name ~= 'train' or task.iteration >= self.iterations then return end
  for _, p in ipairs(self.params) do p.grad = nil end
end

-- cr.hooks.freeze{pattern = 'lua pattern on parameter names', iterations = N}
return function(opts)
  opts = opts or {}
  if type(opts.pattern) ~= 'string' then
    error("freeze: give pattern = a Lua pattern on parameter names, e.g. '^prototypes%.'", 2)
  end
  if type(opts.iterations) ~= 'number' or opts.iterations < 0 then
    error('freeze: iterations must be a non-negative number, got ' .. tostring(opts.iterations), 2)
  end
  return setmetatable({ name = 'freeze', priority = opts.priority or 30, pattern = opts.pattern,
                        iterations = opts.iterations }, Freeze)
end
