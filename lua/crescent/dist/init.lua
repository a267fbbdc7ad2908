-- crescent.dist — distributed training: the launcher's environment, the process group and
-- its collectives (MPI for cpu tensors, NCCL for GPU tensors), DDP, SyncBatchNorm and
-- the recipes' setup around them. (The distributed sampler is the data layer's:
-- cr.data.sampler, used by cr.data.Loader's shard option.)
--
--   cr.dist.init{timeout = 1800, device = 'cpu'}  cr.dist.rank()  cr.dist.world_size()
--   cr.dist.all_reduce(t, 'avg')  cr.dist.broadcast(t, 0)  cr.dist.all_gather(t)
--   cr.dist.reduce_scatter(t, 'sum')  cr.dist.barrier()  cr.dist.shutdown()
--   cr.dist.all_gather_with_grad(z)     -- SimCLR: gradients flow back to every rank's z
--   local ddp = cr.dist.DDP(model, {bucket_mb = 25})
--   cr.dist.convert_sync_batchnorm(model)
--   cr.data.Loader(ds, {shard = {rank = cr.dist.rank(), world_size = cr.dist.world_size()}})
--   cr.dist.launcher.detect()
local cr = require 'crescent'
local comm = require 'crescent.dist.comm'

local M = {
  launcher = require 'crescent.dist.launcher',
  DDP = require 'crescent.dist.ddp',
  comm = comm,
}
for _, k in ipairs { 'init', 'is_initialized', 'group', 'rank', 'world_size', 'local_rank', 'local_world_size',
                     'is_main', 'is_distributed', 'shutdown', 'abort', 'all_reduce', 'broadcast', 'all_gather',
                     'reduce_scatter', 'barrier', 'double_reducer' } do
  M[k] = comm[k]
end

local sync_bn = require 'crescent.dist.sync_bn'
M.SyncBatchNorm = sync_bn.SyncBatchNorm
M.convert_sync_batchnorm = sync_bn.convert

-- all_gather that autograd sees through: forward gathers every rank's z along dim 0;
-- backward sums the incoming grads over the ranks (a reduce-scatter) and keeps this
-- rank's rows. When each rank computes the same loss over the gathered batch, that sum
-- is the gradient of every rank's loss, which DDP's average turns into the gradient of
-- the one loss.
local GatherWithGrad = cr.Function {
  forward = function(_, z) return comm.all_gather(z) end,
  backward = function(_, g) return comm.reduce_scatter(g:contiguous(), 'sum') end,
}
function M.all_gather_with_grad(z)
  if comm.world_size() == 1 then return z end
  return GatherWithGrad(z)
end

M.setup = require('crescent.dist.setup')

return M
