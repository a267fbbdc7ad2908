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
           allocs = tonumber(s.allocs) }
end
-- Fast paths (oneDNN, fused kernels) on by default; specs compare them with the reference.
function cr.set_fast_paths(flag) return C.cr_set_fast_paths(flag and true or false) end
function cr.features() return ffi.string(C.cr_build_features()) end

-- Each op family installs its functions on cr and its methods on Tensor.
for _, family in ipairs { 'creation', 'shape', 'elementwise', 'reduce', 'loss', 'linalg',
                          'conv', 'norm', 'index' } do
  require('crescent.ops.' .. family)(cr, Tensor, Tensor._wrap)
end

return cr
