-- recipe_keys_spec — every recipe's --help: each key it lists has a one-line description,
-- and giving it its own default on the command line is accepted and changes nothing;
-- the keys listed are exactly the ones the recipe declares; and building a recipe's run
-- reads no key it does not declare (each config section answers an undeclared key's read
-- by noting it); a recipe's own defaults win over its method module's.
local H = require 'spec.helper'
local cr = H.cr

local root = require('crescent.native_files').root
local RECIPES = { 'supervised', 'linear_eval', 'extract' }
for i, name in ipairs(cr.ssl.METHODS) do table.insert(RECIPES, i, name) end

-- A value as the command line writes it (strings bare, lists as Lua literals).
local function literal(v)
  if type(v) == 'string' then return v end
  if type(v) == 'table' then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = type(x) == 'string' and string.format('%q', x) or tostring(x) end
    return '{' .. table.concat(parts, ', ') .. '}'
  end
  return tostring(v)
end

describe('recipe keys', function()
  for _, name in ipairs(RECIPES) do
    it(name .. ': --help lists every key with a description, and each key takes its default', function()
      local text, code = H.shell('luajit recipes/' .. name .. '.lua --help')
      assert.are.equal(0, code, text)
      local listed, undescribed = {}, {}
      local lines = {}
      for line in text:gmatch('[^\n]+') do lines[#lines + 1] = line end
      for i, line in ipairs(lines) do
        local key = line:match('^  ([%w_]+%.[%w_.]+) ')
        if key then
          listed[#listed + 1] = key
          local doc = lines[i + 1] and lines[i + 1]:match('^      (%S.*)$')
          if not doc then undescribed[#undescribed + 1] = key end
        end
      end
      assert.are.same({}, undescribed)
      local _, declared = cr.config.load('recipes/' .. name .. '.lua', {})
      local keys = {}
      local function walk(t, prefix)
        for k, v in pairs(t) do
          local key = prefix .. k
          if type(v) == 'table' and not cr.config.is_list(v) then walk(v, key .. '.') else keys[#keys + 1] = key end
        end
      end
      walk(declared.defaults, '')
      table.sort(keys)
      assert.are.same(keys, listed)
      for _, key in ipairs(keys) do
        local default = cr.config.get(declared.defaults, key)
        local opts = { types = declared.opts.types, exit_on_error = false }
        local ok, cfg = pcall(cr.config.parse, { key .. '=' .. literal(default) }, declared.defaults, opts)
        assert(ok, key .. ': ' .. tostring(cfg))
        assert.are.same(default, cr.config.get(cfg, key), key)
      end
    end)
  end

  -- Runs a recipe in this process with argv, its config's sections noting every read of
  -- a key they lack; the dry run's (or the recipe's) exit is caught. Returns the keys.
  local function undeclared_reads(name, argv)
    local parse, exit = cr.config.parse, os.exit
    local reads = {}
    local function watch(t, prefix)
      for k, v in pairs(t) do
        if type(v) == 'table' and not cr.config.is_list(v) then watch(v, prefix .. k .. '.') end
      end
      setmetatable(t, { __index = function(_, k)
        if type(k) == 'string' then reads[prefix .. k] = true end
      end })
    end
    cr.config.parse = function(...) -- luacheck: ignore 122
      local cfg, info = parse(...)
      if cfg then watch(cfg, '') end
      return cfg, info
    end
    os.exit = function() error('exit', 0) end -- luacheck: ignore 122
    local saved_arg = rawget(_G, 'arg')
    _G.arg = argv
    local print0, stdout = _G.print, io.stdout
    rawset(_G, 'print', function() end)
    local ok, err = pcall(function()
      io.stdout = io.open('/dev/null', 'w') -- luacheck: ignore 122
      dofile(root .. '/recipes/' .. name .. '.lua')
    end)
    io.stdout = stdout -- luacheck: ignore 122
    rawset(_G, 'print', print0)
    _G.arg = saved_arg
    cr.config.parse, os.exit = parse, exit -- luacheck: ignore 122
    if not ok and err ~= 'exit' then error(err, 0) end
    local keys = {}
    for k in pairs(reads) do keys[#keys + 1] = k end
    table.sort(keys)
    return keys
  end

  it('building a run reads only declared keys', function()
    local ok, err = pcall(cr.data.fashion_mnist, { split = 'test', limit = 1 })
    if not ok then
      pending('Fashion-MNIST is absent: ' .. tostring(err))
      return
    end
    local tmp = H.tmpdir('recipe_keys')
    local base = { 'data.limit=64', 'model.width=4', 'train.threads=1', 'run.dir=' .. tmp.dir }
    local function with(...)
      local argv = { [0] = 'recipe' }
      for _, a in ipairs(base) do argv[#argv + 1] = a end
      for _, a in ipairs { ... } do argv[#argv + 1] = a end
      return argv
    end
    for _, name in ipairs { 'supervised', unpack(cr.ssl.METHODS) } do
      assert.are.same({}, undeclared_reads(name, with('--dry-run', 'data.batch_size=16')), name)
    end
    assert.are.same({}, undeclared_reads('linear_eval', with('train.epochs=1', 'optim.batch_size=16')), 'linear_eval')
    assert.are.same({}, undeclared_reads('extract', with('extract.out=' .. tmp.path('feats'))), 'extract')
    tmp.remove()
  end)

  it("a recipe's own defaults win over its method module's, for the method's keys too", function()
    local cfg = cr.config.load('recipes/byol.lua')
    assert.are.equal(0.9, cfg.byol.momentum)                    -- recipes/byol.lua's, not the module's 0.99
    assert.are.equal(cr.ssl.byol.defaults.cosine_momentum, cfg.byol.cosine_momentum)   -- the module's, not set there
    assert.are.equal(0.996, cr.config.load('recipes/byol.lua', { byol = { momentum = 0.996 } }).byol.momentum)
  end)
end)
