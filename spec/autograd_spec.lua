-- autograd_spec — the engine: accumulation into .grad, retain_graph, no_grad, detach,
-- hooks, retain_grad, Lua-defined Functions, the in-place guard, and gradchecks of the
-- core ops (arithmetic with broadcasting, views, joins, sum/mean, casts).
local cr = H.cr

describe('autograd engine', function()
  it('accumulates grads across backward calls', function()
    local x = cr.tensor({ 1, 2, 3 }, { dtype = 'f64', requires_grad = true })
    ;(x * x):sum():backward()
    assert.same({ 2, 4, 6 }, x.grad:totable())
    ;(x * 3):sum():backward()
    assert.same({ 5, 7, 9 }, x.grad:totable())
    x.grad = nil
    assert.is_nil(x.grad)
  end)

  it('refuses a second backward unless retain_graph was given', function()
    local x = cr.tensor({ 1, 2 }, { dtype = 'f64', requires_grad = true })
    local y = (x * x):sum()
    y:backward({ retain_graph = true })
    y:backward()
    assert.same({ 4, 8 }, x.grad:totable())
    H.assert_error(function() y:backward() end, 'second time', 'retain_graph')
  end)

  it('records nothing under no_grad and cuts the graph at detach', function()
    local x = cr.ones(3, { requires_grad = true })
    local y = cr.no_grad(function() return x * 2 end)
    assert.is_false(y.requires_grad)
    local z = (x * 2):detach()
    assert.is_false(z.requires_grad)
    assert.is_true(z:same_storage(z))
    H.assert_error(function() y:sum():backward() end, 'does not require grad')
  end)

  it('catches saved tensors modified in place', function()
    local x = cr.ones(3, { requires_grad = true })
    local a = cr.ones(3)
    local y = (x * a):sum()
    a:fill_(2)
    H.assert_error(function() y:backward() end, 'modified by an in-place operation')
  end)

  it('refuses in-place writes to tensors that require grad', function()
    local x = cr.ones(3, { requires_grad = true })
    H.assert_error(function() x:fill_(1) end, 'in-place', 'no_grad')
    cr.no_grad(function() x:fill_(2) end)
    assert.same({ 2, 2, 2 }, x:totable())
  end)

  it('runs hooks, which may replace the grad', function()
    local x = cr.tensor({ 1, 2 }, { dtype = 'f64', requires_grad = true })
    local seen
    local h = x:register_hook(function(g) seen = g:totable(); return g * 10 end)
    local y = x * 3
    local ys
    y:register_hook(function(g) ys = g:totable() end)
    y:sum():backward()
    assert.same({ 1, 1 }, ys)
    assert.same({ 3, 3 }, seen)
    assert.same({ 30, 30 }, x.grad:totable())
    h:remove()
    x.grad = nil
    ;(x * 3):sum():backward()
    assert.same({ 3, 3 }, x.grad:totable())
  end)

  it('fires post-accumulate hooks after .grad is set', function()
    local x = cr.ones(2, { requires_grad = true })
    local got
    x:register_post_accumulate_grad_hook(function(leaf) got = leaf.grad:totable() end)
    ;(x * 4):sum():backward()
    assert.same({ 4, 4 }, got)
  end)

  it('keeps grads of non-leaves on retain_grad', function()
    local x = cr.ones(2, { requires_grad = true })
    local y = (x * 2):retain_grad()
    ;(y * y):sum():backward()
    assert.same({ 4, 4 }, y.grad:totable())
  end)

  it('runs Lua-defined Functions', function()
    local Cube = cr.Function {
      forward = function(ctx, x) ctx:save_for_backward(x); return x * x * x end,
      backward = function(ctx, g) local x = ctx.saved[1]; return g * x * x * 3 end,
    }
    local x = cr.tensor({ 1, 2 }, { dtype = 'f64', requires_grad = true })
    local y = Cube(x)
    assert.equal('LuaFunction', y.grad_fn)
    y:sum():backward()
    assert.same({ 3, 12 }, x.grad:totable())
    H.gradcheck(function(a) return Cube(a) end, { cr.tensor({ 0.5, -1.5 }) })
  end)

  it('frees graphs deep enough to overflow a recursive free', function()
    local x = cr.ones(1, { requires_grad = true })
    local y = x
    for _ = 1, 20000 do y = y * 1 end
    y:sum():backward()
    assert.equal(1, x.grad:item())
  end)
end)

describe('gradcheck of core ops', function()
  local a = function() return cr.tensor({ { 0.3, -1.2, 2.0 }, { 1.1, 0.7, -0.4 } }) end
  local row = function() return cr.tensor({ 0.5, 1.5, -2.5 }) end
  it('add/sub/mul/div with broadcasting', function()
    H.gradcheck(function(x, y) return x + y end, { a(), row() })
    H.gradcheck(function(x, y) return x - y end, { a(), row() })
    H.gradcheck(function(x, y) return x * y end, { a(), row() })
    H.gradcheck(function(x, y) return x / y end, { a(), row() })
    H.gradcheck(function(x) return -x * 2 + 1 end, { a() })
  end)
  it('views, slices and joins', function()
    H.gradcheck(function(x) return x:t():contiguous():view(-1) end, { a() })
    H.gradcheck(function(x) return x:permute(1, 0):reshape(2, 3) end, { a() })
    H.gradcheck(function(x) return x:unsqueeze(0):expand(4, 2, 3) end, { a() })
    H.gradcheck(function(x) return x:slice(1, 0, 3, 2) end, { a() })
    H.gradcheck(function(x) return x:select(0, 1) end, { a() })
    H.gradcheck(function(x, y) return cr.cat({ x, y:view(1, 3) }, 0) end, { a(), row() })
    H.gradcheck(function(x, y) return cr.stack({ x:select(0, 0), y }, 1) end, { a(), row() })
    H.gradcheck(function(x) return x:split(2, 1)[2] end, { a() })
  end)
  it('sum, mean and casts', function()
    H.gradcheck(function(x) return x:sum(1) end, { a() })
    H.gradcheck(function(x) return x:mean(0, true) end, { a() })
    H.gradcheck(function(x) return x:sum() end, { a() })
    H.gradcheck(function(x) return x:float():double() * 1 end, { a() }, { eps = 1e-3, atol = 1e-2 })
  end)
end)

describe('the LuaJIT recorder workaround (tools/jit_crash_repro.lua)', function()
  local function run_child(script)
    local path = os.tmpname()
    local fh = assert(io.open(path, 'w'))
    fh:write(script)
    fh:close()
    local p = io.popen('luajit ' .. path .. ' 2>&1; echo " status=$?"')
    local out = p:read('*a')
    p:close()
    os.remove(path)
    return out
  end

  it('the base cdata __add/__sub send tensors to crescent and other cdata to the FFI', function()
    local ffi = require 'ffi'
    local base = debug.getmetatable(ffi.new('int'))
    assert.is_true(base.__crescent_arith)
    local x = cr.ones(2)
    assert.are.same({ 3, 3 }, base.__add(x, 2):totable())
    assert.are.same({ 1, 1 }, base.__sub(2, x):totable())
    assert.are.equal(6LL, base.__add(ffi.new('int64_t', 5), 1))
    local p = ffi.cast('char*', 4096)
    assert.are.equal(4099, tonumber(ffi.cast('intptr_t', base.__add(p, 3))))
    assert.are.equal(3LL, base.__sub(p + 3, p))
  end)

  it('the plain-FFI reproduction runs with the fix', function()
    local out = run_child('arg = { "fixed" }; dofile("tools/jit_crash_repro.lua")')
    assert.truthy(out:find('^ok%s+status=0'), 'the child run ended with: ' .. out)
  end)

  it('tensor + number and number - tensor in compiled code, traces started at every loop', function()
    local out = run_child [[
      package.path = 'lua/?.lua;lua/?/init.lua;' .. package.path
      local cr = require 'crescent'
      jit.opt.start('hotloop=1', 'hotexit=1')
      local x = cr.ones(2, 3)
      local total = 0
      for i = 1, 200 do
        local f = function(a) return (a + i) - (2 - a) + (a - 1) end -- i everywhere
        for _ = 0, 5 do total = total + f(x):sum():item() end
      end
      io.write(total == 36 * (200 * 201 / 2) and 'ok' or ('wrong total ' .. total))
    ]]
    assert.truthy(out:find('ok status=0', 1, true), 'the child run ended with: ' .. out)
  end)
end)

describe('cr.saved_memory: what a graph keeps for its backward', function()
  local MB = 2 ^ 20
  it('counts each op\'s saved storages once, and mul and div keep an operand only for the other\'s grad', function()
    local x = cr.randn({ 256, 1024 }):requires_grad_()   -- 1 MiB of f32
    local a = x + 1                                      -- not a leaf: counted as saved
    local w = cr.randn({ 256, 1024 })                    -- needs no grad
    local r = cr.saved_memory(a * w)
    assert.are.equal('mul', r[1].op)
    assert.are.equal(1 * MB, r.total)                    -- w, for a's grad; not a
    assert.are.equal(1, r[1].tensors)
    local v = cr.randn({ 256, 1024 }):requires_grad_()
    local b = v + 1
    assert.are.equal(2 * MB, cr.saved_memory(a * b).total)
    local d = cr.saved_memory(a / 3)                      -- a's grad needs the divisor only
    assert.is_true(d.total <= 64, 'a / 3 kept ' .. d.total .. ' bytes')
    assert.are.equal(2 * MB, cr.saved_memory(a / b).total)
    -- a storage reached twice (a * b, then that times b) counts once
    assert.are.equal(3 * MB, cr.saved_memory(a * b * b).total)
    -- a leaf's value is counted apart: the model holds it anyway
    local leafy = cr.saved_memory(x * v)
    assert.are.equal(0, leafy.total)
    assert.are.equal(2 * MB, leafy.leaf_bytes)
    assert.are.equal(0, #cr.saved_memory(cr.ones(3)))   -- no graph: nothing
  end)

  it('gives the same grads when an operand is not kept', function()
    local x0, w = cr.randn({ 5, 7 }, { dtype = 'f64' }), cr.randn({ 5, 7 }, { dtype = 'f64' }) + 3
    assert.is_true(H.gradcheck(function(x) return x * w end, { x0 }))
    assert.is_true(H.gradcheck(function(x) return x / w end, { x0 }))
    assert.is_true(H.gradcheck(function(v) return w / v end, { w:clone() }))
    assert.is_true(H.gradcheck(function(v) return x0 * v end, { w:clone() }))
  end)

  it('DropPath keeps no copy of its input', function()
    local dp = cr.nn.DropPath(0.5)
    local x = cr.randn({ 64, 50, 192 }):requires_grad_()
    local r = cr.saved_memory(dp(x))
    assert.is_true(r.total < 1024, 'DropPath kept ' .. r.total .. ' bytes')
  end)

  it('refuses what is not a tensor', function()
    H.assert_error(function() cr.saved_memory(3) end, 'saved_memory: expected a tensor, got number')
  end)
end)
