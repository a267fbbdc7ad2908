-- crescent.optim.Optimizer — the base of SGD, LARS and AdamW: parameter groups built from
-- named parameters, per-group hyper-parameters, lr multipliers by name pattern, no decay
-- on biases and norm weights, state by parameter name (state_dict/load_state_dict), and
-- the one fused C call per step (csrc/optim/) that updates every parameter at once.
--
--   opt = cr.optim.SGD(model:named_parameters(), {lr = 0.1, momentum = 0.9, weight_decay = 5e-4,
--                      no_decay_bias_norm = true, lr_mult = {['^fc%.'] = 10}})
--   opt = cr.optim.SGD({{params = backbone:named_parameters(), lr = 0.01},
--                       {params = head:named_parameters()}}, {lr = 0.1})
--
-- Parameters come as {name, tensor} pairs (what Module:named_parameters() returns), a
-- module, plain tensors (named '1', '2', ...), or a list of group tables {params = ...,
-- <option> = ...} whose options override the optimizer's.
--
-- Groups. Each input group is split, in order of first appearance, by lr multiplier and
-- by decay/no-decay, so opt.param_groups[i] is a table
--   {params = {t, ...}, names = {'fc.weight', ...}, lr = .., weight_decay = .., lr_mult = ..,
--    weight_decay_mult = .., <the optimizer's other options>}
-- A schedule writes group fields: group[f] = value * (group[f .. '_mult'] or 1), so lr
-- multipliers and no-decay groups survive schedules (see schedule.lua). A group given its
-- own lr (or weight_decay) gets lr_mult = its lr / the optimizer's lr, so a schedule keeps
-- the ratio, as PyTorch's schedulers scale each group's initial lr. A group with
-- fix_lr = true keeps the lr it was made with: schedules leave it alone (SimSiam's
-- predictor, as its official code's fix_lr).
--
-- lr_mult: {[lua_pattern] = m, ...} (a name matching two patterns with different
-- multipliers is an error) or an ordered list {{pattern, m}, ...} (first match wins).
-- no_decay_bias_norm = true: tensors with ndim <= 1 (biases, BatchNorm/LayerNorm weights)
-- get weight_decay 0 and weight_decay_mult 0.
--
-- Gradient accumulation is the train step's job (crescent.engine.steps.standard divides
-- the loss by k and steps every k-th batch); a custom step that sums unscaled micro-batch
-- losses can call opt:step{grad_scale = 1/k} instead, which scales grads as they are read.
--
-- Params without a .grad are skipped (their state and step count do not move), as in
-- PyTorch. zero_grad() sets every .grad to nil (zero_grad{set_to_none = false} zeroes
-- them in place in one C call).
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local Tensor = require 'crescent.tensor'
local util = require 'crescent.util'

local is_tensor = Tensor.op_helpers.is_tensor
local own = util.own

local Optimizer = {}
Optimizer.__index = Optimizer
Optimizer.__name = 'Optimizer'

-- Keys every optimizer understands; a class adds its own in spec.defaults.
local BASE_DEFAULTS = { lr = false, weight_decay = 0, no_decay_bias_norm = false, lr_mult = false }
-- Group keys that are not hyper-parameters (never restored from a state_dict).
local STRUCTURAL = { params = true, names = true }

-- Hyper-parameter values a state_dict carries: numbers, booleans, strings, and lists of
-- numbers (betas), copied so the saved table does not alias the live group.
local function hyper_value(v)
  local tv = type(v)
  if tv == 'number' or tv == 'boolean' or tv == 'string' then return v end
  if tv == 'table' and #v > 0 and not is_tensor(v[1]) then
    local c = {}
    for i, x in ipairs(v) do
      if type(x) ~= 'number' then return nil end
      c[i] = x
    end
    return c
  end
  return nil
end

-- ---- small helpers ------------------------------------------------------------------------

local function fail(msg) error(msg, util.user_level()) end

local function suggest(key, known)
  local best = util.nearest(key, known)
  if best then return "; did you mean '" .. best .. "'?" end
  return '; known options: ' .. table.concat(util.sorted_keys(known), ', ')
end

local function shape_str(t) return '[' .. table.concat(t.shape, ', ') .. ']' end

-- {name, tensor} pairs from whatever the user passed as a group's params.
local function named_list(what, params)
  if type(params) == 'table' and type(params.named_parameters) == 'function' then
    params = params:named_parameters()
  end
  if type(params) ~= 'table' then
    fail(what .. ': expected named parameters ({name, tensor} pairs, e.g. model:named_parameters()), got ' .. type(params))
  end
  local out = {}
  for i, p in ipairs(params) do
    if is_tensor(p) then
      out[i] = { tostring(i), p }
    elseif type(p) == 'table' and type(p[1]) == 'string' and is_tensor(p[2]) then
      out[i] = { p[1], p[2] }
    else
      fail(string.format('%s: entry %d of the parameters is not a {name, tensor} pair or a tensor (got %s)',
        what, i, type(p)))
    end
  end
  return out
end

local function check_param(what, name, t)
  if not t.is_leaf then
    fail(string.format("%s: parameter '%s' is not a leaf (it was computed by %s); optimize the model's own " ..
      "parameters, not results of ops", what, name, t.grad_fn))
  end
  if not t.requires_grad then
    fail(string.format("%s: parameter '%s' does not require grad; leave frozen parameters out " ..
      "(or set p.requires_grad = true)", what, name))
  end
  local dt = t.dtype
  if dt ~= 'f32' and dt ~= 'f64' then
    fail(string.format("%s: parameter '%s' is %s; the optimizers update f32 or f64 parameters", what, name, dt))
  end
  if not t:is_contiguous() then
    fail(string.format("%s: parameter '%s' %s is not contiguous; parameters are updated in place and must be " ..
      "contiguous leaves", what, name, shape_str(t)))
  end
end

-- lr multiplier for a name: 1 when no pattern matches.
local function pattern_mult(what, lr_mult, name)
  if not lr_mult then return 1 end
  if #lr_mult > 0 then                                 -- ordered list: first match wins
    for _, e in ipairs(lr_mult) do
      if name:find(e[1]) then return e[2] end
    end
    return 1
  end
  local m, first
  for pat, v in pairs(lr_mult) do
    if name:find(pat) then
      if m ~= nil and v ~= m then
        fail(string.format("%s: parameter '%s' matches lr_mult patterns '%s' (x%g) and '%s' (x%g); make the " ..
          "patterns exclusive, or give an ordered list {{pattern, mult}, ...} where the first match wins",
          what, name, first, m, pat, v))
      end
      m, first = v, pat
    end
  end
  return m or 1
end

local function check_lr_mult(what, lr_mult)
  if lr_mult == false or lr_mult == nil then return end
  if type(lr_mult) ~= 'table' then
    fail(what .. ": lr_mult must be a table {[pattern] = mult} or {{pattern, mult}, ...}, got " .. type(lr_mult))
  end
  local function check(pat, v)
    if type(pat) ~= 'string' or type(v) ~= 'number' or v < 0 then
      fail(string.format("%s: lr_mult entries must be a Lua pattern and a non-negative number, got %s = %s",
        what, tostring(pat), tostring(v)))
    end
    local ok, err = pcall(string.find, '', pat)
    if not ok then fail(string.format("%s: lr_mult pattern '%s' is not a valid Lua pattern (%s)", what, pat, err)) end
  end
  if #lr_mult > 0 then
    for _, e in ipairs(lr_mult) do
      if type(e) ~= 'table' then fail(what .. ': an ordered lr_mult is a list of {pattern, mult} pairs') end
      check(e[1], e[2])
    end
  else
    for pat, v in pairs(lr_mult) do check(pat, v) end
  end
end

-- ---- class machinery ----------------------------------------------------------------------

-- Optimizer:extend(name, spec) makes a class; spec has
--   defaults  {key = default} (false = required / unset), merged over BASE_DEFAULTS
--   buffers   {'momentum_buffer'} or {'exp_avg', 'exp_avg_sq'}: state names of buf1, buf2
--   step_fn   the C entry point (cr_optim_*_step)
--   validate  function(what, group) that checks a group's hyper-parameters
--   fill      function(slot, group, ndim) that writes the class's slot fields and flags
function Optimizer:extend(name, spec)
  local cls = setmetatable({}, { __index = self, __call = function(c, ...) return c.new(c, ...) end })
  cls.__index = cls
  cls.__name = name
  cls._spec = spec
  cls._defaults = {}
  for k, v in pairs(BASE_DEFAULTS) do cls._defaults[k] = v end
  for k, v in pairs(spec.defaults or {}) do cls._defaults[k] = v end
  cls.__tostring = Optimizer.__tostring
  return cls
end

function Optimizer.new(cls, params, opts)
  if cls == Optimizer then fail('Optimizer is a base class; use cr.optim.SGD, cr.optim.LARS or cr.optim.AdamW') end
  local what = cls.__name
  opts = opts or {}
  if type(opts) ~= 'table' then fail(what .. ': options must be a table, e.g. {lr = 0.1}') end
  for k in pairs(opts) do
    if cls._defaults[k] == nil then
      fail(string.format("%s: unknown option '%s'%s", what, tostring(k), suggest(k, cls._defaults)))
    end
  end
  local self = setmetatable({}, cls)
  self.defaults = {}
  for k, v in pairs(cls._defaults) do self.defaults[k] = v end
  for k, v in pairs(opts) do self.defaults[k] = v end
  check_lr_mult(what, self.defaults.lr_mult)
  self.param_groups = {}
  self.state = {}         -- name -> {step = n, <buffer name> = tensor}
  self._by_name = {}      -- name -> tensor
  if type(params) ~= 'table' then fail(what .. ': the first argument must be named parameters, e.g. model:named_parameters()') end
  local is_groups = type(params[1]) == 'table' and params[1].params ~= nil and not is_tensor(params[1][2])
  if is_groups then
    for _, g in ipairs(params) do self:add_param_group(g) end
  else
    self:add_param_group({ params = params })
  end
  if #self.param_groups == 0 then fail(what .. ': no parameters to optimize (the parameter list is empty)') end
  return self
end

-- Adds one input group (split into several param_groups by lr multiplier and decay).
function Optimizer:add_param_group(g)
  local cls = getmetatable(self)
  local what = cls.__name
  if type(g) ~= 'table' or g.params == nil then
    fail(what .. ': a parameter group is a table {params = named_parameters, <option> = value, ...}')
  end
  local o = {}
  for k, v in pairs(self.defaults) do o[k] = v end
  for k, v in pairs(g) do
    if k ~= 'params' and k ~= 'name' and cls._defaults[k] == nil and k ~= 'lr_mult' and k ~= 'weight_decay_mult'
       and k ~= 'fix_lr' then
      fail(string.format("%s: unknown option '%s' in a parameter group%s", what, tostring(k), suggest(k, cls._defaults)))
    end
    if k ~= 'params' then o[k] = v end
  end
  -- a group's own lr / weight decay is a multiple of the optimizer's (what schedules scale)
  local base_mult, wd_mult = 1, 1
  if type(g.lr_mult) == 'number' then base_mult = g.lr_mult
  elseif g.lr ~= nil and type(self.defaults.lr) == 'number' and self.defaults.lr > 0 then base_mult = g.lr / self.defaults.lr end
  if type(g.weight_decay_mult) == 'number' then wd_mult = g.weight_decay_mult
  elseif g.weight_decay ~= nil and type(self.defaults.weight_decay) == 'number' and self.defaults.weight_decay > 0 then
    wd_mult = g.weight_decay / self.defaults.weight_decay
  end
  local patterns = type(g.lr_mult) == 'table' and g.lr_mult or self.defaults.lr_mult
  check_lr_mult(what, patterns)
  if type(o.lr) ~= 'number' then
    fail(what .. ': lr is required (a number), e.g. ' .. what .. '(model:named_parameters(), {lr = 0.1})')
  end
  if type(o.weight_decay) ~= 'number' or o.weight_decay < 0 then
    fail(string.format('%s: weight_decay must be a number >= 0, got %s', what, tostring(o.weight_decay)))
  end
  if o.lr < 0 or o.lr ~= o.lr then fail(string.format('%s: lr must be >= 0, got %s', what, tostring(o.lr))) end
  if cls._spec.validate then cls._spec.validate(what, o) end

  local list = named_list(what, g.params)
  if #list == 0 then return end
  local subgroups, order = {}, {}
  for _, nt in ipairs(list) do
    local name, t = nt[1], nt[2]
    check_param(what, name, t)
    -- one fused update per step runs on one device (the cpu, or a GPU's kernels)
    self._device = self._device or t.device
    if t.device ~= self._device then
      fail(string.format("%s: parameter '%s' is on %s but earlier ones are on %s; an optimizer updates the " ..
        "parameters of one device: move the whole model with model:to(device) before making it", what, name,
        t.device, self._device))
    end
    if self._by_name[name] then
      fail(string.format("%s: parameter name '%s' appears twice; each parameter may be in one group only", what, name))
    end
    for other, u in pairs(self._by_name) do
      if u == t or C.cr_tensor_same_storage(u, t) then
        fail(string.format("%s: parameters '%s' and '%s' share storage (the same tensor twice?); list it once",
          what, other, name))
      end
    end
    self._by_name[name] = t
    local pm = pattern_mult(what, patterns, name)
    local nodecay = o.no_decay_bias_norm and t:dim() <= 1
    local key = pm .. (nodecay and '/nd' or '/d')
    local sg = subgroups[key]
    if not sg then
      sg = { params = {}, names = {} }
      for k, v in pairs(o) do
        if k ~= 'lr_mult' and k ~= 'weight_decay_mult' and k ~= 'no_decay_bias_norm' then
          sg[k] = type(v) == 'table' and (hyper_value(v) or v) or v   -- betas: a copy per group
        end
      end
      -- a group given only a numeric lr_mult starts at the optimizer's lr times it
      sg.lr = (g.lr == nil and type(g.lr_mult) == 'number' and o.lr * g.lr_mult or o.lr) * pm
      sg.lr_mult = base_mult * pm
      sg.weight_decay = nodecay and 0 or o.weight_decay
      sg.weight_decay_mult = nodecay and 0 or wd_mult
      sg.no_decay = nodecay or nil
      subgroups[key] = sg
      order[#order + 1] = sg
    end
    sg.params[#sg.params + 1] = t
    sg.names[#sg.names + 1] = name
  end
  for _, sg in ipairs(order) do self.param_groups[#self.param_groups + 1] = sg end
  self._slots = nil -- rebuilt on the next step
end

-- ---- the step -------------------------------------------------------------------------------

-- One cr_optim_slot per parameter, in group order; names and ndims beside them.
function Optimizer:_build_slots()
  local n = 0
  for _, g in ipairs(self.param_groups) do n = n + #g.params end
  self._slots = ffi.new('cr_optim_slot[?]', math.max(n, 1))
  self._n = n
  self._slot_names, self._slot_ndim = {}, {}
  self._params_arr = ffi.new('cr_tensor*[?]', math.max(n, 1))
  local i = 0
  for _, g in ipairs(self.param_groups) do
    for j, t in ipairs(g.params) do
      self._slot_names[i] = g.names[j]
      self._slot_ndim[i] = t:dim()
      self._params_arr[i] = t
      i = i + 1
    end
  end
end

-- The C message names "parameter i"; the user knows the name.
local function raise_named(names)
  local msg = ffi.string(C.cr_last_error())
  msg = msg:gsub('parameter (%d+)', function(i)
    local nm = names[tonumber(i)]
    return nm and ("parameter '" .. nm .. "'") or ('parameter ' .. i)
  end)
  fail(msg)
end

-- opt:step() / opt:step{grad_scale = s}: one fused C call over every parameter.
-- Returns the number of parameters updated (those with a grad).
function Optimizer:step(opts)
  local spec = getmetatable(self)._spec
  if not self._slots then self:_build_slots() end
  local slots, names, ndims = self._slots, self._slot_names, self._slot_ndim
  local b1name, b2name = spec.buffers[1], spec.buffers[2]
  local fill = spec.fill
  local i = 0
  for _, g in ipairs(self.param_groups) do
    local lr, wd = g.lr, g.weight_decay
    for j, t in ipairs(g.params) do
      local s = slots[i]
      local st = self.state[g.names[j]]
      s.param = t
      s.grad = nil
      s.buf1 = st and st[b1name] or nil
      s.buf2 = (b2name and st) and st[b2name] or nil
      s.step = st and st.step or 0
      s.lr = lr
      s.weight_decay = wd
      fill(s, g, ndims[i])
      i = i + 1
    end
  end
  local scale = opts and opts.grad_scale or 1
  if spec.step_fn(slots, self._n, scale) ~= 0 then raise_named(names) end
  local stepped = 0
  for k = 0, self._n - 1 do
    local s = slots[k]
    if s.stepped ~= 0 then
      stepped = stepped + 1
      local name = names[k]
      local st = self.state[name]
      if not st then st = {}; self.state[name] = st end
      st.step = tonumber(s.step)
      -- buffers the C side created this step: the slot holds the one reference
      if st[b1name] == nil and s.buf1 ~= nil then st[b1name] = own(s.buf1) end
      if b2name and st[b2name] == nil and s.buf2 ~= nil then st[b2name] = own(s.buf2) end
      if spec.after then spec.after(st, s) end
    end
    s.param, s.buf1, s.buf2 = nil, nil, nil
  end
  return stepped
end

-- opt:zero_grad() sets every .grad to nil; {set_to_none = false} zeroes in place instead.
function Optimizer:zero_grad(opts)
  if not self._slots then self:_build_slots() end
  if opts and opts.set_to_none == false then
    if C.cr_optim_zero_grads(self._params_arr, self._n) ~= 0 then raise_named(self._slot_names) end
    return
  end
  local arr = self._params_arr
  for i = 0, self._n - 1 do C.cr_tensor_set_grad(arr[i], nil) end
end

-- Every parameter tensor, in group order (what clipping takes).
function Optimizer:parameters()
  local out = {}
  for _, g in ipairs(self.param_groups) do
    for _, t in ipairs(g.params) do out[#out + 1] = t end
  end
  return out
end

-- {name, tensor} pairs, in group order.
function Optimizer:named_parameters()
  local out = {}
  for _, g in ipairs(self.param_groups) do
    for j, t in ipairs(g.params) do out[#out + 1] = { g.names[j], t } end
  end
  return out
end

-- The C array of parameter handles (for clip.lua); valid until groups change.
function Optimizer:_param_array()
  if not self._slots then self:_build_slots() end
  return self._params_arr, self._n, self._slot_names
end

-- ---- state_dict ---------------------------------------------------------------------------
-- {state = {[name] = {step = n, <buffer> = tensor}}, param_groups = {{names = {...}, lr = ..,
-- <hyper-parameters>}}}. The tensors are the optimizer's own (no copy): write them out
-- before the next step. load_state_dict copies them in.

function Optimizer:state_dict()
  local sd = { state = {}, param_groups = {} }
  for name, st in pairs(self.state) do
    local e = {}
    for k, v in pairs(st) do e[k] = v end
    sd.state[name] = e
  end
  for i, g in ipairs(self.param_groups) do
    local e = { names = {} }
    for k, v in pairs(g) do
      if not STRUCTURAL[k] then e[k] = hyper_value(v) end
    end
    for j, n in ipairs(g.names) do e.names[j] = n end
    sd.param_groups[i] = e
  end
  return sd
end

function Optimizer:load_state_dict(sd)
  local cls = getmetatable(self)
  local what = cls.__name .. ':load_state_dict'
  if type(sd) ~= 'table' or type(sd.state) ~= 'table' then
    fail(what .. ': expected a table {state = ..., param_groups = ...} from opt:state_dict()')
  end
  local bufs = {}
  for _, b in ipairs(cls._spec.buffers) do bufs[b] = true end
  -- every check before any change, so a bad state_dict leaves the optimizer as it was
  local unknown = {}
  for name in pairs(sd.state) do
    if not self._by_name[name] then unknown[#unknown + 1] = "'" .. tostring(name) .. "'" end
  end
  if #unknown > 0 then
    table.sort(unknown)
    fail(string.format('%s: the state has parameters this optimizer does not know: %s; it was saved from another ' ..
      'model or another parameter naming', what, table.concat(unknown, ', ')))
  end
  for name, st in pairs(sd.state) do
    local p = self._by_name[name]
    for k, v in pairs(st) do
      if k == 'step' then
        if type(v) ~= 'number' or v < 0 then fail(string.format("%s: step of '%s' must be a number >= 0", what, name)) end
      elseif not bufs[k] then
        fail(string.format("%s: state '%s' of parameter '%s' is not %s state (expected %s); was it saved by another " ..
          'optimizer?', what, tostring(k), name, cls.__name, table.concat(cls._spec.buffers, ', ')))
      elseif not is_tensor(v) then
        fail(string.format("%s: state '%s' of parameter '%s' must be a tensor", what, k, name))
      elseif shape_str(v) ~= shape_str(p) then
        fail(string.format("%s: state '%s' of parameter '%s' has shape %s but the parameter has shape %s",
          what, k, name, shape_str(v), shape_str(p)))
      end
    end
  end
  local groups = sd.param_groups
  if groups ~= nil then
    if #groups ~= #self.param_groups then
      fail(string.format('%s: the state has %d parameter groups, this optimizer %d; build the optimizer with the ' ..
        'same groups and options (lr_mult, no_decay_bias_norm) as the saved one', what, #groups, #self.param_groups))
    end
    for i, g in ipairs(groups) do
      local mine = self.param_groups[i]
      if g.names then
        local same = #g.names == #mine.names
        for j = 1, #mine.names do same = same and g.names[j] == mine.names[j] end
        if not same then
          fail(string.format("%s: parameter group %d holds different parameters (saved: %d starting '%s'; here: %d " ..
            "starting '%s')", what, i, #g.names, tostring(g.names[1]), #mine.names, tostring(mine.names[1])))
        end
      end
    end
  end
  -- now apply: buffers are copied so the source optimizer and this one stay independent
  local state = {}
  for name, st in pairs(sd.state) do
    local p = self._by_name[name]
    local e = {}
    for k, v in pairs(st) do
      if k == 'step' then e.step = v
      else
        -- on the parameter's device and in its dtype (a cpu checkpoint resumes a GPU run)
        local c = v:detach()
        local moved = c.device ~= p.device
        if moved then c = c:to(p.device) end
        if c.dtype ~= p.dtype then c = c:to(p.dtype) elseif not moved then c = c:clone() end
        e[k] = c:contiguous()
      end
    end
    e.step = e.step or 0
    state[name] = e
  end
  self.state = state
  if groups then
    for i, g in ipairs(groups) do
      local mine = self.param_groups[i]
      for k, v in pairs(g) do
        if not STRUCTURAL[k] then
          local hv = hyper_value(v)
          if hv ~= nil then mine[k] = hv end
        end
      end
    end
  end
end

function Optimizer:__tostring()
  local cls = getmetatable(self)
  local lines = { cls.__name .. ' (' .. #self.param_groups .. ' groups)' }
  for i, g in ipairs(self.param_groups) do
    local keys = {}
    for k, v in pairs(g) do
      if not STRUCTURAL[k] and type(v) ~= 'table' then keys[#keys + 1] = k .. '=' .. tostring(v) end
    end
    table.sort(keys)
    lines[#lines + 1] = string.format('  group %d: %d params (%s ...) %s', i, #g.params, g.names[1] or '',
      table.concat(keys, ' '))
  end
  return table.concat(lines, '\n')
end

return Optimizer
