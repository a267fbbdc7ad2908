-- crescent.ffi — loads libcrescent.so and declares the C API from the preprocessed
-- public header (build/crescent_cdef.h), so nothing is hand-copied into Lua.
local ffi = require 'ffi'

local here = debug.getinfo(1, 'S').source:match('^@(.*)/lua/crescent/ffi%.lua$') or '.'
local root = os.getenv('CRESCENT_ROOT') or here

local function read(path)
  local f = io.open(path, 'r')
  if not f then return nil end
  local s = f:read('*a')
  f:close()
  return s
end

local cdef = read(root .. '/build/crescent_cdef.h')
if not cdef then
  error('crescent: ' .. root .. '/build/crescent_cdef.h is missing; run `make` in ' .. root, 0)
end
ffi.cdef(cdef)

local ok, C = pcall(ffi.load, os.getenv('CRESCENT_LIB') or (root .. '/build/libcrescent.so'))
if not ok then
  error('crescent: cannot load libcrescent.so (' .. tostring(C) .. '); run `make` in ' .. root, 0)
end

return { C = C, root = root }
