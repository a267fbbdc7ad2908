-- crescent.checks — the argument checks every package shares, each error one line that
-- names the problem and points at the user's line (the first caller outside
-- lua/crescent/, also when a layer is built inside a model or a method inside a recipe).
--   checks.fail(msg)                         raise msg at the user's line
--   checks.options(what, opts, known)        nil or a table of known keys -> a table
--   checks.int(what, name, v, min)           an integer >= min (default 0)
--   checks.pair(what, name, v, min)          a number or an {h, w} pair -> two integers
local util = require 'crescent.util'

local M = {}
local user_level = util.user_level

function M.fail(msg) error(msg, user_level()) end

-- opts must be nil or a table whose keys are all in `known`; returns a table.
function M.options(what, opts, known)
  if opts == nil then return {} end
  if type(opts) ~= 'table' then
    error(string.format('%s: options must be a table, got %s', what, type(opts)), user_level())
  end
  for k in pairs(opts) do
    if not known[k] then
      error(string.format("%s: unknown option '%s'; known: %s", what, tostring(k),
                          table.concat(util.sorted_keys(known), ', ')),
        user_level())
    end
  end
  return opts
end

function M.int(what, name, v, min)
  if type(v) ~= 'number' or v ~= math.floor(v) or v < (min or 0) then
    error(string.format("%s: '%s' must be an integer >= %d, got %s", what, name, min or 0, tostring(v)), user_level())
  end
  return v
end

-- A number or an {h, w} pair, as two integers.
function M.pair(what, name, v, min)
  if type(v) == 'number' then
    M.int(what, name, v, min)
    return v, v
  end
  if type(v) == 'table' and #v == 2 then
    return M.int(what, name, v[1], min), M.int(what, name, v[2], min)
  end
  error(string.format("%s: '%s' must be a number or an {h, w} pair, got %s", what, name, tostring(v)), user_level())
end

return M
