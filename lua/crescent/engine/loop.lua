-- crescent.engine.loop — loads the C step loop (build/crescent_loop.so, a Lua C module:
-- csrc/loop/loop.c). It is a lua_CFunction module rather than FFI so that the loop can
-- call Lua (train steps, hooks) through the Lua C API, which LuaJIT allows from any trace.
local native_files = require 'crescent.native_files'
local path = native_files.path('crescent_loop.so')
local open, err = package.loadlib(path, 'luaopen_crescent_loop')
if not open then
  error('crescent: cannot load the step loop ' .. path .. ' (' .. tostring(err) .. '); ' .. native_files.fix, 0)
end
return open()
