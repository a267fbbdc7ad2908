-- crescent.repl.complete — what <TAB> offers in the REPL: globals and keywords, the fields
-- of a table reached through a dotted path (`cr.nn.Con`), methods after ':' (`x:ad`, with a
-- tensor's methods and properties and a module's class chain), and file paths inside a
-- string (`'recipes/sw`).
--
--   complete.words(env, line_before_word, word) -> sorted array of whole words
local M = {}

local KEYWORDS = { 'and', 'break', 'do', 'else', 'elseif', 'end', 'false', 'for', 'function', 'goto', 'if',
                   'in', 'local', 'nil', 'not', 'or', 'repeat', 'return', 'then', 'true', 'until', 'while' }

local function is_tensor(v)
  if type(v) ~= 'cdata' then return false end
  local cr = package.loaded.crescent
  return cr and cr.is_tensor(v)
end

-- Adds the string keys of t (and of the tables its metatables' __index chain reaches).
local function add_keys(names, t, depth)
  if depth > 8 then return end
  if type(t) == 'table' then
    for k in pairs(t) do
      if type(k) == 'string' then names[k] = true end
    end
  end
  local mt = (type(t) == 'table' or type(t) == 'userdata') and getmetatable(t)
  if type(mt) == 'table' and type(mt.__index) == 'table' then add_keys(names, mt.__index, depth + 1) end
end

-- The names reachable from value v with '.' or ':'.
local function fields_of(v)
  local names = {}
  if is_tensor(v) then
    -- a tensor's methods and properties (the class's tables, such as its op helpers, are
    -- not members of a tensor)
    local Tensor = package.loaded.crescent.Tensor
    for k, f in pairs(Tensor) do
      if type(k) == 'string' and type(f) == 'function' then names[k] = true end
    end
    for k in pairs(Tensor.properties or {}) do names[k] = true end
  elseif type(v) == 'string' then
    add_keys(names, string, 0)
  else
    add_keys(names, v, 0)
  end
  return names
end

-- The value of a dotted path ('cr.nn') in env, or nil. Only field reads: nothing is called.
local function resolve(env, path)
  local v = env
  for part in path:gmatch('[^%.:]+') do
    local tv = type(v)
    if tv ~= 'table' and tv ~= 'userdata' and tv ~= 'cdata' and tv ~= 'string' then return nil end
    local ok, x = pcall(function() return v[part] end)
    if not ok then return nil end
    v = x
    if v == nil then return nil end
  end
  return v
end

local function sorted(set, prefix, decorate)
  local out = {}
  for name in pairs(set) do
    local hidden = name:match('^__') and not prefix:match('^__') -- metamethods, unless asked for
    if name:sub(1, #prefix) == prefix and name:match('^[%a_][%w_]*$') and not hidden then out[#out + 1] = decorate(name) end
  end
  table.sort(out)
  return out
end

-- Inside a string: the line before the word has an unclosed ' or ".
local function in_string(before)
  local quote
  for c in before:gmatch('.') do
    if quote then
      if c == quote then quote = nil end
    elseif c == '"' or c == "'" then
      quote = c
    end
  end
  return quote ~= nil
end

local function list_dir(dir)
  local p = io.popen('ls -1Ap -- ' .. ("'" .. dir:gsub("'", "'\\''") .. "'") .. ' 2>/dev/null')
  if not p then return {} end
  local out = {}
  for name in p:lines() do out[#out + 1] = name end
  p:close()
  return out
end

local function paths(word)
  local dir, base = word:match('^(.*/)([^/]*)$')
  if not dir then dir, base = '', word end
  local out = {}
  for _, name in ipairs(list_dir(dir == '' and '.' or dir)) do
    if name:sub(1, #base) == base then out[#out + 1] = dir .. name end
  end
  table.sort(out)
  return out
end

function M.words(env, before, word)
  if in_string(before) then return paths(word) end
  local path, sep, partial = word:match('^(.-)([%.:])([%w_]*)$')
  if path and path ~= '' then
    local v = resolve(env, path)
    if v == nil then return {} end
    local names = fields_of(v)
    if sep == ':' then
      -- methods only: the functions (a tensor's are all methods)
      local only = {}
      for name in pairs(names) do
        local ok, f = pcall(function() return v[name] end)
        if ok and (type(f) == 'function' or (is_tensor(v) and not (package.loaded.crescent.Tensor.properties or {})[name]))
        then only[name] = true end
      end
      names = only
    end
    return sorted(names, partial, function(n) return path .. sep .. n end)
  end
  local names = {}
  add_keys(names, env, 0)
  for _, k in ipairs(KEYWORDS) do names[k] = true end
  return sorted(names, word, function(n) return n end)
end

return M
