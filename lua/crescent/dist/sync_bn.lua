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
local SyncBN = cr.Function {
  forward = function(ctx, x, weight, bias, mod, factor)
    local C = x.shape[2]
    local dims, view = reduce_dims(x.ndim)
    local shape = view(C)
    local local_count = x:numel() / C
    local s = comm.all_reduce(cr.cat({ x:sum(dims):double(), cr.full({ 1 }, local_count, { dtype = 'f64',
      device = x.device }) }, 0), 'sum')
    local count = s:narrow(0, C, 1):item()
    local mean = (s:narrow(0, 0, C) / count):to(x.dtype)
    local xmu = x - mean:view(shape)
    local var = (comm.all_reduce((xmu * xmu):sum(dims):double(), 'sum') / count):to(x.dtype)
    local invstd = (var + mod.eps):rsqrt()
    local xhat = xmu * invstd:view(shape)
    local y = xhat
    if weight then y = xhat * weight:view(shape) + bias:view(shape) end
    if mod.running_mean and factor then
      local unbiased = count > 1 and var * (count / (count - 1)) or var
      mod.running_mean:copy_(mod.running_mean * (1 - factor) + mean * factor)
      mod.running_var:copy_(mod.running_var * (1 - factor) + unbiased * factor)
    end
    ctx.xhat, ctx.invstd, ctx.weight, ctx.count, ctx.dims, ctx.shape = xhat, invstd, weight, count, dims, shape
    return y
  end,
  backward = function(ctx, g)
    local xhat, dims, shape, C = ctx.xhat, ctx.dims, ctx.shape, ctx.shape[2]
    local sum_g, sum_gx = g:sum(dims), (g * xhat):sum(dims)
    local both = comm.all_reduce(cr.cat({ sum_g, sum_gx }, 0):double(), 'sum'):to(g.dtype)
    local mean_g = both:narrow(0, 0, C) / ctx.count
    local mean_gx = both:narrow(0, C, C) / ctx.count
    local scale = ctx.invstd
    if ctx.weight then scale = scale * ctx.weight end
    local dx = (g - mean_g:view(shape) - xhat * mean_gx:view(shape)) * scale:view(shape)
    if ctx.weight then return dx, sum_gx, sum_g end
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
