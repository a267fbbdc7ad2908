-- spec/input_guards_spec.lua — bad input never crashes and never lies, one
-- case per defect found by fuzzing (spec/bad_input_spec.lua is the generic battery): a
-- foreign object where a tensor goes is refused by name at the Lua binding, in every
-- cr.* function and Tensor method (child-process fuzz: spec/fixtures/foreign_args.lua);
-- a freed tensor is refused by the C entry points (a tag in the tensor's first word);
-- shape arithmetic never wraps; in-place writes refuse repeated elements; a FIFO is not
-- waited on; messages show the values given; the cast rules of core/dtype.c.
local cr = H.cr
local ffi = require 'ffi'

describe('a foreign object where a tensor goes', function()
  it('is refused by every cr.* function and Tensor method, in any of the first three places, without a crash', function()
    local out, code = H.shell('luajit spec/fixtures/foreign_args.lua')
    local last = out:match('([^\n]*)\n[^\n]*$') or ''
    assert.are.equal(0, code, 'crashed after: ' .. last)
    local calls = tonumber(out:match('done (%d+)'))
    assert.is_true(calls and calls > 3000, 'calls made: ' .. tostring(calls))
  end)

  it('and any bad arguments: 3,000 random calls of the API (tools/fuzz_api.lua) end in errors in our words', function()
    local out, code = H.shell('luajit tools/fuzz_api.lua calls=3000 seed=7')
    local last_call = out:match('.*\n(call [^\n]*)') or ''
    assert.are.equal(0, code, 'crashed at: ' .. last_call)
    assert.is_truthy(out:find('done 3000 calls', 1, true), out:sub(-300))
    assert.is_falsy(out:find("read as Lua's own", 1, true), out:match("%d+ distinct errors read as Lua's own:.*"))
  end)

  it('gets an error naming the op and what came instead', function()
    for _, bad in ipairs { io.stdout, newproxy(), ffi.new('int[4]') } do
      for _, name in ipairs { 'clone', 'contiguous', 'detach', 'cpu', 'totable', 'zero_', 'float', 'double', 'half',
                              'bfloat16', 'int', 'long', 'byte', 'bool', 'is_pinned', 'pin_memory', 'data_ptr', 'free',
                              'item' } do
        H.assert_error(function() cr.Tensor[name](bad) end, name .. ": argument 'self' must be a tensor, got " .. type(bad))
      end
      H.assert_error(function() cr.clone(bad) end, "clone: argument 'self' must be a tensor")
      H.assert_error(function() cr.ones(2):mul_(bad) end, 'mul_: expected a tensor or a number, got ' .. type(bad))
      H.assert_error(function() cr.ones(2, 3):expand_as(bad) end, "expand_as: argument 'other' must be a tensor")
      H.assert_error(function() cr.embedding(bad, cr.ones(4, 2)) end, 'index must be an integer tensor')
    end
  end)

  it('a freed tensor is refused by the ops, not read', function()
    local t = cr.ones(3)
    t:free()
    H.assert_error(function() return t:sum() end, "sum: argument 'self' is not a live tensor (a freed one")
    H.assert_error(function() return cr.clone(t) end, 'not a live tensor')
    H.assert_error(function() return cr.ones(3):add(t) end, 'not a live tensor')
  end)

  it('a freed tensor is refused by its properties and metadata too, and prints as freed', function()
    local t = cr.ones(2, 3):requires_grad_()
    assert.is_true(t:free())
    for _, k in ipairs { 'shape', 'dtype', 'device', 'ndim', 'grad', 'requires_grad', 'is_leaf', 'grad_fn' } do
      H.assert_error(function() return t[k] end, 'tensor.' .. k .. ': not a live tensor (it was freed)')
    end
    for _, m in ipairs { 'numel', 'dim', 'size', 'stride', 'is_contiguous', 'data_ptr', 'totable', 'item' } do
      H.assert_error(function() return t[m](t) end, m .. ': not a live tensor (it was freed)')
    end
    H.assert_error(function() return #t end, '#: not a live tensor')
    H.assert_error(function() t.grad = cr.ones(2, 3) end, 'not a live tensor')
    assert.are.equal('[freed tensor]', tostring(t))
  end)

  it('free() leaves views working, and keeps a tensor that the graph still holds usable', function()
    local base = cr.arange(4):float()
    local view = base:view(2, 2)
    assert.is_true(base:free())   -- the view keeps the storage, not the base
    H.assert_error(function() return base:sum() end, 'not a live tensor')
    assert.are.equal(6, view:sum():item())
    local x = cr.ones(3):requires_grad_()
    local y = x * 2
    assert.is_false(x:free())     -- y's graph holds x
    y:sum():backward()
    assert.are.same({ 2, 2, 2 }, x.grad:totable())
  end)
end)

describe('shape arithmetic', function()
  it('refuses a view whose element count passes 2^63 instead of wrapping to 0', function()
    H.assert_error(function() return cr.ones(1, 1):expand(2 ^ 32, 2 ^ 32) end,
      'expand: a view of shape [4294967296, 4294967296] would have more than 2^63 elements')
    assert.are.equal(2 ^ 31 * 4, cr.ones(1, 4):expand(2 ^ 31, 4):numel())   -- large, but it fits
  end)

  it('checks narrow and slice bounds without overflow', function()
    H.assert_error(function() return cr.arange(4):narrow(0, 2 ^ 62, 2 ^ 62) end,
      'narrow: start 4611686018427387904 and length 4611686018427387904 do not fit dim 0 of size 4')
    assert.are.same({ 1 }, cr.arange(10):slice(0, 1, 10, 2 ^ 62):totable())
    assert.are.same({ 1, 4, 7 }, cr.arange(10):slice(0, 1, 10, 3):totable())
    assert.are.same({ 1, 4, 7 }, cr.arange(10):slice(0, 1, 8, 3):totable())
  end)

  it('refuses a reduction over a dim listed twice', function()
    H.assert_error(function() return cr.ones(2, 3):sum({ 0, 0 }) end, 'sum: dim 0 appears more than once')
    H.assert_error(function() return cr.ones(2, 3):mean({ 1, -1 }) end, 'mean: dim 1 appears more than once')
    H.assert_error(function() return cr.ones(2, 3):sum({ 0.5 }) end, 'sum: dims must be integers, got 0.5')
  end)
end)

describe('files', function()
  it('cr.load refuses a FIFO at once instead of waiting for a writer', function()
    local dir = H.tmpdir('bad_input')
    local fifo = dir.path('pipe.safetensors')
    assert(os.execute('mkfifo ' .. fifo) == 0)
    local out, code = H.shell(string.format([[timeout 20 luajit -e "package.path='lua/?.lua;lua/?/init.lua;'..package.path
      print(pcall(require('crescent').load, '%s'))"]], fifo))
    dir.remove()
    assert.are.equal(0, code, out)
    assert.is_truthy(out:find('not a regular file, not a safetensors file', 1, true), out)
  end)
end)

describe('numbers in messages', function()
  it('are the values given, not what a C integer wrapped them to', function()
    H.assert_error(function() cr.conv2d(cr.ones(1, 1, 4, 4), cr.ones(1, 1, 3, 3), nil, { stride = 1e300 }) end,
      "conv2d: 'stride' must be an integer in [-2^31, 2^31), got 1e+300")
    H.assert_error(function() cr.ssl.sinkhorn(cr.ones(4, 3), { iterations = 1e12 }) end,
      'sinkhorn: iterations must be an integer below 2^31, got 1000000000000')
  end)
end)

describe('in-place writes', function()
  it('are refused on a tensor whose elements repeat (an expanded view), as PyTorch refuses them', function()
    local b = cr.zeros(1, 3)
    H.assert_error(function() b:expand(2, 3):add_(1) end, 'add_: the tensor of shape [2, 3] repeats elements',
      ':clone() or :contiguous()')
    assert.are.same({ { 0, 0, 0 } }, b:totable())
    H.assert_error(function() cr.ones(1, 3):expand(4, 3):mul_(2) end, 'mul_: the tensor of shape [4, 3] repeats')
    H.assert_error(function() cr.ones(1, 3):expand(4, 3):fill_(2) end, 'fill_:')
    H.assert_error(function() cr.ones(1, 3):expand(4, 3):copy_(cr.ones(4, 3)) end, 'copy_:')
    assert.are.same({ { 2, 2, 2 } }, cr.ones(1, 3):expand(1, 3):mul_(2):totable())   -- size-1 dims do not repeat
    assert.are.same({ 8, 8 }, cr.ones(4, 2):expand(4, 2):clone():mul_(2):sum(0):totable())
  end)
end)

describe('casts', function()
  it('refuse a value from Lua that an integer dtype cannot hold, as PyTorch does, and truncate fractions', function()
    H.assert_error(function() cr.tensor({ 300, -1 }, { dtype = 'u8' }) end, 'tensor: element 1 (300) does not fit u8')
    H.assert_error(function() cr.full({ 2 }, 0 / 0, { dtype = 'i64' }) end,
      'full: NaN does not fit i64 (integers in [-2^63, 2^63))')
    H.assert_error(function() cr.zeros(2, { dtype = 'i32' }):fill_(2 ^ 40) end, 'fill_: 1099511627776 does not fit i32')
    H.assert_error(function() cr.arange(4, { dtype = 'u8' }):add(300) end, 'scalar: 300 does not fit u8')
    assert.are.same({ 1, -2, 255 }, cr.tensor({ 1.5, -2.9, 255 }, { dtype = 'i64' }):totable())
    assert.are.same({ 0, 255 }, cr.tensor({ 0, 255 }, { dtype = 'u8' }):totable())
  end)

  it('from float tensors to integers truncate toward zero and saturate, NaN giving 0', function()
    local x = cr.tensor({ 0 / 0, 1 / 0, -1 / 0, 1e30, -2.7, 2.7 }, { dtype = 'f32' })
    assert.are.same({ 0, 2 ^ 63, -2 ^ 63, 2 ^ 63, -2, 2 }, x:long():totable())
    assert.are.same({ 0, 2147483647, -2147483648, 2147483647, -2, 2 }, x:int():totable())
    assert.are.same({ 0, 255, 0, 255, 0, 2 }, x:byte():totable())
    assert.are.same({ 0, 255, 0 }, cr.tensor({ 0 / 0, 300, -1 }, { dtype = 'f64' }):to('u8'):totable())
  end)

  it('between integer dtypes wrap modulo 2^bits, as PyTorch and C do', function()
    assert.are.same({ 44, 255, 1 }, cr.tensor({ 300, -1, 65537 }):byte():totable())
    assert.are.same({ 5, -1 }, cr.tensor({ 2 ^ 40 + 5, -1 }):int():totable())
    assert.are.same({ 44 }, cr.tensor({ 300 }, { dtype = 'i32' }):byte():totable())
    assert.are.same({ true, false }, cr.tensor({ 256, 0 }):bool():totable())
  end)
end)

describe('recipes', function()
  it('stop on an error after start-up with one line naming the problem (a traceback only when asked)', function()
    local out, code = H.shell('luajit recipes/swav.lua run.name=../x')
    assert.are.equal(1, code, out)
    assert.is_truthy(out:find("error: config: run.name '../x' must be one folder name", 1, true), out)
    assert.is_falsy(out:find('stack traceback', 1, true), out)
    out = H.shell('luajit recipes/swav.lua data.name=image_folder data.root=/nonexistent')
    assert.is_truthy(out:find("error: image_folder: cannot open the folder '/nonexistent'", 1, true), out)
    out, code = H.shell('CRESCENT_TRACEBACK=1 luajit recipes/supervised.lua run.name=' .. string.rep('a', 300))
    assert.are.equal(1, code, out)
    assert.is_truthy(out:find('run.name is 300 characters long; give at most 200', 1, true), out)
    assert.is_truthy(out:find('stack traceback', 1, true), out)
  end)
end)

describe('max pooling at its edges, as PyTorch 2.15 computes it', function()
  it('gives -inf for a window that lies entirely in padding and sends its gradient nowhere', function()
    -- 1 x 1 input, kernel 2 dilated by 2, padding 1: the window covers columns -1 and 1
    local x = cr.tensor({ { { { 5 } } } }, { dtype = 'f32' }):requires_grad_()
    local y = cr.max_pool2d(x, { 1, 2 }, { stride = 1, padding = { 0, 1 }, dilation = { 1, 2 } })
    assert.are.same({ -math.huge }, y:reshape(-1):totable())
    y:sum():backward()
    assert.are.same({ 0 }, x.grad:reshape(-1):totable())   -- PyTorch's backward writes out of bounds here
  end)

  it('computes a ceil-mode window whose dilated kernel is wider than the padded input', function()
    local x = cr.tensor({ { { { 5 } } } }, { dtype = 'f32' })
    local y = cr.max_pool2d(x, { 1, 2 }, { stride = 2, padding = { 0, 1 }, dilation = { 1, 3 }, ceil_mode = true })
    assert.are.same({ 1, 1, 1, 1 }, y.shape)
    assert.are.same({ -math.huge }, y:reshape(-1):totable())
    H.assert_error(function()   -- without ceil mode there is no window at all, as in PyTorch
      cr.max_pool2d(x, { 1, 2 }, { stride = 2, padding = { 0, 1 }, dilation = { 1, 3 } })
    end, 'is larger than the padded input')
    -- an ordinary ceil-mode case: 1 x 5, kernel 2, stride 2 -> windows {1,2}, {3,4}, {5}
    local row = cr.tensor({ { { { 1, 4, 2, 3, 7 } } } }, { dtype = 'f32' })
    local z = cr.max_pool2d(row, { 1, 2 }, { stride = 2, ceil_mode = true })
    assert.are.same({ 4, 3, 7 }, z:reshape(-1):totable())
  end)
end)
