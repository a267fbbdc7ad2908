-- crescent.ssl.losses — the losses of SwAV, MoCo v2, SimCLR, SimSiam, BYOL and Barlow Twins,
-- composed from differentiable ops (normalize, mm, cat, masked_fill, log_softmax,
-- cross_entropy), so their gradients come from the ops' own rules.
--
--   swav_loss(scores, {crops_for_assign = {0, 1}, temperature = 0.1, epsilon = 0.05,
--             iterations = 3, queue_scores = nil, reduce = nil}) -> loss, codes
--       (reduce: Sinkhorn's distributed sums, see ssl.sinkhorn)
--       scores: a list of V tensors [B, K], the prototype scores of crops 0 .. V-1.
--       For each assigned crop i (0-based ids), q_i = sinkhorn(scores[i]) under no_grad;
--       with queue_scores[j] ([L, K], for the j-th entry of crops_for_assign) the codes are
--       sinkhorn(cat(queue_scores[j], scores[i]))[-B:] (SwAV/VISSL). Then, as
--       main_swav.py:  loss = 1/|assign| * sum_i 1/(V-1) * sum_{v ~= i}
--                              -mean_b sum_k q_i[b, k] * log_softmax(scores[v] / T)[b, k]
--       codes: the list of q_i (no grad), in crops_for_assign order.
--   infonce(q, k, negatives, {temperature = 0.2, detach_key = true}) -> loss, logits
--       MoCo v2: q, k [B, D] are L2-normalised here; negatives [L, D] (the queue, already
--       normalised) are used as given, without grad. logits = cat(q.k [B, 1], q @ neg^T
--       [B, L]) / T, loss = cross_entropy(logits, 0).
--   nt_xent(z1, z2, {temperature = 0.5}) -> loss    (or nt_xent(z [2B, D], nil, opts))
--       SimCLR: z = normalize(cat(z1, z2)); sim = z @ z^T / T with the diagonal masked
--       out; row i's positive is i + B (i < B) or i - B; loss = cross_entropy over 2B rows.
--   cosine_prediction(p, z) -> loss
--       SimSiam's D and BYOL's regression: -mean_b cos(p_b, z_b), z detached (the stop-
--       gradient). SimSiam's loss is (D(p1, z2) + D(p2, z1)) / 2; BYOL's 2 - 2 cos per pair,
--       summed over the two directions, is 4 + 2 (D(p1, t2) + D(p2, t1)).
--   barlow_twins(n1, n2, {lambda = 0.0051, reduce = nil, world = 1}) -> loss, c
--       n1, n2 [B, D]: the two views' embeddings, already batch-normalised (no affine).
--       c = n1^T n2 / B_global (D x D); loss = sum_i (1 - c_ii)^2 + lambda sum_{i ~= j} c_ij^2.
--       reduce(c) -> the sum of c over the ranks (no grad) makes c the global batch's, as
--       the paper's all_reduce; then the loss is multiplied by world, so that DDP's average
--       of the ranks' gradients is the gradient of the global batch.
local cr = require 'crescent'

local M = {}

local util = require 'crescent.util'
local sinkhorn = require 'crescent.ssl.sinkhorn'
local function fail(msg) error(msg, util.user_level()) end

local function opts_table(what, opts)
  if opts == nil then return {} end
  if type(opts) ~= 'table' then fail(what .. ': options must be a table, got ' .. type(opts)) end
  return opts
end
local function num(what, opts, key, default, positive)
  local v = opts[key]
  if v == nil then return default end
  if type(v) ~= 'number' or v ~= v or (positive and v <= 0) then
    fail(string.format('%s: %s must be a number%s, got %s', what, key, positive and ' > 0' or '', tostring(v)))
  end
  return v
end
local function shape_str(t) return '[' .. table.concat(t.shape, ', ') .. ']' end
local function check2d(what, t, name)
  if not cr.is_tensor(t) then fail(string.format('%s: %s must be a tensor, got %s', what, name, type(t))) end
  if t.ndim ~= 2 then fail(string.format('%s: %s must be 2-D, got %s', what, name, shape_str(t))) end
  if not t:is_floating_point() then fail(string.format('%s: %s must be a float tensor, got %s', what, name, t.dtype)) end
end

-- ---- SwAV --------------------------------------------------------------------------------
function M.swav_loss(scores, opts)
  local what = 'swav_loss'
  opts = opts_table(what, opts)
  if type(scores) ~= 'table' or cr.is_tensor(scores) or #scores < 2 then
    fail(what .. ': scores must be a list of at least 2 tensors [B, K], one per crop')
  end
  local V = #scores
  for v = 1, V do check2d(what, scores[v], 'scores of crop ' .. (v - 1)) end
  local B, K = scores[1].shape[1], scores[1].shape[2]
  for v = 2, V do
    local s = scores[v].shape
    if s[1] ~= B or s[2] ~= K then
      fail(string.format('%s: crop %d has scores %s but crop 0 has %s; every crop needs the same batch and prototypes',
                         what, v - 1, shape_str(scores[v]), shape_str(scores[1])))
    end
  end
  local assign = opts.crops_for_assign or { 0, 1 }
  if type(assign) ~= 'table' or #assign == 0 then
    fail(what .. ': crops_for_assign must be a non-empty list of crop ids (0-based), e.g. {0, 1}')
  end
  for _, c in ipairs(assign) do
    if type(c) ~= 'number' or c ~= math.floor(c) or c < 0 or c >= V then
      fail(string.format('%s: crops_for_assign has %s, outside the %d crops (ids 0 .. %d)', what, tostring(c), V, V - 1))
    end
  end
  local T = num(what, opts, 'temperature', 0.1, true)
  local sk = { epsilon = num(what, opts, 'epsilon', 0.05, true), iterations = num(what, opts, 'iterations', 3),
               reduce = opts.reduce }
  local queue = opts.queue_scores
  if queue ~= nil and type(queue) ~= 'table' then
    fail(what .. ': queue_scores must be a list of tensors [L, K] (one per assigned crop) or nil')
  end

  -- log_softmax(scores[v] / T) once per crop, shared by every assigned crop
  local logp = {}
  for v = 1, V do logp[v] = (scores[v] / T):log_softmax(1) end
  local loss, codes = nil, {}
  for j, c in ipairs(assign) do
    local q = cr.no_grad(function()
      local out = scores[c + 1]:detach()
      local qs = queue and queue[j]
      if qs ~= nil then
        check2d(what, qs, 'queue_scores[' .. j .. ']')
        if qs.shape[2] ~= K then
          fail(string.format('%s: queue_scores[%d] is %s but the scores have %d prototypes', what, j, shape_str(qs), K))
        end
        local L = qs.shape[1]
        return sinkhorn(cr.cat({ qs:detach():to(out.dtype), out }, 0), sk):narrow(0, L, B)
      end
      return sinkhorn(out, sk)
    end)
    codes[j] = q
    local sub = nil
    for v = 1, V do
      if v ~= c + 1 then
        local term = (q * logp[v]):sum(1):mean()
        sub = sub and (sub - term) or -term
      end
    end
    sub = sub / (V - 1)
    loss = loss and (loss + sub) or sub
  end
  return loss / #assign, codes
end

-- ---- MoCo v2 --------------------------------------------------------------------------
function M.infonce(q, k, negatives, opts)
  local what = 'infonce'
  opts = opts_table(what, opts)
  check2d(what, q, 'q')
  check2d(what, k, 'k')
  if q.shape[1] ~= k.shape[1] or q.shape[2] ~= k.shape[2] then
    fail(string.format('%s: q is %s but k is %s; they must match', what, shape_str(q), shape_str(k)))
  end
  local T = num(what, opts, 'temperature', 0.2, true)
  local detach_key = opts.detach_key
  if detach_key == nil then detach_key = true end
  q = q:normalize({ dim = 1 })
  k = (detach_key and k:detach() or k):normalize({ dim = 1 })
  local l_pos = (q * k):sum(1, true)
  local logits
  if negatives ~= nil then
    check2d(what, negatives, 'negatives')
    if negatives.shape[2] ~= q.shape[2] then
      fail(string.format('%s: negatives are %s but q is %s; the feature dims must match', what,
                         shape_str(negatives), shape_str(q)))
    end
    local l_neg = q:mm(negatives:detach():to(q.dtype):t())
    logits = cr.cat({ l_pos, l_neg }, 1) / T
  else
    logits = l_pos / T
  end
  local labels = cr.zeros({ q.shape[1] }, { dtype = 'i64', device = q.device })
  return cr.cross_entropy(logits, labels), logits
end

-- ---- SimCLR ------------------------------------------------------------------------------
function M.nt_xent(z1, z2, opts)
  local what = 'nt_xent'
  opts = opts_table(what, opts)
  check2d(what, z1, z2 and 'z1' or 'z')
  local z
  if z2 ~= nil then
    check2d(what, z2, 'z2')
    if z1.shape[1] ~= z2.shape[1] or z1.shape[2] ~= z2.shape[2] then
      fail(string.format('%s: z1 is %s but z2 is %s; the two views must match', what, shape_str(z1), shape_str(z2)))
    end
    z = cr.cat({ z1, z2 }, 0)
  else
    z = z1
    if z.shape[1] % 2 ~= 0 or z.shape[1] == 0 then
      fail(string.format('%s: z is %s; give [2B, D] (two views stacked) or z1 and z2', what, shape_str(z)))
    end
  end
  local T = num(what, opts, 'temperature', 0.5, true)
  local n = z.shape[1]
  local B = n / 2
  z = z:normalize({ dim = 1 })
  local sim = z:mm(z:t()) / T
  local on = { dtype = 'bool', device = z.device }
  local eye = cr.eye(n, n, on)
  sim = sim:masked_fill(eye, -math.huge)
  -- positives: i + B for the first view, i - B for the second
  on.dtype = 'i64'
  local labels = cr.cat({ cr.arange(B, n, on), cr.arange(0, B, on) }, 0)
  return cr.cross_entropy(sim, labels)
end

-- ---- Barlow Twins ------------------------------------------------------------------------
function M.barlow_twins(n1, n2, opts)
  local what = 'barlow_twins'
  opts = opts_table(what, opts)
  check2d(what, n1, 'n1')
  check2d(what, n2, 'n2')
  if n1.shape[1] ~= n2.shape[1] or n1.shape[2] ~= n2.shape[2] then
    fail(string.format('%s: n1 is %s but n2 is %s; the two views must match', what, shape_str(n1), shape_str(n2)))
  end
  local lambda = num(what, opts, 'lambda', 0.0051)
  if lambda < 0 then fail(what .. ': lambda must be >= 0, got ' .. lambda) end
  local world = num(what, opts, 'world', 1, true)
  local D = n1.shape[2]
  local c = n1:t():mm(n2) / (n1.shape[1] * world)
  if opts.reduce then
    if type(opts.reduce) ~= 'function' then fail(what .. ': reduce must be a function(c) -> the sum of c over the ranks') end
    local local_c = c:detach()
    c = c + (opts.reduce(local_c:clone()) - local_c)   -- the global value, the local gradient
  end
  local eye = cr.eye(D, D, { dtype = c.dtype, device = c.device })
  local on = ((c - 1) * eye):pow(2):sum()
  local off = (c * (1 - eye)):pow(2):sum()
  return (on + off * lambda) * world, c
end

-- ---- SimSiam and BYOL -------------------------------------------------------------------
function M.cosine_prediction(p, z)
  local what = 'cosine_prediction'
  check2d(what, p, 'p')
  check2d(what, z, 'z')
  if p.shape[1] ~= z.shape[1] or p.shape[2] ~= z.shape[2] then
    fail(string.format('%s: p is %s but z is %s; they must match', what, shape_str(p), shape_str(z)))
  end
  local cos = (p:normalize({ dim = 1 }) * z:detach():to(p.dtype):normalize({ dim = 1 })):sum(1)
  return -cos:mean()
end

return M
