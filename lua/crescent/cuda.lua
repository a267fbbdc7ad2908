-- crescent.cuda — is a CUDA GPU usable here, and if not, why (no driver, a driver older
-- than the build's toolkit, no device), and the run's device from train.device:
--   cr.cuda.is_available() -> bool        cr.cuda.device_count() -> n (0 when unusable)
--   cr.cuda.why_not() -> reason | nil     cr.cuda.resolve(device) -> 'cpu', line | error
-- The CUDA kernels arrive with issue 6: until then a usable GPU is reported, and
-- train.device=auto runs on the CPU with one line that says so.
local ffi = require 'ffi'
local C = require('crescent.ffi').C

local M = {}
local probed, count, reason

local function probe()
  if not probed then
    local buf = ffi.new('char[512]')
    local n = C.cr_cuda_probe(buf, 512)
    count, reason = math.max(n, 0), n < 0 and ffi.string(buf) or nil
    probed = true
  end
  return count, reason
end

function M.device_count() return (probe()) end
function M.is_available() return probe() > 0 end
function M.why_not() return select(2, probe()) end

-- The device a run uses for train.device (auto | cpu | cuda | cuda:N), and the line to
-- print about the choice (nil for an explicit cpu). An unusable cuda is an error that
-- says why.
function M.resolve(device)
  if device == 'cpu' then return 'cpu', nil end
  local n, why = probe()
  local no_kernels = string.format('%d GPU%s found, but this build has no CUDA kernels yet (they arrive with '
                                   .. 'issue 6)', n, n == 1 and '' or 's')
  if device == 'auto' then
    return 'cpu', 'train.device=auto: cpu (' .. (why or no_kernels) .. ')'
  end
  local index = device == 'cuda' and 0 or tonumber((device or ''):match('^cuda:(%d+)$'))
  if not index then
    error(string.format("train.device='%s': expected auto, cpu, cuda or cuda:N", tostring(device)), 2)
  end
  if why then error('train.device=' .. device .. ': ' .. why .. '; use train.device=cpu or auto', 2) end
  if index >= n then
    error(string.format('train.device=%s: this machine has %d GPU%s (cuda:0 to cuda:%d)', device, n,
                        n == 1 and '' or 's', n - 1), 2)
  end
  error('train.device=' .. device .. ': ' .. no_kernels .. '; use train.device=cpu or auto', 2)
end

return M
