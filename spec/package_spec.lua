-- package_spec — crescent installed rather than run from its checkout. `make install
-- PREFIX=<tmp>` and `luarocks make --tree <tmp> rocks/crescent-scm-1.rockspec` each give a
-- tree from which luajit, started in another folder with only that tree on its paths (not
-- the checkout), loads crescent, computes a gradient and calls the C step loop's module;
-- each tree holds the native files of the build and no build objects; and with
-- libcrescent.so gone the error names where it looked and how to install again. With the
-- build up to date this takes a few seconds (luarocks runs `make`, then a no-op).
local native_files = require 'crescent.native_files'

-- sh(cmd) -> its output (stdout and stderr) and exit code
local function sh(cmd)
  local p = io.popen('(' .. cmd .. ') 2>&1; echo "exit=$?"')
  local out = p:read('*a')
  p:close()
  return out:gsub('exit=%d+%s*$', ''), tonumber(out:match('exit=(%d+)%s*$'))
end

local function ok_sh(cmd)
  local out, code = sh(cmd)
  assert(code == 0, cmd .. '\n' .. out)
  return out
end

local checkout = ok_sh('cd ' .. native_files.root .. ' && pwd'):match('[^\n]+')
local have_luarocks = select(2, sh('command -v luarocks')) == 0

-- what luajit prints when it loads crescent from an installed tree
local PROBE = [[
local cr = require 'crescent'
local w = cr.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = 'f32', requires_grad = true })
local y = cr.matmul(w, w):sum()
y:backward()
local loop = require 'crescent.engine.loop'
print('sum=' .. y:item() .. ' grad=' .. w.grad:sum():item() .. ' loop_now=' .. type(loop.now()))
print('modules=' .. package.searchpath('crescent', package.path))
print('native=' .. require('crescent.native_files').dir)
]]

-- Runs PROBE with luajit in `away`, a folder outside the checkout, after the shell fragment
-- `set_paths` (assignments, or a command and &&) sets the Lua paths, CRESCENT_ROOT unset.
local function run_probe(set_paths, away)
  ok_sh("mkdir -p '" .. away .. "'")
  local f = assert(io.open(away .. '/probe.lua', 'w'))
  f:write(PROBE)
  f:close()
  return sh(string.format("unset CRESCENT_ROOT; cd '%s' && %s luajit probe.lua", away, set_paths))
end

-- the files a tree's native folder must hold: those the build made (oneDNN's library among them when
-- the build has it), no more
local function expected_native_files()
  local names = { 'crescent_cdef.h', 'crescent_loop.so', 'libcrescent.so' }
  for _, optional in ipairs { 'libcrescent_cuda.so', 'libcrescent_mpi.so', 'libdnnl.so.3' } do
    if native_files.find(optional) then names[#names + 1] = optional end
  end
  table.sort(names)
  return table.concat(names, ' ')
end

local function assert_installed_tree(tree, probe_out)
  local lib = tree .. '/lib/lua/5.1/crescent'
  assert.truthy(probe_out:find('sum=54 grad=40 loop_now=number', 1, true), probe_out)
  assert.truthy(probe_out:find('modules=' .. tree .. '/share/lua/5.1/crescent/init.lua', 1, true), probe_out)
  assert.truthy(probe_out:find('native=' .. lib, 1, true), probe_out)
  assert.equal(expected_native_files(), (ok_sh("ls '" .. lib .. "' | sort | tr '\\n' ' '"):gsub('%s+$', '')))
  -- the REPL launcher, unchanged, once the checkout has one
  local launcher = checkout .. '/bin/crescent'
  if select(2, sh("test -f '" .. launcher .. "'")) == 0 then
    ok_sh(string.format("test -x '%s/bin/crescent' && cmp '%s' '%s/bin/crescent'", tree, launcher, tree))
  end
  -- nothing of build/: no objects, flags file, Python venv or build folder
  assert.equal('', ok_sh(string.format("find '%s' \\( -name '*.o' -o -name obj -o -name flags -o -name pyenv " ..
    "-o -name build \\) -print", tree)))
end

describe('packaging', function()
  if H.sanitized then
    it('is checked by make test', function() pending('make install and luarocks build the normal library') end)
    return
  end
  local tmp
  lazy_setup(function() tmp = ok_sh('mktemp -d /tmp/crescent_package.XXXXXX'):match('[^\n]+') end)
  lazy_teardown(function() if tmp then os.execute("rm -rf '" .. tmp .. "'") end end)

  -- LUA_PATH on the tree's modules; LUA_CPATH on its lib folder unless `no_cpath`
  local function lua_paths(tree, no_cpath)
    return string.format("LUA_PATH='%s/share/lua/5.1/?.lua;%s/share/lua/5.1/?/init.lua;;' LUA_CPATH='%s;;'",
      tree, tree, no_cpath and '' or tree .. '/lib/lua/5.1/?.so')
  end

  local function make_install(tree)
    ok_sh(string.format("cd '%s' && make --no-print-directory install PREFIX='%s'", checkout, tree))
  end

  it('make install PREFIX=<tree> gives a tree crescent loads and computes from', function()
    local tree = tmp .. '/prefix'
    make_install(tree)
    local out, code = run_probe(lua_paths(tree), tmp .. '/away')
    assert.equal(0, code, out)
    assert_installed_tree(tree, out)
  end)

  it('finds the native files beside <PREFIX>/share/lua/5.1 when LUA_CPATH does not name them', function()
    local tree = tmp .. '/beside'
    make_install(tree)
    local out, code = run_probe(lua_paths(tree, true), tmp .. '/away')
    assert.equal(0, code, out)
    assert_installed_tree(tree, out)
  end)

  it('says where it looked and how to install again when libcrescent.so is missing', function()
    local tree = tmp .. '/broken'
    make_install(tree)
    os.remove(tree .. '/lib/lua/5.1/crescent/libcrescent.so')
    local out, code = run_probe(lua_paths(tree), tmp .. '/away')
    assert.are_not.equal(0, code)
    assert.truthy(out:find('crescent: cannot find its native files', 1, true), out)
    assert.truthy(out:find('looked in ' .. tree .. '/lib/lua/5.1/crescent/libcrescent.so', 1, true), out)
    assert.truthy(out:find('`make install PREFIX=' .. tree .. '`', 1, true), out)
  end)

  it('luarocks make --tree <tree> rocks/crescent-scm-1.rockspec installs a working rock, offline', function()
    if not have_luarocks then pending('luarocks is not installed (apt-get install luarocks, or make deps)'); return end
    local tree = tmp .. '/rocks'
    -- LuaJIT reads the Lua 5.1 folders; the rockspec declares no rock a fetch could bring
    ok_sh(string.format("cd '%s' && luarocks --lua-version=5.1 make --tree '%s' rocks/crescent-scm-1.rockspec",
      checkout, tree))
    local env = string.format('eval "$(luarocks --lua-version=5.1 --tree \'%s\' path)" &&', tree)
    local out, code = run_probe(env, tmp .. '/away')
    assert.equal(0, code, out)
    assert_installed_tree(tree, out)
  end)
end)
