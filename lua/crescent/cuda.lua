-- crescent.cuda — CUDA GPUs: whether one is usable here and if not why (no driver, a
-- driver older than the build's toolkit, no device, a build without nvcc), the device
-- allocator's statistics, and the run's device from train.device.
--   cr.cuda.is_available() -> bool        cr.cuda.device_count() -> n (0 when unusable)
--   cr.cuda.why_not() -> reason | nil     cr.cuda.resolve(device) -> device, line | error
--   cr.cuda.memory_stats(i) -> {allocated_bytes, reserved_bytes, peak_allocated_bytes, ...}
--   cr.cuda.synchronize(i)  cr.cuda.empty_cache()  cr.cuda.reset_peak_memory_stats(i)
--   cr.cuda.missing_kernels() -> names of the ops the CUDA backend has no kernel for yet
--   cr.cuda.set_deterministic(on)  only deterministic cuDNN algorithms (train.deterministic)
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local util = require 'crescent.util'

local M = {}
local opened, count, reason

-- The driver probe, then the backend library: the first failure is the reason.
local function open()
  if not opened then
    local buf = ffi.new('char[512]')
    local n = C.cr_cuda_probe(buf, 512)
    if n < 0 then
      count, reason = 0, ffi.string(buf)
    elseif C.cr_cuda_init() ~= 0 then
      count, reason = 0, ffi.string(C.cr_last_error()):gsub('^no usable CUDA GPU: ', '')
    else
      count = C.cr_cuda_device_count()
    end
    opened = true
  end
  return count, reason
end

function M.device_count() return (open()) end
function M.is_available() return open() > 0 end
function M.why_not() return select(2, open()) end

local function device_index(i, what)
  i = i or 0
  if type(i) ~= 'number' or i < 0 or i ~= math.floor(i) then
    error(string.format('cuda.%s: device must be an index >= 0, got %s', what, tostring(i)), 3)
  end
  return i
end

local stats_fields = { 'allocated_bytes', 'reserved_bytes', 'peak_allocated_bytes', 'allocs', 'cache_hits',
                       'device_mallocs', 'oom_retries' }
function M.memory_stats(i)
  local s = ffi.new('cr_cuda_memstats')
  util.check(C.cr_cuda_memory_stats(device_index(i, 'memory_stats'), s))
  local out = {}
  for _, k in ipairs(stats_fields) do out[k] = tonumber(s[k]) end
  return out
end
function M.reset_peak_memory_stats(i) util.check(C.cr_cuda_reset_peak(device_index(i, 'reset_peak_memory_stats'))) end
function M.synchronize(i) util.check(C.cr_cuda_synchronize(i == nil and -1 or device_index(i, 'synchronize'))) end
function M.empty_cache() util.check(C.cr_cuda_empty_cache()) end
function M.set_deterministic(on) util.check(C.cr_cuda_set_deterministic(on and true or false)) end

-- Ops without a CUDA kernel (all of them while the backend is not open).
function M.missing_kernels()
  open()
  local out = {}
  for op = 0, C.cr_op_count() - 1 do
    if not C.cr_op_has_kernel(op, C.CR_DEV_CUDA) then out[#out + 1] = ffi.string(C.cr_op_name(op)) end
  end
  return out
end

-- The device a run uses for train.device (auto | cpu | cuda | cuda:N), and the line to
-- print about the choice (nil for an explicit cpu). An unusable cuda is an error that
-- says why. The recipes need every op on the device: should the backend lack a kernel
-- (a build older than its ops), auto stays on the cpu and an explicit cuda names it.
function M.resolve(device)
  if device == 'cpu' then return 'cpu', nil end
  local _, index = util.parse_device(device)
  if device == 'auto' then index = 0 end
  if not index then
    error(string.format("train.device='%s': expected auto, cpu, cuda or cuda:N", tostring(device)), 2)
  end
  local n, why = open()
  local missing = not why and M.missing_kernels() or {}
  local incomplete = #missing > 0 and string.format(
    '%d GPU%s found, but the CUDA backend has no kernel yet for %d of %d ops (%s)', n, n == 1 and '' or 's',
    #missing, C.cr_op_count(), util.short_list(missing, 6))
  if device == 'auto' then
    if why or incomplete then return 'cpu', 'train.device=auto: cpu (' .. (why or incomplete) .. ')' end
    return 'cuda:0', 'train.device=auto: cuda:0 (' .. n .. ' GPU' .. (n == 1 and '' or 's') .. ' usable)'
  end
  if why then error('train.device=' .. device .. ': ' .. why .. '; use train.device=cpu or auto', 2) end
  if index >= n then
    error(string.format('train.device=%s: this machine has %d GPU%s (cuda:0 to cuda:%d)', device, n,
                        n == 1 and '' or 's', n - 1), 2)
  end
  if incomplete then error('train.device=' .. device .. ': ' .. incomplete .. '; use train.device=cpu or auto', 2) end
  return 'cuda:' .. index, nil
end

return M
