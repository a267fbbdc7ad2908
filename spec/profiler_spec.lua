-- profiler_spec — cr.profiler (csrc/core/profile.c): spans of ops, backward rules and
-- named regions with nesting and self time, the Chrome trace, the table, and the
-- profile hook (train.profile) writing both for a window of steps.
local H = require 'spec.helper'
local cr = H.cr
local cjson = require 'cjson'

describe('cr.profiler', function()
  it('records ops, their backward rules and named regions, nested, with self time', function()
    local x = cr.randn({ 8, 4 }):requires_grad_()
    local w = cr.randn({ 4, 3 }):requires_grad_()
    cr.profiler.start()
    local region = cr.profiler.begin('my region')
    local y = x:matmul(w):relu():sum()
    cr.profiler.finish(region)
    y:backward()
    cr.profiler.stop()
    local ev = cr.profiler.events()
    local by = {}
    for _, e in ipairs(ev) do by[e.name] = by[e.name] or e end
    assert.truthy(by['my region'] and by.relu and by.sum and by['relu backward'], cjson.encode(ev))
    assert.are.equal(0, by['my region'].depth)
    assert.are.equal(1, by.relu.depth)
    for _, e in ipairs(ev) do
      assert.is_true(e.dur_us >= 0 and e.self_us >= -1e-6 and e.self_us <= e.dur_us + 1e-6, e.name)
    end
    -- the region's self time is its duration less the ops inside it
    local inside = 0
    for _, e in ipairs(ev) do
      if e.depth == 1 and e.start_us >= by['my region'].start_us and
          e.start_us < by['my region'].start_us + by['my region'].dur_us then
        inside = inside + e.dur_us
      end
    end
    assert.is_true(math.abs(by['my region'].self_us - (by['my region'].dur_us - inside)) < 1e-3)
    -- off: nothing more is recorded, and a region is nil
    local n = #ev
    local _ = (x * 2):sum()
    assert.is_nil(cr.profiler.begin('off'))
    assert.are.equal(n, #cr.profiler.events())
    -- the trace is JSON of complete events; the table ranks by self time
    local path = os.tmpname()
    cr.profiler.chrome_trace(path, ev)
    local trace = cjson.decode(H.read_file(path))
    os.remove(path)
    assert.are.equal(#ev, #trace.traceEvents)
    assert.are.same({ 'X', 1 }, { trace.traceEvents[1].ph, trace.traceEvents[1].tid })
    local rows = cr.profiler.summary(ev)
    for i = 2, #rows do assert.is_true(rows[i - 1].self_us >= rows[i].self_us) end
    assert.truthy(cr.profiler.table(5, ev):find('^op%s+calls%s+self ms%s+total ms%s+self %%'))
    -- starting again drops the last record
    cr.profiler.start()
    cr.profiler.stop()
    assert.are.equal(0, #cr.profiler.events())
  end)

  it('refuses bad options, and GPU timing where no GPU is usable, naming why', function()
    H.assert_error(function() cr.profiler.start('gpu') end, 'profiler.start', 'opts must be a table')
    H.assert_error(function() cr.profiler.start({ gpu = -1 }) end, 'profiler.start', 'device index')
    H.assert_error(function() cr.profiler.start({ gpu = 0.5 }) end, 'profiler.start', 'device index')
    if not H.gpu_available() then
      H.assert_error(function() cr.profiler.start({ gpu = 0 }) end, cr.cuda.why_not())
      assert.is_false(cr.profiler.active())
    end
  end)

  it('the profile hook writes a trace and a table for its window of steps', function()
    local model = cr.nn.Linear(3, 2)
    local batches = {}
    for i = 1, 5 do batches[i] = { input = cr.randn({ 4, 3 }), target = cr.tensor({ 0, 1, 0, 1 }, { dtype = 'i64' }) } end
    local task = cr.engine.Task {
      model = model, optimizer = cr.optim.SGD(model:named_parameters(), { lr = 0.1 }), epochs = 1, test_every = 0,
      train_loader = H.list_loader(batches), loss = function(out, b) return cr.cross_entropy(out, b.target) end,
    }
    local dir = H.tmpdir('profile')
    local said = {}
    task:add_hook(cr.hooks.profile { first = 2, count = 2, dir = dir.dir,
      out = { write = function(_, s) said[#said + 1] = s end, flush = function() end } })
    cr.train(task)
    local trace = cjson.decode(H.read_file(dir.path('profile-2-2.json')))
    local steps, names = {}, {}
    for _, e in ipairs(trace.traceEvents) do
      names[e.name] = true
      if e.name:match('^step ') then steps[#steps + 1] = e.name end
    end
    assert.are.same({ 'step 2', 'step 3' }, steps)
    assert.truthy(names.forward and names.backward and names.optimizer and names.addmm, cjson.encode(names))
    assert.truthy(H.read_file(dir.path('profile-2-2.txt')):find('addmm', 1, true))
    assert.truthy(table.concat(said):find('profile of steps 2-3', 1, true))
    assert.is_false(cr.profiler.active())
    dir.remove()
    assert.are.same({ 10, 3 }, { cr.hooks.profile.parse('10:3') })
    assert.is_nil(cr.hooks.profile.parse(''))
    H.assert_error(function() cr.hooks.profile.parse('10') end, "train.profile must be '<first step>:<count>'")
  end)
end)
