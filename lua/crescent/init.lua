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
cr.saved_memory = autograd.saved_memory

function cr.is_tensor(x) return Tensor.op_helpers.is_tensor(x) end

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
-- Whether the cpu computes bf16 convolutions and matrix products natively (oneDNN on a CPU
-- with AVX512-BF16, fast paths on): cr.autocast('bf16') and train.amp=bf16 are fast only there.
function cr.cpu_bf16_native() return C.cr_cpu_bf16_native() end
-- 'onednn=1 cuda=1 mpi=1': what libcrescent.so was built with, and whether the MPI
-- transport (build/libcrescent_mpi.so, a library of its own) was built beside it.
function cr.features()
  local mpi = require('crescent.native_files').find('libcrescent_mpi.so') ~= nil
  return ffi.string(C.cr_build_features()) .. (mpi and ' mpi=1' or ' mpi=0')
end
cr.cuda = require 'crescent.cuda'

-- Each op family puts its methods on Tensor and returns its functions, which cr carries.
for _, family in ipairs { require 'crescent.ops.creation', require 'crescent.ops.shape',
                          require 'crescent.ops.elementwise', require 'crescent.ops.reduce',
                          require 'crescent.ops.loss', require 'crescent.ops.linalg', require 'crescent.ops.conv',
                          require 'crescent.ops.norm', require 'crescent.ops.index' } do
  for name, fn in pairs(family) do cr[name] = fn end
end

-- The training layers load on first use (cr.nn, cr.optim, ...), so `require 'crescent'`
-- stays fast.
local lazy = {
  nn = 'crescent.nn', optim = 'crescent.optim', ssl = 'crescent.ssl', schedule = 'crescent.optim.schedule',
  data = 'crescent.data', config = 'crescent.config', engine = 'crescent.engine', hooks = 'crescent.hooks',
  io = 'crescent.io', env = 'crescent.env', dist = 'crescent.dist', profiler = 'crescent.profiler',
  recipe = 'crescent.recipe',
}
-- cr.<name> that is a field of one of those: cr.train is cr.engine's (one module runs
-- tasks), cr.save and cr.load are cr.io's
local aliases = { train = 'engine', save = 'io', load = 'io' }
-- both, for spec/layers_spec.lua (a cr.<name> counts as a require of its module)
cr._facade = { modules = lazy, aliases = aliases }
-- Not cached on cr: package.loaded is the one record of what is loaded, so cr.data is
-- always the module that `require 'crescent.data'` gives (a spec runner that unloads
-- modules between files, as busted does, cannot leave cr holding a stale copy).
setmetatable(cr, { __index = function(t, k)
  local name = lazy[k]
  if name then return package.loaded[name] or require(name) end
  local owner = aliases[k]
  if owner then return t[owner][k] end
  return nil
end })

return cr
