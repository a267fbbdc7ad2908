-- env_spec — cr.env: the environment report's fields (versions, build, machine, time),
-- its text and JSON forms, nvidia-smi's lines parsed, the git commit read from a
-- hand-made .git folder; and cr.config.write: a run's config as a Lua file that loads back
-- equal (nested tables, escaped strings, exact floats, booleans), works as --config,
-- replaces the old file whole, and names the path when it cannot be written.
local cjson = require 'cjson'
local cr = H.cr
local env = cr.env
local config = cr.config

local tmpdir = H.tmpdir('env')
teardown(tmpdir.remove)
local path, write = tmpdir.path, tmpdir.write

local report = env.report()

local function exists(file)
  local f = io.open(file, 'rb')
  if f then f:close() end
  return f ~= nil
end

describe('cr.env.report', function()
  it('names the versions of crescent, LuaJIT and oneDNN, and the build', function()
    assert.equal(cr.version, report.crescent)
    assert.equal(jit.version, report.luajit)
    assert.equal(cr.features(), report.features)
    assert.equal(cr.get_num_threads(), report.threads)
    if cr.features():find('onednn=1', 1, true) then
      assert.truthy(report.onednn:match('^%d+%.%d+%.%d+$'), report.onednn)
    else
      assert.equal('absent', report.onednn)
    end
    if not cr.features():find('cuda=1', 1, true) then
      assert.equal('absent', report.cuda)
      assert.equal('absent', report.cudnn)
      assert.equal('absent', report.nccl)
    end
    -- mpi=1 exactly when the MPI transport was built beside the library
    local mpi_built = require('crescent.native_files').find('libcrescent_mpi.so') ~= nil
    assert.equal(mpi_built, cr.features():find('mpi=1', 1, true) ~= nil, cr.features())
  end)

  it('describes the machine and the time', function()
    assert.equal('string', type(report.cpu))
    assert.is_true(report.cpu ~= '')
    if exists('/proc/cpuinfo') then
      assert.is_true(report.cores >= 1 and report.cores == math.floor(report.cores))
      assert.is_true(report.memory_bytes > 2 ^ 20)
    end
    assert.equal('string', type(report.os))
    assert.equal('string', type(report.hostname))
    assert.equal('table', type(report.gpus))
    for _, g in ipairs(report.gpus) do assert.equal('string', type(g.name)) end
    local y, mo, d, h, mi, s = report.started_utc:match('^(%d%d%d%d)%-(%d%d)%-(%d%d)T(%d%d):(%d%d):(%d%d)Z$')
    assert.truthy(y, report.started_utc)
    local t = os.time { year = y, month = mo, day = d, hour = h, min = mi, sec = s, isdst = false }
    local now = os.time(os.date('!*t'))
    assert.is_true(math.abs(now - t) < 3600, report.started_utc .. ' is not now (UTC)')
  end)

  it("reads this checkout's commit when it is a git checkout", function()
    if not exists('.git') then pending('not a git checkout'); return end
    assert.equal('table', type(report.git))
    assert.truthy(report.git.commit and report.git.commit:match('^%x+$') and #report.git.commit == 40,
      tostring(report.git.commit))
  end)

  it('reads HEAD, loose refs, packed refs and worktree links without running git', function()
    local root = tmpdir.dir .. '/repo'
    os.execute("mkdir -p '" .. root .. "/.git/refs/heads/feature'")
    local a, b, c = string.rep('a', 40), string.rep('b', 40), string.rep('c', 40)
    write('repo/.git/HEAD', 'ref: refs/heads/feature/x\n')
    write('repo/.git/refs/heads/feature/x', a .. '\n')
    assert.same({ commit = a, branch = 'feature/x' }, env.git(root))
    write('repo/.git/HEAD', 'ref: refs/heads/main\n')
    write('repo/.git/packed-refs', '# pack-refs with: peeled fully-peeled sorted\n' .. b .. ' refs/heads/main\n')
    assert.same({ commit = b, branch = 'main' }, env.git(root))
    write('repo/.git/HEAD', c .. '\n')
    assert.same({ commit = c }, env.git(root))
    -- a worktree: .git is a file naming its folder, whose commondir holds the refs
    local wt = tmpdir.dir .. '/wt'
    os.execute("mkdir -p '" .. wt .. "' '" .. root .. "/.git/worktrees/wt'")
    write('wt/.git', 'gitdir: ' .. root .. '/.git/worktrees/wt\n')
    write('repo/.git/worktrees/wt/HEAD', 'ref: refs/heads/main\n')
    write('repo/.git/worktrees/wt/commondir', '../..\n')
    assert.same({ commit = b, branch = 'main' }, env.git(wt))
    assert.is_nil(env.git(tmpdir.dir .. '/nowhere'))
  end)

  it("parses nvidia-smi's CSV lines, leaving out anything else", function()
    assert.same({ { name = 'NVIDIA H100 80GB HBM3', driver = '550.54.15' }, { name = 'Tesla T4', driver = '535.1' } },
      env.parse_nvidia_smi('NVIDIA H100 80GB HBM3, 550.54.15\n\nTesla T4, 535.1\n'))
    assert.same({}, env.parse_nvidia_smi('NVIDIA-SMI has failed because it could not communicate with the driver.\n'))
    assert.same({}, env.parse_nvidia_smi(''))
  end)
end)

describe('cr.env.format and cr.env.json', function()
  it('formats a few lines naming the versions and the machine', function()
    local text = env.format(report)
    local lines = {}
    for line in text:gmatch('[^\n]+') do lines[#lines + 1] = line end
    assert.is_true(#lines >= 3 and #lines <= 8, text)
    for _, frag in ipairs { 'crescent ' .. cr.version, jit.version, 'oneDNN ' .. report.onednn, report.features,
                            report.cpu, report.os, report.started_utc } do
      assert.truthy(text:find(frag, 1, true), 'format lacks "' .. frag .. '":\n' .. text)
    end
    local fake = cr.config.copy(report)
    fake.gpus = { { name = 'Tesla T4', driver = '535.1' } }
    fake.git = { commit = string.rep('f', 40), branch = 'dev' }
    local t2 = env.format(fake)
    assert.truthy(t2:find('gpu: Tesla T4 (driver 535.1)', 1, true), t2)
    assert.truthy(t2:find('(dev ffffffffffff)', 1, true), t2)
    H.assert_error(function() env.format('x') end, 'env.format: expected the table of cr.env.report()')
  end)

  it('encodes the report as JSON with sorted keys', function()
    local text = env.json(report)
    local back = cjson.decode(text)
    assert.equal(report.crescent, back.crescent)
    assert.equal(report.luajit, back.luajit)
    assert.equal(report.threads, back.threads)
    assert.equal(report.started_utc, back.started_utc)
    local fake = { crescent = '1.0', b = { z = 1, a = 'x/y' }, a = 0.1, gpus = {} }
    assert.equal('{"a":0.1,"b":{"a":"x/y","z":1},"crescent":"1.0","gpus":[]}', env.json(fake))
    H.assert_error(function() env.json(nil) end, 'env.json: expected the table of cr.env.report()')
  end)
end)

describe('cr.config.write', function()
  local cfg = {
    train = { epochs = 3, seed = 0, device = 'auto', threads = 0 },
    optim = { lr = 0.1, weight_decay = 1e-6, betas = { 0.9, 0.999 }, nesterov = true, warmup = false },
    run = { name = 'say "hi"\nand\\go\tnow\0end', dir = 'runs' },
    data = { name = 'fashion_mnist', root = '', batch_size = 256, workers = 0, limit = 0 },
    nested = { deeper = { third = 1 / 3, big = 2 ^ 60, neg = -7.25e-300, list = { 'a', 'b' } }, ['end'] = 1,
               ['with.dot'] = 'x', empty = {} },
  }

  it('writes a Lua file that loads back to an equal table, floats exactly', function()
    local p = config.write(path('config.lua'), cfg)
    assert.equal(path('config.lua'), p)
    local back = dofile(p)
    assert.same(cfg, back)
    assert.equal(0.1, back.optim.lr)
    assert.equal(1e-6, back.optim.weight_decay)
    assert.equal(1 / 3, back.nested.deeper.third)
    assert.equal(cfg.run.name, back.run.name)
    local text = H.read_file(p)
    assert.equal('return {', text:sub(1, 8))
    assert.truthy(text:find('lr = 0.1,', 1, true), text)          -- the shortest exact form
    -- sorted keys: data before nested before optim before run before train
    local order = {}
    for key in text:gmatch('\n  ([%w_]+) = ') do order[#order + 1] = key end
    assert.same({ 'data', 'nested', 'optim', 'run', 'train' }, order)
    assert.is_false(exists(p .. '.tmp'))                            -- no temp file left
  end)

  it('replaces an existing file whole, and serves as --config', function()
    local p = write('again.lua', string.rep('-- old text\n', 1000))
    config.write(p, { optim = { lr = 0.25 }, run = { name = 'a "quoted" name' } })
    assert.same({ optim = { lr = 0.25 }, run = { name = 'a "quoted" name' } }, dofile(p))
    local schema = config.schema(cr.recipe.run.BASE, cr.optim.from_config.options)
    local got = config.parse({ '--config', p }, schema, { exit_on_error = false })
    assert.equal(0.25, got.optim.lr)
    assert.equal('a "quoted" name', got.run.name)
    assert.equal(10, got.train.epochs)
  end)

  it('names the path and the missing folder, and refuses what a config cannot hold', function()
    local p = tmpdir.dir .. '/no/such/folder/config.lua'
    H.assert_error(function() config.write(p, cfg) end, "config.write: cannot write '" .. p .. "'",
      "the folder '" .. tmpdir.dir .. "/no/such/folder' does not exist")
    H.assert_error(function() config.write(path('f.lua'), { hook = print }) end,
      "config.write: 'hook' holds a function")
    assert.is_false(exists(path('f.lua')))
    H.assert_error(function() config.write('', cfg) end, 'config.write: path must be a file name')
    H.assert_error(function() config.write(path('g.lua'), 'x') end, 'config.write: expected a config table')
  end)
end)
