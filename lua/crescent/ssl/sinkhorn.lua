-- crescent.ssl.sinkhorn — Sinkhorn-Knopp equipartition of SwAV's scores: one fused C call
-- (csrc/ssl/), or its steps with the distributed reductions between them.
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local Tensor = require 'crescent.tensor'
local util = require 'crescent.util'
local parts = require 'crescent.ssl.method_parts'

local W = Tensor.op_helpers
local double_vla_ct = ffi.typeof('double[?]') -- made once: see tensor.lua on C type strings
local double1_ct = ffi.typeof('double[1]')
local fail, opt_number, opts_table = parts.fail, parts.opt_number, parts.opts_table

-- ---- Sinkhorn-Knopp ------------------------------------------------------------------
-- ssl.sinkhorn(scores [B, K], {epsilon = 0.05, iterations = 3}) -> codes [B, K], in the
-- scores' dtype, each row summing to 1 and each column to B/K (SwAV returns Q * B, whose
-- rows are the soft assignments). No gradient: the result never requires grad.
-- Distributed: opts.reduce = {max = f, sum = f, world = k} (or world_batch = Bglobal), where
-- f(ptr, n) all-reduces n doubles in place (MAX / SUM over ranks) and every one of the k
-- ranks has as many rows; the steps of crescent_ssl.h then run here in Lua, with the
-- reductions between them (cr.dist.double_reducer makes f).
local function sinkhorn(scores, opts)
  W.check_tensor(scores, 'sinkhorn', 'scores')
  opts = opts_table('sinkhorn', opts)
  local eps = opt_number('sinkhorn', opts, 'epsilon', 0.05)
  local iters = opt_number('sinkhorn', opts, 'iterations', 3, 0)
  if iters ~= math.floor(iters) or iters > 2 ^ 31 - 1 then
    fail('sinkhorn: iterations must be an integer below 2^31, got ' .. tostring(iters))
  end
  local red = opts.reduce
  if red == nil then return W.call(C.cr_ssl_sinkhorn, scores, eps, iters) end
  if type(red) ~= 'table' or type(red.max) ~= 'function' or type(red.sum) ~= 'function' then
    fail('sinkhorn: reduce must be {max = f, sum = f, world_batch = n} with f(ptr, n) all-reducing n doubles')
  end
  if scores.ndim ~= 2 then util.check(C.cr_ssl_sinkhorn_colmax(scores, nil)) end -- the C message
  local K = scores.shape[2]
  local bglob = red.world_batch or scores.shape[1] * (red.world or 1)
  local buf, total = ffi.new(double_vla_ct, K), ffi.new(double1_ct)
  util.check(C.cr_ssl_sinkhorn_colmax(scores, buf))
  red.max(buf, K)
  if iters == 0 then -- nothing cancels per-prototype shifts: one common shift
    local mx = buf[0]
    for k = 1, K - 1 do if buf[k] > mx or buf[k] ~= buf[k] then mx = buf[k] end end
    for k = 0, K - 1 do buf[k] = mx end
  end
  local q = W.call(C.cr_ssl_sinkhorn_exp, scores, buf, eps, total)
  red.sum(total, 1)
  util.check(C.cr_ssl_sinkhorn_scale(q, 1 / total[0]))
  for _ = 1, iters do
    util.check(C.cr_ssl_sinkhorn_colsum(q, buf))
    red.sum(buf, K)
    util.check(C.cr_ssl_sinkhorn_normalize(q, buf, bglob))
  end
  return W.call(C.cr_ssl_sinkhorn_finish, q, bglob, C.cr_tensor_dtype(scores))
end

return sinkhorn
