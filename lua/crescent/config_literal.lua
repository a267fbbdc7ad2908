-- crescent.config_literal — command-line values read as data, never run as code: decimal
-- numbers, quoted strings, true/false, and tables of them in Lua's literal syntax
-- ({224, 96}, {0.14, 1}, {a = 1, ['b c'] = 'x'}, nested). `--config` files stay Lua and
-- run as code (like mmengine's Python configs); a command line is only data.
--
--   local literal = require 'crescent.config_literal'
--   local v, err = literal.parse('{2, 6}')       -- v = {2, 6}; v nil and err a message when bad
--   literal.number('0.5')  -> 0.5; literal.number('0x10') -> nil (decimal only)
local M = {}

local DECIMAL = { '^[+-]?%d+%.?%d*[eE][+-]?%d+$', '^[+-]?%d+%.?%d*$', '^[+-]?%.%d+[eE][+-]?%d+$', '^[+-]?%.%d+$' }

-- A decimal number written out (no hex, no inf or nan, no spaces), or nil.
function M.number(text)
  for _, p in ipairs(DECIMAL) do
    if text:match(p) then return tonumber(text) end
  end
  return nil
end

local ESCAPES = { n = '\n', t = '\t', r = '\r', ['\\'] = '\\', ['"'] = '"', ["'"] = "'" }

-- The parser over one string: each reader takes a position and returns (value, next
-- position) or raises a message.
local function parser(text)
  local function fail(pos, what)
    error({ msg = string.format("%s at character %d of '%s'", what, pos, text) }, 0)
  end
  local function skip(pos) return text:match('^%s*()', pos) end
  local value

  local function string_at(pos)
    local q = text:sub(pos, pos)
    local out, i = {}, pos + 1
    while true do
      local c = text:sub(i, i)
      if c == '' then fail(pos, 'an unterminated string') end
      if c == q then return table.concat(out), i + 1 end
      if c == '\\' then
        local e = ESCAPES[text:sub(i + 1, i + 1)]
        if not e then fail(i, 'an unknown escape') end
        out[#out + 1], i = e, i + 2
      else
        out[#out + 1], i = c, i + 1
      end
    end
  end

  local function table_at(pos)
    local t, n, i = {}, 0, skip(pos + 1)
    while text:sub(i, i) ~= '}' do
      local key
      local name, after = text:match('^([%a_][%w_]*)%s*=()', i)
      if name and text:sub(after, after) ~= '=' then
        key, i = name, skip(after)
      elseif text:sub(i, i) == '[' then
        key, i = value(skip(i + 1))
        i = skip(i)
        if text:sub(i, i) ~= ']' then fail(i, "a missing ']'") end
        i = skip(i + 1)
        if text:sub(i, i) ~= '=' then fail(i, "a missing '='") end
        i = skip(i + 1)
      end
      local v
      v, i = value(i)
      if key == nil then
        n = n + 1
        t[n] = v
      else
        t[key] = v
      end
      i = skip(i)
      local sep = text:sub(i, i)
      if sep == ',' or sep == ';' then i = skip(i + 1)
      elseif sep ~= '}' then fail(i, "a missing ',' or '}'") end
    end
    return t, i + 1
  end

  function value(pos)
    pos = skip(pos)
    local c = text:sub(pos, pos)
    if c == '{' then return table_at(pos) end
    if c == '"' or c == "'" then return string_at(pos) end
    local word, after = text:match('^([%w_%.%+%-]+)()', pos)
    if not word then fail(pos, c == '' and 'a missing value' or "an unexpected '" .. c .. "'") end
    if word == 'true' then return true, after end
    if word == 'false' then return false, after end
    local v = M.number(word)
    if v == nil then fail(pos, "'" .. word .. "', which is not a decimal number, a quoted string, true or false") end
    return v, after
  end

  return value, skip, fail
end

-- The value written in text, or nil and a message naming what is wrong where.
function M.parse(text)
  local value, skip, fail = parser(text)
  local ok, v = pcall(function()
    local got, pos = value(1)
    pos = skip(pos)
    if pos <= #text then fail(pos, 'more after the value') end
    return got
  end)
  if ok then return v end
  if type(v) == 'table' then return nil, v.msg end
  error(v, 0)
end

return M
