-- crescent.native_files — the one answer to "where is native file X" (libcrescent.so,
-- crescent_cdef.h, crescent_loop.so, libcrescent_mpi.so). The native files of one build sit
-- together in one folder (libcrescent.so finds libcrescent_cuda.so beside itself, and the
-- other libraries find libcrescent.so through their $ORIGIN rpath). That folder is the first
-- of:
--   1. $CRESCENT_ROOT/build           the checkout the environment names
--   2. <checkout>/build               these modules are a checkout's lua/crescent/
--      (in 1 and 2, $CRESCENT_BUILD instead of build/ when it is set: make sanitize)
--   3. <PREFIX>/lib/lua/5.1/crescent  these modules are installed in <PREFIX>/share/lua/5.1/
--                                     (`make install` and LuaRocks lay files out so)
--   4. <LIBDIR>/crescent              <LIBDIR>/?.so is on package.cpath (LUA_CPATH)
-- 1 and 2 are chosen whether or not build/ is made yet (the error then says to run make);
-- 3 and 4 only where libcrescent.so is.
--
--   local native_files = require 'crescent.native_files'
--   native_files.path('crescent_loop.so')  -- the file's path, or an error naming where it
--                                          -- looked and the fix
--   native_files.find('libcrescent_mpi.so') -- the path, or nil and that message
--   native_files.root                      -- the checkout (for its .git); nil when installed
--   native_files.dir                       -- the folder; nil when none was found
local M = {}

local function exists(path)
  local f = io.open(path, 'rb')
  if f then f:close() end
  return f ~= nil
end

-- the folder of crescent's Lua modules, as Lua found this file ('./lua/crescent', '/usr/...')
local modules = debug.getinfo(1, 'S').source:match('^@(.*)/[^/]+$') or '.'
if modules:sub(1, 1) ~= '/' and modules:sub(1, 1) ~= '.' then modules = './' .. modules end

local looked = {}       -- the places tried, for the error when none holds the files
local fix               -- how to make the missing files, for every error below

-- CRESCENT_BUILD: a checkout's build folder other than build/ (make sanitize's)
local function in_checkout(root, how)
  local build = os.getenv('CRESCENT_BUILD')
  M.root, M.dir = root, build ~= nil and build ~= '' and build or root .. '/build'
  fix = 'run `make` in ' .. root .. how
end

local checkout = modules:match('^(.*)/lua/crescent$')
local named = os.getenv('CRESCENT_ROOT')
if named and named ~= '' then
  in_checkout(named, ' (the checkout CRESCENT_ROOT names)')
elseif checkout and exists(checkout .. '/csrc/include/crescent.h') then
  in_checkout(checkout, '')
else
  local prefix = modules:match('^(.*)/share/lua/5%.1/crescent$')
  local beside = prefix and prefix .. '/lib/lua/5.1/crescent'
  if beside then looked[#looked + 1] = beside .. '/libcrescent.so' end
  if beside and exists(beside .. '/libcrescent.so') then
    M.dir = beside
  else
    local lib, tried = package.searchpath('crescent.libcrescent', package.cpath)
    M.dir = lib and lib:match('^(.*)/libcrescent%.so$')
    if not lib then
      for file in tried:gmatch("no file '([^']+/crescent/libcrescent%.so)'") do looked[#looked + 1] = file end
    end
  end
  fix = string.format('install crescent again from its checkout: `make install PREFIX=%s` or ' ..
    '`luarocks make --tree %s rocks/crescent-scm-1.rockspec` (the Lua modules in use are in %s)',
    prefix or '<prefix>', prefix or '<tree>', modules)
  if not M.dir then
    fix = fix .. ', and put its <prefix>/lib/lua/5.1/?.so on LUA_CPATH (`eval "$(luarocks path)"` does), ' ..
      'or set CRESCENT_ROOT to a built checkout'
  end
end

-- find(name) -> the path of native file `name`, or nil and a message naming where it looked
-- and the fix.
function M.find(name)
  if not M.dir then
    return nil, string.format('crescent: cannot find its native files (crescent/libcrescent.so); looked in %s; %s',
      table.concat(looked, ', '), fix)
  end
  local path = M.dir .. '/' .. name
  if exists(path) then return path end
  return nil, string.format('crescent: %s is missing; %s', path, fix)
end

-- path(name) -> the path of native file `name`; raises find's message when it is missing.
function M.path(name)
  local path, missing = M.find(name)
  if not path then error(missing, 0) end
  return path
end

-- the sentence that says how to rebuild the native files (for a file that is there but
-- does not load)
M.fix = fix

return M
