-- crescent.dist.launcher — which launcher started this process, and its place in the job:
-- torchrun-style variables, OpenMPI's mpirun, MPICH's Hydra (PMI) or Slurm's srun, each
-- normalised to rank, world size, local rank and local world size.
--
--   local info = cr.dist.launcher.detect()      -- reads the environment
--   info = {launcher = 'torchrun' | 'openmpi' | 'mpich' | 'slurm' | 'single', rank = 0,
--           world_size = 1, local_rank = 0, local_world_size = 1, master_addr = nil,
--           master_port = nil}
--   cr.dist.launcher.detect(env)                 -- env: a table of variables (for tests)
--   cr.dist.launcher.device(info, ngpus)         -- 'cuda:<local_rank>': the local rank picks the GPU
--
-- The order of precedence: explicit torchrun variables (RANK and WORLD_SIZE), then
-- OpenMPI, then MPICH, then Slurm (an mpirun inside an srun allocation is the launcher
-- that started the process). Values that do not fit together are an error naming them.
local M = {}

local function fail(msg) error('dist: ' .. msg, 0) end

-- A non-negative integer from variable `name`, or nil when it is unset.
local function int_var(env, name)
  local v = env[name]
  if v == nil or v == '' then return nil end
  local n = tonumber(v)
  if not n or n < 0 or n ~= math.floor(n) then
    fail(string.format("%s='%s' is not a non-negative integer; check the launcher's environment", name, tostring(v)))
  end
  return n
end

-- The tasks on node `node` from Slurm's compressed per-node counts: '4(x2),3' lists 4, 4, 3.
function M.slurm_tasks_on_node(spec, node)
  local i = 0
  for part in tostring(spec):gmatch('[^,]+') do
    local count, rep = part:match('^(%d+)%(x(%d+)%)$')
    if not count then count, rep = part:match('^(%d+)$'), '1' end
    if not count then fail(string.format("SLURM_STEP_TASKS_PER_NODE='%s' is not Slurm's count list", spec)) end
    i = i + tonumber(rep)
    if node < i then return tonumber(count) end
  end
  fail(string.format("SLURM_STEP_TASKS_PER_NODE='%s' lists no node %d", spec, node))
end

-- {launcher, rank, world, local rank, local world, and the variables they came from}
local function from_env(env)
  if env.RANK or env.WORLD_SIZE then
    return { launcher = 'torchrun', names = { 'RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE' },
             rank = int_var(env, 'RANK'), world_size = int_var(env, 'WORLD_SIZE'),
             local_rank = int_var(env, 'LOCAL_RANK'), local_world_size = int_var(env, 'LOCAL_WORLD_SIZE') }
  end
  if env.OMPI_COMM_WORLD_SIZE then
    return { launcher = 'openmpi',
             names = { 'OMPI_COMM_WORLD_RANK', 'OMPI_COMM_WORLD_SIZE', 'OMPI_COMM_WORLD_LOCAL_RANK',
                       'OMPI_COMM_WORLD_LOCAL_SIZE' },
             rank = int_var(env, 'OMPI_COMM_WORLD_RANK'), world_size = int_var(env, 'OMPI_COMM_WORLD_SIZE'),
             local_rank = int_var(env, 'OMPI_COMM_WORLD_LOCAL_RANK'),
             local_world_size = int_var(env, 'OMPI_COMM_WORLD_LOCAL_SIZE') }
  end
  if env.PMI_SIZE then
    return { launcher = 'mpich', names = { 'PMI_RANK', 'PMI_SIZE', 'MPI_LOCALRANKID', 'MPI_LOCALNRANKS' },
             rank = int_var(env, 'PMI_RANK'), world_size = int_var(env, 'PMI_SIZE'),
             local_rank = int_var(env, 'MPI_LOCALRANKID'), local_world_size = int_var(env, 'MPI_LOCALNRANKS') }
  end
  if env.SLURM_PROCID and (env.SLURM_STEP_NUM_TASKS or env.SLURM_NTASKS) then
    local world_name = env.SLURM_STEP_NUM_TASKS and 'SLURM_STEP_NUM_TASKS' or 'SLURM_NTASKS'
    local local_world
    if env.SLURM_STEP_TASKS_PER_NODE then
      local node = int_var(env, 'SLURM_NODEID') or 0
      local_world = M.slurm_tasks_on_node(env.SLURM_STEP_TASKS_PER_NODE, node)
    end
    return { launcher = 'slurm', names = { 'SLURM_PROCID', world_name, 'SLURM_LOCALID', 'SLURM_STEP_TASKS_PER_NODE' },
             rank = int_var(env, 'SLURM_PROCID'), world_size = int_var(env, world_name),
             local_rank = int_var(env, 'SLURM_LOCALID'), local_world_size = local_world }
  end
  return { launcher = 'single', names = {}, rank = 0, world_size = 1, local_rank = 0, local_world_size = 1 }
end

function M.detect(env)
  if env ~= nil and type(env) ~= 'table' then fail('detect: env must be a table of variables, got ' .. type(env)) end
  env = env or setmetatable({}, { __index = function(_, k) return os.getenv(k) end })
  local info = from_env(env)
  local n = info.names
  if info.rank == nil or info.world_size == nil then
    fail(string.format('%s: %s and %s must both be set (got %s and %s)', info.launcher, n[1], n[2],
      tostring(env[n[1]]), tostring(env[n[2]])))
  end
  if info.world_size < 1 or info.rank >= info.world_size then
    fail(string.format('%s: %s=%d does not lie in [0, %s=%d)', info.launcher, n[1], info.rank, n[2], info.world_size))
  end
  -- without local figures (a torchrun-style environment set by hand): one node
  if info.local_rank == nil then info.local_rank = info.rank end
  if info.local_world_size == nil then info.local_world_size = info.world_size end
  if info.local_rank >= info.local_world_size or info.local_world_size > info.world_size then
    fail(string.format('%s: local rank %d and local world size %d (%s, %s) do not fit a world of %d', info.launcher,
      info.local_rank, info.local_world_size, n[3], n[4] or '-', info.world_size))
  end
  info.names = nil
  info.master_addr = env.MASTER_ADDR
  info.master_port = int_var(env, 'MASTER_PORT')
  return info
end

-- The GPU of this process: its local rank, which must name one of the node's GPUs.
function M.device(info, ngpus)
  if ngpus < 1 then fail('device: this node has no usable GPU; run on the cpu (train.device=cpu)') end
  if info.local_rank >= ngpus then
    fail(string.format('device: local rank %d has no GPU of its own (%d on this node); start at most %d processes '
      .. 'per node', info.local_rank, ngpus, ngpus))
  end
  return 'cuda:' .. info.local_rank
end

return M
