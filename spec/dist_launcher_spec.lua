-- dist_launcher_spec — the launchers' environments (torchrun, OpenMPI, MPICH, Slurm)
-- normalised to rank, world size, local rank and local world size, and the errors for
-- values that do not fit together.
local cr = H.cr
local launcher = cr.dist.launcher

describe('dist launcher detection', function()
  it('is a single process without a launcher', function()
    assert.are.same({ launcher = 'single', rank = 0, world_size = 1, local_rank = 0, local_world_size = 1 },
      launcher.detect({}))
  end)

  it('reads each launcher and normalises the four figures', function()
    local cases = {
      { { RANK = '3', WORLD_SIZE = '8', LOCAL_RANK = '1', LOCAL_WORLD_SIZE = '2', MASTER_ADDR = '10.0.0.1',
          MASTER_PORT = '29500' }, 'torchrun', 3, 8, 1, 2 },
      { { OMPI_COMM_WORLD_RANK = '5', OMPI_COMM_WORLD_SIZE = '6', OMPI_COMM_WORLD_LOCAL_RANK = '2',
          OMPI_COMM_WORLD_LOCAL_SIZE = '3' }, 'openmpi', 5, 6, 2, 3 },
      { { PMI_RANK = '1', PMI_SIZE = '2', MPI_LOCALRANKID = '1', MPI_LOCALNRANKS = '2' }, 'mpich', 1, 2, 1, 2 },
      { { SLURM_PROCID = '9', SLURM_STEP_NUM_TASKS = '11', SLURM_LOCALID = '1', SLURM_NODEID = '2',
          SLURM_STEP_TASKS_PER_NODE = '4(x2),3' }, 'slurm', 9, 11, 1, 3 },
      -- mpirun inside an srun allocation: mpirun started the process
      { { SLURM_PROCID = '0', SLURM_NTASKS = '4', OMPI_COMM_WORLD_RANK = '1', OMPI_COMM_WORLD_SIZE = '2',
          OMPI_COMM_WORLD_LOCAL_RANK = '1', OMPI_COMM_WORLD_LOCAL_SIZE = '2' }, 'openmpi', 1, 2, 1, 2 },
      -- torchrun-style variables set by hand without local figures: one node
      { { RANK = '1', WORLD_SIZE = '2' }, 'torchrun', 1, 2, 1, 2 },
    }
    for _, c in ipairs(cases) do
      local info = launcher.detect(c[1])
      assert.are.same({ c[2], c[3], c[4], c[5], c[6] },
        { info.launcher, info.rank, info.world_size, info.local_rank, info.local_world_size }, c[2])
    end
    local t = launcher.detect(cases[1][1])
    assert.are.equal('10.0.0.1', t.master_addr)
    assert.are.equal(29500, t.master_port)
  end)

  it("expands Slurm's per-node task counts", function()
    assert.are.same({ 4, 4, 3 }, { launcher.slurm_tasks_on_node('4(x2),3', 0), launcher.slurm_tasks_on_node('4(x2),3', 1),
      launcher.slurm_tasks_on_node('4(x2),3', 2) })
    H.assert_error(function() launcher.slurm_tasks_on_node('4(x2)', 2) end, 'lists no node 2')
    H.assert_error(function() launcher.slurm_tasks_on_node('four', 0) end, "'four' is not Slurm's count list")
  end)

  it('names the variables that do not fit together', function()
    H.assert_error(function() launcher.detect({ RANK = '2', WORLD_SIZE = '2' }) end,
      'torchrun: RANK=2 does not lie in [0, WORLD_SIZE=2)')
    H.assert_error(function() launcher.detect({ RANK = '0' }) end, 'RANK and WORLD_SIZE must both be set')
    H.assert_error(function() launcher.detect({ RANK = 'x', WORLD_SIZE = '2' }) end,
      "RANK='x' is not a non-negative integer")
    H.assert_error(function()
      launcher.detect({ OMPI_COMM_WORLD_RANK = '0', OMPI_COMM_WORLD_SIZE = '2', OMPI_COMM_WORLD_LOCAL_RANK = '2',
                        OMPI_COMM_WORLD_LOCAL_SIZE = '2' })
    end, 'local rank 2 and local world size 2', 'OMPI_COMM_WORLD_LOCAL_RANK')
  end)

  it('gives each local rank its own GPU', function()
    local info = launcher.detect({ RANK = '3', WORLD_SIZE = '4', LOCAL_RANK = '1', LOCAL_WORLD_SIZE = '2' })
    assert.are.equal('cuda:1', launcher.device(info, 2))
    H.assert_error(function() launcher.device(info, 1) end, 'local rank 1 has no GPU of its own (1 on this node)')
    H.assert_error(function() launcher.device(info, 0) end, 'no usable GPU')
  end)

  it('reads the real environment when given none', function()
    local info = launcher.detect()
    assert.is_true(info.rank >= 0 and info.rank < info.world_size)
  end)
end)
