-- tools/jit_crash_repro.lua — the LuaJIT trace-recorder bug that crescent works around in
-- lua/crescent/tensor.lua (install_cdata_arith). Plain FFI, no crescent: `luajit
-- tools/jit_crash_repro.lua` segfaults with Debian 12's luajit 2.1.0-beta3 (and luajit2
-- 2.1-20230119); `luajit tools/jit_crash_repro.lua fixed` prints ok.
-- `pointer + number` goes to the __add of the base metatable every cdata shares. For a
-- pointer to an incomplete struct the interpreter refuses pointer arithmetic there and
-- calls the metatype's __add; the recorder records pointer arithmetic anyway, then records
-- the metamethod's bytecode as if it were the caller's, and crashes. The fix replaces the
-- base __add with a Lua function that sends such pointers to the metamethod itself.
local ffi = require 'ffi'
ffi.cdef [[ typedef struct jit_repro_obj jit_repro_obj; double fabs(double); ]]
local obj_ptr = ffi.typeof('jit_repro_obj*')
local function add(a, b)
  local _ = ffi.C.fabs(b)
  return a
end
ffi.metatype('jit_repro_obj', { __add = add })
if arg and arg[1] == 'fixed' then
  local base = debug.getmetatable(ffi.new('int'))
  local ffi_add = base.__add
  base.__add = function(a, b)
    if ffi.istype(obj_ptr, a) then return add(a, b) end
    return ffi_add(a, b)
  end
  jit.flush()
end
local x = ffi.cast(obj_ptr, 4096)
local f = function(a) return a + 1 end
for _ = 1, 100 do local _ = f(x) end
-- other cdata keep the FFI's arithmetic: int64 sums and pointer offsets
local i64, p = ffi.new('int64_t', 5), ffi.cast('char*', 4096)
for _ = 1, 100 do
  assert(i64 + 1 == 6LL and tonumber(ffi.cast('intptr_t', p + 3)) == 4099)
end
print('ok')
