-- crescent — a deep-learning training toolkit: a C core (tensors, autograd, kernels)
-- scripted from LuaJIT. This module is `cr`: tensor constructors, every op as a function
-- and as a Tensor method, autograd, RNG and thread control.
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local Tensor = require 'crescent.tensor'
local autograd = require 'crescent.autograd'

local cr = {}
cr.Tensor = Tensor
cr.C = C
cr.version = ffi.string(C.cr_version())

cr.no_grad = autograd.no_grad
cr.autocast = autograd.autocast
cr.enable_grad = autograd.enable_grad
cr.set_grad_enabled = autograd.set_grad_enabled
cr.is_grad_enabled = autograd.is_grad_enabled
cr.Function = autograd.Function
cr.grad = autograd.grad

function cr.is_tensor(x) return Tensor._wrap.is_tensor(x) end

function cr.manual_seed(seed)
  if type(seed) ~= 'number' or seed < 0 or seed ~= math.floor(seed) then
    error('manual_seed: expected a non-negative integer, got ' .. tostring(seed), 2)
  end
  C.cr_rng_manual_seed(seed)
end
function cr.set_num_threads(n)
  if type(n) ~= 'number' or n < 1 then error('set_num_threads: expected a positive integer', 2) end
  C.cr_set_num_threads(n)
end
function cr.get_num_threads() return C.cr_get_num_threads() end
function cr.memory_stats()
  local s = ffi.new('cr_memstats')
  C.cr_memory_stats(s)
  return { live_bytes = tonumber(s.live_bytes), peak_bytes = tonumber(s.peak_bytes),
           live_tensors = tonumber(s.live_tensors), live_storages = tonumber(s.live_storages),
           allocs = tonumber(s.allocs), cached_bytes = tonumber(s.cached_bytes),
           cache_hits = tonumber(s.cache_hits) }
end
-- Large freed blocks are cached for reuse (csrc/core/host_cache.c); these give them back
-- and bound them (bytes; nil restores the default: env CRESCENT_HOST_CACHE_MB, else a
-- quarter of physical memory; 0 turns the cache off).
function cr.memory_empty_cache() C.cr_memory_empty_cache() end
function cr.memory_cache_limit(bytes)
  if bytes ~= nil and (type(bytes) ~= 'number' or bytes < 0) then
    error('memory_cache_limit: expected a number of bytes >= 0, or nil for the default', 2)
  end
  C.cr_memory_set_cache_limit(bytes or -1)
end
-- Fast paths (oneDNN, fused kernels) on by default; specs compare them with the reference.
function cr.set_fast_paths(flag) return C.cr_set_fast_paths(flag and true or false) end
function cr.features() return ffi.string(C.cr_build_features()) end
cr.cuda = require 'crescent.cuda'

-- Each op family installs its functions on cr and its methods on Tensor.
for _, family in ipairs { 'creation', 'shape', 'elementwise', 'reduce', 'loss', 'linalg',
                          'conv', 'norm', 'index' } do
  require('crescent.ops.' .. family)(cr, Tensor, Tensor._wrap)
end

-- The training layers load on first use (cr.nn, cr.optim, ...), so `require 'crescent'`
-- stays fast and works in a checkout where some of them are absent.
local lazy = {
  nn = { 'crescent.nn' },
  optim = { 'crescent.optim' },
  ssl = { 'crescent.ssl' },
  schedule = { 'crescent.optim.schedule', 'crescent.optim.schedules', 'crescent.schedule' },
  data = { 'crescent.data' },
  config = { 'crescent.config' },
  engine = { 'crescent.engine' },
  hooks = { 'crescent.hooks' },
  io = { 'crescent.io' },
  env = { 'crescent.env' },
  dist = { 'crescent.dist' },
  profiler = { 'crescent.profiler' },
}
local function load_lazy(key)
  local errs = {}
  for _, name in ipairs(lazy[key]) do
    local ok, mod = pcall(require, name)
    if ok then return mod end
    -- a module that exists but fails to load: show its own error
    if not tostring(mod):find("module '" .. name .. "' not found", 1, true) then error(mod, 0) end
    errs[#errs + 1] = name
  end
  if key == 'schedule' then
    local optim = rawget(cr, 'optim') or load_lazy('optim')
    if optim.schedule then return optim.schedule end
  end
  error('cr.' .. key .. ' is not available: no module ' .. table.concat(errs, ' or ') .. ' under lua/', 3)
end
setmetatable(cr, { __index = function(t, k)
  if lazy[k] then
    local mod = load_lazy(k)
    rawset(t, k, mod)
    return mod
  end
  if k == 'train' then -- cr.engine's own, so a Task and cr.train come from one module
    local f = t.engine.train
    rawset(t, k, f)
    return f
  end
  if k == 'save' or k == 'load' then -- cr.save / cr.load are cr.io's
    local f = (rawget(t, 'io') or t.io)[k]
    rawset(t, k, f)
    return f
  end
  return nil
end })

return cr
