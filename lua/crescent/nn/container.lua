-- crescent.nn.container — Sequential (children named '0', '1', ... run in order) and
-- ModuleList (children held by index, no forward), named as PyTorch names them so
-- checkpoints map by name.
local Module = require 'crescent.nn.module'

local M = {}   -- the classes and functions of this file, which crescent.nn carries

local is_module = Module.is_module

-- Children from varargs: modules, or one array of modules, or one array of {name, module}.
local function add_all(self, what, ...)
  local args = { ... }
  if select('#', ...) == 1 and type(args[1]) == 'table' and not is_module(args[1]) then args = args[1] end
  for i, m in ipairs(args) do
    if type(m) == 'table' and not is_module(m) and type(m[1]) == 'string' and is_module(m[2]) then
      self:add_module(m[1], m[2])
    elseif is_module(m) then
      self:add_module(tostring(#self._children), m)
    else
      error(string.format('%s: argument %d is a %s, expected a module (or a {name, module} pair)',
        what, i, type(m)), 4)
    end
  end
end

-- nn.Sequential(m1, m2, ...), nn.Sequential{m1, m2}, nn.Sequential{{'conv', m1}, {'relu', m2}}
local Sequential = Module:extend('Sequential')
function Sequential:init(...) add_all(self, 'Sequential', ...) end

function Sequential:forward(x)
  local ch = self._children
  for i = 1, #ch do x = self[ch[i]]:forward(x) end
  return x
end

-- Appends a module under the next index name; returns self for chaining.
function Sequential:add(m)
  if not is_module(m) then error('Sequential:add: expected a module, got ' .. type(m), 2) end
  self:add_module(tostring(#self._children), m)
  return self
end
Sequential.append = Sequential.add

-- seq:get(i): the i-th child, 0-based like its name (negative counts from the end).
function Sequential:get(i)
  local n = #self._children
  if type(i) ~= 'number' or i ~= math.floor(i) or i < -n or i >= n then
    error(string.format('%s:get: index %s out of range for %d children (0-based)', self.__name, tostring(i), n), 2)
  end
  if i < 0 then i = i + n end
  return self[self._children[i + 1]]
end
-- The number of children (LuaJIT ignores __len on tables, so #seq cannot be used).
function Sequential:len() return #self._children end
M.Sequential = Sequential

-- nn.ModuleList{m1, m2}: holds modules so their parameters register; index with :get(i).
local ModuleList = Module:extend('ModuleList')
function ModuleList:init(...) add_all(self, 'ModuleList', ...) end
ModuleList.add, ModuleList.append = Sequential.add, Sequential.add
ModuleList.get, ModuleList.len = Sequential.get, Sequential.len
function ModuleList.forward()
  error('ModuleList has no forward: iterate over its modules (m:get(i), m:len()) in the parent forward', 2)
end
M.ModuleList = ModuleList

return M
