-- crescent.ffi — loads libcrescent.so and declares the C API from the preprocessed
-- public header (crescent_cdef.h), so nothing is hand-copied into Lua. Where the two files
-- are (a checkout's build/ or an install's lib folder) is crescent.native_files' answer.
local ffi = require 'ffi'
local native_files = require 'crescent.native_files'

local function read(path)
  local f = assert(io.open(path, 'r'))
  local s = f:read('*a')
  f:close()
  return s
end

ffi.cdef(read(native_files.path('crescent_cdef.h')))

local lib = native_files.path('libcrescent.so')
local ok, C = pcall(ffi.load, lib)
if not ok then
  error('crescent: cannot load ' .. lib .. ' (' .. tostring(C) .. '); ' .. native_files.fix, 0)
end

return { C = C }
