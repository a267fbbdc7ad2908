-- config_spec — cr.config: declarations (options, schema, with, without, renames, take),
-- command-line overrides of every type,
-- --config files (merged under the command line), unknown keys with their "did you
-- mean", type errors that name the key, the type and the value, merge, and dump's
-- round trip.
local config = require 'crescent.config'

local tmpdir = H.tmpdir('config')
teardown(tmpdir.remove)
local tmp, file = tmpdir.dir, tmpdir.write
local err_of = H.error_of
local function has(msg, ...)
  for _, frag in ipairs { ... } do
    assert(msg:find(frag, 1, true), 'message should contain "' .. frag .. '": ' .. msg)
  end
end

-- a schema as a recipe declares one
local function defaults()
  local o = config.options
  return config.schema(
    o('train', { { 'epochs', 'integer', 10, 'epochs', min = 0 }, { 'device', { 'auto', 'cpu', 'cuda' }, 'auto', 'device' },
                 { 'seed', 'integer', 0, 'seed', min = 0 } }),
    o('data', { { 'root', 'string', '', 'root' }, { 'batch_size', 'integer', 256, 'batch', min = 1 } }),
    o('optim', { { 'name', 'string', 'sgd', 'name' }, { 'lr', 'number', 0.1, 'lr', min = 0 },
                 { 'weight_decay', 'number', 5e-4, 'wd', min = 0 } }),
    o('run', { { 'name', 'string', '', 'name' } }),
    o('model', { { 'width', 'integer', 64, 'width' }, { 'arch', 'string', 'resnet18', 'arch' },
                 { 'zero_init', 'boolean', false, 'zero' }, { 'milestones', 'list', { 30, 60 }, 'ms', elem = 'integer' },
                 { 'betas', 'list', { 0.9, 0.999 }, 'betas', elem = 'number' } }),
    o('loss', { { 'temperature', 'number', 0.1, 'temperature' }, { 'smoothing', 'integer', 0, 'an integer key' } }),
    o('hooks', { { 'names', 'list', { 'console', 'timer' }, 'names', elem = 'string' } }))
end

describe('config.options and config.schema', function()
  it('declare each key once, with its type, default, range and description', function()
    local s = defaults()
    assert.is_true(config.is_schema(s))
    assert.are.equal(10, s.defaults.train.epochs)
    assert.are.same({ 30, 60 }, s.defaults.model.milestones)
    assert.are.equal('integer', s.leaves['train.epochs'].type)
    assert.are.same({ 'auto', 'cpu', 'cuda' }, s.leaves['train.device'].choices)
    -- a schema's defaults are copies: a config changed in place leaves them alone
    local cfg = config.check({}, s)
    cfg.model.milestones[1] = 0
    assert.are.equal(30, s.defaults.model.milestones[1])
  end)

  it('refuse a declaration without a type, a description, a default of its type, or elements for a list', function()
    local o = config.options
    has(err_of(o, 'x', { { 'a', 'float', 1, 'doc' } }), "'x.a' has type 'float'")
    has(err_of(o, 'x', { { 'a', 'number', 1 } }), "'x.a' needs a one-line description")
    has(err_of(o, 'x', { { 'a', 'integer', nil, 'doc' } }), "'x.a' needs a default")
    has(err_of(o, 'x', { { 'a', 'integer', 0.5, 'doc' } }), 'x.a expects an integer, got 0.5 (its declared default)')
    has(err_of(o, 'x', { { 'a', 'number', -1, 'doc', min = 0 } }), 'x.a expects a number >= 0, got -1')
    has(err_of(o, 'x', { { 'a', 'list', { 1 }, 'doc' } }), "'x.a' is a list: declare its elements")
    has(err_of(o, 'x', { { 'a', 'number', 1, 'doc', mni = 0 } }), "'x.a' has an unknown field 'mni'")
    has(err_of(config.schema, o('x', { { 'a', 'number', 1, 'doc' } }), o('x', { { 'a', 'number', 2, 'doc' } })),
      "'x.a' is declared twice")
    has(err_of(config.parse, {}, { optim = { lr = 0.1 } }), 'config.parse: give a schema')
  end)

  it('change defaults with :with (checked) and drop keys with :without', function()
    local s = defaults():with { train = { epochs = 2 }, model = { betas = { 0.5, 0.9 } } }
    assert.are.equal(2, s.defaults.train.epochs)
    assert.are.equal(2, s.leaves['train.epochs'].default)
    assert.are.equal(10, defaults().defaults.train.epochs)
    has(err_of(function() defaults():with { train = { epochs = 2.5 } } end), 'train.epochs', 'an integer',
      "in a recipe's defaults")
    has(err_of(function() defaults():with { train = { epoch = 2 } } end), "unknown key 'train.epoch'")
    local less = defaults():without { 'loss', 'train.seed' }
    assert.is_nil(less.leaves['loss.smoothing'])
    assert.is_nil(less.leaves['train.seed'])
    assert.is_not_nil(less.leaves['train.epochs'])
  end)

  it('name the new key for a renamed one, on the command line, in files and in constructors', function()
    local opts = config.options('swav', { { 'num_prototypes', 'integer', 100, 'K', min = 2, was = 'prototypes' } })
    local s = config.schema(opts)
    has(err_of(config.parse, { 'swav.prototypes=30' }, s), "'swav.prototypes' is now 'swav.num_prototypes'",
      'swav.num_prototypes=<value>')
    has(err_of(config.check, { swav = { prototypes = 30 } }, s), "'swav.prototypes' is now 'swav.num_prototypes'")
    has(err_of(config.take, opts, 'SwAV', { prototypes = 3 }), "SwAV: option 'prototypes' is now 'num_prototypes'")
  end)

  it('take gives a constructor its options by the same names, checked, with the declared defaults', function()
    local opts = config.options('m', { { 'k', 'integer', 100, 'K', min = 2 }, { 'ids', 'list', { 0, 1 }, 'ids',
                                                                                elem = 'integer' } })
    local o = config.take(opts, 'M', { k = 7, trunk = 'a trunk' }, { trunk = true })
    assert.are.same({ k = 7, ids = { 0, 1 }, trunk = 'a trunk' }, o)
    assert.are.same({ 0, 1 }, config.take(opts, 'M', nil).ids)
    has(err_of(config.take, opts, 'M', { k = 1 }), 'M: k expects an integer >= 2, got 1')
    has(err_of(config.take, opts, 'M', { ids = { 0.5 } }), 'M: ids[1] expects an integer, got 0.5')
    has(err_of(config.take, opts, 'M', { kk = 3 }, { trunk = true }), "M: unknown option 'kk'; the options are ids, k, trunk")
  end)

  it('validates choices and ranges', function()
    local d = defaults()
    for _, dev in ipairs { 'auto', 'cpu', 'cuda' } do
      assert.are.equal(dev, config.parse({ 'train.device=' .. dev }, d).train.device)
    end
    has(err_of(config.parse, { 'train.device=gpu' }, d), 'train.device', 'one of auto|cpu|cuda', "'gpu'")
    has(err_of(config.parse, { 'data.batch_size=0' }, d), 'data.batch_size', 'an integer >= 1', 'got 0')
    has(err_of(config.parse, { 'train.epochs=-1' }, d), 'train.epochs', '>= 0')
    -- weight decay and lr take fractions whatever their default
    local cfg = config.parse({ 'optim.weight_decay=1e-4', 'optim.lr=3' }, d:with { optim = { weight_decay = 0 } })
    assert.are.equal(1e-4, cfg.optim.weight_decay)
    assert.are.equal(3, cfg.optim.lr)
  end)
end)

describe('config.parse overrides', function()
  it('sets values of every type from key.sub=value', function()
    local d = defaults()
    local cfg, info = config.parse({ 'optim.lr=0.25', 'train.epochs=3', 'model.arch=resnet50', 'model.zero_init=true',
                                     'data.root=/data/fm', 'run.name="my run"', 'loss.temperature=1e-2' }, d)
    assert.are.equal(0.25, cfg.optim.lr)
    assert.are.equal(3, cfg.train.epochs)
    assert.are.equal('resnet50', cfg.model.arch)
    assert.are.equal(true, cfg.model.zero_init)
    assert.are.equal('/data/fm', cfg.data.root)
    assert.are.equal('my run', cfg.run.name)
    assert.are.equal(0.01, cfg.loss.temperature)
    assert.are.same({ 'optim.lr=0.25', 'train.epochs=3', 'model.arch=resnet50', 'model.zero_init=true',
                      'data.root=/data/fm', 'run.name="my run"', 'loss.temperature=1e-2' }, info.overrides)
    -- untouched keys keep their defaults, and the defaults table is not modified
    assert.are.equal(256, cfg.data.batch_size)
    assert.are.equal(0.1, d.defaults.optim.lr)
    assert.are.same(defaults().defaults, d.defaults)
  end)

  it('reads booleans as true/false/1/0 (and yes/no, on/off)', function()
    local d = defaults()
    for text, want in pairs { ['true'] = true, ['false'] = false, ['1'] = true, ['0'] = false, yes = true,
                              off = false, TRUE = true } do
      assert.are.equal(want, config.parse({ 'model.zero_init=' .. text }, d).model.zero_init)
    end
    has(err_of(config.parse, { 'model.zero_init=maybe' }, d), 'model.zero_init', 'a boolean', "'maybe'")
  end)

  it('reads lists as comma-separated values or Lua literals, checking the elements', function()
    local d = defaults()
    assert.are.same({ 10, 20, 30 }, config.parse({ 'model.milestones=10,20,30' }, d).model.milestones)
    assert.are.same({ 5 }, config.parse({ 'model.milestones={5}' }, d).model.milestones)
    assert.are.same({}, config.parse({ 'model.milestones=' }, d).model.milestones)
    assert.are.same({ 0.5, 0.99 }, config.parse({ 'model.betas={0.5, 0.99}' }, d).model.betas)
    assert.are.same({ 'tb', 'json' }, config.parse({ 'hooks.names=tb, json' }, d).hooks.names)
    assert.are.same({ 'a', 'b' }, config.parse({ "hooks.names={'a', 'b'}" }, d).hooks.names)
    has(err_of(config.parse, { 'model.milestones=10,x' }, d), 'model.milestones[2]', 'an integer', "'x'")
    has(err_of(config.parse, { 'model.milestones=1.5' }, d), 'model.milestones[1]', 'an integer', '1.5')
    has(err_of(config.parse, { 'model.milestones={1,' }, d), 'model.milestones',
      'is not a list literal (a missing value at character 4')
    -- command-line values are data: code is refused, never run (it could loop forever)
    has(err_of(config.parse, { 'model.milestones={(function() while true do end end)()}' }, d), 'model.milestones',
      "an unexpected '(' at character 2")
    has(err_of(config.parse, { 'model.betas={0.5, x}' }, d), "'x', which is not a decimal number")
    assert.are.same({ 224, 96 }, config.parse({ 'model.milestones={224, 96}' }, d).model.milestones)
  end)

  it('refuses a key given twice, explaining bash\'s brace expansion for a list', function()
    local d = defaults()
    -- what bash makes of an unquoted model.milestones={2,6}
    has(err_of(config.parse, { 'model.milestones=2', 'model.milestones=6' }, d), 'model.milestones is given twice',
      "brace expansion turns model.milestones={2,6} into two arguments", 'model.milestones=2,6',
      "'model.milestones={2,6}'")
    has(err_of(config.parse, { 'model.width=2', 'model.width=4' }, d), 'model.width is given twice', 'give it once')
  end)

  it('reads numbers in decimal only: 0x10 is refused, not taken as 16', function()
    local d = defaults()
    has(err_of(config.parse, { 'model.width=0x10' }, d), 'model.width', '0x10')
    assert.are.equal(16, config.parse({ 'model.width=16' }, d).model.width)
    assert.are.same({ 0.5, 0.25 }, config.parse({ 'model.betas=.5,2.5e-1' }, d).model.betas)
  end)

  it('keeps integers integer: an integer key refuses fractions, whatever its default', function()
    local d = defaults()
    has(err_of(config.parse, { 'train.epochs=2.5' }, d), 'train.epochs', 'an integer', '2.5')
    has(err_of(config.parse, { 'model.width=wide' }, d), 'model.width', 'an integer', "'wide'")
    assert.are.equal(1000, config.parse({ 'model.width=1e3' }, d).model.width)
    has(err_of(config.parse, { 'loss.smoothing=0.1' }, d), 'loss.smoothing', 'an integer')
    -- a number key takes fractions though its default is 0; choices and ranges as declared
    local o = config.options
    local s = config.schema(o('loss', { { 'smoothing', 'number', 0, 'smoothing', min = 0, max = 1 } }),
      o('model', { { 'arch', { 'resnet18', 'resnet50' }, 'resnet18', 'arch' },
                   { 'width', 'integer', 64, 'width', min = 8, max = 512 } }))
    assert.are.equal(0.1, config.parse({ 'loss.smoothing=0.1' }, s).loss.smoothing)
    has(err_of(config.parse, { 'model.arch=vgg' }, s), 'model.arch', 'one of resnet18|resnet50', "'vgg'")
    has(err_of(config.parse, { 'model.width=4' }, s), 'model.width', 'in [8, 512]', 'got 4')
  end)

  it('names the key, the expected type and the value on a type error', function()
    local d = defaults()
    has(err_of(config.parse, { 'optim.lr=fast' }, d), 'optim.lr', 'expects a number', "got 'fast'",
      'on the command line: optim.lr=fast')
    has(err_of(config.parse, { 'optim.lr=nan' }, d), 'optim.lr', 'expects a number')
  end)

  it('suggests the nearest key for an unknown one', function()
    local d = defaults()
    has(err_of(config.parse, { 'optim.lrr=0.1' }, d), "unknown key 'optim.lrr'", "did you mean 'optim.lr'?")
    has(err_of(config.parse, { 'lr=0.1' }, d), "unknown key 'lr'", "did you mean 'optim.lr'?")
    has(err_of(config.parse, { 'trian.epochs=2' }, d), "did you mean 'train.epochs'?")
    has(err_of(config.parse, { 'data.batchsize=2' }, d), "did you mean 'data.batch_size'?")
    has(err_of(config.parse, { 'model.widht=2' }, d), "did you mean 'model.width'?")
    local far = err_of(config.parse, { 'zzzzzzzzzz=1' }, d)
    has(far, "unknown key 'zzzzzzzzzz'", 'data.*', 'optim.*', '--help')
    assert.is_nil(far:find('did you mean', 1, true))
    assert.are.equal(3, config.levenshtein('kitten', 'sitting'))
    assert.are.equal(0, config.levenshtein('', ''))
  end)

  it('refuses a section given a value, and arguments it cannot read', function()
    local d = defaults()
    has(err_of(config.parse, { 'optim=sgd' }, d), "'optim' is a section", 'optim.lr', 'optim.weight_decay')
    has(err_of(config.parse, { 'epochs' }, d), "cannot read argument 'epochs'", 'key.sub=value', '--config')
    has(err_of(config.parse, { '--config' }, d), 'needs a file name')
  end)

  it('accepts a leading -- and reads only arg[1..n] (not the interpreter or script names)', function()
    local argv = { [-1] = 'luajit', [0] = 'recipes/x.lua', '--train.epochs=4' }
    assert.are.equal(4, config.parse(argv, defaults()).train.epochs)
    assert.are.same(defaults().defaults, config.parse(nil, defaults()))
  end)

  it('prints the keys for --help', function()
    local cfg, text = config.parse({ '--help' }, defaults(), { exit_on_help = false })
    assert.is_nil(cfg)
    has(text, 'usage:', 'optim.lr', 'a number >= 0', 'default 0.1', 'train.device', 'one of auto|cpu|cuda',
      'model.milestones', 'a list of integers')
  end)
end)

describe('config --config files', function()
  it('merges a file over the defaults, and the command line over the file', function()
    local f = file('run.lua', [[
      return { optim = { lr = 0.05, name = 'lars' }, model = { milestones = { 1, 2, 3 } }, ['train.epochs'] = 7 }
    ]])
    local cfg, info = config.parse({ 'optim.lr=0.3', '--config', f }, defaults())
    assert.are.equal(0.3, cfg.optim.lr)          -- the command line wins, wherever it stands
    assert.are.equal('lars', cfg.optim.name)
    assert.are.same({ 1, 2, 3 }, cfg.model.milestones)
    assert.are.equal(7, cfg.train.epochs)        -- dotted keys work in files too
    assert.are.equal(5e-4, cfg.optim.weight_decay)
    assert.are.same({ f }, info.files)
  end)

  it('applies several files in order, and --config=file', function()
    local a = file('a.lua', 'return { train = { epochs = 1, seed = 5 } }')
    local b = file('b.lua', 'return { train = { epochs = 2 } }')
    local cfg = config.parse({ '--config=' .. a, '--config', b }, defaults())
    assert.are.equal(2, cfg.train.epochs)
    assert.are.equal(5, cfg.train.seed)
  end)

  it('can compute values (the file runs as Lua)', function()
    local f = file('calc.lua', 'local bs = 512\nreturn { data = { batch_size = bs }, optim = { lr = 0.1 * bs / 256 } }')
    local cfg = config.parse({ '--config', f }, defaults())
    assert.are.equal(512, cfg.data.batch_size)
    assert.are.equal(0.2, cfg.optim.lr)
  end)

  it('checks files like the command line, naming the file', function()
    local d = defaults()
    local f = file('typo.lua', 'return { optim = { lrr = 0.1 } }')
    has(err_of(config.parse, { '--config', f }, d), "unknown key 'optim.lrr'", f, "did you mean 'optim.lr'?")
    f = file('type.lua', "return { train = { epochs = 'ten' } }")
    has(err_of(config.parse, { '--config', f }, d), 'train.epochs', 'an integer', "'ten'", f)
    f = file('sect.lua', 'return { optim = 0.1 }')
    has(err_of(config.parse, { '--config', f }, d), "'optim' is a section", f)
    f = file('ret.lua', 'return 5')
    has(err_of(config.parse, { '--config', f }, d), 'must return a table', 'number')
    f = file('syntax.lua', 'return { optim = ')
    has(err_of(config.parse, { '--config', f }, d), 'cannot load', f)
    f = file('boom.lua', "error('no GPU here')")
    has(err_of(config.parse, { '--config', f }, d), 'failed', 'no GPU here')
    has(err_of(config.parse, { '--config', tmp .. '/none.lua' }, d), 'cannot load', 'no such file')
  end)
end)

describe('config.merge, get, check and dump', function()
  it('merges sections key by key and replaces lists, without touching its arguments', function()
    local a = { x = { y = 1, z = { 1, 2, 3 } }, w = 'a' }
    local b = { x = { z = { 9 } }, v = true }
    local m = config.merge(a, b, { x = { y = 2 } })
    assert.are.same({ x = { y = 2, z = { 9 } }, w = 'a', v = true }, m)
    assert.are.same({ x = { y = 1, z = { 1, 2, 3 } }, w = 'a' }, a)
    m.x.z[1] = 0
    assert.are.equal(9, b.x.z[1])
    assert.are.equal(2, config.get(m, 'x.y'))
    assert.is_nil(config.get(m, 'x.q.r'))
    config.set(m, 'x.q.r', 5)                   -- missing sections are made
    config.set(m, 'w', 'b')
    assert.are.equal(5, config.get(m, 'x.q.r'))
    assert.are.same({ x = { y = 2, z = { 0 }, q = { r = 5 } }, w = 'b', v = true }, m)
  end)

  it('checks a table built in code', function()
    local cfg = config.check({ optim = { lr = 0.5 } }, defaults())
    assert.are.equal(0.5, cfg.optim.lr)
    assert.are.equal(10, cfg.train.epochs)
    has(err_of(config.check, { optim = { momentum = 0.9 } }, defaults()), "unknown key 'optim.momentum'")
  end)

  it('dumps Lua source that loads back to an equal table', function()
    local cfg = config.merge(defaults().defaults, {
      run = { name = 'quote " and \\ backslash\nnewline' },
      optim = { lr = 0.1, weight_decay = 1e-8, eps = 1 / 3 },
      model = { ['end'] = 1, ['with space'] = 'x', nested = { { a = 1 }, { b = { 2, 3 } } } },
      big = 2 ^ 40, neg = -7, inf = math.huge,
    })
    local src = config.dump(cfg)
    assert.are.equal('return {', src:sub(1, 8))
    local back = assert(loadstring(src))()
    assert.are.same(cfg, back)
    assert.truthy(src:find('lr = 0.1,', 1, true))   -- the shortest exact form, not 0.10000000000000001
    assert.are.equal(src, config.dump(back))          -- stable
    has(err_of(config.dump, { f = print }), "'f' holds a function")
  end)

  it('flattens to dotted keys, leaves as they are and lists as JSON text', function()
    local flat = config.flatten({ optim = { lr = 0.1, nesterov = true }, crops = { num = { 2, 6 }, empty = {} },
                                  run = { name = 'x' }, seed = 3 })
    assert.are.same({ ['optim.lr'] = 0.1, ['optim.nesterov'] = true, ['crops.num'] = '[2,6]', ['crops.empty'] = '[]',
                      ['run.name'] = 'x', seed = 3 }, flat)
    assert.are.same({}, config.flatten({}))
  end)
end)

describe('config on the command line', function()
  it('prints one error line and exits with status 2 for a bad key', function()
    local p = io.popen('luajit recipes/supervised.lua optim.lrr=1 2>&1; echo "status=$?"')
    local out = p:read('*a')
    p:close()
    assert.truthy(out:find("error: config: unknown key 'optim.lrr'", 1, true), out)
    assert.truthy(out:find("did you mean 'optim.lr'", 1, true), out)
    assert.truthy(out:find('status=2', 1, true), out)
    assert.falsy(out:find('stack traceback', 1, true), out)
  end)
end)
