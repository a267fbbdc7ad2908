-- tools/jit_crash_repro.lua — reproduces the LuaJIT trace-recorder crash that made
-- make test run its specs with the JIT off (see tools/run_specs.sh and docs/ARCHITECTURE.md).
-- Run from the repository root, several times: `luajit tools/jit_crash_repro.lua 10`
-- segfaults in most runs with Debian 12's luajit 2.1.0-beta3 (and luajit2 2.1-20230119),
-- never with `luajit -joff`. Gradchecks run inside coroutines trigger it; the
-- crash is inside the recorder (lj_ir_kgc on a TValue that holds no object).
package.path = 'lua/?.lua;lua/?/init.lua;spec/?.lua;' .. package.path
local H = dofile('spec/helper.lua')
local cr = H.cr
local a = function() return cr.tensor({ { 0.3, -1.2, 2.0 }, { 1.1, 0.7, -0.4 } }) end
local row = function() return cr.tensor({ 0.5, 1.5, -2.5 }) end
local tests = {
  function() H.gradcheck(function(x, y) return x + y end, { a(), row() }) end,
  function() H.gradcheck(function(x, y) return x - y end, { a(), row() }) end,
  function() H.gradcheck(function(x, y) return x * y end, { a(), row() }) end,
  function() H.gradcheck(function(x, y) return x / y end, { a(), row() }) end,
  function() H.gradcheck(function(x) return -x * 2 + 1 end, { a() }) end,
}
for _ = 1, tonumber(arg[1] or 30) do
  for _, t in ipairs(tests) do
    local co = coroutine.create(t)
    assert(coroutine.resume(co))
    co = nil -- luacheck: ignore
    collectgarbage('collect')
  end
end
print('ok')
