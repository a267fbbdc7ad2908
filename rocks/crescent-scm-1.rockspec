-- crescent-scm-1.rockspec — installs crescent from its checkout into a LuaRocks tree:
--   luarocks make rocks/crescent-scm-1.rockspec               (run in the checkout's root)
--   luarocks make --tree ~/rocks rocks/crescent-scm-1.rockspec && eval "$(luarocks --tree ~/rocks path)"
-- The Makefile does the work (`make`, then `make install` into the rock's folders), so a
-- rock holds what `make install` installs: lua/crescent/ and the native files of the build.
rockspec_format = "3.0"
package = "crescent"
version = "scm-1"

-- crescent has no public address yet. `luarocks make` builds the folder it runs in and never
-- fetches source.url, so the url names just that: the git checkout of the current folder.
source = {
  url = "git+file://.",
}

description = {
  summary = "Deep-learning training toolkit: a C core scripted from LuaJIT",
  detailed = [[
Tensors, autograd, CPU (oneDNN) and CUDA kernels, collectives (MPI, NCCL), fused
optimizers and a C step loop, scripted from LuaJIT: models, self-supervised losses
(SwAV, MoCo, SimCLR), hooks and recipes.]],
}

-- LuaJIT only (the binding is its FFI); LuaRocks knows it as Lua 5.1. The other needs are
-- Debian packages that `make deps` installs: the C libraries of the build (oneDNN, zlib,
-- libturbojpeg, libpng, OpenMPI), lua-cjson, and busted for the specs. They are not declared
-- as rocks: a rock dependency on lua-cjson would make LuaRocks fetch it from luarocks.org
-- although Debian's is installed, and one list of dependencies (the Makefile's) is enough.
dependencies = {
  "lua ~> 5.1",
}

build = {
  type = "make",
  -- No CFLAGS from LuaRocks (-O2 -fPIC): the Makefile picks its own (-O3, ARCH=-march=native;
  -- `make ARCH=...` to change it), so this build is the checkout's own and `make` after it
  -- rebuilds nothing. LuaRocks warns that CFLAGS is not passed; that is this choice.
  build_variables = {},
  install_variables = {
    PREFIX = "$(PREFIX)",
    LUADIR = "$(LUADIR)",
    LIBDIR = "$(LIBDIR)",
    BINDIR = "$(BINDIR)",
  },
}

-- bin/crescent is a LuaJIT script: installed as it is, not wrapped in a shell script that
-- would start it with LuaRocks' Lua 5.1 interpreter.
deploy = {
  wrap_bin_scripts = false,
}

-- `luarocks test` runs busted with .busted's settings (under luajit). LuaRocks insists on busted
-- as a rock and installs it from luarocks.org first (Debian's busted does not count, not even
-- listed in rocks_provided); without the network, `make test` runs the same specs with Debian's.
test = {
  type = "busted",
}
