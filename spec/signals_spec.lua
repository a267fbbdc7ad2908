-- spec/signals_spec.lua — preemption: SIGTERM, SIGINT and SIGUSR1 during
-- cr.train stop the C step loop after the current step (a SIGINT only pauses a run
-- stepped by hand) (task.signal, the after_step hooks
-- of that step, after_train, no test phase, the epoch not advanced past a cut-short
-- epoch), the previous handlers come back on every way out, a second SIGINT exits at once
-- with status 130, `kill -TERM` from outside ends a run with status 0, and a Ctrl-C during
-- start-up (before the loop) exits 130 with one line.
-- The signals are real ones, sent with kill(2) to this process or to a subprocess
-- (spec/fixtures/signal_run.lua).
local ffi = require 'ffi'
local cr = H.cr
local Task = cr.engine.Task
local loop = require 'crescent.engine.loop'

pcall(ffi.cdef, 'int getpid(void); int kill(int pid, int sig);')
pcall(ffi.cdef, 'void *signal(int sig, void *handler);')
pcall(ffi.cdef, 'int poll(void *fds, unsigned long nfds, int timeout);')

local SIG = { SIGINT = 2, SIGUSR1 = 10, SIGTERM = 15 }
local SIG_IGN = ffi.cast('void *', 1)

local function send(name) ffi.C.kill(ffi.C.getpid(), SIG[name]) end

-- The handler of a signal now, as an address (0: default, 1: ignored).
local function handler_of(sig)
  local prev = ffi.C.signal(sig, SIG_IGN)
  ffi.C.signal(sig, prev)
  return tonumber(ffi.cast('intptr_t', prev))
end

-- Runs fn with the three signals ignored, so that a signal the loop fails to catch
-- cannot end busted; the handlers found before are put back afterwards.
local function with_signals_ignored(fn)
  local saved = {}
  for name, n in pairs(SIG) do saved[name] = ffi.C.signal(n, SIG_IGN) end
  local ok, err = pcall(fn)
  for name, n in pairs(SIG) do ffi.C.signal(n, saved[name]) end
  if not ok then error(err, 0) end
end

local function loader(n)
  return {
    iter = function()
      local i = 0
      return function()
        i = i + 1
        if i <= n then return { size = 2, i = i } end
      end
    end,
    num_batches = function() return n end,
  }
end

-- A task of `steps` train batches and `test_steps` test batches per epoch that records
-- what happened in task.log: every step as 'train:E:I' / 'test:E:I', the signal its
-- after_step hooks saw, the phases, and whether after_train ran. The step named by
-- args.send_at sends args.signal to this process while it runs.
local function task_with_log(args)
  local log = { steps = {}, seen = {}, phases = {} }
  local function step(t)
    -- the loop counts phase_iteration once the step has returned
    if args.send_at == t.phase_name .. ':' .. t.epoch .. ':' .. (t.phase_iteration + 1) then
      send(args.signal)
      log.pending = loop.pending_signal()
    end
  end
  local task = Task {
    epochs = args.epochs or 2, test_every = args.test_steps and 1 or 0,
    train_loader = loader(args.steps or 5), test_loader = args.test_steps and loader(args.test_steps) or nil,
    train_step = step, eval_step = step, handle_signals = args.handle_signals,
  }
  task.log = log
  task:add_hook {
    name = 'log',
    before_phase = function(_, t) log.phases[#log.phases + 1] = t.phase_name .. ':' .. t.epoch end,
    after_step = function(_, t)
      local key = t.phase_name .. ':' .. t.epoch .. ':' .. t.phase_iteration
      log.steps[#log.steps + 1] = key
      if t.signal then log.seen[#log.seen + 1] = key .. '=' .. t.signal end
    end,
    after_train = function(_, t) log.after_train = t.signal or 'no signal' end,
  }
  return task
end

describe('preemption signals in the step loop', function()
  it('SIGINT pauses a run stepped by hand after the current step; the next call goes on', function()
    with_signals_ignored(function()
      local task = Task { epochs = 1, train_loader = loader(6), train_step = function(t)
        if t.iteration == 1 then send('SIGINT') end
      end }
      assert.equal(2, task:step(5)) -- the step that got it (the 2nd) finished, then a pause
      assert.is_false(task.stop_requested)
      assert.is_nil(task.signal)
      assert.equal('paused', loop.state(task._loop))
      assert.equal(1, handler_of(SIG.SIGINT)) -- the handlers are back (ignored) between calls
      assert.equal(4, task:step(5)) -- the other 4 batches, then the run ends
      assert.equal(6, task.iteration)
      assert.equal(1, task.epoch)
      assert.equal('idle', loop.state(task._loop))
    end)
  end)

  it('SIGTERM at iteration 3: the step finishes, its after_step hooks see it, then the run stops', function()
    with_signals_ignored(function()
      local task = task_with_log { epochs = 2, steps = 5, test_steps = 2, send_at = 'train:0:3', signal = 'SIGTERM' }
      cr.train(task)
      local log = task.log
      assert.equal('SIGTERM', log.pending)
      assert.same({ 'train:0:1', 'train:0:2', 'train:0:3' }, log.steps)
      assert.same({ 'train:0:3=SIGTERM' }, log.seen)
      assert.same({ 'train:0' }, log.phases) -- the test phase did not run
      assert.equal('SIGTERM', log.after_train)
      assert.equal(3, task.iteration)
      assert.equal(6, task.samples_seen)
      assert.equal(0, task.epoch) -- epoch 0 was cut short: a resume redoes its rest
      assert.equal(3, task.phase_iteration)
      assert.equal('SIGTERM', task.signal)
      assert.equal('signal', task.stop_reason)
      assert.is_true(task.stop_requested)
      assert.is_nil(loop.pending_signal())
      -- the handler found before the run (ignore) is back
      assert.equal(1, handler_of(SIG.SIGTERM))
      assert.equal(1, handler_of(SIG.SIGINT))
      assert.equal(1, handler_of(SIG.SIGUSR1))
    end)
  end)

  it('a signal a hook reports (another rank got it) stops the run as one received here', function()
    local task = task_with_log { epochs = 2, steps = 5, test_steps = 2 }
    task:add_hook { name = 'other_rank', priority = 99, after_step = function(_, t)
      if t.phase_name == 'train' and t.iteration == 2 then
        t:request_stop('signal')
        t.signal = 'SIGTERM'
      end
    end }
    cr.train(task)
    local log = task.log
    assert.same({ 'train:0:1', 'train:0:2' }, log.steps)
    assert.same({ 'train:0' }, log.phases) -- no test phase after it, as after a signal here
    assert.equal('SIGTERM', log.after_train)
    assert.equal(0, task.epoch)
    assert.equal('SIGTERM', task.signal)
  end)

  it('puts back whatever handlers were there, and installs its own only during the run', function()
    local before = {}
    for name, n in pairs(SIG) do before[name] = handler_of(n) end
    local during = {}
    local task = task_with_log { epochs = 1, steps = 2 }
    task:add_hook { before_step = function() for name, n in pairs(SIG) do during[name] = handler_of(n) end end }
    cr.train(task)
    for name, n in pairs(SIG) do
      assert.equal(before[name], handler_of(n), name .. ' after the run')
      assert.are_not.equal(before[name], during[name], name .. ' during the run')
      assert.is_true(during[name] > 1, name .. ' during the run is a handler, not default/ignore')
    end
    assert.is_nil(task.signal)
  end)

  it('SIGUSR1 at the last batch of an epoch: the epoch counts as done, no test phase', function()
    with_signals_ignored(function()
      local task = task_with_log { epochs = 3, steps = 4, test_steps = 2, send_at = 'train:0:4', signal = 'SIGUSR1' }
      cr.train(task)
      assert.same({ 'train:0' }, task.log.phases)
      assert.same({ 'train:0:4=SIGUSR1' }, task.log.seen)
      assert.equal(4, task.iteration)
      assert.equal(1, task.epoch)
      assert.equal('SIGUSR1', task.signal)
    end)
  end)

  it('a signal in the test phase stops it after the current step; the train epoch counts', function()
    with_signals_ignored(function()
      local task = task_with_log { epochs = 3, steps = 2, test_steps = 3, send_at = 'test:0:1', signal = 'SIGUSR1' }
      cr.train(task)
      assert.same({ 'train:0:1', 'train:0:2', 'test:0:1' }, task.log.steps)
      assert.same({ 'test:0:1=SIGUSR1' }, task.log.seen)
      assert.same({ 'train:0', 'test:0' }, task.log.phases)
      assert.equal(2, task.iteration)
      assert.equal(1, task.epoch)
    end)
  end)

  it('one SIGINT is a clean stop and cr.train returns normally', function()
    with_signals_ignored(function()
      local task = task_with_log { epochs = 2, steps = 3, send_at = 'train:1:2', signal = 'SIGINT' }
      local ok, err = pcall(cr.train, task)
      assert.is_true(ok, tostring(err))
      assert.equal('SIGINT', task.signal)
      assert.equal(5, task.iteration)
      assert.equal(1, task.epoch)
      assert.equal('SIGINT', task.log.after_train)
    end)
  end)

  it('a signal during before_train stops the run before its first step', function()
    with_signals_ignored(function()
      local task = task_with_log { epochs = 2, steps = 3, test_steps = 1 }
      task:add_hook { before_train = function() send('SIGTERM') end }
      cr.train(task)
      assert.same({}, task.log.steps)
      assert.same({}, task.log.phases)
      assert.equal(0, task.iteration)
      assert.equal(0, task.epoch)
      assert.equal('SIGTERM', task.signal)
      assert.equal('SIGTERM', task.log.after_train)
    end)
  end)

  it('a signal during an after_phase hook stops the run at the end of that phase', function()
    with_signals_ignored(function()
      local task = task_with_log { epochs = 3, steps = 2, test_steps = 2 }
      task:add_hook { after_phase = function(_, t) if t.phase_name == 'train' and t.epoch == 1 then send('SIGTERM') end end }
      cr.train(task)
      assert.same({ 'train:0', 'test:0', 'train:1' }, task.log.phases)
      assert.equal(4, task.iteration)
      assert.equal(2, task.epoch)
      assert.equal('SIGTERM', task.signal)
    end)
  end)

  it('handle_signals = false leaves the handlers alone', function()
    with_signals_ignored(function()
      local task = task_with_log { epochs = 1, steps = 4, send_at = 'train:0:2', signal = 'SIGTERM', handle_signals = false }
      cr.train(task)
      assert.is_nil(task.log.pending)
      assert.is_nil(task.signal)
      assert.equal(4, task.iteration) -- the ignored signal stopped nothing
      assert.equal('no signal', task.log.after_train)
    end)
  end)

  it('puts the handlers back when the run fails, and the next run starts with no signal pending', function()
    with_signals_ignored(function()
      local task = task_with_log { epochs = 1, steps = 4, send_at = 'train:0:1', signal = 'SIGTERM' }
      task:add_hook { after_step = function() error('hook broke after the signal') end }
      local ok, err = pcall(cr.train, task)
      assert.is_false(ok)
      assert.truthy(tostring(err):find('hook broke after the signal', 1, true))
      assert.equal(1, handler_of(SIG.SIGTERM))
      assert.is_nil(loop.pending_signal())
      local again = task_with_log { epochs = 1, steps = 3 }
      cr.train(again)
      assert.is_nil(again.signal)
      assert.equal(3, again.iteration)
    end)
  end)

  it('a non-signal stop keeps its behaviour: the test phase runs and the epoch advances', function()
    local task = task_with_log { epochs = 3, steps = 4, test_steps = 1 }
    task:add_hook { after_step = function(_, t) if t.iteration == 2 then t:request_stop('enough') end end }
    cr.train(task)
    assert.same({ 'train:0', 'test:0' }, task.log.phases)
    assert.equal(1, task.epoch)
    assert.is_nil(task.signal)
    assert.equal('enough', task.stop_reason)
  end)

  it('resume: the first epoch is read after before_train, the step counter starts at phase_iteration', function()
    local task = task_with_log { epochs = 3, steps = 4 }
    local resumed = false
    task:add_hook { before_train = function(_, t) t.epoch, t.iteration, t.samples_seen = 1, 6, 12 end }
    -- what the checkpoint code's Task will do: _begin_phase sets the resumed batch index,
    -- and the loader skips the batches before it
    task._begin_phase = function(t, phase)
      Task._begin_phase(t, phase)
      if phase == 'train' and not resumed then t.phase_iteration, resumed = 2, true end
    end
    task._batches = function(t, phase, epoch)
      local f, s, c = Task._batches(t, phase, epoch)
      for _ = 1, t.phase_iteration do c = f(s, c) end
      return f, s, c
    end
    cr.train(task)
    assert.same({ 'train:1:3', 'train:1:4', 'train:2:1', 'train:2:2', 'train:2:3', 'train:2:4' }, task.log.steps)
    assert.equal(12, task.iteration)
    assert.equal(24, task.samples_seen)
    assert.equal(3, task.epoch)
  end)
end)

-- ---- subprocesses -------------------------------------------------------------------
local root = io.popen('pwd'):read('*l')
local script = root .. '/spec/fixtures/signal_run.lua'

local read_file = require('crescent.util').read_file

local function sleep_ms(ms) ffi.C.poll(nil, 0, ms) end

-- Waits up to `seconds` for a file to hold a line; returns its text or nil.
local function wait_for(path, seconds)
  local deadline = os.time() + seconds
  repeat
    local s = read_file(path)
    if s and s:find('\n', 1, true) then return s end
    sleep_ms(50)
  until os.time() > deadline
  return nil
end

describe('preemption signals, in a subprocess', function()
  it('a second SIGINT exits at once with status 130 and says so', function()
    local err = os.tmpname()
    local p = io.popen(string.format('luajit %q double_sigint 2>%q; echo "exit=$?"', script, err))
    local out = p:read('*a')
    p:close()
    local stderr = read_file(err) or ''
    os.remove(err)
    assert.equal('130', out:match('exit=(%d+)'), 'stdout: ' .. out .. '\nstderr: ' .. stderr)
    assert.truthy(stderr:find('crescent: SIGINT at iteration 3: finishing this step, checkpointing, exiting', 1, true),
      stderr)
    assert.truthy(stderr:find('crescent: second SIGINT, exiting now without a checkpoint\n', 1, true), stderr)
    assert.falsy(out:find('stopped by', 1, true), 'the run went on after the second SIGINT: ' .. out)
  end)

  it('kill -TERM from outside finishes the step and exits 0', function()
    local ready, err, status = os.tmpname(), os.tmpname(), os.tmpname()
    os.remove(ready)
    os.remove(status)
    os.execute(string.format('(luajit %q term %q 2>%q; echo $? >%q.tmp; mv %q.tmp %q) >/dev/null 2>&1 &',
      script, ready, err, status, status, status))
    local pid = wait_for(ready, 60)
    if not pid then
      local code = read_file(status)
      error('the subprocess wrote no ready file within 60 s' .. (code and (' (it exited with ' .. code .. ')') or '') ..
        '; its stderr: ' .. (read_file(err) or ''))
    end
    pid = assert(tonumber(pid:match('%d+')), 'bad pid in the ready file: ' .. pid)
    os.execute('kill -TERM ' .. pid)
    local code = wait_for(status, 60)
    local stderr = read_file(err) or ''
    os.remove(ready)
    os.remove(err)
    os.remove(status)
    assert(code, 'the subprocess did not exit within 60 s of SIGTERM; its stderr: ' .. stderr)
    assert.equal('0', code:match('%d+'), 'exit status ' .. code .. '; stderr: ' .. stderr)
    assert.truthy(stderr:match('crescent: SIGTERM at iteration %d+: finishing this step, checkpointing, exiting\n'),
      stderr)
  end)

  it('Ctrl-C during start-up (before the loop takes the signals) exits 130 with one line', function()
    local body = os.tmpname()
    local f = assert(io.open(body, 'w'))
    -- a start-up that takes long (the interpreter checks for LuaJIT's interrupt hook)
    f:write("package.path = 'lua/?.lua;lua/?/init.lua;' .. package.path\njit.off()\n" ..
      "require('crescent').recipe.run.main(function() local x = 0; while true do x = x + 1 end end)\n")
    f:close()
    -- --foreground: one SIGINT to the process, as a terminal's Ctrl-C sends; without it,
    -- timeout signals its process group too, and the second SIGINT (LuaJIT's handler has
    -- reset the default by then) killed the process before it could say a word
    local out, code = H.shell('timeout --foreground --preserve-status -k 10 -s INT 1 luajit ' .. body)
    os.remove(body)
    assert.equal(130, code, out)
    assert.truthy(out:find('crescent: interrupted (Ctrl-C) during start-up; nothing was trained', 1, true), out)
    assert.is_nil(out:find('error: interrupted', 1, true), out)
  end)
end)
