-- crescent.repl.help — `? expr` in the REPL (also help(x)): the documentation a value's
-- source carries. For a Lua function, the comment block right above its definition (the
-- modules document each function there, e.g. `-- cr.conv2d(x, w, bias, {...})`); for a
-- module table, the purpose comment at the top of the file that defines it and its
-- fields; for a class (cr.nn.Conv2d), the comment above the line that makes it; for a
-- tensor, what it is and its methods; for a tensor's property (x.grad), its getter's.
--
--   help.text(value, name) -> string
local M = {}

local cache = {}
local function file_lines(path)
  if cache[path] == nil then
    local f = io.open(path, 'r')
    local lines = false
    if f then
      lines = {}
      for l in f:lines() do lines[#lines + 1] = l end
      f:close()
    end
    cache[path] = lines
  end
  return cache[path] or nil
end

local function source_of(f)
  local info = debug.getinfo(f, 'S')
  if not info or info.what == 'C' then return nil end
  local path = info.source:match('^@(.*)$')
  return path, info.linedefined
end

-- The run of `--` comment lines that ends right above line n (blank lines do not count).
local function comment_above(lines, n)
  local out = {}
  local i = n - 1
  while i >= 1 and lines[i]:match('^%s*%-%-') and not lines[i]:match('^%s*%-%-%s*%-%-%-') do
    table.insert(out, 1, (lines[i]:gsub('^%s*%-%- ?', '')))
    i = i - 1
  end
  return out
end

-- The file's purpose comment: its first run of comment lines.
local function header(lines)
  local out = {}
  for _, l in ipairs(lines) do
    if not l:match('^%s*%-%-') then break end
    out[#out + 1] = (l:gsub('^%s*%-%- ?', ''))
  end
  return out
end

local function short_path(path)
  repeat
    local before = path
    path = path:gsub('[^/]+/%.%./', '', 1)
  until path == before
  local cwd = os.getenv('PWD')
  if cwd and path:sub(1, #cwd + 1) == cwd .. '/' then return path:sub(#cwd + 2) end
  return path
end

-- For a function made by a factory (Tensor.sum = reducer('sum')), the line that assigns
-- it under its last name: `Tensor.<key> =`, `cr.<key> =` or `M.<key> =`; then the comment
-- above the run of such assignments it stands in.
local function assignment_doc(lines, key)
  if not key then return {}, nil end
  local pat = '^%s*[%w_]+%.' .. key:gsub('%p', '%%%0') .. '%s*='
  for i, l in ipairs(lines) do
    if l:match(pat) then
      local j = i
      while j > 1 and lines[j - 1]:match('^%s*[%w_%.]+%s*=%s*[%w_%.]+%b()%s*$') do j = j - 1 end
      local doc = comment_above(lines, j)
      if #doc > 0 then return doc, i end
    end
  end
  return {}, nil
end

local function function_help(f, name)
  local path, line = source_of(f)
  if not path then return name .. ': a built-in (C) function; no documentation here' end
  local lines = file_lines(path)
  local where = short_path(path) .. ':' .. line
  if not lines then return name .. ': defined at ' .. where end
  local doc = comment_above(lines, line)
  if #doc == 0 then
    local at
    doc, at = assignment_doc(lines, name:match('[%.:]([%a_][%w_]*)$'))
    if at then where = short_path(path) .. ':' .. at end
  end
  if #doc == 0 then
    return name .. ': no documentation comment above its definition (' .. where .. ')\n  ' .. (lines[line] or '')
  end
  return table.concat(doc, '\n') .. '\n  [' .. where .. ']'
end

-- A class made by Module:extend('Name') (cr.nn.Conv2d): the comment above that line,
-- where the constructor is documented, else the one above its init.
local function class_help(t)
  local path, line = source_of(t.init)
  local lines = path and file_lines(path)
  if not lines then return nil end
  local cls = tostring(rawget(t, '__name') or ''):gsub('%p', '%%%0')
  for i, l in ipairs(lines) do
    if cls ~= '' and l:match(':extend%([\'"]' .. cls .. '[\'"]%)') then
      local doc = comment_above(lines, i)
      if #doc > 0 then return table.concat(doc, '\n') .. '\n  [' .. short_path(path) .. ':' .. i .. ']' end
    end
  end
  local doc = comment_above(lines, line)
  if #doc > 0 then return table.concat(doc, '\n') .. '\n  [' .. short_path(path) .. ':' .. line .. ']' end
  return nil
end

local function sorted_fields(t)
  local fns, others = {}, {}
  for k, v in pairs(t) do
    if type(k) == 'string' and not k:match('^_') then
      if type(v) == 'function' then fns[#fns + 1] = k else others[#others + 1] = k end
    end
  end
  table.sort(fns)
  table.sort(others)
  return fns, others
end

local function wrap(words, width, indent)
  local out, line = {}, indent
  for _, w in ipairs(words) do
    if #line + #w + 2 > width and line ~= indent then
      out[#out + 1] = line
      line = indent
    end
    line = line .. w .. '  '
  end
  if line ~= indent then out[#out + 1] = line end
  return table.concat(out, '\n')
end

-- The file that defines table t: where its first Lua function field (or its metatable's
-- __call, for a class) was written.
local function defining_file(t)
  local mt = getmetatable(t)
  if type(mt) == 'table' and type(mt.__call) == 'function' then
    local p = source_of(mt.__call)
    if p and not p:match('/nn/module%.lua$') then return p end
  end
  local keys = {}
  for k, v in pairs(t) do
    if type(v) == 'function' and type(k) == 'string' and not k:match('^_') then keys[#keys + 1] = k end
  end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local p = source_of(t[k])
    if p then return p end
  end
  return nil
end

local function table_help(t, name)
  if type(rawget(t, 'init')) == 'function' and rawget(t, '__name') then
    local h = class_help(t)
    if h then return h end
  end
  local parts = {}
  local mt = getmetatable(t)
  local path
  for modname, loaded in pairs(package.loaded) do   -- a module: the file `require` read
    if rawequal(loaded, t) and type(modname) == 'string' then path = package.searchpath(modname, package.path) end
  end
  path = path or defining_file(t) or (type(mt) == 'table' and defining_file(mt)) or nil
  local lines = path and file_lines(path)
  if lines then
    local h = header(lines)
    if #h > 0 then parts[#parts + 1] = table.concat(h, '\n') .. '\n  [' .. short_path(path) .. ']' end
  end
  if #parts == 0 then parts[1] = name .. ': a table' end
  local fns, others = sorted_fields(t)
  if #fns > 0 then parts[#parts + 1] = 'functions:\n' .. wrap(fns, 88, '  ') end
  if #others > 0 then parts[#parts + 1] = 'fields:\n' .. wrap(others, 88, '  ') end
  return table.concat(parts, '\n')
end

local function tensor_help(x, name)
  local cr = package.loaded.crescent
  local Tensor = cr.Tensor
  local shape = table.concat(x.shape, ', ')
  local methods = {}
  for k, v in pairs(Tensor) do
    if type(v) == 'function' and type(k) == 'string' and not k:match('^_') then methods[#methods + 1] = k end
  end
  table.sort(methods)
  local props = {}
  for k in pairs(Tensor.properties or {}) do props[#props + 1] = k end
  table.sort(props)
  return string.format('%s: a tensor of shape [%s], %s on %s%s\nproperties:\n%s\nmethods (`? x.name` for one):\n%s',
    name, shape, x.dtype, x.device, x.requires_grad and ', requires_grad' or '', wrap(props, 88, '  '),
    wrap(methods, 88, '  '))
end

-- `? x.grad` (x a tensor): the property, documented above its getter in tensor.lua.
function M.property_text(key, name)
  local cr = package.loaded.crescent
  local get = cr and cr.Tensor.properties[key]
  if not get then return nil end
  return function_help(get, name)
end

-- What `? name` shows for value v.
function M.text(v, name)
  name = name or '?'
  local cr = package.loaded.crescent
  if type(v) == 'function' then return function_help(v, name) end
  if type(v) == 'cdata' and cr and cr.is_tensor(v) then return tensor_help(v, name) end
  if type(v) == 'table' then return table_help(v, name) end
  if v == nil then return name .. ' is nil (no such variable or field)' end
  return string.format('%s: a %s, %s', name, type(v), tostring(v))
end

return M
