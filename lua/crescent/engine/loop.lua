-- crescent.engine.loop — loads the C step loop (build/crescent_loop.so, a Lua C module:
-- csrc/loop/loop.c). It is a lua_CFunction module rather than FFI so that the loop can
-- call Lua (train steps, hooks) through the Lua C API, which LuaJIT allows from any trace.
local root = require('crescent.ffi').root

local path = root .. '/build/crescent_loop.so'
local open, err = package.loadlib(path, 'luaopen_crescent_loop')
if not open then
  error('crescent: cannot load the step loop ' .. path .. ' (' .. tostring(err) .. '); run `make` in ' .. root, 0)
end
return open()
