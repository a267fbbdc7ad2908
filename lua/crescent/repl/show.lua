-- crescent.repl.show — how the REPL prints a result: tensors and modules as their own
-- tostring (long tensors summarised by crescent.format), strings quoted, tables as a
-- bounded literal (nested tables to depth 2, at most 24 entries each), functions with
-- where they were defined.
--
--   show.value(v) -> string
local M = {}

local MAX_ENTRIES, MAX_DEPTH = 24, 2

local function has_tostring(v)
  local mt = getmetatable(v)
  return type(mt) == 'table' and mt.__tostring ~= nil
end

local function is_identifier(k)
  return type(k) == 'string' and k:match('^[%a_][%w_]*$') ~= nil
end

local function scalar(v)
  local t = type(v)
  if t == 'string' then return string.format('%q', v) end
  if t == 'function' then
    local info = debug.getinfo(v, 'S')
    if info.what == 'C' then return 'function: builtin' end
    return string.format('function <%s:%d>', info.short_src, info.linedefined)
  end
  return tostring(v)
end

local function indent(s, pad)
  return (s:gsub('\n', '\n' .. pad))
end

local function show(v, depth, seen)
  if type(v) ~= 'table' or has_tostring(v) then
    if type(v) == 'table' or type(v) == 'cdata' or type(v) == 'userdata' then return tostring(v) end
    return scalar(v)
  end
  if seen[v] then return '<cycle>' end
  if depth >= MAX_DEPTH then return '{...}' end
  seen[v] = true
  local keys, n = {}, #v
  for k in pairs(v) do
    if not (type(k) == 'number' and k >= 1 and k <= n and k == math.floor(k)) then keys[#keys + 1] = k end
  end
  table.sort(keys, function(a, b)
    if type(a) == type(b) and (type(a) == 'string' or type(a) == 'number') then return a < b end
    return type(a) < type(b)
  end)
  local items = {}
  for i = 1, math.min(n, MAX_ENTRIES) do items[#items + 1] = show(v[i], depth + 1, seen) end
  for _, k in ipairs(keys) do
    if #items >= MAX_ENTRIES then break end
    local key = is_identifier(k) and k or '[' .. scalar(k) .. ']'
    items[#items + 1] = key .. ' = ' .. show(v[k], depth + 1, seen)
  end
  seen[v] = nil
  local total = n + #keys
  if total > #items then items[#items + 1] = string.format('... (%d more)', total - #items) end
  if #items == 0 then return '{}' end
  local one = '{ ' .. table.concat(items, ', ') .. ' }'
  if #one <= 88 and not one:find('\n') then return one end
  return '{\n  ' .. indent(table.concat(items, ',\n'), '  ') .. '\n}'
end

function M.value(v)
  return show(v, 0, {})
end

return M
