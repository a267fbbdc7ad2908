-- matrix_spec — combinations are features: every training recipe (the SSL methods of
-- cr.ssl.METHODS and supervised) x {1 rank, 2 MPI ranks} x {f32, bf16 autocast} x
-- {SyncBatchNorm on, off} trains a few steps, is stopped after step 3, resumes from its
-- checkpoint and ends bit for bit where an uninterrupted run ends, with finite losses
-- (spec/matrix/run.lua runs each recipe file as a user does). On one rank SyncBatchNorm is
-- BatchNorm, so the rank-1 rows take the recipe's default. In `make test` the runs are
-- tiny (1 epoch of 4 steps; DINO's ViT, which has no BatchNorm, with its default only);
-- `make check-all` sets CRESCENT_MATRIX=full: 3 epochs of more data and every
-- combination. A new axis (a strategy, a device) gets its column here.
local H = require 'spec.helper'
local cr = H.cr

local native_files = require 'crescent.native_files'
local FULL = os.getenv('CRESCENT_MATRIX') == 'full'
local EPOCHS, LIMIT = FULL and 3 or 1, FULL and 64 or 32
local RECIPES = { 'supervised' }
for _, m in ipairs(cr.ssl.METHODS) do RECIPES[#RECIPES + 1] = m end

-- Runs the driver (under mpirun with ranks > 1); returns its ok/FAIL lines and its output.
local function matrix(tmp, ranks, recipes, amps, sync_bns)
  local dir = tmp.path(string.format('r%d_%s', ranks, recipes[1]))
  local cmd = string.format('luajit spec/matrix/run.lua %s %s %s %s %d %d', dir, table.concat(recipes, ','),
    table.concat(amps, ','), table.concat(sync_bns, ','), EPOCHS, LIMIT)
  if ranks > 1 then
    cmd = string.format('OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 ' ..
      'timeout 900 mpirun -np %d %s', ranks, cmd)
  end
  local out, code = H.shell(cmd)
  local lines = {}
  for l in out:gmatch('[^\n]+') do
    if l:match('^ok ') or l:match('^FAIL ') then lines[#lines + 1] = l end
  end
  return lines, out, code
end

local function expect_all_ok(lines, out, code, count)
  local bad = {}
  for _, l in ipairs(lines) do if l:match('^FAIL') then bad[#bad + 1] = l end end
  assert(#bad == 0, table.concat(bad, '\n'))
  assert(code == 0 and #lines == count, string.format('%d of %d combinations reported (exit %s):\n%s', #lines, count,
    tostring(code), out:sub(-3000)))
end

describe('the combination matrix: recipe x ranks x precision x SyncBatchNorm, with a resume', function()
  local ok, err = pcall(cr.data.fashion_mnist, { split = 'test', limit = 1 })
  if not ok then
    pending('Fashion-MNIST is absent: ' .. tostring(err))
    return
  end
  local tmp = H.tmpdir('matrix')
  teardown(tmp.remove)

  it('1 rank: every training recipe in f32 and bf16 resumes bit for bit', function()
    local lines, out, code = matrix(tmp, 1, RECIPES, { 'off', 'bf16' }, { 'true' })
    expect_all_ok(lines, out, code, #RECIPES * 2)
  end)

  local have_mpirun = os.execute('command -v mpirun >/dev/null 2>&1') == 0
  local missing = not have_mpirun and 'mpirun is not installed (apt-get install openmpi-bin)'
    or not native_files.find('libcrescent_mpi.so') and 'build/libcrescent_mpi.so is missing (make with libopenmpi-dev)'
    or nil
  it('2 MPI ranks: every training recipe in f32 and bf16, SyncBatchNorm on and off, resumes bit for bit', function()
    if missing then
      pending('skipped: ' .. missing)
      return
    end
    local resnets = {}
    for _, r in ipairs(RECIPES) do if r ~= 'dino' or FULL then resnets[#resnets + 1] = r end end
    local lines, out, code = matrix(tmp, 2, resnets, { 'off', 'bf16' }, { 'true', 'false' })
    expect_all_ok(lines, out, code, #resnets * 4)
    if not FULL then
      lines, out, code = matrix(tmp, 2, { 'dino' }, { 'off', 'bf16' }, { 'true' })
      expect_all_ok(lines, out, code, 2)
    end
  end)
end)
