-- crescent.optim.checks — hyper-parameter checks shared by the optimizer classes, with
-- messages that name the optimizer, the option and the accepted range.
local util = require 'crescent.util'

local M = {}

-- g[key] must be a number >= lo (lo nil: any finite number).
function M.number(what, g, key, lo)
  local v = g[key]
  if type(v) ~= 'number' or v ~= v or (lo and v < lo) then
    error(string.format('%s: %s must be a number%s, got %s', what, key, lo and (' >= ' .. lo) or '', tostring(v)),
      util.user_level())
  end
end

-- v (shown as `key`) must be a number in [lo, hi).
function M.range(what, key, v, lo, hi)
  if type(v) ~= 'number' or v ~= v or v < lo or v >= hi then
    error(string.format('%s: %s must be a number in [%g, %g), got %s', what, key, lo, hi, tostring(v)),
      util.user_level())
  end
end

return M
