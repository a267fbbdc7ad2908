-- crescent.ssl — the numerical core of the self-supervised methods (SwAV, MoCo v2,
-- SimCLR, BYOL-style targets) and their evaluation:
--   ssl.sinkhorn(scores, {epsilon = 0.05, iterations = 3, reduce = nil}) -> codes [B, K]
--   ssl.ema_update(target, source, m)       target = m * target + (1 - m) * source
--   ssl.copy_tensors(target, source)        exact copies (buffers, any dtype)
--   ssl.cosine_momentum(m0, progress)       1 - (1 - m0) * (cos(pi * progress) + 1) / 2
--   ssl.swav_loss, ssl.infonce, ssl.nt_xent (crescent.ssl.losses)
--   ssl.Queue (crescent.ssl.queue), ssl.knn_classify (crescent.ssl.knn),
--   ssl.extract_features (crescent.ssl.features)
--   ssl.swav / ssl.moco / ssl.simclr: the methods as modules, with build(cfg) and task(cfg)
-- The Sinkhorn and EMA kernels are C (csrc/ssl/, declared in csrc/include/crescent_ssl.h);
-- the losses are composed from differentiable ops.
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local Tensor = require 'crescent.tensor'
local util = require 'crescent.util'

local W = Tensor._wrap
local is_tensor = W.is_tensor
local tensor_vla_ct = ffi.typeof('cr_tensor*[?]') -- made once: see tensor.lua on C type strings
local double_vla_ct = ffi.typeof('double[?]')
local double1_ct = ffi.typeof('double[1]')

local M = {}

local function fail(msg) error(msg, util.user_level()) end

local function opt_number(what, opts, key, default, lo)
  local v = opts[key]
  if v == nil then return default end
  if type(v) ~= 'number' or v ~= v or (lo and v < lo) then
    fail(string.format('%s: %s must be a number%s, got %s', what, key,
                       lo and (' >= ' .. lo) or '', tostring(v)))
  end
  return v
end
M._opt_number = opt_number

local function opts_table(what, opts)
  if opts == nil then return {} end
  if type(opts) ~= 'table' then fail(what .. ': options must be a table, got ' .. type(opts)) end
  return opts
end
M._opts_table = opts_table

-- What every method's constructor checks first: an options table of known keys with a
-- trunk module. Returns the projection head's dims: feat_dim, hidden_dim (default 512;
-- 0: no hidden layer) and out_dim (default 128).
function M._method_options(what, o, known, example)
  local nn = require('crescent').nn
  if type(o) ~= 'table' then
    fail(string.format('%s: give an options table, e.g. %s%s', what, what, example or '{trunk = model, feat_dim = 128}'))
  end
  nn._options(what, o, known)
  if not nn.is_module(o.trunk) then
    fail(what .. ': trunk must be a module returning features [B, feat_dim], got ' .. type(o.trunk))
  end
  return nn._int(what, 'feat_dim', o.feat_dim, 1), nn._int(what, 'hidden_dim', o.hidden_dim or 512, 0),
         nn._int(what, 'out_dim', o.out_dim or 128, 1)
end

-- A method's projection head: Linear -> [BatchNorm1d] -> ReLU -> Linear, or one Linear
-- when hidden is 0. The BatchNorm is there when o.head_bn is true, or (o.head_bn nil)
-- when default_bn is.
function M._head(what, o, feat, hidden, out, default_bn)
  local bn = o.head_bn
  if bn == nil then bn = default_bn end
  if type(bn) ~= 'boolean' then fail(what .. ': head_bn must be true or false, got ' .. tostring(bn)) end
  return require('crescent').nn.MLP { dims = hidden > 0 and { feat, hidden, out } or { feat, out }, bn = bn }
end

-- A number > 0 (NaN refused), or the default when v is nil.
function M._positive(what, name, v, default)
  if v == nil then v = default end
  if type(v) ~= 'number' or v ~= v or v <= 0 then
    fail(string.format('%s: %s must be a number > 0, got %s', what, name, tostring(v)))
  end
  return v
end

-- ---- Sinkhorn-Knopp ------------------------------------------------------------------
-- ssl.sinkhorn(scores [B, K], {epsilon = 0.05, iterations = 3}) -> codes [B, K], in the
-- scores' dtype, each row summing to 1 and each column to B/K (SwAV returns Q * B, whose
-- rows are the soft assignments). No gradient: the result never requires grad.
-- Distributed: opts.reduce = {max = f, sum = f, world = k} (or world_batch = Bglobal), where
-- f(ptr, n) all-reduces n doubles in place (MAX / SUM over ranks) and every one of the k
-- ranks has as many rows; the steps of crescent_ssl.h then run here in Lua, with the
-- reductions between them (cr.dist.double_reducer makes f).
function M.sinkhorn(scores, opts)
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

-- ---- momentum (EMA) update -------------------------------------------------------------
-- A list of tensors, a list of {name, tensor} pairs, or a module (its named_parameters;
-- `buffers = true` picks its named_buffers). Returns a C array, the count and the names.
local function tensor_list(what, side, xs, buffers)
  if type(xs) == 'table' and type(xs.named_parameters) == 'function' then
    xs = buffers and xs:named_buffers() or xs:named_parameters()
  end
  if is_tensor(xs) then xs = { xs } end
  if type(xs) ~= 'table' then
    fail(string.format('%s: the %s must be a module, a list of tensors or a list of {name, tensor} pairs, got %s',
                       what, side, type(xs)))
  end
  local n = #xs
  local arr, names = ffi.new(tensor_vla_ct, math.max(n, 1)), {}
  for i, x in ipairs(xs) do
    if is_tensor(x) then
      arr[i - 1], names[i] = x, nil
    elseif type(x) == 'table' and is_tensor(x[2]) then
      arr[i - 1], names[i] = x[2], tostring(x[1])
    else
      fail(string.format('%s: entry %d of the %s is not a tensor or a {name, tensor} pair', what, i, side))
    end
  end
  return arr, n, names
end

local function pairs_of(what, target, source, buffers)
  -- raw pointers: the tensors stay alive through the caller's arguments until C returns
  local ta, tn, tnames = tensor_list(what, 'target', target, buffers)
  local sa, sn, snames = tensor_list(what, 'source', source, buffers)
  if tn ~= sn then
    fail(string.format('%s: the target has %d tensors but the source has %d; the two models must have the same architecture',
                       what, tn, sn))
  end
  for i = 1, tn do
    if tnames[i] and snames[i] and tnames[i] ~= snames[i] then
      fail(string.format("%s: entry %d is '%s' in the target but '%s' in the source; give the tensors in the same order",
                         what, i, tnames[i], snames[i]))
    end
  end
  return ta, sa, tn, function()
    local msg = ffi.string(C.cr_last_error()):gsub('pair (%d+)', function(i)
      local nm = tnames[tonumber(i) + 1] or snames[tonumber(i) + 1]
      return nm and ("'" .. nm .. "'") or ('pair ' .. (tonumber(i) + 1))
    end)
    fail(msg)
  end
end

-- ssl.ema_update(target, source, m): target = m * target + (1 - m) * source for every pair,
-- in place, one fused C call (MoCo's key encoder: m = 0.999). Targets' versions bump.
function M.ema_update(target, source, m)
  if type(m) ~= 'number' or m ~= m or m < 0 or m > 1 then
    fail('ema_update: the momentum must be a number in [0, 1] (MoCo: 0.999), got ' .. tostring(m))
  end
  local ta, sa, n, raise = pairs_of('ema_update', target, source, false)
  if C.cr_ssl_ema_update(ta, sa, n, m) ~= 0 then raise() end
  return target
end

-- ssl.copy_tensors(target, source, {buffers = true}): exact copies, any dtype. With two
-- modules and buffers = true, copies their named_buffers (BN running statistics).
function M.copy_tensors(target, source, opts)
  opts = opts_table('copy_tensors', opts)
  local ta, sa, n, raise = pairs_of('copy_tensors', target, source, opts.buffers)
  if C.cr_ssl_copy_tensors(ta, sa, n) ~= 0 then raise() end
  return target
end

-- BYOL / MoCo cosine momentum schedule over training progress t in [0, 1]:
-- m(t) = 1 - (1 - m0) * (cos(pi * t) + 1) / 2, from m0 at t = 0 up to 1 at t = 1.
function M.cosine_momentum(m0, t)
  if type(m0) ~= 'number' or m0 < 0 or m0 > 1 then
    fail('cosine_momentum: the base momentum must be in [0, 1], got ' .. tostring(m0))
  end
  if type(t) ~= 'number' or t ~= t then fail('cosine_momentum: progress must be a number in [0, 1], got ' .. tostring(t)) end
  t = math.min(math.max(t, 0), 1)
  return 1 - (1 - m0) * (math.cos(math.pi * t) + 1) / 2
end

local losses = require 'crescent.ssl.losses'
M.swav_loss = losses.swav_loss
M.infonce = losses.infonce
M.nt_xent = losses.nt_xent
M.Queue = require 'crescent.ssl.queue'
M.knn_classify = require('crescent.ssl.knn').classify
M.extract_features = require('crescent.ssl.features').extract

-- The methods and the recipe builder load on first use (they need cr.nn):
-- ssl.swav.SwAV, ssl.moco.MoCo, ssl.simclr.SimCLR, ssl.recipe, ssl.linear_probe.
local LAZY = { swav = 'crescent.ssl.swav', moco = 'crescent.ssl.moco', simclr = 'crescent.ssl.simclr',
               recipe = 'crescent.ssl.recipe', linear_probe = 'crescent.ssl.linear_probe' }
return setmetatable(M, { __index = function(t, k)
  local path = LAZY[k]
  if not path then return nil end
  local v = require(path)
  rawset(t, k, v)
  return v
end })
