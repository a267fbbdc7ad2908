-- crescent.dist.comm — the process group of a distributed run and the collectives on
-- tensors: cpu tensors over MPI (build/libcrescent_mpi.so), GPU tensors over NCCL (the
-- CUDA backend). A process that no launcher started is a group of one: every collective
-- is then the identity, so code written for k ranks runs unchanged on one.
--
--   cr.dist.init{timeout = 1800, device = 'cpu'}   -- once; reads the launcher's environment
--   cr.dist.rank(), cr.dist.world_size(), cr.dist.local_rank(), cr.dist.is_main()
--   cr.dist.all_reduce(t, 'sum' | 'avg' | 'max' | 'min')   -- in place; returns t
--   cr.dist.broadcast(t, root)                              -- in place; returns t
--   cr.dist.all_gather(t)  -> [world * n, ...]: every rank's t, concatenated along dim 0
--   cr.dist.reduce_scatter(t, op) -> this rank's block of dim 0 of the reduction
--   cr.dist.barrier()
--   local w = cr.dist.all_reduce(t, 'avg', {async = true}); ...; w:wait()
--   cr.dist.shutdown()                                      -- at the end (also at exit)
--
-- Every rank must call the same collectives in the same order with tensors of the same
-- shape and dtype. A wait longer than `timeout` seconds means a rank died or is stuck: the
-- rank prints one line naming the collective and every rank of the job ends (never a
-- hang). cpu ranks need an MPI launcher (mpirun, srun); torchrun-style variables
-- (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) start GPU ranks, whose NCCL id is spread
-- over a TCP rendezvous at MASTER_ADDR:MASTER_PORT.
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local native_files = require 'crescent.native_files'
local util = require 'crescent.util'
local launcher = require 'crescent.dist.launcher'
local cr = require 'crescent'

local M = {}
local OPS = { sum = C.CR_REDUCE_SUM, avg = C.CR_REDUCE_AVG, max = C.CR_REDUCE_MAX, min = C.CR_REDUCE_MIN }
local MPI_LAUNCHERS = { openmpi = true, mpich = true, slurm = true }

-- the group: nil until init
local G = nil
local mpi = nil          -- the MPI library (ffi.load), opened by init in an MPI run
local work_box = ffi.new('cr_dist_work*[1]')
local int2 = ffi.new('int[2]')

local function fail(msg, level) error('dist: ' .. msg, level or 0) end

-- The MPI library, loaded with its symbols global (OpenMPI's plugins look them up).
local function open_mpi()
  if mpi then return mpi end
  local path, missing = native_files.find('libcrescent_mpi.so')
  if not path then
    fail('this run was started by an MPI launcher, but crescent was built without MPI (' ..
      missing:gsub('^crescent: ', '') .. ' after apt-get install libopenmpi-dev openmpi-bin)')
  end
  local ok, lib = pcall(ffi.load, path, true)
  if not ok then fail(string.format('cannot load %s (%s)', path, tostring(lib))) end
  mpi = lib
  return lib
end

local function gpu_index(device)
  local idx = tostring(device):match('^cuda:(%d+)$')
  return idx and tonumber(idx) or nil
end

-- init(opts) -> the group {rank, world_size, local_rank, local_world_size, launcher, device}.
-- opts.timeout: seconds a collective may wait (default 1800); opts.device: 'cpu' or
-- 'cuda:N' (the GPU of this rank's NCCL communicator); opts.env: variables (for tests).
function M.init(opts)
  opts = opts or {}
  if G then return G end
  local timeout = opts.timeout or 1800
  if type(timeout) ~= 'number' or timeout <= 0 then
    fail('timeout must be a positive number of seconds, got ' .. tostring(timeout), 2)
  end
  local info = launcher.detect(opts.env)
  local g = { rank = info.rank, world_size = info.world_size, local_rank = info.local_rank,
              local_world_size = info.local_world_size, launcher = info.launcher, timeout = timeout,
              device = opts.device or 'cpu', mpi = false, nccl = false }
  if g.world_size > 1 or MPI_LAUNCHERS[info.launcher] then
    if MPI_LAUNCHERS[info.launcher] then
      local lib = open_mpi()
      util.check(lib.cr_mpi_init(int2, int2 + 1))
      lib.cr_mpi_set_timeout(timeout)
      if int2[0] ~= g.rank or int2[1] ~= g.world_size then
        fail(string.format('the launcher (%s) says rank %d of %d, but MPI says rank %d of %d; is this MPI ' ..
          "the launcher's (mpirun of the same MPI that crescent was built with)?", info.launcher, g.rank,
          g.world_size, int2[0], int2[1]))
      end
      g.mpi = true
    end
    local dev = gpu_index(g.device)
    if dev then
      M._init_nccl(g, info, dev)
    elseif not g.mpi then
      fail(string.format("%s-style variables started %d ranks on the %s: cpu collectives go through MPI, so " ..
        'start cpu ranks with mpirun -np %d (or srun); torchrun-style variables are for GPU ranks ' ..
        '(train.device=cuda)', info.launcher, g.world_size, g.device, g.world_size))
    end
  end
  G = g
  return g
end

-- NCCL's id from rank 0 to every rank: over MPI when there is an MPI launcher, else a TCP
-- rendezvous at MASTER_ADDR:MASTER_PORT.
function M._init_nccl(g, info, dev)
  if not C.cr_nccl_available() then
    fail('GPU ranks need NCCL, and this build has none (no GPU backend, or it was built without nccl.h): ' ..
      ffi.string(C.cr_last_error()))
  end
  local id = ffi.new('uint8_t[?]', C.CR_NCCL_ID_BYTES)
  if g.rank == 0 then util.check(C.cr_nccl_unique_id(id)) end
  if g.mpi then
    util.check(mpi.cr_mpi_broadcast_bytes(id, C.CR_NCCL_ID_BYTES, 0))
  else
    if not info.master_addr or not info.master_port then
      fail('GPU ranks without an MPI launcher meet at MASTER_ADDR:MASTER_PORT; set both (torchrun sets them)')
    end
    util.check(C.cr_dist_rendezvous(info.master_addr, info.master_port, g.rank, g.world_size, id,
      C.CR_NCCL_ID_BYTES, g.timeout))
  end
  util.check(C.cr_nccl_init(g.rank, g.world_size, id, dev, g.timeout))
  g.nccl = true
end

function M.is_initialized() return G ~= nil end
function M.group() return G end
function M.rank() return G and G.rank or 0 end
function M.world_size() return G and G.world_size or 1 end
function M.local_rank() return G and G.local_rank or 0 end
function M.local_world_size() return G and G.local_world_size or 1 end
function M.is_main() return M.rank() == 0 end
function M.is_distributed() return M.world_size() > 1 end

-- Ends the group (MPI_Finalize, the NCCL communicator). Later collectives are identities
-- again only after a new init, which MPI does not allow: call it once, at the end.
function M.shutdown()
  if not G then return end
  if G.nccl then C.cr_nccl_finalize() end
  if G.mpi then mpi.cr_mpi_finalize() end
  G = nil
end

-- Prints `why` with this rank and ends every rank of the job (an error on one rank must
-- not leave the others waiting in a collective until the timeout).
function M.abort(why)
  if G and G.mpi then mpi.cr_mpi_abort(tostring(why)) end
  util.end_live_line()
  io.stderr:write(string.format('crescent.dist: rank %d of %d: %s\n', M.rank(), M.world_size(), tostring(why)))
  os.exit(1)
end

-- ---- collectives -------------------------------------------------------------------------
local Work = {}
Work.__index = Work
function Work:wait()
  local p = self.ptr
  if p == nil then return self.tensor end
  self.ptr = nil
  util.check(self.wait_fn(p))
  return self.tensor
end
-- Lets a started cpu collective advance without waiting for it (MPI has no progress
-- thread here); true once it has completed. A GPU collective advances on its own stream.
local done_box = ffi.new('int[1]')
function Work:poke()
  local p = self.ptr
  if p == nil or self.done then return true end
  if not self.test_fn then return false end
  util.check(self.test_fn(p, done_box))
  self.done = done_box[0] ~= 0
  return self.done
end
local done_mt = { __index = { wait = function(self) return self.tensor end, poke = function() return true end } }

local function check_tensor(t, what)
  if not cr.is_tensor(t) then fail(what .. ': expected a tensor, got ' .. type(t), 3) end
end

local function op_of(op, what)
  local v = OPS[op or 'sum']
  if not v then fail(string.format("%s: op must be 'sum', 'avg', 'max' or 'min', got %s", what, tostring(op)), 3) end
  return v
end

local function is_gpu(t) return t.device ~= 'cpu' end

-- Runs C entry `name` of the tensor's transport (cr_mpi_* or cr_nccl_*) with args and a
-- work box; returns t, or a Work when opts.async.
local function run(name, result, opts, ...)
  local gpu = is_gpu(result)
  local lib, prefix, wait_fn, test_fn
  if gpu then
    if not G.nccl then
      fail(name .. ': a GPU tensor, but this group has no NCCL communicator; dist.init{device = ' ..
        "'cuda:N'} makes one", 3)
    end
    lib, prefix, wait_fn = C, 'cr_nccl_', C.cr_nccl_wait
  else
    if not G.mpi then
      fail(name .. ': a cpu tensor, but this group has no MPI (a GPU run over NCCL); move it to the GPU', 3)
    end
    lib, prefix, wait_fn, test_fn = mpi, 'cr_mpi_', mpi.cr_mpi_wait, mpi.cr_mpi_test
  end
  local async = opts and opts.async
  local st = lib[prefix .. name](...)
  if st ~= 0 then util.raise() end
  if async then return setmetatable({ ptr = work_box[0], wait_fn = wait_fn, test_fn = test_fn, tensor = result }, Work) end
  return result
end

local function solo(t, opts)
  if opts and opts.async then return setmetatable({ tensor = t }, done_mt) end
  return t
end

-- MPI has no f16 or bf16 arithmetic: a reduction of such a cpu tensor (SimCLR's gathered
-- negatives' grads under autocast) reduces an f32 copy, which also sums more exactly than
-- the half type would, and rounds once at the end. It completes at once (async too).
local function half_on_mpi(t)
  return (t.dtype == 'bf16' or t.dtype == 'f16') and t.device == 'cpu' and G ~= nil and G.mpi
end

function M.all_reduce(t, op, opts)
  check_tensor(t, 'all_reduce')
  local o = op_of(op, 'all_reduce')
  if M.world_size() == 1 then return solo(t, opts) end
  if half_on_mpi(t) then
    local f = t:float()
    run('all_reduce', f, nil, f, o, nil)
    t:copy_(f)
    return solo(t, opts)
  end
  return run('all_reduce', t, opts, t, o, opts and opts.async and work_box or nil)
end

function M.broadcast(t, root, opts)
  check_tensor(t, 'broadcast')
  root = root or 0
  if M.world_size() == 1 then return solo(t, opts) end
  return run('broadcast', t, opts, t, root, opts and opts.async and work_box or nil)
end

-- [world * n, ...]: rank r's t at rows r * n .. (r + 1) * n - 1.
function M.all_gather(t, opts)
  check_tensor(t, 'all_gather')
  local W = M.world_size()
  if W == 1 then return solo(t:clone(), opts) end
  local x = t:contiguous()
  local shape = { unpack(x.shape) }
  if #shape == 0 then shape = { 1 } end
  shape[1] = shape[1] * W
  local out = cr.empty(shape, { dtype = x.dtype, device = x.device })
  return run('all_gather', out, opts, out, x, opts and opts.async and work_box or nil)
end

-- The reduction over ranks of t [world * n, ...], of which this rank keeps block `rank`.
function M.reduce_scatter(t, op, opts)
  check_tensor(t, 'reduce_scatter')
  local o = op_of(op, 'reduce_scatter')
  local W = M.world_size()
  if W == 1 then return solo(t:clone(), opts) end
  local x = t:contiguous()
  if #x.shape == 0 or x.shape[1] % W ~= 0 then
    fail(string.format('reduce_scatter: dim 0 of [%s] must be a multiple of the world size %d',
      table.concat(x.shape, ', '), W), 2)
  end
  if half_on_mpi(x) then return solo(M.reduce_scatter(x:float(), op):to(x.dtype), opts) end
  local shape = { unpack(x.shape) }
  shape[1] = shape[1] / W
  local out = cr.empty(shape, { dtype = x.dtype, device = x.device })
  return run('reduce_scatter', out, opts, out, x, o, opts and opts.async and work_box or nil)
end

function M.barrier()
  if M.world_size() == 1 then return end
  if G.mpi then
    util.check(mpi.cr_mpi_barrier())
  else
    local t = cr.zeros({ 1 }, { device = G.device })
    M.all_reduce(t)
    util.check(C.cr_nccl_synchronize())
  end
end

-- f(ptr, n) all-reducing n doubles in place: the form SwAV's Sinkhorn steps take. On GPU
-- ranks the doubles make a trip through a GPU tensor.
function M.double_reducer(op)
  local o = op_of(op, 'double_reducer')
  return function(ptr, n)
    if M.world_size() == 1 then return end
    if G.mpi then
      util.check(mpi.cr_mpi_all_reduce_f64(ptr, n, o))
      return
    end
    local host = cr.empty({ n }, { dtype = 'f64' })
    ffi.copy(C.cr_tensor_data(host), ptr, n * 8)
    host = M.all_reduce(host:to(G.device), op):to('cpu')
    ffi.copy(ptr, C.cr_tensor_data(host), n * 8)
  end
end

return M
