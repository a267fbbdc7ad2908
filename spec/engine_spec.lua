-- spec/engine_spec.lua — the training engine: the C step loop's events, order and
-- counts, errors through after_train, timings, counters, the event storage, the
-- standard step's gradient accumulation and clipping, the pre-flight check, and a tiny
-- end-to-end train on Fashion-MNIST.
local cr = H.cr
local Task = cr.engine.Task

-- a loader of n fake batches of b samples each
local function fake_loader(n, b)
  b = b or 2
  return {
    iter = function(_, _)
      local i = 0
      return function()
        i = i + 1
        if i <= n then return { input = cr.zeros(b, 3), target = cr.zeros({ b }, { dtype = 'i64' }), i = i } end
      end
    end,
    num_batches = function() return n end,
  }
end

-- a task whose steps only fire the inner events
local function fake_task(args)
  args = args or {}
  local test_loader
  if not args.no_test then test_loader = fake_loader(2) end
  return Task {
    epochs = args.epochs or 2, test_every = args.test_every or 1,
    train_loader = fake_loader(args.steps or 3, args.b), test_loader = test_loader,
    train_step = args.train_step or function(task)
      task:fire('after_forward')
      task:fire('after_backward')
    end,
    eval_step = function() end,
  }
end

describe('the step loop', function()
  it('fires every event the right number of times (2 epochs x 3 steps, test every epoch)', function()
    local task = fake_task()
    local counts, seq = {}, {}
    local h = {}
    for _, e in ipairs(Task.EVENTS) do
      h[e] = function(_, t)
        counts[e] = (counts[e] or 0) + 1
        if e ~= 'before_step' and e ~= 'after_step' and e ~= 'after_forward' and e ~= 'after_backward' then
          seq[#seq + 1] = e .. (t.phase_name and (':' .. t.phase_name) or '')
        end
      end
    end
    task:add_hook(h)
    cr.train(task)
    -- train steps: 2 x 3; test steps: 2 x 2 (before/after_step fire in both phases)
    assert.same({ before_train = 1, before_phase = 4, before_step = 10, after_forward = 6, after_backward = 6,
                  after_step = 10, after_phase = 4, after_train = 1 }, counts)
    assert.same({ 'before_train', 'before_phase:train', 'after_phase:train', 'before_phase:test', 'after_phase:test',
                  'before_phase:train', 'after_phase:train', 'before_phase:test', 'after_phase:test', 'after_train' }, seq)
    assert.equal(6, task.iteration)
    assert.equal(2, task.epoch)
    assert.equal(12, task.samples_seen)
    assert.equal(6, task.timing.steps)
  end)

  it('tests every N epochs and after the last one', function()
    local task = fake_task { epochs = 5, test_every = 2, steps = 1 }
    local tested = {}
    task:add_hook { before_phase = function(_, t) if t.phase_name == 'test' then tested[#tested + 1] = t.epoch end end }
    cr.train(task)
    assert.same({ 1, 3, 4 }, tested)
  end)

  it('with epochs = 0 runs one test phase of the weights it has (an evaluation-only run), none without a test set', function()
    local task = fake_task { epochs = 0 }
    local seq = {}
    task:add_hook { before_phase = function(_, t) seq[#seq + 1] = 'phase:' .. t.phase_name end,
                    after_train = function() seq[#seq + 1] = 'after_train' end }
    cr.train(task)
    assert.same({ 'phase:test', 'after_train' }, seq)
    assert.same({ 0, 0 }, { task.epoch, task.iteration })
    local untested = fake_task { epochs = 0, no_test = true }
    local phases = 0
    untested:add_hook { before_phase = function() phases = phases + 1 end }
    cr.train(untested)
    assert.equal(0, phases)
  end)

  it('runs hooks by priority, then registration order', function()
    local task = fake_task { epochs = 1, steps = 1, no_test = true }
    local order = {}
    local function mk(name, prio)
      return { name = name, priority = prio, before_step = function() order[#order + 1] = name end }
    end
    task:add_hook(mk('default_a'))
    task:add_hook(mk('last', 100))
    task:add_hook(mk('first', 0))
    task:add_hook(mk('default_b', 50))
    task:add_hook(mk('early', 10))
    cr.train(task)
    assert.same({ 'first', 'early', 'default_a', 'default_b', 'last' }, order)
  end)

  it('runs on_exception and after_train when a step fails, then re-raises the message', function()
    local task = fake_task {
      train_step = function(t) if t.iteration == 1 then error('boom in step two', 0) end end,
    }
    local seen = {}
    task:add_hook {
      on_exception = function(_, t) seen[#seen + 1] = 'on_exception:' .. tostring(t.exception) end,
      after_train = function(_, t) seen[#seen + 1] = 'after_train:' .. t.iteration end,
      after_step = function() seen[#seen + 1] = 'after_step' end,
    }
    local ok, err = pcall(cr.train, task)
    assert.is_false(ok)
    assert.equal('boom in step two', err)
    assert.same({ 'after_step', 'on_exception:boom in step two', 'after_train:1' }, seen)
    assert.truthy(task.traceback:find('boom in step two', 1, true))
  end)

  it('runs after_train after a hook fails, and keeps the first error', function()
    local task = fake_task()
    local after = 0
    task:add_hook { before_phase = function() error('hook broke') end }
    task:add_hook { after_train = function() after = after + 1; error('second failure') end }
    -- (the failing after_train is reported on stderr)
    local ok, err = pcall(cr.train, task)
    assert.is_false(ok)
    assert.truthy(tostring(err):find('hook broke', 1, true))
    assert.equal(1, after)
  end)

  it('stops after the current step when a hook requests it', function()
    local task = fake_task { epochs = 3, no_test = true }
    task:add_hook { after_step = function(_, t) if t.iteration == 4 then t:request_stop('enough') end end }
    cr.train(task)
    assert.equal(4, task.iteration)
    assert.equal('enough', task.stop_reason)
  end)

  it('lets the collector free a finished task, its hooks and its loop context once nothing holds them', function()
    local gone = setmetatable({}, { __mode = 'k' })
    do
      local task = fake_task { epochs = 1 }
      local hook = { after_step = function() end }
      task:add_hook(hook)
      cr.train(task)
      gone[task], gone[hook] = true, true
    end
    for _ = 1, 3 do collectgarbage() end
    assert.is_nil(next(gone), 'a finished task stays alive (the loop context held it)')
  end)

  it('times data, step and hooks', function()
    local task = fake_task {
      epochs = 1, no_test = true,
      train_step = function(t)
        local t0 = os.clock(); while os.clock() - t0 < 0.004 do end
        t:fire('after_backward')
        t0 = os.clock(); while os.clock() - t0 < 0.002 do end
      end,
    }
    task:add_hook { name = 'slow', after_step = function() local t0 = os.clock(); while os.clock() - t0 < 0.001 do end end }
    cr.train(task)
    local tm = task.timing
    -- lower bounds only: a busy machine may stretch any interval (upper bounds: sanity)
    assert.is_true(tm.forward_backward >= 0.0035 and tm.forward_backward < 5, 'fb ' .. tm.forward_backward)
    assert.is_true(tm.optimizer >= 0.0015 and tm.optimizer < 5, 'opt ' .. tm.optimizer)
    assert.is_true(tm.hooks >= 0.0009, 'hooks ' .. tm.hooks)
    assert.is_true(tm.data >= 0 and tm.data < 5)
    local found
    for _, r in ipairs(task:hook_times()) do
      if r.label == 'slow' and r.event == 'after_step' then found = r end
    end
    assert.equal(3, found.calls)
    assert.is_true(found.seconds >= 0.0027)
  end)

  it('refuses a bad task with a message naming the field', function()
    H.assert_error(function() cr.train(Task { epochs = 1 }) end, 'train_loader')
    H.assert_error(function() Task { epoch = 1 } end, "did you mean 'epochs'")
    H.assert_error(function() cr.train(fake_task { epochs = -1 }) end, 'train.epochs')
    local t = fake_task()
    t:add_hook { after_steps = function() end }
    H.assert_error(function() cr.train(t) end, "did you mean 'after_step'")
    H.assert_error(function() fake_task():add_hook { priority = 200 } end, 'priority')
    -- the standard step needs a model, a loss and an optimizer
    H.assert_error(function() cr.train(Task { train_loader = fake_loader(1) }) end, 'task.model is missing')
  end)

  it("takes the model's device for its batches, and refuses another one naming both", function()
    local model = cr.nn.Linear(3, 2)
    assert.are.equal('cpu', model:device())
    -- a move to where the model already is keeps its tensors, so an optimizer built before still holds them
    local w = model.weight
    model:to('cpu'):to('f32')
    assert.is_true(rawequal(w, model.weight))
    assert.are.equal('cpu', cr.nn.ReLU():device())   -- no tensors: the cpu
    local task = Task { model = model, train_loader = fake_loader(1) }
    assert.are.equal('cpu', task.device)
    local seen
    task.train_step = function(_, batch) seen = batch end
    cr.train(task)
    assert.are.equal('cpu', seen.input.device)
    H.assert_error(function() Task { model = model, device = 'cuda', train_loader = fake_loader(1) } end,
      "device is 'cuda:0' but the model is on cpu", "model:to('cuda:0')")
    H.assert_error(function() Task { model = model, device = 'gpu', train_loader = fake_loader(1) } end,
      "unknown device 'gpu'")
  end)
end)

describe('the event storage', function()
  it('keeps history and smooths with a windowed median when hinted', function()
    local s = cr.engine.Storage.new { window = 3 }
    for i, v in ipairs { 1, 100, 2, 3, 50 } do s:put_scalar('loss', v, { iteration = i }) end
    s:put_scalar('lr', 0.5, { smoothing_hint = false, iteration = 5 })
    s:put_scalar('lr', 0.25, { smoothing_hint = false, iteration = 6 })
    assert.equal(3, s:smoothed('loss'))                 -- median of 2, 3, 50
    assert.equal(0.25, s:smoothed('lr'))                -- latest: no hint
    assert.equal(50, (s:latest('loss')))
    local h = s:history('loss')
    assert.near((1 + 100 + 2 + 3 + 50) / 5, h:global_avg(), 1e-12)
    assert.near((3 + 50) / 2, h:avg(2), 1e-12)
    assert.equal(26.5, h:median(4))                     -- even window: sorted {2, 3, 50, 100}
    local tab = s:latest_with_smoothing_hint(3)
    assert.same({ 3, 5 }, tab.loss)
    assert.same({ 0.25, 6 }, tab.lr)
    H.assert_error(function() s:put_scalar('lr', 1) end, 'smoothing_hint')
  end)

  it('caps the history', function()
    local s = cr.engine.Storage.new { max_len = 10 }
    for i = 1, 25 do s:put_scalar('x', i) end
    local h = s:history('x')
    assert.is_true(h.n <= 10)
    assert.equal(25, (h:latest()))
    assert.equal(25, h.count)
  end)
end)
