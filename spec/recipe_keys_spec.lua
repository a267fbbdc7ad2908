-- recipe_keys_spec — every recipe's --help: each key it lists has a one-line description,
-- and the keys listed are exactly the ones the recipe declares; the schema walk: every key
-- of every recipe takes its own default (changing nothing), a legal value of each kind its
-- type accepts and refuses an illegal one with a message naming the key; and building a recipe's run
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
    it(name .. ': --help lists every key it declares, each with a description', function()
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
      assert.are.same(declared.schema.order, listed)
    end)

    it(name .. ': the schema walk: each key takes its default, a legal value of each kind and refuses an illegal one',
      function()
      local _, declared = cr.config.load('recipes/' .. name .. '.lua', {})
      local schema = declared.schema
      local function parse(key, text)
        local ok, cfg = pcall(cr.config.parse, { key .. '=' .. text }, schema, { exit_on_error = false })
        if not ok then return false, cfg end
        return true, cr.config.get(cfg, key)
      end
      for _, key in ipairs(schema.order) do
        local spec = schema.leaves[key]
        local ok, got = parse(key, literal(spec.default))
        assert(ok, key .. ': ' .. tostring(got))
        assert.are.same(spec.default, got, key)
        -- legal values other than the default, and illegal ones with the message's words
        local legal, illegal = {}, {}
        if spec.choices then
          for _, c in ipairs(spec.choices) do legal[#legal + 1] = { c, c } end
          illegal[#illegal + 1] = { 'no_such_choice', 'expects one of' }
        elseif spec.type == 'integer' or spec.type == 'number' then
          local lo = spec.min or (spec.above and spec.above + 0.5) or -3
          local hi = spec.max or (lo + 7)
          legal[#legal + 1] = { tostring(lo), lo }
          legal[#legal + 1] = { tostring(hi), hi }
          if spec.type == 'number' then
            local mid = lo + (hi - lo) * 0.375
            legal[#legal + 1] = { string.format('%.17g', mid), mid }
          else
            illegal[#illegal + 1] = { '2.5', 'expects an integer' }
          end
          illegal[#illegal + 1] = { 'many', 'expects' }
          if spec.min then illegal[#illegal + 1] = { tostring(spec.min - 1), 'got ' .. (spec.min - 1) } end
          if spec.above then illegal[#illegal + 1] = { tostring(spec.above), 'got ' .. spec.above } end
          if spec.max then illegal[#illegal + 1] = { tostring(spec.max + 1), 'got ' .. (spec.max + 1) } end
        elseif spec.type == 'boolean' then
          legal[1], legal[2] = { 'true', true }, { 'off', false }
          illegal[1] = { 'maybe', 'expects a boolean' }
        elseif spec.type == 'string' then
          legal[1] = { 'some text', 'some text' }
        elseif spec.type == 'list' then
          local samples = { integer = { '{2, 3}', { 2, 3 } }, number = { '{0.35, 1}', { 0.35, 1 } },
                            string = { '{"a", "b"}', { 'a', 'b' } }, any = { "{{'^head', 0.1}}", { { '^head', 0.1 } } },
                            boolean = { '{true, false}', { true, false } } }
          legal[1], legal[2] = samples[spec.elem], { '{}', {} }
          local bad = { integer = { '{1, 0.35}', 'expects an integer' }, number = { "{'a'}", 'expects a number' },
                        boolean = { '{1, 2}', 'expects a boolean' }, string = { '{1}', 'expects a string' } }
          illegal[1] = bad[spec.elem]
          illegal[#illegal + 1] = { '{1,', 'not a list literal' }
        end
        for _, case in ipairs(legal) do
          local okl, v = parse(key, case[1])
          assert(okl, key .. '=' .. case[1] .. ': ' .. tostring(v))
          assert.are.same(case[2], v, key .. '=' .. case[1])
        end
        for _, case in ipairs(illegal) do
          local oki, msg = parse(key, case[1])
          assert(not oki, key .. '=' .. case[1] .. ' was taken')
          assert(tostring(msg):find(key, 1, true) and tostring(msg):find(case[2], 1, true),
            key .. '=' .. case[1] .. ': ' .. tostring(msg))
        end
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
    assert.are.equal(0.9, cfg.byol.momentum)                    -- recipes/byol.lua's, not the module's 0.996
    assert.are.equal(cr.ssl.byol.options[2].default, cfg.byol.cosine_momentum)   -- the module's, not set there
    assert.are.equal(0.95, cr.config.load('recipes/byol.lua', { byol = { momentum = 0.95 } }).byol.momentum)
  end)
end)
