-- crescent.nn.module — the Module base class: parameters, buffers and child modules by
-- name (registration order kept, so names and orders are deterministic), train/eval,
-- PyTorch-style state_dict/load_state_dict with dotted names, apply, freeze, parameter
-- counts, a repr tree, and subclassing with Module:extend(name).
--
-- Attributes live in the instance table itself, so `self.conv1(x)` or `self.weight` in a
-- forward is a plain table read (no __index function on the hot path). The registries
-- only record names and kinds; enumeration reads the current value under each name, so
-- reassigning `self.fc = nn.Linear(...)` replaces what state_dict and named_parameters see.
local Tensor = require 'crescent.tensor'
local autograd = require 'crescent.autograd'
local util = require 'crescent.util'

local is_tensor = Tensor.op_helpers.is_tensor
local no_grad = autograd.no_grad

local Module = {}
Module.__index = Module
Module.__name = 'Module'
Module.__is_module = true

local function is_module(v)
  if type(v) ~= 'table' then return false end
  local mt = getmetatable(v)
  return mt ~= nil and mt.__is_module == true
end
Module.is_module = is_module

-- ---- registration -------------------------------------------------------------------------
-- Each instance holds three ordered name lists (_params, _buffers, _children) and a map
-- _kind[name] -> 'param' | 'buffer' | 'module'. They are set with rawset before init runs.
local function setup(self)
  rawset(self, '_params', {})
  rawset(self, '_buffers', {})
  rawset(self, '_children', {})
  rawset(self, '_kind', {})
  rawset(self, '_nonpersistent', {})
  rawset(self, 'training', true)
end

local lists = { param = '_params', buffer = '_buffers', module = '_children' }

local function unregister(self, name)
  local kind = self._kind[name]
  if not kind then return end
  local list = self[lists[kind]]
  for i = 1, #list do
    if list[i] == name then table.remove(list, i); break end
  end
  self._kind[name] = nil
  self._nonpersistent[name] = nil
end

local function register(self, name, kind, value, what)
  if type(name) ~= 'string' or name == '' or name:find('.', 1, true) then
    error(string.format("%s: name must be a non-empty string without '.', got %s", what, tostring(name)), 3)
  end
  if rawget(self, '_kind') == nil then
    error(string.format('%s: the module is not set up; in a subclass, create it with Class(...) '
      .. '(not by hand) so Module fields exist before init runs', what), 3)
  end
  local old = self._kind[name]
  if old ~= kind then
    unregister(self, name)
    local list = self[lists[kind]]
    list[#list + 1] = name
    self._kind[name] = kind
  end
  rawset(self, name, value)
end

-- self:register_parameter('weight', t): t is trained (its requires_grad is set).
function Module:register_parameter(name, t)
  if t ~= nil and not is_tensor(t) then
    error(string.format("register_parameter: '%s' must be a tensor or nil, got %s", tostring(name), type(t)), 2)
  end
  if t ~= nil and not t.requires_grad and t:is_floating_point() then t:requires_grad_(true) end
  register(self, name, 'param', t, 'register_parameter')
  return t
end

-- self:register_buffer('running_mean', t, {persistent = true}): state that is saved but not
-- trained. Non-persistent buffers stay out of state_dict.
function Module:register_buffer(name, t, opts)
  if t ~= nil and not is_tensor(t) then
    error(string.format("register_buffer: '%s' must be a tensor or nil, got %s", tostring(name), type(t)), 2)
  end
  register(self, name, 'buffer', t, 'register_buffer')
  if opts and opts.persistent == false then self._nonpersistent[name] = true end
  return t
end

function Module:add_module(name, m)
  if m ~= nil and not is_module(m) then
    error(string.format("add_module: '%s' must be a module or nil, got %s", tostring(name), type(m)), 2)
  end
  register(self, name, 'module', m, 'add_module')
  return m
end
Module.register_module = Module.add_module

-- First assignment of a name: a module becomes a child, a tensor that requires grad a
-- parameter (as nn.Parameter would in PyTorch); other values are plain attributes. Use
-- register_buffer for tensors that are state but not trained.
function Module.__newindex(self, k, v)
  local kinds = rawget(self, '_kind')
  if kinds and type(k) == 'string' then
    if is_module(v) then register(self, k, 'module', v, 'set module'); return end
    local old = kinds[k]
    if is_tensor(v) and (old == 'buffer' or old == 'param') then rawset(self, k, v); return end
    if is_tensor(v) and v.requires_grad then register(self, k, 'param', v, 'set parameter'); return end
    if old == 'module' and v == nil then rawset(self, k, nil); return end
  end
  rawset(self, k, v)
end

-- ---- class machinery ------------------------------------------------------------------------
local function construct(cls, ...)
  local self = setmetatable({}, cls)
  setup(self)
  self:init(...)
  return self
end

-- Metamethods are read raw from the metatable, so each class copies them.
local function finish_class(cls, parent, name)
  cls.__index = cls
  cls.__name = name
  cls.__newindex = Module.__newindex
  cls.__call = parent.__call
  cls.__tostring = parent.__tostring
  return setmetatable(cls, { __index = parent, __call = construct, __tostring = function() return 'class ' .. name end })
end

-- local Block = nn.Module:extend('Block'); function Block:init(...) end; function Block:forward(x) end
function Module:extend(name, cls)
  if type(name) ~= 'string' then error('extend: give the class a name, e.g. nn.Module:extend("Block")', 2) end
  return finish_class(cls or {}, self, name)
end

function Module.init() end
function Module:forward()
  error(self.__name .. ': forward is not implemented; define function ' .. self.__name .. ':forward(x)', 2)
end
function Module.__call(self, ...) return self:forward(...) end

-- ---- enumeration ---------------------------------------------------------------------------------
local function join(prefix, name) return prefix == '' and name or (prefix .. '.' .. name) end

-- Calls fn(prefix, module) for self and every descendant, depth-first in registration order.
local function walk(self, prefix, fn, seen)
  if seen then
    if seen[self] then return end
    seen[self] = true
  end
  fn(prefix, self)
  local ch = self._children
  for i = 1, #ch do
    local c = rawget(self, ch[i])
    if is_module(c) then walk(c, join(prefix, ch[i]), fn, seen) end
  end
end

-- {name, tensor} for the registry `key` ('_params' or '_buffers') of self and its
-- descendants; a tensor shared by two modules appears once (under its first name), as in
-- PyTorch. {recurse = false} lists only own ones.
local function named_tensors(self, key, opts)
  local out, seen_t = {}, {}
  local function own(prefix, m)
    local names = m[key]
    for i = 1, #names do
      local t = rawget(m, names[i])
      if is_tensor(t) and not seen_t[t] then
        seen_t[t] = true
        out[#out + 1] = { join(prefix, names[i]), t }
      end
    end
  end
  if opts and opts.recurse == false then own('', self) else walk(self, '', own, {}) end
  return out
end

-- m:named_parameters() -> array of {name, tensor}
function Module:named_parameters(opts) return named_tensors(self, '_params', opts) end

function Module:parameters(opts)
  local out = {}
  for i, p in ipairs(self:named_parameters(opts)) do out[i] = p[2] end
  return out
end

function Module:named_buffers(opts) return named_tensors(self, '_buffers', opts) end

function Module:buffers(opts)
  local out = {}
  for i, b in ipairs(self:named_buffers(opts)) do out[i] = b[2] end
  return out
end

function Module:named_children()
  local out, ch = {}, self._children
  for i = 1, #ch do
    local c = rawget(self, ch[i])
    if is_module(c) then out[#out + 1] = { ch[i], c } end
  end
  return out
end

function Module:children()
  local out = {}
  for i, c in ipairs(self:named_children()) do out[i] = c[2] end
  return out
end

-- self first, then descendants depth-first; each module once.
function Module:named_modules()
  local out = {}
  walk(self, '', function(prefix, m) out[#out + 1] = { prefix, m } end, {})
  return out
end

function Module:modules()
  local out = {}
  for i, m in ipairs(self:named_modules()) do out[i] = m[2] end
  return out
end

-- ---- modes ---------------------------------------------------------------------------------------
-- m:train() puts m and its descendants in training mode, except the modules whose
-- parameters :freeze() has fixed (they and theirs stay in eval mode: a frozen
-- BatchNorm's running statistics do not move); m:train(false) or m:eval() puts all in
-- eval mode.
local function set_mode(m, mode)
  local keep_eval = mode and rawget(m, '_frozen')
  rawset(m, 'training', mode and not keep_eval)
  local ch = m._children
  for i = 1, #ch do
    local c = rawget(m, ch[i])
    if is_module(c) then set_mode(c, mode and not keep_eval) end
  end
end

function Module:train(mode)
  if mode == nil then mode = true end
  set_mode(self, mode and true or false)
  return self
end
function Module:eval() return self:train(false) end

-- fn(m) on every descendant, children before their parent (PyTorch's order).
function Module:apply(fn)
  if type(fn) ~= 'function' then error('apply: expected a function(module), got ' .. type(fn), 2) end
  local ch = self._children
  for i = 1, #ch do
    local c = rawget(self, ch[i])
    if is_module(c) then c:apply(fn) end
  end
  fn(self)
  return self
end

-- m:freeze() stops training every parameter; m:freeze('^layer1%.') only those whose
-- dotted name matches the Lua pattern. A module all of whose parameters are frozen so
-- (BatchNorm, a whole trunk) stays in eval mode when m:train() runs, as VISSL and
-- mmengine keep a frozen trunk: its BatchNorm uses and keeps its running statistics.
-- (A parameter whose requires_grad is turned off by hand, as MoCo's key encoder, does
-- not freeze its module's mode.)
local frozen_params = setmetatable({}, { __mode = 'k' }) -- tensor -> true, set by :freeze

local function set_trainable(self, flag, pattern, what)
  if pattern ~= nil and type(pattern) ~= 'string' then
    error(what .. ': the optional argument is a Lua pattern over parameter names, got ' .. type(pattern), 3)
  end
  local n = 0
  for _, p in ipairs(self:named_parameters()) do
    if pattern == nil or p[1]:find(pattern) then
      p[2]:requires_grad_(flag)
      frozen_params[p[2]] = (not flag) or nil
      n = n + 1
    end
  end
  if pattern ~= nil and n == 0 then
    error(string.format("%s: no parameter name matches '%s'", what, pattern), 3)
  end
  walk(self, '', function(_, m)
    local params, all_frozen = m:named_parameters(), true
    for _, p in ipairs(params) do all_frozen = all_frozen and frozen_params[p[2]] == true end
    rawset(m, '_frozen', (#params > 0 and all_frozen) or nil)
  end)
  if rawget(self, 'training') then self:train() end -- in training mode: the frozen parts go to eval now
  return self
end
function Module:freeze(pattern) return set_trainable(self, false, pattern, 'freeze') end
function Module:unfreeze(pattern) return set_trainable(self, true, pattern, 'unfreeze') end

-- Elements in the (unique) parameters; {trainable = true} counts those that require grad.
function Module:num_parameters(opts)
  local n = 0
  local trainable = opts and opts.trainable
  for _, p in ipairs(self:named_parameters()) do
    if not trainable or p[2].requires_grad then n = n + p[2]:numel() end
  end
  return n
end

function Module:zero_grad()
  for _, p in ipairs(self:named_parameters()) do p[2].grad = nil end
  return self
end

-- m:to('f64') converts floating parameters and buffers to another dtype (e.g. for
-- gradcheck; integer buffers such as num_batches_tracked keep theirs); m:to('cuda:0') /
-- m:cuda() / m:cpu() move every parameter and buffer to a device. A tensor shared by
-- several modules stays shared. A module holding tensors outside its parameters and
-- buffers (a method's queue) moves them in its own extra_to(what). Build the optimizer
-- after moving: the moved parameters are new tensors, as in PyTorch.
function Module:to(what)
  local device = util.parse_device(what) ~= nil and util.device_string(what)
  local dtype = not device and util.dtype_name(util.dtype(what))
  local moved = {}
  local function convert(t, is_param)
    if not is_tensor(t) or (not device and not t:is_floating_point()) then return t end
    -- already there: the same tensor, so an optimizer built before still holds it
    if t.device == device or t.dtype == dtype then return t end
    if moved[t] == nil then
      local c = t:detach():to(what)
      if is_param then c = c:requires_grad_(t.requires_grad) end
      moved[t] = c
    end
    return moved[t]
  end
  no_grad(function()
    walk(self, '', function(_, m)
      for _, name in ipairs(m._params) do rawset(m, name, convert(rawget(m, name), true)) end
      for _, name in ipairs(m._buffers) do rawset(m, name, convert(rawget(m, name), false)) end
      if m.extra_to then m:extra_to(what) end
    end, {})
  end)
  return self
end

-- The device of the module's first parameter or buffer ('cpu' when it has none): where
-- its inputs belong.
function Module:device()
  local found
  walk(self, '', function(_, m)
    if found then return end
    for _, list in ipairs { m._params, m._buffers } do
      for _, name in ipairs(list) do
        local t = rawget(m, name)
        if is_tensor(t) then found = t.device; return end
      end
    end
  end, {})
  return found or 'cpu'
end
function Module:double() return self:to('f64') end
function Module:float() return self:to('f32') end
function Module:cuda(index) return self:to('cuda:' .. (index or 0)) end
function Module:cpu() return self:to('cpu') end

-- ---- state dict --------------------------------------------------------------------------------------
-- Ordered list of {name, tensor} for everything saved: each module's parameters, then its
-- persistent buffers, then its children (PyTorch's order). Shared tensors keep every name.
function Module:named_state()
  local out = {}
  walk(self, '', function(prefix, m)
    for _, name in ipairs(m._params) do
      local t = rawget(m, name)
      if is_tensor(t) then out[#out + 1] = { join(prefix, name), t } end
    end
    for _, name in ipairs(m._buffers) do
      local t = rawget(m, name)
      if is_tensor(t) and not m._nonpersistent[name] then out[#out + 1] = { join(prefix, name), t } end
    end
  end)
  return out
end

-- name -> tensor (detached: same storage, no graph). The order is named_state's.
function Module:state_dict()
  local sd = {}
  for _, e in ipairs(self:named_state()) do sd[e[1]] = e[2]:detach() end
  return sd
end

local function shape_str(t) return '[' .. table.concat(t.shape, ', ') .. ']' end

local function same_shape(a, b)
  local na, nb = a:dim(), b:dim()
  if na ~= nb then return false end
  for d = 0, na - 1 do
    if a:size(d) ~= b:size(d) then return false end
  end
  return true
end

-- Lua patterns `skip` (a string or a list of them); a name that matches one is skipped.
local function skip_matcher(skip, what)
  if skip == nil then return function() return false end end
  if type(skip) == 'string' then skip = { skip } end
  if type(skip) ~= 'table' then
    error(string.format('%s: skip must be a Lua pattern or a list of them, got %s', what, type(skip)), util.user_level())
  end
  for i, p in ipairs(skip) do
    if type(p) ~= 'string' then
      error(string.format('%s: skip[%d] must be a Lua pattern (a string), got %s', what, i, type(p)), util.user_level())
    end
    local ok, err = pcall(string.find, '', p)
    if not ok then
      error(string.format("%s: skip pattern '%s' is not a valid Lua pattern (%s)", what, p,
        (tostring(err):gsub('^.-:%d+: ', ''))), util.user_level())
    end
  end
  return function(name)
    for _, p in ipairs(skip) do
      if name:find(p) then return true end
    end
    return false
  end
end

-- m:load_state_dict(sd, {strict = true, skip = nil}) copies each tensor of sd into the
-- module's tensor of the same name (in place, so optimizers keep their references),
-- converting the dtype if it differs. Strict (the default) checks everything first and
-- raises, copying nothing, when keys are missing, unexpected or of another shape.
-- Non-strict copies what fits and reports the rest. Names (of the module or of sd) that
-- match a Lua pattern of skip are left alone and not reported.
-- Returns {missing = {names}, unexpected = {names}, mismatched = {{name, expected, got}}}
-- and the number of tensors copied. Callers such as cr.io.load_into name themselves in
-- errors with opts.what, and the source with opts.source ("the file 'x'") and
-- opts.source_short ('the file', in the shape mismatch lines).
function Module:load_state_dict(sd, opts)
  local what = opts and opts.what or 'load_state_dict'
  local source = opts and opts.source or 'the state dict'
  local source_short = opts and opts.source_short or source
  if type(sd) ~= 'table' or is_module(sd) then
    error(what .. ': expected a table name -> tensor (from state_dict or a checkpoint), got '
      .. (is_module(sd) and 'a module; pass m:state_dict()' or type(sd)), util.user_level())
  end
  local strict = not (opts and opts.strict == false)
  local skipped = skip_matcher(opts and opts.skip, what)
  local report = { missing = {}, unexpected = {}, mismatched = {} }
  local own, copies = {}, {}
  for _, e in ipairs(self:named_state()) do
    local name, dst = e[1], e[2]
    own[name] = true
    local src = sd[name]
    if not skipped(name) then
      if src == nil then
        report.missing[#report.missing + 1] = name
      elseif not is_tensor(src) then
        error(string.format("%s: entry '%s' is a %s, expected a tensor", what, name, type(src)), util.user_level())
      elseif not same_shape(dst, src) then
        report.mismatched[#report.mismatched + 1] = { name, shape_str(dst), shape_str(src) }
      else
        copies[#copies + 1] = { dst, src }
      end
    end
  end
  for k in pairs(sd) do
    if not own[k] and not (type(k) == 'string' and skipped(k)) then
      report.unexpected[#report.unexpected + 1] = tostring(k)
    end
  end
  table.sort(report.unexpected)
  if strict and (#report.missing > 0 or #report.unexpected > 0 or #report.mismatched > 0) then
    local lines = { string.format('%s: %s does not match %s:', what, source, self.__name) }
    if #report.missing > 0 then
      lines[#lines + 1] = '  missing keys: ' .. util.short_list(report.missing)
    end
    if #report.unexpected > 0 then
      lines[#lines + 1] = '  unexpected keys: ' .. util.short_list(report.unexpected)
    end
    for i, mm in ipairs(report.mismatched) do
      if i > 8 then lines[#lines + 1] = string.format('  ... %d shape mismatches in all', #report.mismatched); break end
      lines[#lines + 1] = string.format('  shape mismatch for %s: the model has %s, %s %s', mm[1], mm[2], source_short, mm[3])
    end
    lines[#lines + 1] = '  (pass {strict = false} to load the keys that match and get this report back)'
    error(table.concat(lines, '\n'), util.user_level())
  end
  no_grad(function()
    for _, c in ipairs(copies) do c[1]:copy_(c[2]) end
  end)
  return report, #copies
end

-- ---- repr ------------------------------------------------------------------------------------------------
-- PyTorch's layout: Name(extra) for leaves; Name(\n  (child): ...\n) otherwise.
function Module.extra_repr() return '' end

local function indent(s)
  return (s:gsub('\n', '\n  '))
end

function Module:repr()
  local extra = self:extra_repr()
  local lines = {}
  if extra ~= '' then
    for line in extra:gmatch('[^\n]+') do lines[#lines + 1] = line end
  end
  for _, c in ipairs(self:named_children()) do
    lines[#lines + 1] = '(' .. c[1] .. '): ' .. indent(c[2]:repr())
  end
  local name = self.__name
  if #lines == 0 then return name .. '()' end
  if #lines == 1 and extra ~= '' and not extra:find('\n') then return name .. '(' .. extra .. ')' end
  return name .. '(\n  ' .. table.concat(lines, '\n  ') .. '\n)'
end
Module.__tostring = function(self) return self:repr() end

-- nn.Module() is a bare container to hang children on.
return setmetatable(Module, { __call = construct, __tostring = function() return 'class Module' end })
