-- crescent.format — how tensors print: values (summarised past 1000 elements, with
-- edges kept, as PyTorch does), then one line with shape, dtype, device and grad_fn.
local ffi = require 'ffi'
local C = require('crescent.ffi').C

local M = {}
local THRESHOLD, EDGE = 1000, 3

local function fmt_number(v, isfloat, isbool, sci, width, prec)
  local s
  if isbool then s = v ~= 0 and 'true' or 'false'
  elseif not isfloat then s = string.format('%d', v)
  elseif v ~= v then s = 'nan'
  elseif v == math.huge then s = 'inf'
  elseif v == -math.huge then s = '-inf'
  elseif sci then s = string.format('%.' .. prec .. 'e', v)
  else s = string.format('%.' .. prec .. 'f', v) end
  return string.rep(' ', width - #s) .. s
end

function M.tensor(t)
  local ndim = C.cr_tensor_ndim(t)
  local shape = {}
  for i = 0, ndim - 1 do shape[i + 1] = tonumber(C.cr_tensor_size(t, i)) end
  local n = tonumber(C.cr_tensor_numel(t))
  local dt = C.cr_tensor_dtype(t)
  local isfloat, isbool = C.cr_dtype_is_float(dt), dt == C.CR_DT_BOOL
  local dtname = ffi.string(C.cr_dtype_name(dt))
  local dev = C.cr_tensor_device(t) == C.CR_DEV_CPU and 'cpu' or ('cuda:' .. C.cr_tensor_device_index(t))
  local summarise = n > THRESHOLD
  local host = dev == 'cpu' and t or t:cpu() -- a GPU tensor prints from a host copy

  -- which flat indices are shown: along each dim keep the first/last EDGE when summarising
  local function shown(d, i) return not summarise or shape[d] <= 2 * EDGE or i < EDGE or i >= shape[d] - EDGE end

  -- gather the shown values to pick a common format
  local maxabs, minabs, allint, count = 0, math.huge, true, 0
  local strides = {}
  local acc = 1
  for d = ndim, 1, -1 do strides[d] = acc; acc = acc * shape[d] end
  local function visit(d, base, f)
    if d > ndim then f(base); return end
    for i = 0, shape[d] - 1 do
      if shown(d, i) then visit(d + 1, base + i * strides[d], f) end
    end
  end
  if n > 0 then
    visit(1, 0, function(flat)
      local v = C.cr_tensor_get_flat(host, flat)
      if v == v and v ~= math.huge and v ~= -math.huge then
        local a = math.abs(v)
        if a > maxabs then maxabs = a end
        if a > 0 and a < minabs then minabs = a end
        if v ~= math.floor(v) then allint = false end
      end
      count = count + 1
    end)
  end
  local wide_range = minabs ~= math.huge and maxabs / minabs > 1e6 and maxabs > 1e3
  local sci = isfloat and (maxabs >= 1e8 or (minabs < 1e-4 and minabs > 0) or wide_range)
  local prec = isfloat and (allint and not sci and 0 or 4) or 0
  local width = 1
  if n > 0 then
    visit(1, 0, function(flat)
      local s = fmt_number(C.cr_tensor_get_flat(host, flat), isfloat, isbool, sci, 0, prec)
      if #s > width then width = #s end
    end)
  end
  local function num(flat)
    local s = fmt_number(C.cr_tensor_get_flat(host, flat), isfloat, isbool, sci, width, prec)
    if isfloat and allint and not sci then s = s .. '.' end
    return s
  end

  local parts = {}
  local function emit(s) parts[#parts + 1] = s end
  local function rec(d, base, indent)
    if d > ndim then emit(num(base)); return end
    emit('[')
    local first = true
    for i = 0, shape[d] - 1 do
      if shown(d, i) then
        if not first then
          if d == ndim then emit(', ') else emit(',' .. string.rep('\n', ndim - d) .. string.rep(' ', indent + 1)) end
        end
        first = false
        rec(d + 1, base + i * strides[d], indent + 1)
      elseif i == EDGE then
        if d == ndim then emit(', ...') else emit(',\n' .. string.rep(' ', indent + 1) .. '...') end
      end
    end
    emit(']')
  end
  local body
  if ndim == 0 then body = num(0)
  else rec(1, 0, 0); body = table.concat(parts) end
  local info = { dtname, '[' .. table.concat(shape, ', ') .. ']', dev }
  local gf = ffi.string(C.cr_tensor_grad_fn_name(t))
  if gf ~= '' then info[#info + 1] = 'grad_fn=' .. gf
  elseif C.cr_tensor_requires_grad(t) then info[#info + 1] = 'requires_grad' end
  return body .. '\n[' .. table.concat(info, ' ') .. ']'
end

return M
