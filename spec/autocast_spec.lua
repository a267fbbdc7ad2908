-- autocast_spec — mixed precision on the cpu: inside cr.autocast('bf16'|'f16', f) matrix
-- products and convolutions run on half copies of f32 inputs, the precision-sensitive ops
-- run in f32, grads reach the f32 leaves in f32, and the setting comes back afterwards,
-- also when f raises. The half results equal the same op on inputs rounded by hand.
local cr = H.cr

describe('cr.autocast', function()
  local a, b = H.park_miller({ 5, 7 }, 1):float(), H.park_miller({ 7, 3 }, 2):float()

  it('casts matrix products and convolutions down, and their results equal rounded inputs', function()
    for _, dt in ipairs({ 'bf16', 'f16' }) do
      local y = cr.autocast(dt, function() return a:mm(b) end)
      assert.are.equal(dt, y.dtype)
      H.assert_close(y:float(), a:to(dt):mm(b:to(dt)):float(), 0, 0, 'mm ' .. dt)
      local x, w = H.park_miller({ 2, 3, 6, 6 }, 3):float(), H.park_miller({ 4, 3, 3, 3 }, 4):float()
      local c = cr.autocast(dt, function() return x:conv2d(w, nil, { padding = 1 }) end)
      assert.are.equal(dt, c.dtype)
      H.assert_close(c:float(), x:to(dt):conv2d(w:to(dt), nil, { padding = 1 }):float(), 0, 0, 'conv2d ' .. dt)
      local l = cr.autocast(dt, function() return cr.linear(a, b:t(), H.park_miller({ 3 }, 5):float()) end)
      assert.are.equal(dt, l.dtype)
      -- a half activation meets the next layer's f32 weight and bias
      local w2, b2 = H.park_miller({ 2, 3 }, 6):float(), H.park_miller({ 2 }, 7):float()
      local l2 = cr.autocast(dt, function() return cr.linear(l, w2, b2) end)
      assert.are.equal(dt, l2.dtype)
      H.assert_close(l2:float(), cr.linear(l, w2:to(dt), b2:to(dt)):float(), 0, 0, 'chained linear ' .. dt)
    end
  end)

  it('runs softmax, the losses, normalize and the sums of half inputs in f32', function()
    local h = a:bfloat16()
    cr.autocast('bf16', function()
      assert.are.equal('f32', h:softmax(1).dtype)
      assert.are.equal('f32', h:log_softmax(1).dtype)
      assert.are.equal('f32', h:sum().dtype)
      assert.are.equal('f32', h:mean(1).dtype)
      assert.are.equal('f32', h:normalize({ dim = 1 }).dtype)
      assert.are.equal('f32', cr.cross_entropy(h, cr.tensor({ 0, 1, 2, 3, 4 }, { dtype = 'i64' })).dtype)
      H.assert_close(h:log_softmax(1), h:float():log_softmax(1), 0, 0)
      -- the rest keep their dtypes: elementwise ops of halves stay half
      assert.are.equal('bf16', (h * 2):relu().dtype)
    end)
  end)

  it('casts a parameter once per autocast region and version, and its uses\' grads add up', function()
    local w = b:clone():requires_grad_()
    local x1, x2 = a:clone(), (a * 2):clone()
    local function casts(f)
      cr.profiler.start()
      local out = f()
      cr.profiler.stop()
      local n = 0
      for _, e in ipairs(cr.profiler.events()) do if e.name == 'to' then n = n + 1 end end
      return n, out
    end
    -- where the CPU has no bf16 arithmetic, each bf16 product runs on f32 copies (two
    -- casts in, one out): that many more per product
    local route = cr.cpu_bf16_native() and 0 or 3
    -- two products with w: one cast of w (a cast of each activation is not cached)
    local n, loss = casts(function()
      return cr.autocast('bf16', function() return x1:mm(w):float():sum() + x2:mm(w):float():sum() end)
    end)
    assert.are.equal(1 + 4 + 2 * route, n)   -- w once; x1, x2 down and both products up
    loss:backward()
    local w2 = b:clone():requires_grad_()
    local l1 = cr.autocast('bf16', function() return x1:mm(w2):float():sum() end)
    local l2 = cr.autocast('bf16', function() return x2:mm(w2):float():sum() end)
    l1:add(l2):backward()
    -- (their sum is rounded to bf16 once before the cast back, as in PyTorch)
    H.assert_close(w.grad, w2.grad, 0, 2 ^ -7, 'the cached cast passes both grads back')
    -- an in-place update between uses (a new version) casts again; a new region too
    n = casts(function()
      cr.autocast('bf16', function()
        x1:mm(w)
        cr.no_grad(function() w:add_(1) end)
        x1:mm(w)
      end)
    end)
    assert.are.equal(2 + 2 + 2 * route, n)   -- w twice, x1 twice
  end)

  it('sends f32 grads to f32 leaves through the casts', function()
    local w = b:clone():requires_grad_()
    local x = a:clone():requires_grad_()
    local loss = cr.autocast('bf16', function() return x:mm(w):log_softmax(1):mean() end)
    assert.are.equal('f32', loss.dtype)
    loss:backward()
    assert.are.equal('f32', w.grad.dtype)
    assert.are.equal('f32', x.grad.dtype)
    -- the same graph by hand: the casts are ordinary ops
    local w2, x2 = b:clone():requires_grad_(), a:clone():requires_grad_()
    x2:bfloat16():mm(w2:bfloat16()):float():log_softmax(1):mean():backward()
    H.assert_close(w.grad, w2.grad, 0, 0)
    H.assert_close(x.grad, x2.grad, 0, 0)
  end)

  -- Each op whose row in the op list has autocast class HALF or F32, called through Lua:
  -- under autocast, HALF turns f32 inputs into a half result, F32 turns half inputs into
  -- an f32 result; the list must name every such op (the rows are the policy).
  it('follows the autocast class of every op row that has one', function()
    local ffi = require 'ffi'
    local f, h = a, a:bfloat16()                                   -- [5, 7]
    local target = cr.tensor({ 0, 1, 2, 0, 1 }):long()
    local calls = {
      mm = { 'half', function(x) return x:mm(b) end },
      bmm = { 'half', function(x) return x:view({ 1, 5, 7 }):bmm(b:view({ 1, 7, 3 })) end },
      addmm = { 'half', function(x) return cr.linear(x, b:t(), H.park_miller({ 3 }, 5):float()) end },
      conv2d = { 'half', function(x) return x:view({ 1, 1, 5, 7 }):conv2d(cr.ones(2, 1, 3, 3), nil, { padding = 1 }) end },
      sum = { 'f32', function(x) return x:sum() end },
      mean = { 'f32', function(x) return x:mean() end },
      softmax = { 'f32', function(x) return x:softmax(1) end },
      log_softmax = { 'f32', function(x) return x:log_softmax(1) end },
      nll_loss = { 'f32', function(x) return cr.nll_loss(x, target) end },
      cross_entropy = { 'f32', function(x) return cr.cross_entropy(x, target) end },
      layer_norm = { 'f32', function(x) return cr.layer_norm(x, { 7 }) end },
      normalize = { 'f32', function(x) return x:normalize({ dim = 1 }) end },
    }
    local listed = {}
    for op = 0, tonumber(cr.C.cr_op_count()) - 1 do
      local class = tonumber(cr.C.cr_op_autocast_class(op))
      if class ~= 0 then
        local name = ffi.string(cr.C.cr_op_name(op))
        local call = calls[name]
        assert.is_not_nil(call, name .. ' has an autocast class in its row but no case here')
        assert.are.equal(class == 1 and 'half' or 'f32', call[1], name)
        listed[name] = true
        local y = cr.autocast('bf16', function() return call[2](class == 1 and f or h) end)
        assert.are.equal(class == 1 and 'bf16' or 'f32', y.dtype, name)
      end
    end
    for name in pairs(calls) do assert.is_true(listed[name], name .. ' has no autocast class in its row') end
  end)

  it('restores the previous setting, also after an error, and names a bad dtype', function()
    assert.are.equal('f32', a:mm(b).dtype)
    local ok = pcall(cr.autocast, 'bf16', function() error('boom') end)
    assert.is_false(ok)
    assert.are.equal('f32', a:mm(b).dtype)
    cr.autocast('f16', function()
      cr.autocast('off', function() assert.are.equal('f32', a:mm(b).dtype) end)
      assert.are.equal('f16', a:mm(b).dtype)
    end)
    H.assert_error(function() cr.autocast('f8', function() end) end, "autocast: dtype must be 'bf16', 'f16' or 'off'")
  end)
end)

describe('cr.optim.GradScaler', function()
  local function param_with_grad(g)
    local p = cr.zeros({ 2 }):requires_grad_()
    p.grad = cr.tensor(g, { dtype = 'f32' })
    return p
  end

  it('unscales finite grads, and doubles the scale after growth_interval good steps', function()
    local s = cr.optim.GradScaler { init_scale = 8, growth_interval = 2 }
    H.assert_close(s:scale(cr.tensor(1.5)), cr.tensor(12))
    local p = param_with_grad({ 8, -16 })
    assert.is_true(s:unscale({ p }))
    H.assert_close(p.grad, { 1, -2 })
    assert.are.same({ 8, 8 }, { s:update() })
    p.grad = cr.tensor({ 8, 8 }, { dtype = 'f32' })
    assert.is_true(s:unscale({ p }))
    assert.are.same({ 8, 16 }, { s:update() })
    assert.are.equal(0, s.skipped_steps)
  end)

  it('skips a step whose grads hold inf or NaN: grads zeroed, scale halved, skip counted', function()
    local s = cr.optim.GradScaler { init_scale = 1024 }
    for _, bad in ipairs({ math.huge, 0 / 0 }) do
      local p = param_with_grad({ 1, bad })
      assert.is_false(s:unscale({ p }))
      H.assert_close(p.grad, { 0, 0 })
      s:update()
    end
    assert.are.equal(256, s.scale_value)
    assert.are.equal(2, s.skipped_steps)
    local s2 = cr.optim.GradScaler()
    s2:load_state_dict(s:state_dict())
    assert.are.same(s:state_dict(), s2:state_dict())
    H.assert_error(function() cr.optim.GradScaler { init_scal = 1 } end, "unknown option 'init_scal'")
    H.assert_error(function() cr.optim.GradScaler { growth_factor = 0 } end, 'growth_factor must be a finite number > 0')
  end)
end)

describe('train.amp in the standard step', function()
  local function run(amp, scaler)
    cr.manual_seed(0)
    local model = cr.nn.Linear(4, 3)
    local x, y = H.park_miller({ 6, 4 }, 9):float(), cr.tensor({ 0, 1, 2, 0, 1, 2 }, { dtype = 'i64' })
    local seen = {}
    local task = cr.engine.Task {
      model = model, optimizer = cr.optim.SGD(model:named_parameters(), { lr = 0.1 }), epochs = 1, test_every = 0,
      train_loader = H.list_loader({ { input = x, target = y } }), amp = amp, scaler = scaler,
      loss = function(out, batch)
        seen.out = out.dtype
        return cr.cross_entropy(out, batch.target)
      end,
    }
    cr.train(task)
    seen.loss = task.loss_tensor.dtype
    return model, seen, task
  end

  it('runs forward and loss under autocast: a bf16 linear, an f32 loss, f32 parameters updated', function()
    local ref = run('off')
    local model, seen = run('bf16')
    assert.are.same({ out = 'bf16', loss = 'f32' }, seen)
    assert.are.equal('f32', model.weight.dtype)
    assert.is_true(H.max_diff(model.weight, ref.weight) > 0) -- bf16 products differ from f32 ones
    assert.is_true(H.max_diff(model.weight, ref.weight) < 1e-2)
    H.assert_error(function() run('fp8') end, "amp must be 'off', 'bf16', 'f16' or 'auto'")
  end)

  it("with amp = 'auto', runs bf16 where the cpu computes it natively and f32 elsewhere", function()
    local _, seen, task = run('auto')
    local want = cr.cpu_bf16_native() and 'bf16' or 'off'
    assert.are.equal(want, task.amp)
    assert.are.equal(want == 'bf16' and 'bf16' or 'f32', seen.out)
    local prev = cr.set_fast_paths(false) -- no native bf16 then: auto stays in f32
    local ok, err = pcall(function()
      local _, seen_off, task_off = run('auto')
      assert.are.equal('off', task_off.amp)
      assert.are.equal('f32', seen_off.out)
    end)
    cr.set_fast_paths(prev)
    assert(ok, err)
  end)

  it('with f16, scales the loss and skips a step whose grads overflow, leaving the weights alone', function()
    local before = run('off', nil)
    local model, _, task = run('f16', cr.optim.GradScaler { init_scale = 1e38 }) -- loss * 1e38 overflows
    cr.manual_seed(0)
    H.assert_close(model.weight, cr.nn.Linear(4, 3).weight, 0, 0, 'skipped step: the weights as initialised')
    assert.are.equal(1, task.scaler.skipped_steps)
    assert.are.equal(5e37, task.scaler.scale_value)
    local ok_model = run('f16')
    assert.is_true(H.max_diff(ok_model.weight, before.weight) < 1e-2) -- a normal scale: a normal step
    -- the scaler's state travels in checkpoints
    local tmp = H.tmpdir('autocast')
    local path = tmp.path('amp.safetensors')
    cr.engine.checkpoint.save(task, path)
    local _, _, fresh = run('f16')
    cr.engine.checkpoint.load(fresh, path)
    assert.are.same(task.scaler:state_dict(), fresh.scaler:state_dict())
    tmp.remove()
  end)
end)
