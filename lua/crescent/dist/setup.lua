-- crescent.dist.setup — what a recipe does to run on k ranks: the same script runs under
-- mpirun / srun / torchrun-style variables and alone, and these calls are no-ops alone.
--
--   local device = cr.recipe.run.setup(cfg)          -- calls dist.setup.init(cfg, device)
--   local ddp = cr.dist.setup.model(cfg, model)      -- SyncBN (dist.sync_bn), then DDP
--   cr.data.Loader(ds, {..., shard = cr.dist.setup.shard()})
--   cr.dist.setup.task(task)                         -- before cr.train: the hooks below
--
-- The config keys: M.options below (a config without them gets their defaults; the SSL
-- recipes turn dist.sync_bn on).
--
-- data.batch_size is per rank: k ranks train on a global batch of k * data.batch_size.
-- Rank 0 alone logs (console, TensorBoard, metrics.jsonl), evaluates (eval, kNN) and writes
-- checkpoints; every rank resumes from the same checkpoint. The ranks agree each step on
-- stopping (a signal or a hook's request_stop on any rank stops all after the same step,
-- one small all-reduce per step),
-- and an error on one rank ends every rank at once instead of after the timeout.
local ffi = require 'ffi'
local cr = require 'crescent'
local comm = require 'crescent.dist.comm'
local launcher = require 'crescent.dist.launcher'
local util = require 'crescent.util'

local M = {}

-- The dist.* keys: this module's, then DDP's own (bucket_mb, find_unused, broadcast_buffers).
M.options = require('crescent.config').options('dist', {
  { 'timeout', 'number', 1800, 'seconds a collective may wait before every rank exits', min = 0 },
  { 'sync_bn', 'boolean', false, 'BatchNorm statistics over the global batch on k ranks' },
  { 'quiet', 'boolean', true, 'ranks other than 0 write nothing to stdout' },
})
for _, o in ipairs(require('crescent.dist.ddp').options) do M.options[#M.options + 1] = o end

local function dist_cfg(cfg)
  local d = cfg.dist or {}
  local out = {}
  for _, o in ipairs(M.options) do
    if d[o.name] == nil then out[o.name] = o.default else out[o.name] = d[o.name] end
  end
  return out
end

pcall(ffi.cdef, 'int open(const char *path, int flags, ...); int dup2(int oldfd, int newfd); int close(int fd);')

-- stdout of this process to /dev/null (print and io.stdout both write to fd 1).
local function silence_stdout()
  io.stdout:flush()
  local fd = ffi.C.open('/dev/null', 1) -- O_WRONLY
  if fd >= 0 then
    ffi.C.dup2(fd, 1)
    ffi.C.close(fd)
  end
end

-- In a process a launcher started with more than one rank: joins the group, and returns
-- the device of this rank (its local rank's GPU when `device` is a GPU). Threads default
-- to the cores shared out among the ranks of the machine. Alone: returns device.
function M.init(cfg, device)
  local info = launcher.detect()
  if info.world_size == 1 and not comm.is_initialized() then return device end
  local d = dist_cfg(cfg)
  if device ~= 'cpu' then device = launcher.device(info, cr.cuda.device_count()) end
  comm.init { timeout = d.timeout, device = device }
  if cfg.train and cfg.train.threads == 0 then
    cr.set_num_threads(math.max(1, math.floor(cr.get_num_threads() / comm.local_world_size())))
  end
  if d.quiet and not comm.is_main() then silence_stdout() end
  return device
end

-- SyncBatchNorm (dist.sync_bn) and DDP for the model of a distributed run; nil alone.
-- Call it after the model is on its device and before the optimizer takes its parameters.
function M.model(cfg, model)
  if not comm.is_distributed() then return nil end
  local d = dist_cfg(cfg)
  if d.sync_bn then require('crescent.dist.sync_bn').convert(model) end
  return require('crescent.dist.ddp')(model, { bucket_mb = d.bucket_mb, find_unused = d.find_unused,
                                               broadcast_buffers = d.broadcast_buffers })
end

-- The Loader option that shards a training set over the ranks (nil alone).
function M.shard()
  if not comm.is_distributed() then return nil end
  return { rank = comm.rank(), world_size = comm.world_size() }
end

-- For a banner: '' alone, else ', rank r of k, DDP with n buckets (... MB)'.
function M.describe(ddp)
  if not comm.is_distributed() then return '' end
  return string.format(', rank %d of %d (%s)%s', comm.rank(), comm.world_size(), comm.group().launcher,
    ddp and (', DDP ' .. ddp:describe()) or '')
end

local MAIN_ONLY = { console = true, tensorboard = true, jsonl = true, eval = true, knn = true }

-- The ranks stop together: after each train step one all-reduce (MAX) of a code, 0 go on,
-- 1 a stop request (a hook's), 2.. a signal. A signal another rank received becomes this
-- rank's task.signal, which the loop treats as its own (no test phase, the checkpoint at
-- the end); a request becomes a request. The checkpoint hook (98) runs before this one.
local SIGNALS = { 'SIGTERM', 'SIGINT', 'SIGUSR1' }
local SIGNAL_CODE = { SIGTERM = 2, SIGINT = 3, SIGUSR1 = 4 }

local function agree_hook()
  local flag = cr.zeros({ 1 }, { device = comm.group().device })
  return {
    name = 'dist_agree', priority = 99,
    after_step = function(_, task)
      if task.phase_name ~= 'train' then return end
      flag:fill_(task.signal and (SIGNAL_CODE[task.signal] or 2) or task.stop_requested and 1 or 0)
      local code = comm.all_reduce(flag, 'max'):item()
      if code >= 2 and not task.signal then
        task:request_stop('signal')
        task.signal = SIGNALS[code - 1]
        util.end_live_line()
        io.stderr:write(string.format('crescent.dist: rank %d stops after iteration %d: another rank got %s\n',
          comm.rank(), task.iteration, task.signal))
      elseif code == 1 and not task.stop_requested then
        task:request_stop('another rank asked to stop')
      end
    end,
  }
end

-- Prepares a task for a distributed run (a no-op alone): rank 0 alone keeps the logging
-- and evaluation hooks and writes checkpoints, the ranks agree on stopping, and an error
-- in the loop on one rank ends the job.
function M.task(task)
  if not comm.is_distributed() then return task end
  if not comm.is_main() then
    local kept = {}
    for _, h in ipairs(task.hooks) do
      if not MAIN_ONLY[h.name] then kept[#kept + 1] = h end
      if h.name == 'checkpoint' then h.read_only = true end
    end
    task.hooks = kept
    task.test_loader = nil   -- the test phase is rank 0's (its eval hook reports it)
  end
  task:add_hook(agree_hook())
  task:add_hook {
    name = 'dist_abort', priority = 100,
    on_exception = function(_, t)
      comm.abort('the training loop raised an error, so every rank ends: ' .. tostring(t.exception))
    end,
  }
  return task
end

return M
