-- recipe_keys_spec — every recipe's --help: each key it lists has a one-line description,
-- and giving it its own default on the command line is accepted and changes nothing;
-- the keys listed are exactly the ones the recipe declares.
local H = require 'spec.helper'
local cr = H.cr

local root = require('crescent.native_files').root
local RECIPES = { 'swav', 'moco', 'simclr', 'supervised', 'linear_eval', 'extract' }

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
      local p = io.popen(string.format('cd %s && luajit recipes/%s.lua --help 2>&1; echo "exit=$?"', root, name))
      local text = p:read('*a')
      p:close()
      assert.truthy(text:find('exit=0', 1, true), text)
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
end)
