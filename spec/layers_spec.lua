-- layers_spec — the Lua modules under lua/crescent require one another without cycles: a
-- module reaches what it uses by require (or through the cr.<name> façade of
-- lua/crescent/init.lua, counted as a require of that module), never back up through a
-- package that loads it. Prints each cycle it finds, module by module. In C, core/ calls
-- no function that ops/ or autograd/ define (autograd hands core what it needs), and no
-- layer includes the private header of a layer above it.
local root = require('crescent.native_files').root

-- cr.<key> of the façade and the module it loads, as init.lua maps them
local FACADE = {}
for k, name in pairs(H.cr._facade.modules) do FACADE[k] = name end
for k, owner in pairs(H.cr._facade.aliases) do FACADE[k] = H.cr._facade.modules[owner] end
assert(FACADE.nn == 'crescent.nn' and FACADE.train == 'crescent.engine', 'the façade map changed shape')

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
    for dep in src:gmatch("require%s*%(?%s*['\"]([%w_%.]+)['\"]") do
      if mods[dep] and dep ~= name then out[dep] = true end
    end
    for key in without_strings(src):gmatch('%f[%w_]cr%.([%w_]+)') do
      local dep = FACADE[key]
      if dep and dep ~= name then out[dep] = true end
    end
    for dep in src:gmatch("require%s*%(%s*'crescent'%s*%)%.([%w_]+)") do
      if FACADE[dep] and FACADE[dep] ~= name then out[FACADE[dep]] = true end
    end
    edges[name] = out
  end
  return mods, edges
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

describe('the Lua require graph', function()
  it('reads every module and its requires', function()
    local mods, edges = module_graph()
    local n = 0
    for _ in pairs(mods) do n = n + 1 end
    assert.is_true(n > 50)
    assert.is_true(edges['crescent.engine.task']['crescent.engine.trainer'])
    assert.is_true(edges['crescent.hooks.knn']['crescent.data'])   -- through cr.data
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

  it('the headers nest core.h < call.h < node.h < internal.h', function()
    assert.are.same({ 'crescent.h', 'half.h' }, includes('csrc/core/core.h'))
    assert.are.same({ 'core.h' }, includes('csrc/ops/call.h'))
    assert.are.same({ 'call.h' }, includes('csrc/autograd/node.h'))
    assert.are.same({ 'core.h', 'call.h', 'node.h' }, includes('csrc/internal.h'))
  end)
end)
