-- crescent.config (cr.config) — recipe configuration. Every key a recipe takes is
-- declared once, in the module that reads it, with its type, default, range and a
-- one-line description; a recipe's schema gathers those declarations. The user changes
-- the values from the command line (`optim.lr=0.2`) or with `--config file.lua` (a Lua
-- file returning a table merged over the defaults). Every override is checked: an
-- unknown key is an error with the nearest valid key (or the new name of a renamed one),
-- a value of the wrong type names the key, the type and the value.
--
--   local opts = cr.config.options('loss', {
--     -- name, type, default, description; then min, above (an exclusive min), max, elem
--     -- (a list's elements), was
--     { 'smoothing', 'number', 0, 'label smoothing', min = 0, max = 1 },
--     { 'weights', 'list', { 1, 1 }, 'class weights', elem = 'number' },
--     { 'kind', { 'ce', 'focal' }, 'ce', 'the loss' },          -- a list of choices: a string
--   })
--   local schema = cr.config.schema(cr.recipe.run.BASE, opts):with { train = { epochs = 2 } }
--   local cfg = cr.config.parse(arg, schema)     -- --help prints every key from the schema
--
-- Types are 'integer', 'number', 'string', 'boolean', 'list' (with elem) and 'any'; they
-- are declared, never guessed from a default (a default {1} would make a list of
-- integers refuse 0.35). `was = 'old_name'` keeps a renamed key's old name as an error
-- that names the new one. A module's constructor takes its section's options by the
-- same names (cr.config.take), so one name goes from the command line to the code.
-- Order: --config files first (in the order given), then key=value overrides on top.
local config_literal = require 'crescent.config_literal'

local M = {}

-- ---- helpers ----------------------------------------------------------------------------
local function is_list(t)
  if type(t) ~= 'table' then return false end
  if next(t) == nil then return true end
  local n = #t
  if n == 0 then return false end
  local count = 0
  for _ in pairs(t) do count = count + 1 end
  return count == n
end
M.is_list = is_list

local function is_int(v) return type(v) == 'number' and v == math.floor(v) and math.abs(v) < 2 ^ 53 end

local function deep_copy(v)
  if type(v) ~= 'table' then return v end
  local o = {}
  for k, x in pairs(v) do o[k] = deep_copy(x) end
  return o
end
M.copy = deep_copy

-- merge(base, over, ...): a new table, base with each `over` applied in turn. Sections
-- merge key by key; lists and values replace. No checking (parse checks).
function M.merge(base, ...)
  local out = deep_copy(base or {})
  for i = 1, select('#', ...) do
    local over = select(i, ...)
    if over ~= nil then
      if type(over) ~= 'table' then error('config.merge: argument ' .. (i + 1) .. ' is not a table', 2) end
      local function apply(dst, src)
        for k, v in pairs(src) do
          if type(v) == 'table' and not is_list(v) and type(dst[k]) == 'table' and not is_list(dst[k]) then
            apply(dst[k], v)
          else
            dst[k] = deep_copy(v)
          end
        end
      end
      apply(out, over)
    end
  end
  return out
end

-- Value at a dotted key ('optim.lr'), or nil.
function M.get(cfg, key)
  local v = cfg
  for part in key:gmatch('[^.]+') do
    if type(v) ~= 'table' then return nil end
    v = v[part]
  end
  return v
end

-- Sets the value at a dotted key ('optim.lr') in place, making missing sections.
function M.set(cfg, key, value)
  local t = cfg
  local parts = {}
  for part in key:gmatch('[^.]+') do parts[#parts + 1] = part end
  for i = 1, #parts - 1 do
    t[parts[i]] = t[parts[i]] or {}
    t = t[parts[i]]
  end
  t[parts[#parts]] = value
end
local set = M.set

local levenshtein, to_json = require('crescent.util').edit_distance, require('crescent.util').json
M.levenshtein = levenshtein

-- The nearest valid key, or nil when nothing is close. A key whose last part matches a
-- valid key's last part ('lr' -> 'optim.lr') counts as near.
local function nearest(s, key)
  local best, best_d
  local cands = {}
  for k in pairs(s.leaves) do cands[#cands + 1] = k end
  for k in pairs(s.sections) do cands[#cands + 1] = k end
  table.sort(cands)
  for _, c in ipairs(cands) do
    local d = levenshtein(key, c)
    local last = c:match('([^.]+)$')
    local klast = key:match('([^.]+)$')
    if last then d = math.min(d, levenshtein(key, last) + 1, levenshtein(klast, last) + 1) end
    if not best_d or d < best_d then best, best_d = c, d end
  end
  if best and best_d <= math.max(2, math.floor(#key / 2)) then return best end
end

local function unknown_key(s, key, where)
  local new = s.renamed and s.renamed[key]
  if new then
    error(string.format("config: '%s' is now '%s'%s; write %s=<value>", key, new, where, new), 0)
  end
  local hint = nearest(s, key)
  local tops = {}
  for k in pairs(s.sections) do if not k:find('.', 1, true) then tops[#tops + 1] = k .. '.*' end end
  table.sort(tops)
  error(string.format("config: unknown key '%s'%s; %s", key, where,
    hint and ("did you mean '" .. hint .. "'?")
      or ('the keys are under ' .. table.concat(tops, ', ') .. ' (--help lists them)')), 0)
end

local function section_error(s, key, where)
  local keys = {}
  for _, k in ipairs(s.order) do
    if k:sub(1, #key + 1) == key .. '.' then keys[#keys + 1] = k end
  end
  error(string.format("config: '%s' is a section, not a value%s; set one of its keys: %s", key, where,
    table.concat(keys, ', ')), 0)
end

local function type_desc(spec)
  if spec.choices then return 'one of ' .. table.concat(spec.choices, '|') end
  if spec.type == 'list' then
    return spec.elem == 'any' and 'a list' or ('a list of ' .. spec.elem .. 's')
  end
  local art = spec.type == 'integer' and 'an ' or 'a '
  local d = art .. spec.type
  if spec.above and spec.max then d = d .. ' in (' .. spec.above .. ', ' .. spec.max .. ']'
  elseif spec.above then d = d .. ' > ' .. spec.above
  elseif spec.min and spec.max then d = d .. ' in [' .. spec.min .. ', ' .. spec.max .. ']'
  elseif spec.min then d = d .. ' >= ' .. spec.min
  elseif spec.max then d = d .. ' <= ' .. spec.max end
  return d
end

local function show(v)
  if type(v) == 'string' then return "'" .. v .. "'" end
  if type(v) == 'table' then return is_list(v) and 'a list' or 'a table' end
  return tostring(v)
end

local function bad_value(key, spec, given, where)
  error(string.format('config: %s expects %s, got %s%s', key, type_desc(spec), show(given), where), 0)
end

-- Checks a Lua value against a leaf's type; returns it (lists are copied).
local function check_value(key, spec, v, where)
  local t = spec.type
  if t == 'any' then return deep_copy(v) end
  if t == 'integer' or t == 'number' then
    if type(v) ~= 'number' or v ~= v or math.abs(v) == math.huge then bad_value(key, spec, v, where) end
    if t == 'integer' and not is_int(v) then bad_value(key, spec, v, where) end
  elseif t == 'list' then
    if not is_list(v) then bad_value(key, spec, v, where) end
    local out = {}
    for i, e in ipairs(v) do
      out[i] = check_value(key .. '[' .. i .. ']', { type = spec.elem }, e, where)
    end
    return out
  elseif type(v) ~= t then
    bad_value(key, spec, v, where)
  end
  if spec.choices then
    local ok = false
    for _, c in ipairs(spec.choices) do if c == v then ok = true end end
    if not ok then bad_value(key, spec, v, where) end
  end
  if (spec.min and v < spec.min) or (spec.above and v <= spec.above) or (spec.max and v > spec.max) then
    bad_value(key, spec, v, where)
  end
  return v
end

-- A value in Lua's literal syntax ({1, 2}, 'x', 3), parsed as data (never run), or nil
-- and the parser's message.
local literal, decimal = config_literal.parse, config_literal.number

local TRUE = { ['true'] = true, ['1'] = true, yes = true, on = true }
local FALSE = { ['false'] = true, ['0'] = true, no = true, off = true }

-- A command-line string turned into a value of the leaf's type (then checked).
local function from_string(key, spec, text, where)
  local t = spec.type
  if t == 'string' then
    local q = text:match('^"(.*)"$') or text:match("^'(.*)'$")
    return check_value(key, spec, q or text, where)
  elseif t == 'integer' or t == 'number' then
    local v = decimal(text)
    if v == nil then bad_value(key, spec, text, where) end
    return check_value(key, spec, v, where)
  elseif t == 'boolean' then
    local l = text:lower()
    if TRUE[l] then return true end
    if FALSE[l] then return false end
    error(string.format("config: %s expects a boolean (true/false/1/0), got '%s'%s", key, text, where), 0)
  elseif t == 'list' then
    local v
    if text:match('^%s*{') then
      local why
      v, why = literal(text)
      if type(v) ~= 'table' then
        error(string.format("config: %s expects %s; '%s' is not a list literal (%s)%s", key, type_desc(spec), text,
          why or 'not a table', where), 0)
      end
    else
      v = {}
      for item in (text .. ','):gmatch('([^,]*),') do
        item = item:match('^%s*(.-)%s*$')
        if item ~= '' then
          local e = item
          if spec.elem == 'number' or spec.elem == 'integer' then e = decimal(item) or item
          elseif spec.elem == 'boolean' then e = TRUE[item:lower()] and true or FALSE[item:lower()] and false or item
          elseif spec.elem == 'any' then
            e = decimal(item) or (item == 'true' and true) or (item == 'false' and false) or
                item:match('^"(.*)"$') or item:match("^'(.*)'$") or item
          end
          v[#v + 1] = e
        end
      end
    end
    return check_value(key, spec, v, where)
  else -- any: a Lua literal when it reads as one, else the string
    local v = literal(text)
    if v == nil then v = text end
    return v
  end
end

-- Applies a table (from a --config file) to cfg, checking every key.
local function apply_table(s, cfg, t, prefix, where)
  for k, v in pairs(t) do
    if type(k) ~= 'string' then
      error(string.format('config: key %s%s is not a name', tostring(k), where), 0)
    end
    local key = prefix == '' and k or prefix .. '.' .. k
    if s.sections[key] then
      if type(v) ~= 'table' or is_list(v) and next(v) ~= nil then section_error(s, key, where) end
      apply_table(s, cfg, v, key, where)
    elseif s.leaves[key] then
      set(cfg, key, check_value(key, s.leaves[key], v, where))
    else
      unknown_key(s, key, where)
    end
  end
end

-- ---- declarations: options and schemas ---------------------------------------------------
local KINDS = { integer = true, number = true, string = true, boolean = true, list = true, any = true }

local Schema = {}
Schema.__index = Schema

local function declared(section, e, i)
  local where = string.format("config.options('%s'): entry %d", section, i)
  if type(e) ~= 'table' or type(e[1]) ~= 'string' or not e[1]:match('^[%a_][%w_]*$') then
    error(where .. " must be {name, type, default, description, ...} with a name such as 'lr'", 3)
  end
  local key = section .. '.' .. e[1]
  where = string.format("config.options: '%s'", key)
  local spec = { name = e[1], key = key, min = e.min, above = e.above, max = e.max, elem = e.elem, was = e.was }
  if type(e[2]) == 'table' then
    spec.type, spec.choices = 'string', e[2]
  else
    spec.type = e[2]
  end
  if not KINDS[spec.type] then
    error(where .. " has type '" .. tostring(e[2]) .. "'; types are integer, number, string, boolean, list (with " ..
      'elem), any, or a list of choices', 3)
  end
  if spec.type == 'list' and not KINDS[spec.elem or ''] then
    error(where .. ' is a list: declare its elements, elem = integer|number|string|boolean|any', 3)
  end
  if type(e[4]) ~= 'string' or e[4] == '' then error(where .. ' needs a one-line description (its 4th field)', 3) end
  spec.doc = e[4]
  if e[3] == nil then error(where .. ' needs a default (its 3rd field)', 3) end
  spec.default = check_value(key, spec, e[3], ' (its declared default)')
  for k in pairs(e) do
    if type(k) == 'string' and spec[k] == nil and k ~= 'elem' then
      error(where .. " has an unknown field '" .. k .. "'; fields are min, above, max, elem and was", 3)
    end
  end
  return spec
end

-- options(section, entries) -> the declarations of a section's keys (see the top), in
-- the order given; each entry {name, type, default, description, min =, max =, elem =,
-- was =}. A default outside its own type or range is an error here.
function M.options(section, entries)
  if type(section) ~= 'string' or type(entries) ~= 'table' then
    error("config.options(section, entries): e.g. config.options('loss', {{'smoothing', 'number', 0, '...'}})", 2)
  end
  local out = {}
  for i, e in ipairs(entries) do out[i] = declared(section, e, i) end
  return out
end

local function build(specs)
  local s = setmetatable({ leaves = {}, sections = {}, order = {}, renamed = {}, defaults = {}, list = specs }, Schema)
  for _, spec in ipairs(specs) do
    local key = spec.key
    if s.leaves[key] then error("config.schema: '" .. key .. "' is declared twice", 3) end
    s.leaves[key] = spec
    s.order[#s.order + 1] = key
    local prefix = key:match('^(.*)%.[^.]+$')
    while prefix do
      s.sections[prefix] = true
      prefix = prefix:match('^(.*)%.[^.]+$')
    end
    if spec.was then s.renamed[(key:match('^(.*%.)') or '') .. spec.was] = key end
    set(s.defaults, key, deep_copy(spec.default))
  end
  for key in pairs(s.leaves) do
    if s.sections[key] then error("config.schema: '" .. key .. "' is both a key and a section", 3) end
  end
  table.sort(s.order)
  return s
end

-- schema(options, ...) -> the schema of a recipe: the option lists (or schemas) given,
-- nil skipped, each key declared once.
function M.schema(...)
  local specs = {}
  for i = 1, select('#', ...) do
    local list = select(i, ...)
    if list ~= nil then
      if type(list) ~= 'table' then error('config.schema: argument ' .. i .. ' is not a list of options', 2) end
      for _, spec in ipairs(getmetatable(list) == Schema and list.list or list) do specs[#specs + 1] = spec end
    end
  end
  return build(specs)
end

function M.is_schema(v) return getmetatable(v) == Schema end

-- schema:with(values) -> the schema with other defaults ({train = {epochs = 5}}), each
-- checked against its key's type as a --config file is.
function Schema:with(values)
  local defaults = deep_copy(self.defaults)
  apply_table(self, defaults, values or {}, '', " (in a recipe's defaults)")
  local specs = {}
  for i, spec in ipairs(self.list) do
    local copy = {}
    for k, v in pairs(spec) do copy[k] = v end
    copy.default = M.get(defaults, spec.key)
    specs[i] = copy
  end
  return build(specs)
end

-- schema:without(keys) -> the schema less those dotted keys or whole sections.
function Schema:without(keys)
  local drop = {}
  for _, k in ipairs(keys) do drop[k] = true end
  local specs = {}
  for _, spec in ipairs(self.list) do
    local gone, prefix = drop[spec.key], spec.key
    while not gone and prefix do
      prefix = prefix:match('^(.*)%.[^.]+$')
      gone = prefix and drop[prefix]
    end
    if not gone then specs[#specs + 1] = spec end
  end
  return build(specs)
end

-- A copy of the defaults, as a nested table.
function Schema:defaults_table() return deep_copy(self.defaults) end

local function as_schema(s, who)
  if getmetatable(s) ~= Schema then
    error(who .. ': give a schema, cr.config.schema(cr.config.options(...), ...), not a ' .. type(s), 3)
  end
  return s
end

-- take(options, owner, given, wiring) -> a module's checked options: `given` (a
-- constructor's table) holds the keys of `options` (one section's declarations), by the
-- same names, and those of `wiring` (names the module takes from its caller, not from a
-- config section: the trunk, ...), nothing else. Missing options get their declared
-- defaults; a value of the wrong type or range is an error that names owner.
function M.take(options, owner, given, wiring)
  if given ~= nil and type(given) ~= 'table' then error(owner .. ': options must be a table, got ' .. type(given), 0) end
  given = given or {}
  local by_name = {}
  for _, spec in ipairs(options) do by_name[spec.name] = spec end
  local out = {}
  for k, v in pairs(given) do
    if wiring and wiring[k] then
      out[k] = v
    elseif not by_name[k] then
      local names = {}
      for _, spec in ipairs(options) do
        if spec.was == k then error(string.format("%s: option '%s' is now '%s'", owner, k, spec.name), 0) end
        names[#names + 1] = spec.name
      end
      for n in pairs(wiring or {}) do names[#names + 1] = n end
      table.sort(names)
      error(string.format("%s: unknown option '%s'; the options are %s", owner, tostring(k), table.concat(names, ', ')), 0)
    end
  end
  for _, spec in ipairs(options) do
    local v = given[spec.name]
    if v == nil then
      out[spec.name] = deep_copy(spec.default)
    else
      local ok, res = pcall(check_value, spec.name, spec, v, '')
      if not ok then error((tostring(res):gsub('^config: ', owner .. ': ')), 0) end
      out[spec.name] = res
    end
  end
  return out
end

local function load_config_file(path)
  local f, err = loadfile(path)
  if not f then
    local exists = io.open(path, 'r')
    if exists then exists:close() end
    error(string.format("config: cannot load --config '%s': %s", path, exists and err or 'no such file'), 0)
  end
  setfenv(f, setmetatable({}, { __index = _G }))
  local ok, v = pcall(f)
  if not ok then error(string.format("config: --config '%s' failed: %s", path, tostring(v)), 0) end
  if type(v) ~= 'table' then
    error(string.format("config: --config '%s' must return a table (return {optim = {lr = 0.1}}), it returned %s",
      path, type(v)), 0)
  end
  return v
end

-- ---- help and dump ------------------------------------------------------------------------
local LUA_KEYWORDS = {}
for w in ([[and break do else elseif end false for function goto if in local nil not or repeat return then
  true until while]]):gmatch('%a+') do LUA_KEYWORDS[w] = true end

local function ser_key(k)
  if type(k) == 'string' and k:match('^[%a_][%w_]*$') and not LUA_KEYWORDS[k] then return k end
  if type(k) == 'string' then return '[' .. string.format('%q', k) .. ']' end
  return '[' .. tostring(k) .. ']'
end

local function ser_scalar(v, path)
  local t = type(v)
  if t == 'number' then
    if v ~= v then return '0/0' end
    if v == math.huge then return '1/0' end
    if v == -math.huge then return '-1/0' end
    if is_int(v) then return string.format('%d', v) end
    for digits = 15, 16 do   -- the shortest form that reads back exactly: 0.1, not 0.10000000000000001
      local txt = string.format('%.' .. digits .. 'g', v)
      if tonumber(txt) == v then return txt end
    end
    return string.format('%.17g', v)
  elseif t == 'string' then
    return (string.format('%q', v):gsub('\\\n', '\\n'))
  elseif t == 'boolean' then
    return tostring(v)
  end
  error("config.dump: '" .. path .. "' holds a " .. t .. ', which a config file cannot hold', 0)
end

local function ser(v, indent, path)
  if type(v) ~= 'table' then return ser_scalar(v, path) end
  if is_list(v) then
    local parts, flat = {}, true
    for i, e in ipairs(v) do
      if type(e) == 'table' then flat = false end
      parts[i] = ser(e, indent .. '  ', path .. '[' .. i .. ']')
    end
    if flat then return '{' .. table.concat(parts, ', ') .. '}' end
    return '{\n' .. indent .. '  ' .. table.concat(parts, ',\n' .. indent .. '  ') .. ',\n' .. indent .. '}'
  end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  local lines = {}
  for _, k in ipairs(keys) do
    lines[#lines + 1] = indent .. '  ' .. ser_key(k) .. ' = ' ..
      ser(v[k], indent .. '  ', path == '' and tostring(k) or path .. '.' .. tostring(k)) .. ','
  end
  return '{\n' .. table.concat(lines, '\n') .. '\n' .. indent .. '}'
end

-- Lua source that load() turns back into an equal table (for run folders).
function M.dump(cfg)
  if type(cfg) ~= 'table' then error('config.dump: expected a table, got ' .. type(cfg), 2) end
  return 'return ' .. ser(cfg, '', '') .. '\n'
end

-- flatten(cfg) -> {['optim.lr'] = 0.6, ['crops.num'] = '[2,6]', ...}: every leaf under its
-- dotted key; numbers, strings and booleans as they are, lists (and other tables without
-- string keys) as their JSON text. For the run report's config differences and
-- TensorBoard's hyper-parameters.
function M.flatten(cfg, prefix, out)
  out, prefix = out or {}, prefix or ''
  for k, v in pairs(cfg or {}) do
    local key = prefix .. tostring(k)
    if type(v) == 'table' and not (#v > 0 or next(v) == nil) then M.flatten(v, key .. '.', out)
    elseif type(v) == 'table' then out[key] = to_json(v)
    else out[key] = v end
  end
  return out
end

-- write(path, cfg): the config as a Lua file returning it (dump's text), for run folders;
-- it loads back with dofile or as `--config path`. Written to path .. '.tmp' and renamed
-- over path, so a crash never leaves half a file. Returns path.
function M.write(path, cfg)
  if type(path) ~= 'string' or path == '' then
    error('config.write: path must be a file name (a non-empty string), got ' .. type(path), 2)
  end
  if type(cfg) ~= 'table' then error('config.write: expected a config table, got ' .. type(cfg), 2) end
  local ok, text = pcall(M.dump, cfg)
  if not ok then error((tostring(text):gsub('^config%.dump', 'config.write')), 2) end
  local tmp = path .. '.tmp'
  local f, err = io.open(tmp, 'wb')
  if not f then
    local folder = path:match('^(.*)/[^/]*$')
    local why = tostring(err):gsub('^' .. tmp:gsub('%p', '%%%0') .. ': ', '')
    local probe = folder and folder ~= '' and io.open(folder .. '/.', 'rb')
    if probe then probe:close() end
    if folder and folder ~= '' and not probe then
      why = "the folder '" .. folder .. "' does not exist; create it first (mkdir -p)"
    end
    error(string.format("config.write: cannot write '%s': %s", path, why), 2)
  end
  local wrote, werr = f:write(text)
  if wrote then wrote, werr = f:flush() end
  f:close()
  if wrote then wrote, werr = os.rename(tmp, path) end
  if not wrote then
    os.remove(tmp)
    error(string.format("config.write: cannot write '%s': %s", path, tostring(werr)), 2)
  end
  return path
end

-- Every key of a schema with its type, default and description (--help).
function M.help(schema)
  local s = as_schema(schema, 'config.help')
  local lines = { 'usage: luajit <recipe>.lua [--config file.lua] [--dry-run] [key.sub=value ...]', '', 'keys:' }
  for _, key in ipairs(s.order) do
    local d = s.leaves[key].default
    lines[#lines + 1] = string.format('  %-28s %-26s default %s', key, type_desc(s.leaves[key]),
      type(d) == 'table' and ser(d, '', key) or (type(d) == 'string' and string.format('%q', d) or tostring(d)))
    lines[#lines + 1] = '      ' .. s.leaves[key].doc
  end
  return table.concat(lines, '\n') .. '\n'
end

-- ---- parse ----------------------------------------------------------------------------------
-- parse(arg, schema, opts) -> cfg, info. arg is the script's `arg` (arg[1..n] are read);
-- schema: cr.config.schema(...) (see the top). info.files and info.overrides list what was
-- applied. --help prints the keys and exits (opts.exit_on_help = false returns instead:
-- nil, help text). When argv is the script's own `arg`, a bad argument prints one line on
-- stderr and exits with status 2, as command-line tools do (opts.exit_on_error = false
-- raises instead, as it always does for other tables).
local function parse(argv, schema, opts)
  opts = opts or {}
  argv = argv or {}
  local s = as_schema(schema, 'config.parse')
  local cfg = s:defaults_table()
  local files, overrides = {}, {}
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if type(a) ~= 'string' then error('config: argument ' .. i .. ' is not a string', 0) end
    if a == '--config' or a == '-c' then
      if not argv[i + 1] then error("config: '" .. a .. "' needs a file name: --config myrun.lua", 0) end
      files[#files + 1] = argv[i + 1]
      i = i + 1
    elseif a:match('^%-%-config=') then
      files[#files + 1] = a:sub(10)
    elseif a == '--dry-run' then
      if not s.leaves['run.dry_run'] then
        error("config: --dry-run: this recipe has no run.dry_run key; a recipe of your own gets it from " ..
          'cr.recipe.run.BASE in its schema, and acts on it (crescent/engine/dry_run.lua)', 0)
      end
      overrides[#overrides + 1] = { key = 'run.dry_run', value = 'true', text = a }
    elseif a == '--help' or a == '-h' then
      local text = M.help(s)
      if opts.exit_on_help == false then return nil, text end
      io.write(text)
      os.exit(0)
    else
      local key, value = a:match('^%-*([^=]+)=(.*)$')
      if not key then
        error(string.format("config: cannot read argument '%s'; overrides are key.sub=value (e.g. optim.lr=0.1), " ..
          'files are --config file.lua', a), 0)
      end
      overrides[#overrides + 1] = { key = key, value = value, text = a }
    end
    i = i + 1
  end
  for _, f in ipairs(files) do
    apply_table(s, cfg, load_config_file(f), '', " (in --config '" .. f .. "')")
  end
  local given = {}
  for _, o in ipairs(overrides) do
    local where = ' (on the command line: ' .. o.text .. ')'
    if s.sections[o.key] then section_error(s, o.key, where) end
    local spec = s.leaves[o.key]
    if not spec then unknown_key(s, o.key, where) end
    local first = given[o.key]
    if first then
      -- bash's brace expansion turns crops.num={2,6} into crops.num=2 crops.num=6
      local brace = spec.type == 'list' and string.format("; bash's brace expansion turns %s={%s,%s} into two " ..
        "arguments: write %s=%s,%s or quote it, '%s={%s,%s}'", o.key, first.value, o.value, o.key, first.value, o.value,
        o.key, first.value, o.value) or ''
      error(string.format('config: %s is given twice on the command line (%s and %s)%s', o.key, first.text, o.text,
        brace ~= '' and brace or '; give it once'), 0)
    end
    given[o.key] = o
    set(cfg, o.key, from_string(o.key, spec, o.value, where))
  end
  local applied = {}
  for _, o in ipairs(overrides) do applied[#applied + 1] = o.text end
  return cfg, { files = files, overrides = applied }
end

-- cr.config.load captures the config of the recipe it runs here (see below)
local capture = nil
local CAPTURED = setmetatable({}, { __tostring = function() return 'crescent.config: recipe config captured' end })

function M.parse(argv, schema, opts)
  if capture and not capture.cfg then
    capture.schema = schema
    capture.cfg = M.check(capture.overrides, schema)
    error(CAPTURED, 0)
  end
  if argv == nil or argv ~= rawget(_G, 'arg') or (opts and opts.exit_on_error == false) then
    return parse(argv, schema, opts)
  end
  local function finish(ok, ...)
    if ok then return ... end
    io.stderr:write('error: ', tostring((...)), '\n')
    os.exit(2)
  end
  return finish(pcall(parse, argv, schema, opts))
end

-- The dotted keys whose values differ between configs a and b, sorted, each as {key,
-- value in a, value in b} (nil where a side lacks the key); lists compare as one value.
function M.diff(a, b)
  local out = {}
  local function same(x, y)
    if type(x) ~= 'table' or type(y) ~= 'table' then return x == y end
    for k, v in pairs(x) do if not same(v, y[k]) then return false end end
    for k in pairs(y) do if x[k] == nil then return false end end
    return true
  end
  local function walk(x, y, prefix)
    local keys = {}
    for k in pairs(x or {}) do keys[k] = true end
    for k in pairs(y or {}) do keys[k] = true end
    for k in pairs(keys) do
      local u, v, key = x and x[k], y and y[k], prefix .. tostring(k)
      local sections = (type(u) == 'table' and not is_list(u)) or (type(v) == 'table' and not is_list(v))
      if sections and (u == nil or type(u) == 'table') and (v == nil or type(v) == 'table') then
        walk(u, v, key .. '.')
      elseif not same(u, v) then
        out[#out + 1] = { key, u, v }
      end
    end
  end
  walk(a, b, '')
  table.sort(out, function(p, q) return p[1] < q[1] end)
  return out
end

-- A value as a config file or the command line writes it: 0.1, 'swav', {2, 6}.
function M.format_value(v)
  if type(v) == 'string' then return "'" .. v .. "'" end
  if type(v) == 'table' then
    local parts = {}
    if is_list(v) then
      for i, x in ipairs(v) do parts[i] = M.format_value(x) end
    else
      local keys = {}
      for k in pairs(v) do keys[#keys + 1] = tostring(k) end
      table.sort(keys)
      for i, k in ipairs(keys) do parts[i] = k .. ' = ' .. M.format_value(v[k]) end
    end
    return '{' .. table.concat(parts, ', ') .. '}'
  end
  if v == nil then return '(absent)' end
  return tostring(v)
end

-- Checks a whole table against a schema (the same rules as a --config file); returns
-- the defaults with it merged, checked. For configs built in code.
function M.check(cfg, schema)
  local s = as_schema(schema, 'config.check')
  local out = s:defaults_table()
  apply_table(s, out, cfg, '', '')
  return out
end

-- cr.config.load(path, overrides) -> the config that the recipe at `path` would run
-- with: its defaults with `overrides` (a table, checked like a --config file) on top,
-- without running it (the recipe stops inside its cr.config.parse). From the REPL:
--   task = cr.recipe.ssl.task('swav', cr.config.load('recipes/swav.lua', {train = {epochs = 1}}))
-- A file that returns a table (a --config file) gives that table with overrides merged.
-- For a recipe, a second result holds what it declared: {schema = } (cr.config.help(r.schema)).
function M.load(path, overrides)
  if type(path) ~= 'string' then error('cr.config.load(path, overrides): path must be a string', 2) end
  if overrides ~= nil and type(overrides) ~= 'table' then
    error('cr.config.load: overrides must be a table like {train = {epochs = 1}}, got ' .. type(overrides), 2)
  end
  local f, err = loadfile(path)
  if not f then error('cr.config.load: ' .. err, 2) end
  local outer = capture
  capture = { overrides = overrides or {} }
  local saved_arg = rawget(_G, 'arg')
  _G.arg = { [0] = path }
  local ok, res = pcall(f)
  _G.arg = saved_arg
  local cap = capture
  capture = outer
  if cap.cfg then return cap.cfg, cap end
  if not ok then error(res, 0) end
  if type(res) == 'table' then return M.merge(res, overrides or {}) end
  error('cr.config.load: ' .. path .. ' neither calls cr.config.parse nor returns a config table', 2)
end

return M
