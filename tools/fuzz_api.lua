-- tools/fuzz_api.lua — random calls of the whole Lua API with bad arguments, to prove that
-- bad input gets an error and never a crash or a hang. Every cr.* function and
-- Tensor method is called with one to four arguments drawn from a pool of good and bad
-- values: nil, booleans, strings, tables, numbers at the edges (NaN, infinities, 2^63,
-- negatives, fractions), foreign objects (a userdata, a proxy, a cdata of another type),
-- tensors of every dtype, 0-dim, empty, expanded, transposed and freed ones. Errors are
-- caught; a crash ends the process, and the last line it printed names the call.
--
--   luajit tools/fuzz_api.lua [calls=3000] [seed=1] [quiet=1]   (from the repository root)
-- Prints "call <n> <function> <argument kinds>" before each call (unbuffered; quiet=1:
-- not) and "done <calls> calls, <errors> errors" at the end, then each distinct error
-- that reads as Lua's own ("attempt to ...", "bad argument #..."): a message that does
-- not say what was wrong in the user's terms. `make fuzz` runs 100,000 calls.
package.path = 'lua/?.lua;lua/?/init.lua;' .. package.path
local ffi = require 'ffi'
local cr = require 'crescent'

local opts = { calls = 3000, seed = 1, quiet = 0 }
for _, a in ipairs(arg or {}) do
  local k, v = a:match('^(%w+)=(%d+)$')
  if not k or opts[k] == nil then
    io.stderr:write('usage: luajit tools/fuzz_api.lua [calls=N] [seed=N] [quiet=1]\n')
    os.exit(2)
  end
  opts[k] = tonumber(v)
end

-- Calls that block, read the terminal, change the process or the run's global state, or
-- drive a whole training: exercised by their own specs.
local SKIP = {
  repl = true, train = true, set_num_threads = true, manual_seed = true, set_grad_enabled = true,
  set_fast_paths = true, memory_empty_cache = true, memory_cache_limit = true, attach = true, profiler = true,
}

local state = opts.seed
local function rand(n) -- a 31-bit LCG: the same calls for the same seed
  state = (state * 1103515245 + 12345) % 2147483648
  return state % n + 1
end

-- The pool: each entry makes a fresh value (so in-place calls cannot leak into the next).
local pool = {
  { 'nil', function() return nil end },
  { 'true', function() return true end },
  { 'string', function() return 'abc' end },
  { 'empty table', function() return {} end },
  { 'list', function() return { 2, 3 } end },
  { 'nested table', function() return { { 1, 2 }, { 3 } } end },
  { 'options', function() return { dim = 1, keepdim = true, dtype = 'f32' } end },
  { 'bad options', function() return { dtype = 'nope', stride = -1, padding = 1e300 } end },
  { '0', function() return 0 end },
  { '1', function() return 1 end },
  { '-1', function() return -1 end },
  { '0.5', function() return 0.5 end },
  { 'NaN', function() return 0 / 0 end },
  { 'inf', function() return 1 / 0 end },
  { '2^63', function() return 2 ^ 63 end },
  { '-2^62', function() return -2 ^ 62 end },
  { '1e300', function() return 1e300 end },
  { 'userdata', function() return io.stdout end },
  { 'proxy', function() return newproxy() end },
  { 'cdata', function() return ffi.new('int[4]') end },
  { 'function', function() return function() end end },
  { 'f32 [2,3]', function() return cr.ones(2, 3) end },
  { 'f64 [3]', function() return cr.arange(3, { dtype = 'f64' }) end },
  { 'i64 [4]', function() return cr.arange(4) end },
  { 'u8 [2,2]', function() return cr.ones(2, 2, { dtype = 'u8' }) end },
  { 'bool [3]', function() return cr.tensor({ true, false, true }) end },
  { 'f16 [2]', function() return cr.ones(2, { dtype = 'f16' }) end },
  { '0-dim', function() return cr.tensor(2.5) end },
  { 'empty [0,3]', function() return cr.zeros(0, 3) end },
  { 'expanded', function() return cr.ones(1, 3):expand(4, 3) end },
  { 'transposed', function() return cr.ones(2, 3):t() end },
  { '4-d', function() return cr.ones(2, 1, 3, 3) end },
  { 'requires grad', function() return cr.ones(2, 3):requires_grad_() end },
  { 'freed', function()
    local t = cr.ones(3)
    t:free()
    return t
  end },
}

local names = {}
for k, v in pairs(cr) do
  if type(v) == 'function' and not SKIP[k] then names[#names + 1] = { 'cr.' .. k, v } end
end
for k, v in pairs(cr.Tensor) do
  if type(v) == 'function' and k:sub(1, 1) ~= '_' and not SKIP[k] then names[#names + 1] = { 'Tensor.' .. k, v } end
end
table.sort(names, function(a, b) return a[1] < b[1] end)

local errors, raw = 0, {}
for n = 1, opts.calls do
  local f = names[rand(#names)]
  local nargs = rand(4)
  local args, kinds = {}, {}
  for i = 1, nargs do
    local p = pool[rand(#pool)]
    kinds[i] = p[1]
    args[i] = p[2]()
  end
  if opts.quiet == 0 then
    io.stdout:write('call ', n, ' ', f[1], '(', table.concat(kinds, ', '), ')\n')
    io.stdout:flush()
  end
  local ok, err = pcall(f[2], unpack(args, 1, nargs))
  if not ok then
    errors = errors + 1
    err = tostring(err)
    if err:find('attempt to', 1, true) or err:find('bad argument #', 1, true) then
      raw[f[1] .. ': ' .. err:gsub('^[^:]*:%d+: ', ''):sub(1, 100)] = true
    end
  end
  if n % 200 == 0 then collectgarbage() end
end
print(string.format('done %d calls, %d errors', opts.calls, errors))
local list = {}
for k in pairs(raw) do list[#list + 1] = k end
table.sort(list)
if #list > 0 then print(#list .. " distinct errors read as Lua's own:") end
for _, k in ipairs(list) do print('  ' .. k) end
