-- crescent.dist.sync_bn — SyncBatchNorm: BatchNorm whose training statistics are those of
-- the global batch (every rank's samples), so k ranks x batch b normalise exactly as one
-- rank x batch k*b would. SSL methods need it: with small per-rank batches, per-rank
-- statistics are noisy and leak which samples share a rank.
--
--   cr.dist.convert_sync_batchnorm(model)  -- every BatchNorm1d/2d becomes a SyncBatchNorm,
--                                          -- in place: same parameters, buffers and names
--
-- Training forward, with M the global count of values per channel:
--   mean = all_reduce(sum x) / M;  var = all_reduce(sum (x - mean)^2) / M   (two passes)
--   y = (x - mean) / sqrt(var + eps) * weight + bias
-- running_var takes the unbiased var * M / (M - 1), as BatchNorm does.
-- Backward: with xhat = (x - mean) / sqrt(var + eps) and g the incoming grad,
--   dx = weight / sqrt(var + eps) * (g - all_reduce(sum g) / M - xhat * all_reduce(sum g xhat) / M)
-- which is the gradient of the sum of every rank's loss; DDP's average then makes it the
-- gradient of the mean loss. weight's and bias's grads stay local (DDP averages them).
-- On one rank, or in eval mode, it is BatchNorm (the C kernel).
local cr = require 'crescent'
local comm = require 'crescent.dist.comm'
local nn = cr.nn

local M = {}

local function reduce_dims(nd)
  if nd == 4 then return { 0, 2, 3 }, function(C) return { 1, C, 1, 1 } end end
  if nd == 3 then return { 0, 2 }, function(C) return { 1, C, 1 } end end
  return { 0 }, function(C) return { 1, C } end
end

-- The Function: x, weight, bias (nil when not affine) and the module (running stats).
-- Under autocast x comes in bf16 or f16 beside f32 parameters, as the C kernel takes it:
-- statistics, normalisation and grads are computed in f32 (f64 for an f64 x), the output
-- and x's grad come back in x's dtype, weight's and bias's grads in theirs. The backward
-- recomputes x-hat from x and the saved statistics, so no f32 copy of x is kept.
local function compute_dtype(x) return x.dtype == 'f64' and 'f64' or 'f32' end

local SyncBN = cr.Function {
  forward = function(ctx, x, weight, bias, mod, factor)
    local C = x.shape[2]
    local dims, view = reduce_dims(x.ndim)
    local shape = view(C)
    local ct = compute_dtype(x)
    local xc = x:to(ct)
    local local_count = x:numel() / C
    local s = comm.all_reduce(cr.cat({ xc:sum(dims):double(), cr.full({ 1 }, local_count, { dtype = 'f64',
      device = x.device }) }, 0), 'sum')
    local count = s:narrow(0, C, 1):item()
    local mean = (s:narrow(0, 0, C) / count):to(ct)
    local xmu = xc - mean:view(shape)
    local var = (comm.all_reduce((xmu * xmu):sum(dims):double(), 'sum') / count):to(ct)
    local invstd = (var + mod.eps):rsqrt()
    local y = xmu * invstd:view(shape)
    if weight then y = y * weight:to(ct):view(shape) + bias:to(ct):view(shape) end
    if mod.running_mean and factor then
      local unbiased = count > 1 and var * (count / (count - 1)) or var
      local rd = mod.running_mean.dtype
      mod.running_mean:copy_(mod.running_mean * (1 - factor) + mean:to(rd) * factor)
      mod.running_var:copy_(mod.running_var * (1 - factor) + unbiased:to(rd) * factor)
    end
    ctx.x, ctx.mean, ctx.invstd, ctx.weight, ctx.count, ctx.dims, ctx.shape = x, mean, invstd, weight, count, dims,
      shape
    return y:to(x.dtype)
  end,
  backward = function(ctx, g)
    local x, dims, shape, C = ctx.x, ctx.dims, ctx.shape, ctx.shape[2]
    local ct = ctx.mean.dtype
    local gc = g:to(ct)
    local xhat = (x:to(ct) - ctx.mean:view(shape)) * ctx.invstd:view(shape)
    local sum_g, sum_gx = gc:sum(dims), (gc * xhat):sum(dims)
    local both = comm.all_reduce(cr.cat({ sum_g, sum_gx }, 0):double(), 'sum'):to(ct)
    local mean_g = both:narrow(0, 0, C) / ctx.count
    local mean_gx = both:narrow(0, C, C) / ctx.count
    local scale = ctx.invstd
    if ctx.weight then scale = scale * ctx.weight:to(ct) end
    local dx = ((gc - mean_g:view(shape) - xhat * mean_gx:view(shape)) * scale:view(shape)):to(x.dtype)
    if ctx.weight then return dx, sum_gx:to(ctx.weight.dtype), sum_g:to(ctx.weight.dtype) end
    return dx
  end,
}

local SyncBatchNorm = nn.BatchNorm2d:extend('SyncBatchNorm')
SyncBatchNorm._ndim_a, SyncBatchNorm._ndim_b, SyncBatchNorm._expect = 2, 4, '2-D [N, C] or 4-D [N, C, H, W]'
local batch_norm_forward = nn.BatchNorm2d.forward

function SyncBatchNorm:forward(x, relu)
  if not self.training or comm.world_size() == 1 then return batch_norm_forward(self, x, relu) end
  local y = SyncBN(x, self.weight, self.bias, self, self:_begin(x))
  if relu then y = y:relu() end
  return y
end
M.SyncBatchNorm = SyncBatchNorm

-- Every BatchNorm of `model` becomes a SyncBatchNorm (in place); returns the model and the
-- number converted.
function M.convert(model)
  local n = 0
  for _, m in ipairs(model:modules()) do
    local cls = getmetatable(m)
    if cls == nn.BatchNorm2d or cls == nn.BatchNorm1d then
      setmetatable(m, SyncBatchNorm)
      n = n + 1
    end
  end
  return model, n
end

return M
