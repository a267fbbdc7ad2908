-- spec/dist/equivalence.lua — the proof of DDP: k ranks x batch b train the same weights as
-- one rank x batch k*b. Run alone and under `mpirun -np 2` by spec/dist_mpi_spec.lua:
--   luajit spec/dist/equivalence.lua <supervised|swav|barlow_twins|npid|deepcluster_v2|accum> <out.safetensors>
--                                    [steps] [accum_steps]
-- Trains the supervised recipe's model (a ResNet-18, width 4, CIFAR stem, SGD with
-- nesterov, weight decay off norms and biases, warmup-cosine lr) or SwAV (the same trunk,
-- multi-crop 2x28 + 2x14, prototypes frozen for the first steps) or Barlow Twins (the same
-- trunk, two 28 px views, c all-reduced over the ranks) or NPID (the same trunk, one 28 px
-- view, 16 negatives, the memory bank saved with the weights) or DeepCluster-v2 (SwAV's crops,
-- heads of 10 and 12 clusters, memory and assignments saved too) on Fashion-MNIST for
-- `steps` SGD steps of a global batch of 8, with SyncBatchNorm, DDP, the sharded loader
-- and the Task loop; rank 0 writes the model's tensors to out. In f64: a tiny ResNet with
-- batch-8 BatchNorm is chaotic (a 1e-7 change of one weight grows to 1e-4 in three f32
-- steps), so only f64's rounding stays far enough below the spec's 1e-5. accum: an MLP
-- (no BatchNorm, whose statistics a micro-batch changes) trained with optim.accum_steps
-- batches of GLOBAL_BATCH / (ranks * accum_steps) per step; rank 0 prints how many
-- gradient all-reduces DDP ran ('all-reduces N over S steps of B buckets').
local root = debug.getinfo(1, 'S').source:match('^@(.*)/spec/dist/[^/]*$') or '.'
package.path = root .. '/lua/?.lua;' .. root .. '/lua/?/init.lua;' .. package.path
local cr = require 'crescent'
local steps_mod = require 'crescent.engine.steps'

local method, out_path, steps, accum = arg[1], arg[2], tonumber(arg[3] or '20'), tonumber(arg[4] or '1')
local GLOBAL_BATCH = 8
local cfg = { train = { threads = 1 }, dist = { sync_bn = true, timeout = 60 } }
cr.set_num_threads(1)
cr.dist.setup.init(cfg, 'cpu')
local W = cr.dist.world_size()
cr.manual_seed(0)

local train_set = cr.data.fashion_mnist { split = 'train', limit = GLOBAL_BATCH * steps }
local function trunk() return cr.nn.models.resnet18 { stem = 'cifar', width = 4, in_channels = 1, num_classes = 0 } end
local model, views, loss_fn
if method == 'accum' then
  model = cr.nn.Sequential(cr.nn.Flatten(), cr.nn.Linear(784, 16), cr.nn.ReLU(), cr.nn.Linear(16, 10))
  loss_fn = function(output, batch) return cr.cross_entropy(output, batch.target) end
elseif method == 'supervised' then
  model = cr.nn.models.resnet18 { stem = 'cifar', width = 4, in_channels = 1, num_classes = 10 }
  loss_fn = function(output, batch) return cr.cross_entropy(output, batch.target) end
elseif method == 'npid' then
  model = cr.ssl.npid.NPID { trunk = trunk(), feat_dim = 32, out_dim = 8, num_samples = GLOBAL_BATCH * steps,
                             negatives = 16 }
  views = cr.data.transforms.multicrop { size_crops = { 28 }, num_crops = { 1 }, crop_scales = { { 0.3, 1 } } }
  loss_fn = function(output, batch) return model:loss(output, batch) end
elseif method == 'deepcluster_v2' then
  model = cr.ssl.deepcluster_v2.DeepClusterV2 { trunk = trunk(), feat_dim = 32, hidden_dim = 16, out_dim = 8,
    num_prototypes = { 10, 12 }, num_crops = 4, num_samples = GLOBAL_BATCH * steps, kmeans_iterations = 3 }
  views = cr.data.transforms.multicrop { size_crops = { 28, 14 }, num_crops = { 2, 2 },
                                         crop_scales = { { 0.3, 1 }, { 0.1, 0.3 } } }
  loss_fn = function(output, batch) return model:loss(output, batch) end
elseif method == 'barlow_twins' then
  model = cr.ssl.barlow_twins.BarlowTwins { trunk = trunk(), feat_dim = 32, hidden_dim = 16, out_dim = 8, proj_layers = 2 }
  views = cr.data.transforms.multicrop { size_crops = { 28 }, num_crops = { 2 }, crop_scales = { { 0.3, 1 } } }
  loss_fn = function(output) return model:loss(output) end
else
  model = cr.ssl.swav.SwAV { trunk = trunk(), feat_dim = 32, hidden_dim = 16, out_dim = 8, num_prototypes = 10,
                             num_crops = 4, freeze_prototypes_iterations = 5 }
  views = cr.data.transforms.multicrop { size_crops = { 28, 14 }, num_crops = { 2, 2 },
                                         crop_scales = { { 0.3, 1 }, { 0.1, 0.3 } } }
  loss_fn = function(output) return model:loss(output) end
end
model:to('f64')
if method == 'deepcluster_v2' then   -- the fill pass, as the recipe builds it (f64 crops for the f64 model)
  model.memory_loader = cr.data.Loader(train_set, { batch_size = GLOBAL_BATCH / W, shuffle = false, drop_last = false,
    views = views, shard = cr.dist.setup.shard(), transform = function(b)
      for i, x in ipairs(b.input) do b.input[i] = x:double() end
    end })
end
local ddp = cr.dist.setup.model(cfg, model)
assert((W > 1) == (ddp ~= nil))
-- the gradient all-reduces DDP starts (its buckets' async all_reduce)
local comm = require 'crescent.dist.comm'
local all_reduces, all_reduce = 0, comm.all_reduce
comm.all_reduce = function(t, op, o)
  if o and o.async then all_reduces = all_reduces + 1 end
  return all_reduce(t, op, o)
end
local loader = cr.data.Loader(train_set, { batch_size = GLOBAL_BATCH / W / accum, shuffle = true, drop_last = true, seed = 0,
                                           views = views, shard = cr.dist.setup.shard() })
local optimizer = cr.optim.SGD(model:named_parameters(), { lr = 0.1, momentum = 0.9, nesterov = true,
                                                          weight_decay = 5e-4, no_decay_bias_norm = true })
local task = cr.engine.Task {
  model = model, optimizer = optimizer, loss = loss_fn, train_loader = loader, epochs = 1, handle_signals = false,
  accum_steps = accum,
  schedules = { lr = cr.schedule.warmup_cosine { warmup = 0.2, from = 0, peak = 0.1, to = 0 } },
  train_step = function(t, batch)
    if type(batch.input) == 'table' then
      for i, x in ipairs(batch.input) do batch.input[i] = x:double() end
    else
      batch.input = batch.input:double()
    end
    return steps_mod.standard(t, batch)
  end,
}
task:add_hook(cr.hooks.schedule())
if method == 'swav' or method == 'deepcluster_v2' then for _, h in ipairs(model:hooks()) do task:add_hook(h) end end
task.ddp = ddp
cr.dist.setup.task(task)
cr.train(task)
assert(task.iteration == steps * accum, 'ran ' .. task.iteration .. ' steps')
if ddp and cr.dist.is_main() then
  print(string.format('all-reduces %d over %d steps of %d buckets', all_reduces, steps, #ddp.buckets))
end
if cr.dist.is_main() then
  local tensors = {}
  for _, nt in ipairs(model:named_state()) do tensors[nt[1]] = nt[2] end
  if method == 'npid' then tensors['bank.memory'] = model.bank end
  if method == 'deepcluster_v2' then
    for v, m in ipairs(model.memory) do tensors['memory.view' .. v] = m end
    tensors['assignments'] = model.assignments:double()
  end
  cr.save(out_path, tensors)
end
cr.dist.shutdown()
