-- crescent.ops.linalg — matrix products: cr.mm, cr.bmm, cr.addmm, cr.matmul, cr.linear
-- and the Tensor methods t:mm, t:bmm, t:addmm, t:matmul; fused attention,
-- cr.scaled_dot_product_attention.
local C = require('crescent.ffi').C
local Tensor = require 'crescent.tensor'
local W = Tensor.op_helpers

local M = {}   -- what this family adds to cr: cr.<name> is M.<name>

local call, is_tensor = W.call, W.is_tensor

-- nil goes through to C, which names the missing argument; other non-tensors stop here
local function arg(x, what, name)
  if x ~= nil and not is_tensor(x) then
    error(string.format("%s: argument '%s' must be a tensor, got %s", what, name, type(x)), 3)
  end
  return x
end

local function opt_number(opts, key, default, what)
  if opts == nil then return default end
  if type(opts) ~= 'table' then error(what .. ': options must be a table, e.g. {beta = 1, alpha = 1}', 3) end
  local v = opts[key]
  if v == nil then return default end
  if type(v) ~= 'number' then error(string.format('%s: %s must be a number, got %s', what, key, type(v)), 3) end
  return v
end

function M.mm(a, b) return call(C.cr_op_mm, arg(a, 'mm', 'self'), arg(b, 'mm', 'mat2')) end
function M.bmm(a, b) return call(C.cr_op_bmm, arg(a, 'bmm', 'self'), arg(b, 'bmm', 'mat2')) end
function M.matmul(a, b) return call(C.cr_op_matmul, arg(a, 'matmul', 'self'), arg(b, 'matmul', 'other')) end

-- cr.addmm(bias, a, b, {beta = 1, alpha = 1}) = beta * bias + alpha * (a @ b)
function M.addmm(bias, a, b, opts)
  local beta = opt_number(opts, 'beta', 1, 'addmm')
  local alpha = opt_number(opts, 'alpha', 1, 'addmm')
  return call(C.cr_op_addmm, arg(bias, 'addmm', 'self'), arg(a, 'addmm', 'mat1'),
              arg(b, 'addmm', 'mat2'), beta, alpha)
end

-- cr.linear(x, w, b): x [..., in] @ w[out, in]^T + b[out]; b may be nil
function M.linear(x, w, b)
  return call(C.cr_op_linear, arg(x, 'linear', 'input'), arg(w, 'linear', 'weight'),
              arg(b, 'linear', 'bias'))
end

local SDPA_KEYS = { mask = true, causal = true, scale = true, dropout = true }

-- cr.scaled_dot_product_attention(q, k, v, {mask = m, causal = false, scale = 1/sqrt(d),
-- dropout = 0}): softmax(scale q k^T + mask) v, fused (csrc/ops/attention.c). q [B, H,
-- Tq, d] (or [N, Tq, d]), k [.., Tk, d], v [.., Tk, dv] -> [.., Tq, dv]. mask broadcasts
-- to [.., Tq, Tk]: bool (true attends, as PyTorch's) or float (added to the scores).
-- dropout is the probability of zeroing a weight: pass 0 outside training.
function M.scaled_dot_product_attention(q, k, v, opts)
  local what = 'scaled_dot_product_attention'
  if opts ~= nil and type(opts) ~= 'table' then
    error(what .. ': options must be a table, e.g. {causal = true, dropout = 0.1}', 2)
  end
  opts = opts or {}
  for key in pairs(opts) do
    if not SDPA_KEYS[key] then
      error(string.format("%s: unknown option '%s' (known: mask, causal, scale, dropout)", what, tostring(key)), 2)
    end
  end
  if opts.causal ~= nil and type(opts.causal) ~= 'boolean' then
    error(what .. ': causal must be true or false, got ' .. tostring(opts.causal), 2)
  end
  local scale = opt_number(opts, 'scale', 0, what)
  if opts.scale ~= nil and scale == 0 then error(what .. ': scale must not be 0 (leave it out for 1/sqrt(d))', 2) end
  return call(C.cr_op_attention, arg(q, what, 'query'), arg(k, what, 'key'), arg(v, what, 'value'),
              arg(opts.mask, what, 'mask'), opts.causal == true, scale, opt_number(opts, 'dropout', 0, what))
end

Tensor.mm = M.mm
Tensor.bmm = M.bmm
Tensor.matmul = M.matmul
Tensor.addmm = M.addmm

return M
