-- spec/stepping_spec.lua — a task driven by hand (task:step(n), task:phase()): the same
-- hooks in the same order as cr.train, pausing and going on (also with cr.train), the
-- run's end, errors, re-entry, and the same weights as an uninterrupted cr.train.
local cr = H.cr
local Task = cr.engine.Task

-- n batches of 2 samples; batch i holds the value i
local function loader(n)
  local batches = {}
  for i = 1, n do batches[i] = { input = cr.full({ 2, 3 }, i), target = cr.zeros({ 2 }, { dtype = 'i64' }) } end
  return H.list_loader(batches)
end

-- a task that records every event as 'event:phase_name:epoch:iteration'
local function recorded_task(log, args)
  args = args or {}
  local task = Task {
    epochs = args.epochs or 2, test_every = 1, handle_signals = false,
    train_loader = loader(3), test_loader = loader(2),
    train_step = args.train_step or function(t)
      t:fire('after_forward')
      t:fire('after_backward')
    end,
    eval_step = function() end,
  }
  local h = {}
  for _, e in ipairs(Task.EVENTS) do
    h[e] = function(_, t)
      log[#log + 1] = table.concat({ e, tostring(t.phase_name), t.epoch, t.iteration }, ':')
    end
  end
  task:add_hook(h)
  return task
end

-- a linear model trained by the standard step; returns the task and its model
local function linear_task()
  cr.manual_seed(3)
  local model = cr.nn.Linear(3, 2)
  local opt = cr.optim.SGD(model:named_parameters(), { lr = 0.1, momentum = 0.9 })
  local task = Task {
    epochs = 2, test_every = 1, handle_signals = false, model = model, optimizer = opt,
    loss = function(out, batch) return cr.cross_entropy(out, batch.target) end,
    train_loader = loader(4), test_loader = loader(1),
  }
  return task, model
end

describe('task:step and task:phase', function()
  it('fire the same events, in the same order, as cr.train', function()
    local whole, by_hand = {}, {}
    cr.train(recorded_task(whole))
    local task = recorded_task(by_hand)
    local ran = {}
    for _ = 1, 4 do ran[#ran + 1] = task:step(2) end
    assert.same({ 2, 2, 2, 0 }, ran) -- the 4th call finds the batches spent and ends the run
    assert.same(whole, by_hand)
    assert.equal(6, task.iteration)
    assert.equal(2, task.epoch)
  end)

  it('pause between steps: the state is visible and can be changed before going on', function()
    local log = {}
    local task = recorded_task(log)
    assert.equal(1, task:step())
    assert.equal(1, task.iteration)
    assert.equal('train', task.phase_name)
    assert.same({ 'before_train:nil:0:0', 'before_phase:train:0:0', 'before_step:train:0:0',
                  'after_forward:train:0:0', 'after_backward:train:0:0', 'after_step:train:0:1' }, log)
    task.epochs = 1 -- a hyper-parameter changed between steps takes effect from here on
    assert.equal(2, task:step(5))
    assert.equal(1, task.epoch)
    assert.equal('after_train:nil:1:3', log[#log])
  end)

  it('task:phase runs to the end of a phase and names it', function()
    local log = {}
    local task = recorded_task(log)
    task:step()
    assert.equal('train', task:phase()) -- the rest of epoch 0's train phase
    assert.equal(3, task.iteration)
    assert.equal('after_phase:train:0:3', log[#log])
    assert.equal('test', task:phase())
    assert.equal('train', task:phase())
    assert.equal('test', task:phase())
    assert.is_nil(task:phase()) -- no phase left: the run ends
    assert.equal('after_train:nil:2:6', log[#log])
  end)

  it('a finished run says so, and how to go on', function()
    local task = recorded_task({}, { epochs = 1 })
    cr.train(task)
    assert.has_error(function() task:step() end,
      'cr.train: the training is finished (epoch 1 of train.epochs = 1); raise task.epochs to train on')
    task.epochs = 2
    assert.equal(3, task:step(10))
    assert.equal(2, task.epoch)
  end)

  it('cr.train goes on with a run stepped by hand, to the same weights', function()
    local whole, wm = linear_task()
    cr.train(whole)
    local task, m = linear_task()
    task:step(3)
    assert.equal('test', task:phase() and task:phase())
    cr.train(task)
    assert.equal(8, task.iteration)
    local mine = m:state_dict()
    for name, p in pairs(wm:state_dict()) do
      assert.equal(0, (p - mine[name]):abs():max():item(), name)
    end
  end)

  it('an error in a step fires on_exception and after_train, and the next call starts a new run', function()
    local log, fail = {}, true
    local task = recorded_task(log, { train_step = function(t)
      if t.iteration == 1 and fail then error('boom') end
    end })
    task:step()
    assert.has_error(function() task:step() end, 'boom')
    assert.equal('after_train:train:0:1', log[#log])
    assert.equal('on_exception:train:0:1', log[#log - 1])
    fail = false
    assert.equal(1, task:step())
    assert.equal('before_train', log[#log - 3]:match('^[%w_]+'))
  end)

  it('refuses to step a task from inside its own run', function()
    local task = recorded_task({}, { train_step = function(t) t:step() end })
    assert.has_error(function() cr.train(task) end)
    assert.matches('already running', tostring(task.exception))
  end)

  it('checks n', function()
    local task = recorded_task({})
    assert.has_error(function() task:step(0) end, 'task:step(n): n must be a positive integer, got 0')
    assert.has_error(function() task:step(1.5) end, 'task:step(n): n must be a positive integer, got 1.5')
  end)
end)

describe('cr.config.load', function()
  local tmp = H.tmpdir('stepping')
  teardown(tmp.remove)

  it("gives a recipe's config without running it; the task it builds steps by hand", function()
    local cfg = cr.config.load('recipes/swav.lua', { train = { epochs = 1, device = 'cpu' },
      data = { limit = 256, batch_size = 32 }, run = { dir = tmp.dir } })
    assert.equal(1, cfg.train.epochs)
    assert.equal(256, cfg.data.limit)
    assert.equal(100, cfg.swav.freeze_prototypes_iterations) -- recipes/swav.lua's own value (SwAV{}'s: 0)
    local task = cr.recipe.ssl.task('swav', cfg)
    assert.equal(2, task:step(2))
    assert.equal(2, task.iteration)
    assert.is_true(task.metrics ~= nil)
  end)

  it('checks the overrides like a --config file, and names a bad path', function()
    assert.has_error(function() cr.config.load('recipes/swav.lua', { train = { epochz = 1 } }) end,
      "config: unknown key 'train.epochz'; did you mean 'train.epochs'?")
    assert.has_error(function() cr.config.load('recipes/nope.lua') end,
      'cr.config.load: cannot open recipes/nope.lua: No such file or directory')
  end)

  it('gives a --config file (a file returning a table) with the overrides on top', function()
    local path = os.tmpname()
    local f = assert(io.open(path, 'w'))
    f:write('return { train = { epochs = 4 }, optim = { lr = 0.5 } }')
    f:close()
    local cfg = cr.config.load(path, { optim = { lr = 0.25 } })
    os.remove(path)
    assert.same({ train = { epochs = 4 }, optim = { lr = 0.25 } }, cfg)
  end)
end)
