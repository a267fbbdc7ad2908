-- dist_mpi_spec — distributed training on cpu ranks, each case a real `mpirun -np 2` job
-- running a script of spec/dist/: the collectives' values, the sampler's coverage and
-- SyncBatchNorm under bf16 autocast (collectives.lua), the proof of DDP with SyncBatchNorm — 2 ranks x batch 4 give the
-- weights of 1 rank x batch 8 after 20 SGD steps, for the supervised model, SwAV and
-- Barlow Twins, whose c is all-reduced, NPID and DeepCluster-v2, whose memory writes are
-- all-gathered (equivalence.lua), and with gradient accumulation
-- one all-reduce per optimizer step — and a rank that hangs or is killed ending the job within
-- dist.timeout (failure.lua). Pending, with the reason, where mpirun or the MPI library is
-- missing (`make` builds it when libopenmpi-dev is installed; `make test` installs it).
local H = require 'spec.helper'
local cr = H.cr
local now = require('crescent.engine.loop').now

local native_files = require 'crescent.native_files'
local root = native_files.root
local have_mpirun = os.execute('command -v mpirun >/dev/null 2>&1') == 0
local missing = not have_mpirun and 'mpirun is not installed (apt-get install openmpi-bin)'
  or not native_files.find('libcrescent_mpi.so') and 'build/libcrescent_mpi.so is missing (make with libopenmpi-dev)'
  or nil

-- Runs `mpirun -np n luajit <script> args` (root may run it; 2 ranks may share 1 core);
-- returns its output (stdout and stderr), exit code and seconds.
local function mpirun(n, script, args)
  local cmd = string.format('cd %s && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ' ..
    'OMPI_MCA_rmaps_base_oversubscribe=1 timeout 120 mpirun -np %d luajit %s %s 2>&1; echo "exit=$?"', root, n,
    script, args or '')
  local t0 = now()
  local p = io.popen(cmd)
  local out = p:read('*a')
  p:close()
  local code = tonumber(out:match('exit=(%d+)%s*$'))
  return out, code, now() - t0
end

local function max_diff(a_path, b_path)
  local a, b = cr.load(a_path), cr.load(b_path)
  local worst, where, n = 0, nil, 0
  for name, t in pairs(a) do
    assert(b[name], 'only one run has ' .. name)
    if t:is_floating_point() then
      n = n + 1
      local d = (t - b[name]):abs():max():item()
      if d > worst then worst, where = d, name end
    end
  end
  return worst, where, n
end

describe('distributed cpu ranks (mpirun -np 2)', function()
  if missing then
    pending('skipped: ' .. missing)
    return
  end
  local tmp = H.tmpdir('dist')
  teardown(tmp.remove)

  it('all_reduce, broadcast, all_gather (with grad), reduce_scatter and the sampler give the right values', function()
    local out, code = mpirun(2, 'spec/dist/collectives.lua')
    assert.is_nil(out:find('FAIL'), out)
    assert.are.equal(0, code, out)
    assert.truthy(out:find('collectives: rank 0 of 2 done', 1, true), out)
    local oks = select(2, out:gsub('\nok ', ''))
    assert.is_true(oks >= 30, out)
  end)

  for _, method in ipairs { 'supervised', 'swav', 'barlow_twins', 'npid', 'deepcluster_v2' } do
    it(method .. ': 2 ranks x batch 4 train the weights of 1 rank x batch 8 (20 steps, SyncBatchNorm, f64)', function()
      local two, one = tmp.path(method .. '_2.safetensors'), tmp.path(method .. '_1.safetensors')
      local out, code = mpirun(2, 'spec/dist/equivalence.lua', method .. ' ' .. two)
      assert.are.equal(0, code, out)
      local p = io.popen(string.format('cd %s && luajit spec/dist/equivalence.lua %s %s 2>&1; echo "exit=$?"', root,
        method, one))
      local out1 = p:read('*a')
      p:close()
      assert.truthy(out1:find('exit=0', 1, true), out1)
      local d, where, n = max_diff(two, one)
      assert.is_true(n > 50)
      assert.is_true(d < 1e-5, string.format('%s differs by %g', tostring(where), d))
    end)
  end

  it('optim.accum_steps: 2 ranks x 2 batches of 2 train the weights of 1 rank x batch 8, one all-reduce a step', function()
    local two, one = tmp.path('accum_2.safetensors'), tmp.path('accum_1.safetensors')
    local out, code = mpirun(2, 'spec/dist/equivalence.lua', 'accum ' .. two .. ' 10 2')
    assert.are.equal(0, code, out)
    local n, steps, buckets = out:match('all%-reduces (%d+) over (%d+) steps of (%d+) buckets')
    assert.truthy(n, out)
    assert.are.equal(tonumber(steps) * tonumber(buckets), tonumber(n), out)
    local out1, code1 = H.shell('luajit spec/dist/equivalence.lua accum ' .. one .. ' 10 1')
    assert.are.equal(0, code1, out1)
    local d, where, count = max_diff(two, one)
    assert.are.equal(4, count)
    assert.is_true(d < 1e-12, string.format('%s differs by %g', tostring(where), d))
  end)

  it('optim.scaling follows the ranks: the global batch of 2 ranks doubles a linearly scaled lr', function()
    local args = 'data.name=synthetic data.size=16 data.limit=64 model.width=4 train.threads=1 data.batch_size=16 ' ..
      "'crops.size={16}' optim.lr=0.3 optim.base_batch_size=16 optim.scaling=linear --dry-run run.dir=" .. tmp.path('sc')
    local out, code = mpirun(2, 'recipes/simclr.lua', args)
    assert.are.equal(0, code, out)
    assert.truthy(out:find('lr 0.6 = 0.3 x (32 / 16) for a global batch of 32 (16 x 2 ranks x 1 accumulated)', 1, true),
      out)
    local one = H.shell('luajit recipes/simclr.lua ' .. args)
    assert.truthy(one:find('lr 0.3 = 0.3 x (16 / 16) for a global batch of 16 (16 x 1 rank x 1 accumulated)', 1, true),
      one)
  end)

  it('extract on 2 ranks writes the features of 1 rank, each rank extracting a share', function()
    local ok, err = pcall(cr.data.fashion_mnist, { split = 'test', limit = 1 })
    if not ok then pending('Fashion-MNIST is absent: ' .. tostring(err)) return end
    local args = 'data.limit=21 data.batch_size=4 model.width=4 train.threads=1 data.split=test extract.out='
    local out, code = mpirun(2, 'recipes/extract.lua', args .. tmp.path('two'))
    assert.are.equal(0, code, out)
    local out1, code1 = H.shell('luajit recipes/extract.lua ' .. args .. tmp.path('one'))
    assert.are.equal(0, code1, out1)
    local a, b = cr.load(tmp.path('two_test.safetensors')), cr.load(tmp.path('one_test.safetensors'))
    assert.are.same({ 21, 32 }, a.features.shape)
    assert.are.equal(0, (a.labels - b.labels):abs():max():item())
    assert.is_true((a.features - b.features):abs():max():item() < 1e-5)
  end)

  it('a rank that stops taking part ends every rank after dist.timeout, naming the collective', function()
    local out, code, secs = mpirun(2, 'spec/dist/failure.lua', 'hang 2')
    assert.are_not.equal(0, code, out)
    assert.truthy(out:find('all_reduce(avg) waited', 1, true), out)
    assert.truthy(out:find('dist.timeout = 2 s', 1, true), out)
    assert.is_nil(out:find('not reached', 1, true), out)
    assert.is_true(secs < 30, 'took ' .. secs .. ' s')
  end)

  it('DDP refuses a parameter that gets no gradient, naming it', function()
    local out, code = mpirun(2, 'spec/dist/failure.lua', 'unused 20')
    assert.are_not.equal(0, code, out)
    assert.truthy(out:find('no gradient reached spare.bias, spare.weight', 1, true), out)
    assert.is_nil(out:find('not reached', 1, true), out)
  end)

  it('a rank killed mid-run ends the job at once', function()
    local out, code, secs = mpirun(2, 'spec/dist/failure.lua', 'kill 20')
    assert.are_not.equal(0, code, out)
    assert.truthy(out:find('killing itself', 1, true), out)
    assert.truthy(out:find('rank 1', 1, true), out)
    assert.is_nil(out:find('not reached', 1, true), out)
    assert.is_true(secs < 20, 'took ' .. secs .. ' s: more than the timeout')
  end)
end)

describe('distributed setup without a launcher', function()
  it('is a group of one whose collectives are identities', function()
    local dist = cr.dist
    assert.are.equal(1, dist.world_size())
    assert.are.equal(0, dist.rank())
    local t = cr.tensor({ 1, 2 })
    assert.are.equal(t, dist.all_reduce(t, 'sum'))
    H.assert_close(dist.all_gather(t), t)
    local z = cr.ones({ 2 }):requires_grad_()
    assert.are.equal(z, dist.all_gather_with_grad(z))
    assert.is_nil(dist.setup.shard())
    assert.is_nil(dist.setup.model({}, cr.nn.Linear(2, 2)))
  end)

  it('refuses cpu ranks started by torchrun-style variables, saying to use mpirun', function()
    local comm = require 'crescent.dist.comm'
    local err = H.error_of(comm.init, { env = { RANK = '0', WORLD_SIZE = '2', LOCAL_RANK = '0',
      MASTER_ADDR = '127.0.0.1', MASTER_PORT = '29500' } })
    assert.truthy(err:find('mpirun -np 2', 1, true), err)
    assert.is_false(comm.is_initialized())
  end)
end)
