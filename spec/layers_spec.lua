-- layers_spec — the Lua modules under lua/crescent stand on floors (FLOORS below: tensors
-- and ops < nn, data, optim, dist < SSL numerics < the engine < hooks < methods < recipe
-- assembly < the report) and reach only their own floor and those below, without cycles:
-- by require, by a require built from a string, by a module name kept in a string, or
-- through the cr.<name> façade of lua/crescent/init.lua. Prints the floors and each
-- upward edge or cycle it finds. In C, core/ calls
-- no function that ops/ or autograd/ define (autograd hands core what it needs), and no
-- layer includes the private header of a layer above it.
local root = require('crescent.native_files').root

-- cr.<key> of the façade and the module it loads, as init.lua maps them
local FACADE = {}
for k, name in pairs(H.cr._facade.modules) do FACADE[k] = name end
for k, owner in pairs(H.cr._facade.aliases) do FACADE[k] = H.cr._facade.modules[owner] end
assert(FACADE.nn == 'crescent.nn' and FACADE.train == 'crescent.engine', 'the façade map changed shape')

-- The Lua floors, bottom up: a module requires (or reaches through cr.<name>) modules of
-- its own floor or below, never one above. Each module is on the first floor one of
-- whose patterns its name matches; docs/ARCHITECTURE.md draws the same table.
local FLOORS = {
  { 'tensors, ops, autograd: what cr carries, and the files, config and I/O under them',
    '^crescent$', '^crescent%.ffi$', '^crescent%.native_files$', '^crescent%.util$', '^crescent%.format$',
    '^crescent%.tensor$', '^crescent%.autograd$', '^crescent%.ops%.', '^crescent%.cuda$', '^crescent%.io$',
    '^crescent%.env$', '^crescent%.profiler$', '^crescent%.config$', '^crescent%.config_literal$', '^crescent%.checks$' },
  { 'nn, data, optim, dist', '^crescent%.nn$', '^crescent%.nn%.', '^crescent%.data$', '^crescent%.data%.',
    '^crescent%.optim$', '^crescent%.optim%.', '^crescent%.dist$', '^crescent%.dist%.' },
  { 'SSL numerics: losses, Sinkhorn, momentum, queues, kNN, features, the parts methods share',
    '^crescent%.ssl%.losses$', '^crescent%.ssl%.sinkhorn$', '^crescent%.ssl%.momentum$', '^crescent%.ssl%.queue$',
    '^crescent%.ssl%.knn$', '^crescent%.ssl%.features$', '^crescent%.ssl%.method_parts$' },
  { 'the engine: task, trainer, C loop, checkpoints, meters, stepping and the REPL',
    '^crescent%.engine$', '^crescent%.engine%.', '^crescent%.repl$', '^crescent%.repl%.' },
  { 'hooks', '^crescent%.hooks$', '^crescent%.hooks%.' },
  { 'methods, one file each, and their registry', '^crescent%.ssl$', '^crescent%.ssl%.' },
  { 'recipe assembly', '^crescent%.recipe$', '^crescent%.recipe%.' },
  { 'the run report', '^crescent%.report$', '^crescent%.report%.' },
}

local function floor_of(name)
  for i, f in ipairs(FLOORS) do
    for j = 2, #f do
      if name:match(f[j]) then return i end
    end
  end
end

local function read(path)
  local f = assert(io.open(path))
  local s = f:read('*a')
  f:close()
  return s
end

local function without_comments(src)
  return (src:gsub('%-%-%[(=*)%[.-%]%1%]', ''):gsub('%-%-[^\n]*', ''))
end
local function without_strings(src)
  src = src:gsub('%[(=*)%[.-%]%1%]', '""')
  return (src:gsub("'[^'\n]*'", "''"):gsub('"[^"\n]*"', '""'))
end

-- Every module under lua/crescent and what it reaches: edges[a][b] = how (a require by
-- name; a require built from a string, 'crescent.x.' .. name, which reaches every module
-- under that prefix; a module's name written in a string, as a table of modules to load
-- later holds it; a cr.<name> lookup through the façade). The façade's own table of lazy
-- modules (crescent/init.lua) is the one string table not counted: cr.<name> lookups
-- count instead, where they are made.
local function module_graph()
  local mods = {}
  local p = io.popen('cd ' .. root .. ' && find lua/crescent -name "*.lua" | sort')
  for path in p:lines() do
    local name = path:gsub('^lua/', ''):gsub('%.lua$', ''):gsub('/', '.'):gsub('%.init$', '')
    mods[name] = root .. '/' .. path
  end
  p:close()
  local edges = {}
  for name, path in pairs(mods) do
    local src, out = without_comments(read(path)), {}
    local function add(dep, how)
      if mods[dep] and dep ~= name and not out[dep] then out[dep] = how end
    end
    for dep in src:gmatch("require%s*%(?%s*['\"]([%w_%.]+)['\"]") do add(dep, 'require') end
    for prefix in src:gmatch("require%s*%(%s*['\"]([%w_%.]+%.)['\"]%s*%.%.") do
      for dep in pairs(mods) do
        if dep:sub(1, #prefix) == prefix then add(dep, "require('" .. prefix .. "' .. name)") end
      end
    end
    if name ~= 'crescent' then
      for dep in src:gmatch("['\"](crescent%.[%w_%.]+)['\"]") do add(dep, 'its name in a string') end
    end
    for key in without_strings(src):gmatch('%f[%w_]cr%.([%w_]+)') do
      if FACADE[key] then add(FACADE[key], 'cr.' .. key) end
    end
    for key in src:gmatch("require%s*%(%s*'crescent'%s*%)%.([%w_]+)") do
      if FACADE[key] then add(FACADE[key], "require('crescent')." .. key) end
    end
    edges[name] = out
  end
  return mods, edges
end

-- The edges that go up a floor, as sorted lines, and the modules on no floor.
local function upward_edges(edges)
  local up, lost = {}, {}
  for a, out in pairs(edges) do
    local fa = floor_of(a)
    if not fa then lost[#lost + 1] = a end
    for b, how in pairs(out) do
      local fb = floor_of(b)
      if fa and fb and fb > fa then
        up[#up + 1] = string.format('%s (floor %d) -> %s (floor %d) by %s', a, fa, b, fb, how)
      end
    end
  end
  table.sort(up)
  table.sort(lost)
  return up, lost
end

-- A cycle through the graph as a list of names (first == last), or nil.
local function find_cycle(edges)
  local state, stack = {}, {}
  local function visit(v)
    state[v] = 'open'
    stack[#stack + 1] = v
    local deps = {}
    for w in pairs(edges[v] or {}) do deps[#deps + 1] = w end
    table.sort(deps)
    for _, w in ipairs(deps) do
      if state[w] == 'open' then
        local cycle, on = {}, false
        for _, u in ipairs(stack) do
          if u == w then on = true end
          if on then cycle[#cycle + 1] = u end
        end
        cycle[#cycle + 1] = w
        return cycle
      elseif not state[w] then
        local c = visit(w)
        if c then return c end
      end
    end
    stack[#stack] = nil
    state[v] = 'done'
  end
  local names = {}
  for v in pairs(edges) do names[#names + 1] = v end
  table.sort(names)
  for _, v in ipairs(names) do
    if not state[v] then
      local c = visit(v)
      if c then return c end
    end
  end
end

-- The package of a module: its folder under crescent/ (crescent.nn.layers -> nn), or
-- 'crescent' for the files at the top (what cr carries).
local function package_of(name) return name:match('^crescent%.([%w_]+)%.') or 'crescent' end

-- Private fields read outside their package: a module that defines X._name = ... at the
-- top of its file keeps X._name to its package; every read of X._name in a file of
-- another package is listed, 'reader -> X._name (defined in definer)'. (M, the usual
-- name of a module's own table, is left out: the name says nothing across files; so are
-- metamethods, __index and the like.)
local function private_crossings(sources)
  local defined = {}
  for name, src in pairs(sources) do
    for line in src:gmatch('[^\n]+') do
      local x, field = line:match('^([%a_][%w_]*)%.(_[%w_]+)%s*=')
      if x and x ~= 'M' and not field:match('^__') then defined[x .. '.' .. field] = name end
    end
  end
  local out = {}
  for name, src in pairs(sources) do
    for x, field in src:gmatch('%f[%w_]([%a_][%w_]*)%.(_[%w_]+)') do
      local definer = defined[x .. '.' .. field]
      if definer and package_of(definer) ~= package_of(name) then
        out[#out + 1] = string.format('%s -> %s.%s (defined in %s)', name, x, field, definer)
      end
    end
  end
  table.sort(out)
  return out
end

describe('the Lua require graph', function()
  it('reads every module and its requires', function()
    local mods, edges = module_graph()
    local n = 0
    for _ in pairs(mods) do n = n + 1 end
    assert.is_true(n > 50)
    assert.is_true(edges['crescent.engine.task']['crescent.engine.trainer'] ~= nil)
    assert.are.equal('cr.data', edges['crescent.hooks.knn']['crescent.data'])
    assert.are.equal("require('crescent.ssl.' .. name)", edges['crescent.ssl']['crescent.ssl.swav'])
  end)

  it('has no cycle', function()
    local _, edges = module_graph()
    local cycle = find_cycle(edges)
    assert.is_nil(cycle, cycle and ('a require cycle: ' .. table.concat(cycle, ' -> ')))
  end)

  it('finds a cycle when there is one (the check itself)', function()
    local cycle = find_cycle { a = { b = true }, b = { c = true }, c = { a = true }, d = {} }
    assert.are.same({ 'a', 'b', 'c', 'a' }, cycle)
    assert.is_nil(find_cycle { a = { b = true }, b = {} })
  end)

  it('goes up no floor: each module reaches only its own floor and those below', function()
    local mods, edges = module_graph()
    local count = {}
    for name in pairs(mods) do
      local f = floor_of(name)
      if f then count[f] = (count[f] or 0) + 1 end
    end
    for i = #FLOORS, 1, -1 do print(string.format('  floor %d  %3d modules  %s', i, count[i] or 0, FLOORS[i][1])) end
    local up, lost = upward_edges(edges)
    assert.are.same({}, lost, 'modules on no floor (add them to FLOORS in spec/layers_spec.lua): ' ..
      table.concat(lost, ', '))
    assert.are.same({}, up, 'upward edges:\n' .. table.concat(up, '\n'))
  end)

  it('reads no private field across packages: what packages share is public', function()
    local mods = module_graph()
    local sources = {}
    for name, path in pairs(mods) do sources[name] = without_strings(without_comments(read(path))) end
    local crossings = private_crossings(sources)
    assert.are.same({}, crossings, 'private fields read outside their package:\n' .. table.concat(crossings, '\n'))
    -- the check itself
    assert.are.same({ 'crescent.repl.help -> Tensor._props (defined in crescent.tensor)' }, private_crossings {
      ['crescent.tensor'] = 'Tensor._props = props\nlocal x = Tensor._props',
      ['crescent.repl.help'] = 'local p = Tensor._props',
      ['crescent.nn.layers'] = 'local M = {}\nM._int = 1',
      ['crescent.hooks.knn'] = 'local n = M._int',
    })
  end)

  it('finds an upward edge when there is one (the check itself)', function()
    local up, lost = upward_edges {
      ['crescent.nn.layers'] = { ['crescent.hooks.knn'] = 'require', ['crescent.tensor'] = 'require' },
      ['crescent.hooks.knn'] = { ['crescent.nn'] = 'cr.nn' },
      ['crescent.elsewhere'] = {},
    }
    assert.are.same({ 'crescent.nn.layers (floor 2) -> crescent.hooks.knn (floor 5) by require' }, up)
    assert.are.same({ 'crescent.elsewhere' }, lost)
  end)
end)

describe('the C layers', function()
  local function c_files(dir)
    local p, out = io.popen('cd ' .. root .. ' && ls csrc/' .. dir .. '/*.c'), {}
    for path in p:lines() do out[#out + 1] = path end
    p:close()
    return out
  end

  it('core/ calls nothing that ops/ or autograd/ define', function()
    local defined = {}
    for _, dir in ipairs { 'ops', 'autograd' } do
      for _, path in ipairs(c_files(dir)) do
        for name in read(root .. '/' .. path):gmatch('\n[%w_][%w_ %*]-%f[%w_](cr_[%w_]+)%s*%b()%s*{') do
          defined[name] = path
        end
      end
    end
    assert.truthy(defined.cr_autograd_record and defined.cr_sum_to_shape, 'the definitions were not found')
    for _, path in ipairs(c_files('core')) do
      for name in read(root .. '/' .. path):gmatch('%f[%w_](cr_[%w_]+)%s*%(') do
        assert.is_nil(defined[name], path .. ' calls ' .. name .. ' from ' .. tostring(defined[name]))
      end
    end
  end)

  -- The CUDA backend is a column of kernels under the op layer: it composes nothing
  -- from op entries (cr_op_<name>, with dispatch and autograd), only from its own kernels.
  it('cuda/ calls no op entry', function()
    local p, files = io.popen('cd ' .. root .. ' && ls csrc/cuda/*.c'), 0
    for path in p:lines() do
      files = files + 1
      for name in read(root .. '/' .. path):gmatch('%f[%w_](cr_op_[%w_]+)%s*%(') do
        assert.are.equal('cr_op_name', name, path .. ' calls the op entry ' .. name)
      end
    end
    p:close()
    assert.is_true(files > 10)
  end)

  -- The private headers go one way: core/core.h, then ops/call.h, then autograd/node.h
  -- (internal.h, all three, serves the layers above). A layer's files include no header
  -- of a layer above it; the CUDA backend fills the call table and needs no graph node.
  local function includes(path)
    local out = {}
    for name in read(root .. '/' .. path):gmatch('#include%s*"([^"]+)"') do out[#out + 1] = name:match('[^/]+$') end
    return out
  end
  local ABOVE = {
    core = { 'call.h', 'node.h', 'internal.h' },
    gpu = { 'call.h', 'node.h', 'internal.h' },
    cuda = { 'node.h', 'internal.h' },
  }
  for dir, banned in pairs(ABOVE) do
    it(dir .. '/ includes no header of a layer above it', function()
      local p, files = io.popen('cd ' .. root .. ' && ls csrc/' .. dir .. '/*.c csrc/' .. dir .. '/*.h 2>/dev/null'), 0
      for path in p:lines() do
        files = files + 1
        for _, name in ipairs(includes(path)) do
          for _, b in ipairs(banned) do
            assert.are_not.equal(b, name, path .. ' includes ' .. name)
          end
        end
      end
      p:close()
      assert.is_true(files > 3)
    end)
  end

  -- The call graph between the C layers (each folder under csrc/, its subfolders with it;
  -- core/error.c, the error channel every layer reports through, a layer of its own below
  -- all): the circles in it, found as strongly connected folders. ops <-> autograd is the
  -- one circle, by design (ops record graph nodes; the derivative rules are ops).
  local function c_call_graph()
    local p, files = io.popen('cd ' .. root .. ' && find csrc -name "*.c" -o -name "*.cu" | sort'), {}
    for path in p:lines() do files[#files + 1] = path end
    p:close()
    local function layer(path)
      if path == 'csrc/core/error.c' then return 'error' end
      return path:match('^csrc/([^/]+)/') or 'csrc'
    end
    local function code(path) return (read(root .. '/' .. path):gsub('/%*.-%*/', ''):gsub('//[^\n]*', '')) end
    local defined = {}
    for _, path in ipairs(files) do
      for name in code(path):gmatch('\n[%w_][%w_ %*]-%f[%w_](cr_[%w_]+)%s*%b()%s*{') do
        defined[name] = defined[name] or layer(path)
      end
    end
    local edges = {}
    for _, path in ipairs(files) do
      local from = layer(path)
      edges[from] = edges[from] or {}
      for name in code(path):gmatch('%f[%w_](cr_[%w_]+)%s*%(') do
        local to = defined[name]
        if to and to ~= from then edges[from][to] = edges[from][to] or (path .. ' calls ' .. name) end
      end
    end
    return edges
  end
  -- The folders that reach each other both ways, as sorted 'a <-> b' lines with a call each way.
  local function c_circles(edges)
    local function reaches(a, b)
      local seen, todo = { [a] = true }, { a }
      while #todo > 0 do
        local v = table.remove(todo)
        for w in pairs(edges[v] or {}) do
          if w == b then return true end
          if not seen[w] then seen[w] = true; todo[#todo + 1] = w end
        end
      end
      return false
    end
    local out = {}
    for a in pairs(edges) do
      for b in pairs(edges) do
        if a < b and reaches(a, b) and reaches(b, a) then
          out[#out + 1] = string.format('%s <-> %s (%s; %s)', a, b, edges[a][b] or 'through others',
            edges[b][a] or 'through others')
        end
      end
    end
    table.sort(out)
    return out
  end

  it('has one circle between layers in the call graph: ops <-> autograd', function()
    local edges = c_call_graph()
    assert.truthy(edges.core and edges.core.gpu, 'core calls the GPU loader: the graph was not read')
    assert.truthy(edges.gpu.error, 'the GPU loader reports errors: the graph was not read')
    local circles = c_circles(edges)
    for _, c in ipairs(circles) do print('  ' .. c) end
    assert.are.equal(1, #circles, table.concat(circles, '\n'))
    assert.truthy(circles[1]:match('^autograd <%-> ops '), circles[1])
  end)

  it('finds a circle between layers when there is one (the check itself)', function()
    local circles = c_circles { a = { b = 'x' }, b = { c = 'y' }, c = { a = 'z' }, d = { a = 'w' } }
    assert.are.equal(3, #circles)
    assert.are.same({}, c_circles { a = { b = 'x' }, b = {} })
  end)

  -- A function a debugger steps into has a name grep finds: ## builds only the entries
  -- of the op list's tables (CR_OP_<ENUM>, CR_AMP_<class>), never a function's name.
  it('pastes no names together outside the op tables', function()
    local find = 'find csrc -name "*.c" -o -name "*.h" -o -name "*.cu" -o -name "*.cuh" | sort'
    local p, files = io.popen('cd ' .. root .. ' && ' .. find), 0
    local found = {}
    for path in p:lines() do
      files = files + 1
      local n = 0
      for line in read(root .. '/' .. path):gmatch('[^\n]*') do
        n = n + 1
        local rest = line:gsub('CR_OP_##E', ''):gsub('CR_AMP_##amp', '')
        if rest:find('##', 1, true) then found[#found + 1] = path .. ':' .. n .. ': ' .. line end
      end
    end
    p:close()
    assert.is_true(files > 100)
    assert.are.same({}, found, table.concat(found, '\n'))
  end)

  it('the headers nest core.h < call.h < node.h < internal.h', function()
    assert.are.same({ 'crescent.h', 'half.h' }, includes('csrc/core/core.h'))
    assert.are.same({ 'core.h' }, includes('csrc/ops/call.h'))
    assert.are.same({ 'call.h' }, includes('csrc/autograd/node.h'))
    assert.are.same({ 'core.h', 'call.h', 'node.h' }, includes('csrc/internal.h'))
  end)
end)
