-- spec/hooks_spec.lua — the built-in hooks (schedule, console writer, NaN/Inf guard,
-- freeze, eval, timer), the standard step's gradient accumulation and clipping, a tiny
-- end-to-end train on Fashion-MNIST, and the supervised recipe's JSON last line.
local cr = H.cr
local nn = cr.nn
local Task = cr.engine.Task

-- n batches of b samples of 3 features, fixed per (index), labels in {0, 1}
local function batches(n, b, seed)
  local list = {}
  cr.manual_seed(seed or 1)
  for i = 1, n do
    list[i] = { input = cr.randn(b, 3), target = cr.randint(0, 2, { b }) }
  end
  return list
end
local list_loader = H.list_loader
local function linear_task(args)
  cr.manual_seed(7)
  local model = args.model or nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
  local opt = cr.optim.SGD(model:named_parameters(), { lr = args.lr or 0.1, momentum = 0.9 })
  return Task {
    model = model, optimizer = opt, epochs = args.epochs or 1, test_every = args.test_every or 0,
    loss = args.loss or function(out, batch) return cr.cross_entropy(out, batch.target) end,
    train_loader = list_loader(args.batches or batches(3, 4)), test_loader = args.test_loader,
    accum_steps = args.accum_steps, clip_norm = args.clip_norm, schedules = args.schedules,
    amp = args.amp, scaler = args.scaler,
  }
end
local function params_of(task)
  local out = {}
  for _, np in ipairs(task.model:named_parameters()) do out[np[1]] = np[2]:clone() end
  return out
end
local sink = H.sink
-- pcall(f, ...) with io.stderr going to a sink: ok, the error, and what was written there
local function quietly(f, ...)
  local stderr, log = io.stderr, sink()
  io.stderr = log -- luacheck: ignore 122
  local ok, err = pcall(f, ...)
  io.stderr = stderr -- luacheck: ignore 122
  return ok, err, log.text
end

describe('the standard step', function()
  it('with accum_steps = 2 on batches of 4 equals batches of 8', function()
    local big = batches(2, 8, 3)
    local small = {}
    for _, b in ipairs(big) do
      small[#small + 1] = { input = b.input:narrow(0, 0, 4), target = b.target:narrow(0, 0, 4) }
      small[#small + 1] = { input = b.input:narrow(0, 4, 4), target = b.target:narrow(0, 4, 4) }
    end
    -- under a schedule too: it advances per optimizer step, not per batch
    local function sched() return { lr = cr.schedule.warmup_cosine { warmup = 0.5, from = 0, peak = 0.1, to = 0 } } end
    local a = linear_task { batches = big, schedules = sched() }
    a:add_hook(cr.hooks.schedule())
    cr.train(a)
    local b = linear_task { batches = small, accum_steps = 2, schedules = sched() }
    b:add_hook(cr.hooks.schedule())
    cr.train(b)
    local pa, pb = params_of(a), params_of(b)
    local n = 0
    for name, t in pairs(pa) do
      H.assert_close(pb[name], t, 1e-6, 1e-5, name)
      n = n + 1
    end
    assert.equal(4, n)
    assert.equal(4, b.iteration)
    -- and the params moved
    local c = linear_task { batches = big, epochs = 0 }
    cr.train(c)
    assert.is_true(H.max_diff(params_of(c)['0.weight'], pa['0.weight']) > 1e-4)
  end)

  it('clips the gradient norm before the step', function()
    local t = linear_task { clip_norm = 1e-3 }
    cr.train(t)
    local h = t.storage:history('grad_norm')
    assert.equal(3, h.n)
    assert.is_true(h:latest() > 1e-3)   -- the norm before clipping
  end)

  it('names a model/optimizer mismatch', function()
    local t = linear_task {}
    t.model = nn.Linear(3, 2)
    H.assert_error(function() cr.train(t) end, 'not parameters of task.model')
  end)
end)

describe('the schedule hook', function()
  it('sets the lr of every group before each step', function()
    local t = linear_task { batches = batches(4, 2), schedules = { lr = cr.schedule.linear { from = 1, to = 0 } } }
    local seen = {}
    t:add_hook(cr.hooks.schedule())
    t:add_hook { before_step = function(_, task) seen[#seen + 1] = task.optimizer.param_groups[1].lr end }
    cr.train(t)
    assert.same({ 1, 0.75, 0.5, 0.25 }, seen)
    assert.equal(0.25, t.storage:smoothed('lr'))
  end)

  it('applies per-epoch bindings to any table field', function()
    local t = linear_task { epochs = 3, batches = batches(2, 2) }
    local target = { temperature = 0 }
    t.schedules = { cr.schedule.apply { schedule = cr.schedule.linear { from = 0, to = 3 }, target = target,
                                        field = 'temperature', per = 'epoch' } }
    local seen = {}
    t:add_hook(cr.hooks.schedule())
    t:add_hook { before_phase = function() seen[#seen + 1] = target.temperature end }
    cr.train(t)
    assert.same({ 0, 1, 2 }, seen)
  end)
end)

describe('the console writer', function()
  it('prints plain periodic lines after the date and time when not on a terminal', function()
    local t = linear_task { epochs = 2, batches = batches(3, 2), test_every = 1, test_loader = list_loader(batches(1, 2)) }
    local out = sink()
    t:add_hook(cr.hooks.timer())
    t:add_hook(cr.hooks.eval { topk = { 1 } })
    t:add_hook(cr.hooks.console { every = 2, tty = false, out = out })
    cr.train(t)
    local lines = {}
    for l in out.text:gmatch('[^\n]+') do lines[#lines + 1] = l end
    assert.is_nil(out.text:find('\r', 1, true))
    -- every 2nd iteration and each epoch's last: iterations 2, 3 | 4, 6; a test line per epoch
    assert.equal(6, #lines)
    local stamp = '^%d%d%d%d%-%d%d%-%d%d %d%d:%d%d:%d%d  '
    assert.truthy(lines[1]:match(stamp .. 'epoch 1/2  iter 2/3  loss %d%.%d%d%d%d  lr 0%.1  img/s %d+  data [%d.]+ms  ' ..
      'eta %d+s$'), lines[1])
    assert.truthy(lines[2]:match(stamp .. 'epoch 1/2  iter 3/3  '), lines[2])
    assert.truthy(lines[3]:match(stamp .. 'epoch 1/2 test  top1 %d+%.%d%d%%  loss %d%.%d+$'), lines[3])
    assert.truthy(lines[4]:match(stamp .. 'epoch 2/2  iter 1/3  '), lines[4])
    assert.truthy(lines[5]:match(stamp .. 'epoch 2/2  iter 3/3  '), lines[5])
    assert.truthy(lines[6]:match(stamp .. 'epoch 2/2 test  top1 '), lines[6])
    local bare = sink()
    local t2 = linear_task { epochs = 1, batches = batches(2, 2) }
    t2:add_hook(cr.hooks.console { every = 1, tty = false, timestamps = false, out = bare })
    cr.train(t2)
    assert.truthy(bare.text:match('^epoch 1/1  iter 1/2'), bare.text)
  end)

  it('names the evaluated split (val when the test phase reads held-out training data)', function()
    local t = linear_task { epochs = 1, batches = batches(2, 2), test_every = 1, test_loader = list_loader(batches(1, 2)) }
    local out = sink()
    t:add_hook(cr.hooks.eval { topk = { 1 } })
    t:add_hook(cr.hooks.console { every = 10, tty = false, timestamps = false, out = out, split = 'val' })
    cr.train(t)
    assert.truthy(out.text:find('\nepoch 1/1 val  top1 ', 1, true), out.text)
    assert.is_nil(out.text:find(' test ', 1, true), out.text)
    local ok, err = pcall(cr.hooks.console, { split = 1 })
    assert.is_false(ok)
    assert.truthy(tostring(err):find('split must be a string', 1, true), err)
  end)

  it('rewrites one line with \\r on a terminal', function()
    local t = linear_task { batches = batches(3, 2) }
    local out = sink()
    t:add_hook(cr.hooks.console { tty = true, out = out, refresh = 0 })
    cr.train(t)
    local _, crs = out.text:gsub('\r', '')
    assert.equal(3, crs)
    assert.equal('\n', out.text:sub(-1))
  end)

  it('moves the live line through a test phase too', function()
    local t = linear_task { batches = batches(2, 2), test_every = 1, test_loader = list_loader(batches(3, 2)) }
    local out = sink()
    t:add_hook(cr.hooks.eval { topk = { 1 } })
    t:add_hook(cr.hooks.console { tty = true, out = out, refresh = 0 })
    cr.train(t)
    assert.truthy(out.text:find('\repoch 1/1  test batch 3/3', 1, true), out.text)
    assert.truthy(out.text:find('epoch 1/1 test  top1', 1, true), out.text)   -- the result on a line of its own
  end)

  it('ends the live line before another hook prints, and cuts it to the terminal width', function()
    local t = linear_task { batches = batches(3, 2) }
    local out = sink()
    local live_line = require 'crescent.hooks.live_line'
    t:add_hook(cr.hooks.console { tty = true, out = out, refresh = 0 })
    -- a hook that prints mid-epoch, before the console's own after_phase (as the kNN does)
    t:add_hook { priority = 60, after_step = function(_, task)
      if task.phase_iteration == 2 then live_line.write(out, 'knn epoch 1/1: top1 50.00%\n') end
    end }
    cr.train(t)
    assert.truthy(out.text:find('\nknn epoch 1/1', 1, true), out.text)     -- on a line of its own
    assert.is_nil(out.text:find('s knn epoch', 1, true), out.text)
    -- narrow: the least needed fields go first, so the ETA stays whole
    local stub = { epoch = 0, epochs = 1, iterations_per_epoch = 9, phase_iteration = 3, eta_seconds = 125,
      lr = function() return 0.05 end,
      storage = { smoothed = function(_, k) return ({ loss = 2, img_per_s = 812, data_time = 0.0031 })[k] end } }
    local console = cr.hooks.console { tty = true, out = sink() }
    local wide = console:line(stub)
    assert.are.equal('epoch 1/1  iter 3/9  loss 2.0000  lr 0.05  img/s 812  data 3.1ms  eta 2m05s', wide)
    assert.are.equal('epoch 1/1  iter 3/9  loss 2.0000  lr 0.05  img/s 812  eta 2m05s', console:line(stub, #wide))
    assert.are.equal('epoch 1/1  iter 3/9  loss 2.0000  eta 2m05s', console:line(stub, 50))
    assert.are.equal('epoch 1/1  iter 3/9', console:line(stub, 20))
    local narrow = sink()
    live_line.show(narrow, string.rep('x', 100), 60)
    live_line.show(narrow, 'short', 60)
    live_line.finish(narrow)
    assert.are.equal('\r' .. string.rep('x', 59) .. '\rshort' .. string.rep(' ', 54) .. '\n', narrow.text)
  end)
end)

describe('the timer', function()
  it("counts the time an epoch's end took (kNN, test, checkpoints) into the ETA, once per epoch left", function()
    local t = linear_task { epochs = 3, batches = batches(2, 2) }
    local loop = require 'crescent.engine.loop'
    t:add_hook(cr.hooks.timer())
    -- an after_phase that takes 0.3 s at every train epoch's end, as a kNN monitor would
    t:add_hook { priority = 60, after_phase = function(_, task)
      if task.phase_name == 'train' then
        local t0 = loop.now()
        while loop.now() - t0 < 0.3 do end
      end
    end }
    local etas = {}
    t:add_hook { after_step = function(_, task) etas[#etas + 1] = { task.epoch, task.eta_seconds } end }
    cr.train(t)
    assert.is_true(etas[1][2] < 0.3)            -- epoch 1: no epoch end measured yet
    assert.are.equal(1, etas[3][1])
    assert.is_true(etas[3][2] >= 0.55, tostring(etas[3][2]))   -- epoch 2: two epoch ends to come
    assert.is_true(etas[6][2] >= 0.28 and etas[6][2] < 0.55, tostring(etas[6][2]))   -- the last one's
  end)
end)

describe('the NaN/Inf guard', function()
  it('stops on a bad loss and names the step range since the last good check', function()
    local t = linear_task {
      batches = batches(8, 2),
      loss = function(out, batch)
        local l = cr.cross_entropy(out, batch.target)
        if batch.poison then l = l * (0 / 0) end
        return l
      end,
    }
    t.train_loader = list_loader((function()
      local b = batches(8, 2)
      b[7].poison = true
      return b
    end)())
    t:add_hook(cr.hooks.nan_guard { every = 4 })
    local ok, err = pcall(cr.train, t)
    assert.is_false(ok)
    assert.truthy(err:find('NaN/Inf guard: loss went non-finite between steps 5 and 7', 1, true), err)
    assert.truthy(err:find('last good check after step 4', 1, true), err)
    assert.equal(6, t.iteration)
  end)

  it('names grads and the first bad parameter', function()
    local t = linear_task { batches = batches(6, 2) }
    t:add_hook { priority = 0, after_backward = function(_, task)
      if task.iteration == 2 then
        local w = task.model:named_parameters()[3][2]
        w.grad = cr.full(w.shape, 0 / 0)
      end
    end }
    t:add_hook(cr.hooks.nan_guard { every = 3 })
    local ok, err = pcall(cr.train, t)
    assert.is_false(ok)
    local want = "grads went non-finite between steps 1 and 3 (epoch 1, last good check after step 0), first in '2.weight'"
    assert.truthy(err:find(want, 1, true), err)
  end)

  it('with an f16 loss scaler, lets the scaler skip an overflowing step and runs on', function()
    local t = linear_task { batches = batches(6, 2), amp = 'f16', scaler = cr.optim.GradScaler { init_scale = 1e38 } }
    t:add_hook(cr.hooks.nan_guard { every = 1 })
    local ok, err, said = quietly(cr.train, t) -- loss * 1e38 overflows in the first step: skipped, not a stop
    assert.is_true(ok, err)
    assert.truthy(said:find('step 0: f16 grads hold inf/nan; step skipped', 1, true), said)
    assert.equal(6, t.iteration)
    assert.is_true(t.scaler.skipped_steps >= 1)
    assert.is_true(t.scaler.scale_value < 1e38)
  end)

  it('with an f16 loss scaler, stops when grads stay non-finite at every scale', function()
    local t = linear_task { batches = batches(40, 2), amp = 'f16', scaler = cr.optim.GradScaler { init_scale = 1 } }
    t:add_hook { priority = 0, after_backward = function(_, task)
      local w = task.model:named_parameters()[3][2]
      w.grad = cr.full(w.shape, 0 / 0)
    end }
    t:add_hook(cr.hooks.nan_guard { every = 50 })
    local ok, err = quietly(cr.train, t)
    assert.is_false(ok)
    assert.truthy(err:find('grads went non%-finite between steps 1 and 15 .* at every loss scale: the f16 loss ' ..
      'scaler has skipped 15 steps and its scale fell to 3.05176e%-05'), err)
    assert.equal(15, t.iteration)
  end)

  it('names params', function()
    local Tiny = nn.Module:extend('Tiny')
    function Tiny:init() self.fc = nn.Linear(3, 2); self:register_parameter('extra', cr.zeros(2):requires_grad_()) end
    function Tiny:forward(x) return self.fc(x) end
    local model = Tiny()
    local t = linear_task { model = model, batches = batches(6, 2) }
    t:add_hook { priority = 0, after_step = function(_, task)
      if task.iteration == 3 then cr.no_grad(function() model.extra:fill_(1 / 0) end) end
    end }
    t:add_hook(cr.hooks.nan_guard { every = 2 })
    local ok, err = pcall(cr.train, t)
    assert.is_false(ok)
    assert.truthy(err:find("params went non-finite between steps 3 and 4", 1, true), err)
    assert.truthy(err:find("first in 'extra'", 1, true), err)
  end)
end)

describe('the diagnostics hook', function()
  it('stores grad, param and update norms, the lr per group, memory and the time split, changing nothing', function()
    local t = linear_task { batches = batches(4, 4) }
    t:add_hook(cr.hooks.diagnostics { every = 2 })
    local grads = {}
    t:add_hook { priority = 90, after_backward = function(_, task)
      grads[task.iteration + 1] = (cr.optim.grad_norm(task.model:parameters()))
    end }
    cr.train(t)
    local s = t.storage
    local gn = s:history('grad_norm')
    assert.are.equal(2, gn.n) -- steps 2 and 4
    H.assert_close(cr.tensor { gn.values[1] }, cr.tensor { grads[2] }, 0, 1e-9)
    H.assert_close(cr.tensor { gn.values[2] }, cr.tensor { grads[4] }, 0, 1e-9)
    local pn = 0
    for _, p in ipairs(t.model:parameters()) do pn = pn + p:double():pow(2):sum():item() end
    H.assert_close(cr.tensor { (s:latest('param_norm')) }, cr.tensor { math.sqrt(pn) }, 0, 1e-6)
    assert.is_true(s:latest('update_norm') > 0)
    assert.are.equal(0.1, s:latest('lr/1'))
    assert.is_true(s:latest('memory/peak_host_mb') > 1)
    for _, k in ipairs { 'data', 'forward_backward', 'optimizer', 'hooks' } do assert.is_number(s:latest('time/' .. k)) end
    -- the first step of SGD with momentum moves by lr * grad
    local first = linear_task { batches = batches(1, 4) }
    first:add_hook(cr.hooks.diagnostics { every = 1 })
    cr.train(first)
    H.assert_close(cr.tensor { (first.storage:latest('update_norm')) },
      cr.tensor { 0.1 * first.storage:latest('grad_norm') },
      0, 1e-5)
    local plain = linear_task { batches = batches(4, 4) }
    cr.train(plain)
    local a, b = params_of(t), params_of(plain)
    for name, v in pairs(a) do assert.are.equal(0, H.max_diff(v, b[name])) end
    H.assert_error(function() cr.hooks.diagnostics { every = 0 } end, 'every must be a positive integer')
  end)
end)

describe('the EMA hook', function()
  it('averages the weights after every step, tests with the average, and keeps it in checkpoints', function()
    local tl = list_loader(batches(2, 4))
    local t = linear_task { batches = batches(5, 4), test_loader = tl, test_every = 1 }
    local ema = cr.hooks.ema { model = t.model, momentum = 0.8, start = 1 }
    t:add_hook(ema)
    local expect, in_test = {}, {}
    t:add_hook { priority = 99, after_step = function(_, task)
      if task.phase_name ~= 'train' then return end
      for _, np in ipairs(task.model:named_parameters()) do
        local w = np[2]:detach():clone()
        local e = expect[np[1]]
        -- step 1 copies (start = 1), then e = 0.8 e + 0.2 w
        expect[np[1]] = (e == nil or task.iteration <= 1) and w or e * 0.8 + w * 0.2
      end
    end, before_step = function(_, task)
      if task.phase_name == 'test' then in_test[#in_test + 1] = task.model:named_parameters()[1][2]:clone() end
    end }
    cr.train(t)
    local avg = {}
    for name, e in pairs(ema:tensor_state()) do avg[name] = e:clone() end
    for name, e in pairs(expect) do H.assert_close(avg[name], e, 1e-6, 1e-5, name) end
    -- the test phase ran on the average; afterwards the model has its trained weights back
    H.assert_close(in_test[1], avg[t.model:named_parameters()[1][1]], 0, 0)
    assert.is_true(H.max_diff(t.model:named_parameters()[1][2], avg[t.model:named_parameters()[1][1]]) > 0)
    assert.is_false(ema.swapped)
    assert.are.equal(42, t:with_eval_weights(function(x)
      H.assert_close(t.model:named_parameters()[1][2], avg[t.model:named_parameters()[1][1]], 0, 0)
      return x
    end, 42))
    -- a checkpoint holds the average under hook_state.ema.<name>, and a load restores it
    local path = os.tmpname()
    cr.engine.checkpoint.save(t, path)
    assert.is_truthy(cr.load(path)['hook_state.ema.0.weight'])
    local u = linear_task { batches = batches(5, 4) }
    local ema2 = cr.hooks.ema { model = u.model, momentum = 0.8 }
    u:add_hook(ema2)
    cr.engine.checkpoint.load(u, path)
    os.remove(path)
    for name, e in pairs(avg) do assert.are.equal(0, H.max_diff(ema2:tensor_state()[name] or e * 0 + 1 / 0, e)) end
    H.assert_error(function() cr.hooks.ema { model = u.model, momentum = 1 } end, 'momentum must be a number in [0, 1)')
  end)
end)

describe('the freeze hook', function()
  it('keeps matching parameters fixed for the first N iterations', function()
    local t = linear_task { batches = batches(3, 4) }
    local w0 = t.model:named_parameters()[3][2]:clone()
    local snaps = {}
    t:add_hook(cr.hooks.freeze { pattern = '^2%.weight$', iterations = 2 })
    t:add_hook { after_step = function(_, task) snaps[task.iteration] = task.model:named_parameters()[3][2]:clone() end }
    cr.train(t)
    assert.equal(0, H.max_diff(snaps[1], w0))
    assert.equal(0, H.max_diff(snaps[2], w0))
    assert.is_true(H.max_diff(snaps[3], w0) > 0)
    local bad = linear_task {}
    bad:add_hook(cr.hooks.freeze { pattern = '^prototypes', iterations = 2 })
    H.assert_error(function() cr.train(bad) end, "no parameter name matches the Lua pattern '^prototypes'")
  end)
end)

describe('model.freeze (cr.recipe.run.freeze)', function()
  local function bn_task(freeze_iters)
    cr.manual_seed(5)
    local model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
    local cfg = { model = { freeze = '^[01]%.', freeze_iters = freeze_iters } }
    local said = {}
    local print0 = _G.print
    rawset(_G, 'print', function(s) said[#said + 1] = s end)
    local ok, hook = pcall(cr.recipe.run.freeze, cfg, model)
    rawset(_G, 'print', print0)
    assert(ok, hook)
    local trainable = {}
    for _, np in ipairs(model:named_parameters()) do if np[2].requires_grad then trainable[#trainable + 1] = np end end
    local t = Task { model = model, optimizer = cr.optim.SGD(trainable, { lr = 0.1 }), epochs = 1, test_every = 0,
      loss = function(out, b) return cr.cross_entropy(out, b.target) end, train_loader = list_loader(batches(4, 8)) }
    if hook then t:add_hook(hook) end
    return t, model, said[1]
  end

  it('for the whole run: fixed parameters, BatchNorm in eval mode with its statistics unchanged', function()
    local t, model, line = bn_task(0)
    assert.are.equal("model.freeze: 0.000M parameters matching '^[01]%.' fixed for the whole run", line)
    local w, mean = model['0'].weight:clone(), model['1'].running_mean:clone()
    cr.train(t)
    assert.are.equal(0, H.max_diff(model['0'].weight, w))
    assert.are.equal(0, H.max_diff(model['1'].running_mean, mean))
    assert.is_false(model['1'].training)
    assert.is_true(model['3'].training)
  end)

  it('for the first freeze_iters steps: fixed and in eval mode, then trained again', function()
    local t, model, line = bn_task(2)
    assert.truthy(line:find('fixed for the first 2 steps', 1, true), line)
    local w, mean = model['0'].weight:clone(), model['1'].running_mean:clone()
    local seen = {}
    t:add_hook { priority = 99, after_step = function(_, task)
      seen[task.iteration] = { model['1'].training, H.max_diff(model['0'].weight, w), H.max_diff(model['1'].running_mean, mean) }
    end }
    cr.train(t)
    assert.are.same({ false, 0, 0 }, seen[1])
    assert.are.same({ false, 0, 0 }, seen[2])
    assert.is_true(seen[3][1] and seen[3][2] > 0 and seen[3][3] > 0)
    H.assert_error(function() cr.recipe.run.freeze({ model = { freeze = '^nothing', freeze_iters = 0 } }, model) end,
      "model.freeze: no parameter name matches the Lua pattern '^nothing'")
  end)
end)

describe('the eval hook', function()
  it('reports top-1/top-k into the storage and task.metrics', function()
    -- a model that outputs its input: logits given, so the accuracy is known
    local Id = nn.Module:extend('Id')
    function Id:init() self:register_parameter('w', cr.zeros(1):requires_grad_()) end
    function Id:forward(x) return x + self.w end
    local logits = cr.tensor({ { 0, 1, 2 }, { 2, 1, 0 }, { 0, 2, 1 }, { 1, 0, 2 } })
    local target = cr.tensor({ 2, 1, 1, 0 }, { dtype = 'i64' })  -- top1 hits: 1st, 3rd; top2: + 2nd, 4th
    local t = linear_task { model = Id(), epochs = 1, test_every = 1,
      batches = { { input = cr.zeros(2, 3), target = cr.tensor({ 0, 1 }, { dtype = 'i64' }) } },
      test_loader = list_loader { { input = logits:narrow(0, 0, 2), target = target:narrow(0, 0, 2) },
                                  { input = logits:narrow(0, 2, 2), target = target:narrow(0, 2, 2) } } }
    t.optimizer = cr.optim.SGD(t.model:named_parameters(), { lr = 0 })
    t:add_hook(cr.hooks.eval { topk = { 1, 2 } })
    cr.train(t)
    assert.equal(50, t.metrics.test_top1)
    assert.equal(100, t.metrics.test_top2)
    assert.equal(50, (t.storage:latest('test/top1')))
  end)
end)

describe('a tiny end-to-end train', function()
  it('lowers the loss of a small conv net on 512 Fashion-MNIST images', function()
    local ok, train = pcall(cr.data.fashion_mnist, { split = 'train', limit = 512 })
    if not ok then pending('Fashion-MNIST is absent (make deps installs dataset-fashion-mnist): ' .. tostring(train)) return end
    cr.manual_seed(0)
    local model = nn.Sequential(nn.Conv2d(1, 8, 3, { stride = 2, padding = 1 }), nn.BatchNorm2d(8), nn.ReLU(),
      nn.Conv2d(8, 16, 3, { stride = 2, padding = 1 }), nn.BatchNorm2d(16), nn.ReLU(),
      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
    local t = Task {
      model = model, epochs = 4, test_every = 0,
      optimizer = cr.optim.SGD(model:named_parameters(), { lr = 0.1, momentum = 0.9 }),
      loss = function(out, batch) return cr.cross_entropy(out, batch.target) end,
      train_loader = cr.data.Loader(train, { batch_size = 32, shuffle = true, seed = 0 }),
    }
    t:add_hook(cr.hooks.timer())
    cr.train(t)
    local h = t.storage:history('loss')
    assert.equal(64, h.n)
    local first, last = 0, 0
    for i = 1, 16 do first = first + h.values[i]; last = last + h.values[h.n - 16 + i] end
    assert.is_true(last < 0.7 * first, string.format('loss %.3f -> %.3f', first / 16, last / 16))
    assert.equal(512 * 4, t.samples_seen)
    assert.is_true(t.metrics.train_img_per_s > 0)
  end)
end)

describe('recipes/supervised.lua', function()
  it('ends with its JSON line', function()
    local ok, err = pcall(cr.data.fashion_mnist, { split = 'test', limit = 1 })
    if not ok then pending('Fashion-MNIST is absent: ' .. tostring(err)) return end
    local runs = os.tmpname()
    local p = io.popen('luajit recipes/supervised.lua train.epochs=1 data.limit=1024 model.width=4 train.log_every=4 ' ..
      'run.dir=' .. runs .. '.d 2>&1')
    local out = p:read('*a')
    p:close()
    local last = out:match('([^\n]+)\n?$')
    local cjson = require 'cjson'
    local okj, j = pcall(cjson.decode, last)
    assert.is_true(okj, out)
    assert.equal('supervised', j.recipe)
    assert.equal(1, j.epochs)
    for _, k in ipairs { 'test_top1', 'train_loss', 'seconds', 'img_per_s' } do
      assert.is_number(j[k], k)
    end
    assert.is_true(j.test_top1 > 10 and j.test_top1 <= 100, out)
    assert.truthy(out:find('epoch 1/1 test  top1', 1, true), out)
    assert.truthy(io.open(runs .. '.d/supervised/checkpoints/latest.safetensors', 'rb'), 'no checkpoint')
    os.execute("rm -rf '" .. runs .. ".d' '" .. runs .. "'")
  end)

  it('trains a ViT (model.arch=vit_tiny, model.patch), refuses a patch that does not fit or a too long warm-up', function()
    local ok = pcall(cr.data.fashion_mnist, { split = 'test', limit = 1 })
    if not ok then pending('Fashion-MNIST is absent') return end
    local runs = os.tmpname()
    local out, code = H.shell('luajit recipes/supervised.lua model.arch=vit_tiny model.patch=7 optim.name=adamw ' ..
      'optim.lr=1e-3 train.epochs=1 data.limit=128 data.batch_size=32 checkpoint.save=false run.dir=' .. runs .. '.d')
    assert.are.equal(0, code, out)
    assert.truthy(out:find('supervised: vit_tiny', 1, true), out)
    assert.truthy(out:find('"test_top1":', 1, true), out)
    out, code = H.shell('luajit recipes/supervised.lua model.arch=vit_tiny model.patch=5 train.epochs=1 data.limit=64 ' ..
      'data.batch_size=32 ' ..
      'checkpoint.save=false run.dir=' .. runs .. '.d')
    assert.are.equal(1, code, out)
    assert.truthy(out:find('img_size 28 is not a multiple of patch 5', 1, true), out)
    out, code = H.shell('luajit recipes/supervised.lua train.epochs=1 optim.warmup_epochs=1 data.limit=64 ' ..
      'checkpoint.save=false run.dir=' .. runs .. '.d')
    assert.are.equal(1, code, out)
    assert.truthy(out:find('optim.warmup_epochs = 1 is not shorter than train.epochs = 1', 1, true), out)
    os.execute("rm -rf '" .. runs .. ".d' '" .. runs .. "'")
  end)

  it('trains on a streamed image folder, list or shards, and asks for a test split', function()
    local dir = os.tmpname()
    os.execute("rm -f '" .. dir .. "'")
    local function run(args)
      local p = io.popen('luajit recipes/supervised.lua train.epochs=1 model.width=4 data.size=16 data.batch_size=8 ' ..
        'run.dir=' .. dir .. '/runs ' .. args .. ' 2>&1')
      local out = p:read('*a')
      p:close()
      return out
    end
    assert(os.execute('luajit tools/make_image_folder.lua ' .. dir .. '/demo 6 > /dev/null') == 0)
    local cjson = require 'cjson'
    for _, args in ipairs {
      'data.name=image_folder data.root=' .. dir .. '/demo run.name=folder',
      'data.name=file_list data.root=' .. dir .. '/demo data.list=train.txt data.test_list=val.txt run.name=list',
      "data.name=tar_shards data.root='" .. dir .. "/demo/shards/train-{000..001}.tar' data.test_root=" .. dir ..
        '/demo/shards/val-000.tar run.name=shards',
    } do
      local out = run(args)
      local ok, j = pcall(cjson.decode, out:match('([^\n]+)\n?$'))
      assert.is_true(ok, out)
      assert.are.equal('test', j.evaluated_on, out)
      assert.is_true(j.test_top1 >= 0 and j.test_top1 <= 100, out)
      assert.truthy(out:find('on ' .. args:match('data.name=(%S+)'), 1, true), out)
    end
    local out = run('data.name=image_folder data.root=' .. dir .. '/demo/train run.name=none')
    assert.truthy(out:find('has no test split here', 1, true), out)
    assert.truthy(out:find('data.val_split', 1, true), out)
    os.execute("rm -rf '" .. dir .. "'")
  end)
end)

describe('the live progress line in a real terminal (tmux)', function()
  if not H.has_tmux then
    it('runs in tmux', function() pending('tmux is not installed (apt-get install tmux)') end)
    return
  end
  -- the lines of a pane's text that hold the live line's 'iter a/b'
  local function live_lines(text)
    local out = {}
    for l in text:gmatch('[^\n]+') do if l:find('iter %d+/%d+') then out[#out + 1] = l end end
    return out
  end

  it('ends before a signal line, a warning and the REPL prompt; under a launcher there is none', function()
    local dir = os.tmpname()
    os.execute("rm -f '" .. dir .. "'")
    local p = H.tmux_pane('luajit recipes/supervised.lua train.epochs=1 data.limit=3000 model.width=4 data.batch_size=16 ' ..
      'train.log_every=1 run.dir=' .. dir .. ' run.name=sig checkpoint.save=false; echo RUN-ENDED', 100, 40)
    local ok, err = pcall(function()
      p:wait('  iter ', 1, 60)
      p:keys('C-c')
      local text = p:wait('RUN-ENDED', 1, 120)
      -- the live line ends, then the loop's line starts a line of its own (the terminal's ^C
      -- echo may sit on the live line)
      assert.truthy(text:find('\ncrescent: SIGINT at iteration %d+: finishing this step'), text)
    end)
    p:close()
    os.execute("rm -rf '" .. dir .. "'")
    assert(ok, err)
    -- from Lua: a warning (util.end_live_line) and a torchrun-style launcher's ranks
    local script = os.tmpname()
    local f = assert(io.open(script, 'w'))
    f:write([[
package.path = 'lua/?.lua;lua/?/init.lua;' .. package.path
require 'crescent'
local live_line, util = require 'crescent.hooks.live_line', require 'crescent.util'
live_line.show(io.stdout, 'epoch 1/1  iter 3/9  loss 2.0')
util.end_live_line()
io.stderr:write('WARNED\n')
live_line.show(io.stdout, 'epoch 1/1  iter 4/9')
live_line.finish(io.stdout)
print('TTY', live_line.stdout_is_tty())
]])
    f:close()
    p = H.tmux_pane('luajit ' .. script .. '; RANK=1 WORLD_SIZE=2 luajit ' .. script .. '; echo SCRIPT-ENDED', 100, 40)
    ok, err = pcall(function()
      local text = p:wait('SCRIPT-ENDED', 1, 60)
      assert.truthy(text:find('loss 2.0\nWARNED\nepoch 1/1  iter 4/9\nTTY%s+true\n'), text)
      assert.truthy(text:find('TTY%s+false'), text)   -- a launcher's rank: plain lines
    end)
    p:close()
    os.remove(script)
    assert(ok, err)
  end)

  it('stays one line cut to 60 columns, follows a resize to 150, and keeps other lines off it', function()
    local dir = os.tmpname()
    os.execute("rm -f '" .. dir .. "'")
    -- a recipe run: its log.txt copy makes stdout a pipe, which once hid the width
    local p = H.tmux_pane('luajit recipes/supervised.lua train.epochs=1 data.limit=3000 model.width=4 data.batch_size=16 ' ..
      'train.log_every=1 run.dir=' .. dir .. ' run.name=live checkpoint.save=false; echo RUN-ENDED', 60, 40)
    local ok, err = pcall(function()
      local text = p:wait('  iter ', 1, 60)   -- (the line refreshes every 0.2 s: any iteration)
      local lines = live_lines(text)
      assert.are.equal(1, #lines, text)
      assert.is_true(#lines[1] <= 59, lines[1])
      -- narrow: fields are left out (data time, lr, img/s), not the ETA cut in half
      assert.truthy(lines[1]:find('  eta %d'), lines[1])
      p:resize(150, 40)
      local grown
      for _ = 1, 100 do
        lines = live_lines(p:text())
        if #lines == 1 and #lines[1] > 60 then grown = lines[1] break end
        os.execute('sleep 0.1')
      end
      assert.truthy(grown, 'the live line never grew past 60 columns after the resize:\n' .. p:text())
      assert.truthy(grown:find('eta', 1, true), grown)
      text = p:wait('RUN-ENDED', 1, 300)  -- minutes only on a loaded machine (15 img/s seen)
      lines = live_lines(text)
      assert.are.equal(1, #lines, text)                        -- rewritten in place to the end
      assert.is_nil(lines[1]:find('test', 1, true), lines[1])  -- nothing glued onto it
      assert.truthy(text:find('\nepoch 1/1 test  top1', 1, true), text)     -- the test figures on their own line
    end)
    p:close()
    os.execute("rm -rf '" .. dir .. "'")
    assert(ok, err)
  end)
end)
