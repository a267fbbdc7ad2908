-- crescent.autograd — the Lua side of the backward engine: t:backward() drives the C
-- engine and answers its events (gradient hooks, Lua-defined Functions); no_grad scopes;
-- and cr.Function for custom autograd functions written in Lua.
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local util = require 'crescent.util'
local Tensor = require 'crescent.tensor'

local check, own = util.check, util.own
local is_tensor = Tensor.op_helpers.is_tensor
local M = {}

-- ---- grad mode -----------------------------------------------------------------------------
-- Runs f(...) with recording off (or on, for enable_grad) and restores the mode even
-- when f raises.
local function finish(prev, ok, ...)
  C.cr_grad_set_enabled(prev)
  if not ok then error((...), 0) end
  return ...
end
local function with_grad_mode(enabled, f, ...)
  if type(f) ~= 'function' then
    error(string.format('%s: expected a function to run, got %s', enabled and 'enable_grad' or 'no_grad', type(f)), 3)
  end
  local prev = C.cr_grad_set_enabled(enabled)
  return finish(prev, pcall(f, ...))
end
function M.no_grad(f, ...) return with_grad_mode(false, f, ...) end
function M.enable_grad(f, ...) return with_grad_mode(true, f, ...) end
function M.set_grad_enabled(flag) return C.cr_grad_set_enabled(flag and true or false) end

-- cr.autocast(dtype, f, ...): runs f(...) in mixed precision and restores the previous
-- setting even when f raises. dtype 'bf16' or 'f16' (nil or 'off': no autocast).
-- Matrix products and convolutions cast f32 inputs to dtype; softmax, log_softmax, the
-- losses, normalize, layer_norm, sum and mean compute in f32 (crescent.h documents the
-- policy). The backward pass runs in the forward's dtypes.
local AUTOCAST = { bf16 = C.CR_DT_BF16, bfloat16 = C.CR_DT_BF16, f16 = C.CR_DT_F16, float16 = C.CR_DT_F16,
                   half = C.CR_DT_F16, off = C.CR_DT_F32 }
local function finish_autocast(prev, ok, ...)
  C.cr_autocast_set(prev)
  if not ok then error((...), 0) end
  return ...
end
function M.autocast(dtype, f, ...)
  local dt = AUTOCAST[dtype or 'off']
  if not dt then
    error("autocast: dtype must be 'bf16', 'f16' or 'off', got " .. tostring(dtype), 2)
  end
  if type(f) ~= 'function' then error('autocast: expected a function to run, got ' .. type(f), 2) end
  return finish_autocast(C.cr_autocast_set(dt), pcall(f, ...))
end
function M.is_grad_enabled() return C.cr_grad_is_enabled() end

-- ---- hooks -----------------------------------------------------------------------------------
local hooks, next_hook = {}, 0
local function new_hook(fn)
  if type(fn) ~= 'function' then error('register_hook: expected a function, got ' .. type(fn), 3) end
  next_hook = next_hook + 1
  hooks[next_hook] = fn
  return next_hook
end
local HookHandle = {}
HookHandle.__index = HookHandle
function HookHandle:remove()
  if self.id and hooks[self.id] then
    C.cr_tensor_remove_hook(self.tensor, self.id)
    hooks[self.id] = nil
  end
  self.id = nil
end

-- fn(grad) -> nil or a replacement grad; runs when the grad of t is computed.
function Tensor.register_hook(t, fn)
  local id = new_hook(fn)
  local st = C.cr_tensor_add_hook(t, id)
  if st ~= 0 then hooks[id] = nil; util.raise(2) end
  return setmetatable({ id = id, tensor = t }, HookHandle)
end
-- fn(leaf) after the grad was accumulated into leaf.grad (DDP buckets use these).
function Tensor.register_post_accumulate_grad_hook(t, fn)
  local id = new_hook(fn)
  local st = C.cr_tensor_add_post_accumulate_hook(t, id)
  if st ~= 0 then hooks[id] = nil; util.raise(2) end
  return setmetatable({ id = id, tensor = t }, HookHandle)
end

-- ---- custom functions ----------------------------------------------------------------
local customs, next_custom = {}, 0
local reap_buf = ffi.new('int[256]')
local function reap()
  while true do
    local n = C.cr_autograd_reap_custom(reap_buf, 256)
    for i = 0, n - 1 do customs[reap_buf[i]] = nil end
    if n < 256 then return end
  end
end

local function borrowed(p)
  if p == nil then return nil end
  C.cr_tensor_retain(p)
  return own(p)
end

-- ---- backward -----------------------------------------------------------------------------
local engine_box = ffi.new('cr_engine*[1]')
local event_ct = ffi.typeof('cr_engine_event[1]') -- made once: see tensor.lua on C type strings
local DONE, HOOK, CUSTOM, POST = C.CR_ENGINE_DONE, C.CR_ENGINE_HOOK, C.CR_ENGINE_CUSTOM, C.CR_ENGINE_POST_ACC

local function run_custom(e, id)
  local entry = customs[id]
  if not entry then error('backward: a Lua Function was freed before its backward ran', 0) end
  local ng = C.cr_engine_event_ngrads(e)
  local grads = {}
  for i = 0, ng - 1 do grads[i + 1] = borrowed(C.cr_engine_event_grad(e, i)) end
  local res = { M.no_grad(entry.fn.backward, entry.ctx, unpack(grads, 1, ng)) }
  for i = 1, entry.nin do
    local g = res[i]
    if g ~= nil and not is_tensor(g) then
      error(string.format('Function backward: returned %s for input %d; return a tensor or nil', type(g), i), 0)
    end
    check(C.cr_engine_answer(e, i - 1, g))
  end
end

-- Callbacks queued while a backward runs (from its hooks) run when it is done, in order:
-- DDP waits for its last gradient all-reduces there.
local callback_stack = {}

-- fn() after the backward now running has finished; an error outside a backward.
function M.queue_callback(fn)
  local top = callback_stack[#callback_stack]
  if not top then error('queue_callback: no backward is running; call it from a gradient hook', 2) end
  top[#top + 1] = fn
end

local function run_callbacks(list)
  for i = 1, #list do list[i]() end
end

-- t:backward(grad?, {retain_graph = false})
function Tensor.backward(t, grad, opts)
  if not is_tensor(t) then error('backward: self must be a tensor, got ' .. type(t), 2) end
  if type(grad) == 'table' and not is_tensor(grad) then opts, grad = grad, nil end
  if grad ~= nil and not is_tensor(grad) then
    error('backward: the gradient must be a tensor (or nil for a scalar output), got ' .. type(grad), 2)
  end
  if opts ~= nil and type(opts) ~= 'table' then error('backward: options must be a table, got ' .. type(opts), 2) end
  opts = opts or {}
  check(C.cr_engine_new(engine_box, t, grad, opts.retain_graph and true or false))
  local e = ffi.gc(engine_box[0], C.cr_engine_free)
  local ev = ffi.new(event_ct)
  local callbacks = {}
  callback_stack[#callback_stack + 1] = callbacks
  local ok, err = pcall(M._drive, e, ev)
  table.remove(callback_stack)
  if not ok then error(err, 0) end
  ffi.gc(e, nil)
  C.cr_engine_free(e)
  reap()
  run_callbacks(callbacks)
end

-- Runs the engine to the end, answering its events.
function M._drive(e, ev)
  while true do
    check(C.cr_engine_run(e, ev))
    local kind = ev[0]
    if kind == DONE then break end
    local id = C.cr_engine_event_id(e)
    if kind == HOOK then
      local r = M.no_grad(hooks[id], borrowed(C.cr_engine_event_grad(e, 0)))
      if r ~= nil then
        if not is_tensor(r) then error('hook: returned ' .. type(r) .. '; return a tensor or nil', 2) end
        check(C.cr_engine_answer(e, 0, r))
      end
    elseif kind == POST then
      M.no_grad(hooks[id], borrowed(C.cr_engine_event_tensor(e)))
    elseif kind == CUSTOM then
      run_custom(e, id)
    end
  end
end

-- Computes the grads of outputs w.r.t. inputs without touching .grad: a convenience for
-- tests and research code, built on hooks.
function M.grad(output, inputs, grad)
  if not is_tensor(output) then error('grad: output must be a tensor, got ' .. type(output), 2) end
  if type(inputs) ~= 'table' then error('grad: inputs must be a list of tensors, got ' .. type(inputs), 2) end
  for i, x in ipairs(inputs) do
    if not is_tensor(x) then error(string.format('grad: inputs[%d] must be a tensor, got %s', i, type(x)), 2) end
  end
  local saved, result = {}, {}
  for i, x in ipairs(inputs) do saved[i] = x.grad; x.grad = nil end
  Tensor.backward(output, grad, { retain_graph = true })
  for i, x in ipairs(inputs) do result[i] = x.grad; x.grad = saved[i] end
  return result
end

-- What the graph behind t keeps alive for its backward: a list of {op, bytes, tensors,
-- nodes}, largest first, each storage counted once; .total, the bytes of the list, and
-- .leaf_bytes, storages saved as parameters' values (held by the model anyway).
--   local y = model(x); for _, r in ipairs(cr.saved_memory(y)) do print(r.op, r.bytes) end
function M.saved_memory(t)
  if not is_tensor(t) then error('saved_memory: expected a tensor, got ' .. type(t), 2) end
  local n = C.CR_OP_COUNT
  local bytes, tensors, nodes = ffi.new('int64_t[?]', n), ffi.new('int64_t[?]', n), ffi.new('int64_t[?]', n)
  local leaf = ffi.new('int64_t[1]')
  check(C.cr_autograd_saved_memory(t, bytes, tensors, nodes, leaf))
  local out, total = {}, 0
  for op = 0, n - 1 do
    if nodes[op] > 0 then
      out[#out + 1] = { op = ffi.string(C.cr_op_name(op)), bytes = tonumber(bytes[op]), tensors = tonumber(tensors[op]),
                        nodes = tonumber(nodes[op]) }
      total = total + tonumber(bytes[op])
    end
  end
  table.sort(out, function(a, b)
    if a.bytes ~= b.bytes then return a.bytes > b.bytes end
    return a.op < b.op
  end)
  out.total, out.leaf_bytes = total, tonumber(leaf[0])
  return out
end

-- ---- cr.Function -------------------------------------------------------------------------------
-- local Square = cr.Function{ forward = function(ctx, x) ctx:save_for_backward(x) return x*x end,
--                             backward = function(ctx, g) local x = ctx.saved[1] return 2*x*g end }
-- local y = Square(x)
local Ctx = {}
Ctx.__index = Ctx
function Ctx:save_for_backward(...) self.saved = { ... } end

local Function = {}
Function.__index = Function
function M.Function(def)
  if type(def) ~= 'table' or type(def.forward) ~= 'function' or type(def.backward) ~= 'function' then
    error('cr.Function: give a table with forward(ctx, ...) and backward(ctx, grad...) functions', 2)
  end
  return setmetatable(def, Function)
end

local ins_buf = ffi.new('cr_tensor*[64]')
local outs_buf = ffi.new('cr_tensor*[4]')
function Function.apply(fn, ...)
  reap()
  local n = select('#', ...)
  local args = { ... }
  local ctx = setmetatable({ saved = {} }, Ctx)
  local outs = { M.no_grad(fn.forward, ctx, ...) }
  local nout = #outs
  if nout < 1 or nout > 4 then error('Function: forward must return 1 to 4 tensors', 2) end
  local tensors_in = 0
  for i = 1, n do
    if is_tensor(args[i]) then tensors_in = i end
  end
  if tensors_in > 64 then error('Function: at most 64 tensor inputs', 2) end
  for i = 1, tensors_in do ins_buf[i - 1] = is_tensor(args[i]) and args[i] or nil end
  for k = 1, nout do
    if not is_tensor(outs[k]) then error('Function: forward returned a ' .. type(outs[k]) .. ' as output ' .. k, 2) end
    outs[k] = outs[k]:detach() -- a fresh handle, so an input returned as is gets its own grad_fn
    outs_buf[k - 1] = outs[k]
  end
  next_custom = next_custom + 1
  customs[next_custom] = { fn = fn, ctx = ctx, nin = tensors_in }
  check(C.cr_autograd_custom(outs_buf, nout, ins_buf, tensors_in, next_custom))
  if not outs[1].grad_fn then customs[next_custom] = nil end
  return unpack(outs, 1, nout)
end
Function.__call = Function.apply

return M
