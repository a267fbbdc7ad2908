-- tools/jit_crash_repro.lua — the LuaJIT trace-recorder bug that crescent works around in
-- lua/crescent/tensor.lua (mt.__add/__sub). Plain FFI, no crescent: `luajit
-- tools/jit_crash_repro.lua` segfaults with Debian 12's luajit 2.1.0-beta3 (and luajit2
-- 2.1-20230119); `luajit tools/jit_crash_repro.lua fixed` prints ok.
-- `pointer + number` on a pointer to an incomplete struct is recorded as pointer
-- arithmetic first; the recorder falls back to __add with the number's record broken,
-- and passing that number to a C function inside the metamethod crashes it.
local ffi = require 'ffi'
ffi.cdef [[ typedef struct jit_repro_obj jit_repro_obj; double fabs(double); ]]
local fixed = arg and arg[1] == 'fixed'
ffi.metatype('jit_repro_obj', {
  __add = function(a, b)
    if fixed and type(b) == 'number' then b = b + 0 end -- a fresh record for the number
    local _ = ffi.C.fabs(b)
    return a
  end,
})
local x = ffi.cast('jit_repro_obj*', 4096)
local f = function(a) return a + 1 end
for _ = 1, 100 do local _ = f(x) end
print('ok')
