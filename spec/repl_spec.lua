-- spec/repl_spec.lua — the REPL through a real terminal (tmux): results and timings print,
-- `;` keeps a result quiet, multi-line input, errors leave the session alive, Ctrl-C, tab
-- completion of methods, fields and file paths, `? cr.conv2d` help, who(), Ctrl-D; and
-- attaching to a running training with SIGUSR2 (train.repl_on_signal), then resuming.
local describe_or_skip = H.has_tmux and describe or function(name, f)
  describe(name, function() pending('tmux is not installed (apt-get install tmux)', f) end)
end
local pane = H.tmux_pane
local now = require('crescent.engine.loop').now
local function sh(cmd) os.execute(cmd .. ' >/dev/null 2>&1') end

describe_or_skip('the crescent REPL in a terminal', function()
  local p
  local history = os.tmpname()
  before_each(function() p = pane('CRESCENT_HISTORY=' .. history .. ' bin/crescent; echo REPL-ENDED') end)
  after_each(function() p:close() end)

  it('prints results and timings, keeps a `;` result quiet, and takes multi-line input', function()
    p:wait('`cr` is the package')
    p:line('x = cr.ones(2, 3)')
    local t = p:wait('[f32 [2, 3] cpu]')
    assert.matches('%[%[1%., 1%., 1%.%],', t)
    assert.matches('%-%- [%d.]+ [um]?s', t)
    p:line('quiet = x:sum();')
    p:line('quiet')
    t = p:wait('\n6.\n', 1)
    assert.equal(1, select(2, t:gsub('\n6%.\n', ''))) -- printed by `quiet`, not by the `;` line
    p:line('for i = 1, 2 do')
    p:wait('\n>>')
    p:line('print(i * 10)')
    p:line('end')
    t = p:wait('20')
    assert.matches('\n10\n20\n', t)
  end)

  it('shows an error with its traceback and goes on', function()
    p:wait('`cr` is the package')
    p:line('function f() error("deep trouble") end')
    p:line('f()')
    local t = p:wait('stack traceback')
    assert.matches('stdin:1: deep trouble', t)
    p:line('1 + 41')
    p:wait('\n42\n')
  end)

  it('takes Ctrl-C: drops the line, interrupts a command, and exits on a second one', function()
    p:wait('`cr` is the package')
    p:keys('-l', 'abc = nosuch +')
    p:keys('C-c')
    p:line('1 + 1') -- every key of it reaches the next line
    p:wait('\n2\n')
    p:line('for i = 1, 3 do')
    p:wait('\n>>')
    p:keys('C-c')
    p:wait('(input dropped)')
    -- closures are not compiled (FNEW), so this loop runs interpreted and sees the interrupt
    p:line('for i = 1, 1e12 do local f = function() return i end end')
    sh('sleep 0.5')
    p:keys('C-c')
    p:wait('interrupted (Ctrl-C)')
    p:line('2 + 40')
    p:wait('\n42\n')
    -- a compiled loop runs no interrupt checks: the second Ctrl-C ends the REPL
    p:line('while true do end')
    sh('sleep 0.5')
    p:keys('C-c')
    sh('sleep 0.3')
    p:keys('C-c')
    local t = p:wait('REPL-ENDED')
    assert.matches('second Ctrl%-C and the command did not stop', t)
  end)

  it('completes methods, fields and file paths with <TAB>', function()
    p:wait('`cr` is the package')
    p:line('x = cr.zeros(2);')
    p:keys('-l', 'x:su')
    p:keys('Tab', 'Tab')
    local t = p:wait('x:sum')
    assert.matches('x:sub', t)
    p:keys('C-u')
    p:keys('-l', 'cr.nn.Conv')
    p:keys('Tab')
    p:wait('cr.nn.Conv2d')
    p:keys('C-u')
    p:keys('-l', "f = 'recipes/swa")
    p:keys('Tab')
    p:wait("f = 'recipes/swav.lua")
    p:keys('C-u')
  end)

  it('shows help from the documentation comments, lists the variables, and leaves on Ctrl-D', function()
    p:wait('`cr` is the package')
    p:line('? cr.conv2d')
    p:wait('cr.conv2d(x, w, bias, {stride = 1, padding = 0, dilation = 1, groups = 1})')
    p:line('w = cr.zeros(4, 5);')
    p:line('who()')
    p:wait('tensor [4, 5] f32 cpu')
    p:keys('C-d')
    p:wait('REPL-ENDED')
  end)
end)

describe_or_skip('attaching to a training', function()
  it('opens the REPL on SIGUSR2 between steps, and the run goes on when it is left', function()
    local pidfile = os.tmpname()
    os.remove(pidfile)
    local p = pane('CRESCENT_HISTORY= luajit spec/fixtures/attach_run.lua ' .. pidfile)
    local deadline, pid = now() + 20, nil
    repeat
      local f = io.open(pidfile)
      if f then pid = f:read('*a'); f:close() end
      if not pid or pid == '' then sh('sleep 0.1') end
    until (pid and pid ~= '') or now() > deadline
    assert.truthy(pid and pid ~= '', 'the training never started')
    sh('sleep 0.3')
    sh('kill -USR2 ' .. pid)
    local t = p:wait('`task` is the run')
    assert.truthy(t:find('\ncrescent: attached at iteration'), t)   -- below the live line, not glued onto it
    local at = tonumber(t:match('attached at iteration (%d+)'))
    assert.truthy(at and at > 0)
    p:line('task.iteration')
    p:wait('\n' .. at .. '\n')
    p:line('task.stop_at = task.iteration + 5;')
    p:keys('C-d')
    t = p:wait('stopped (asked in the REPL) at iteration')
    assert.matches('detached; training goes on', t)
    -- after leaving, steps at+1 .. at+6 ran; the last one asked to stop
    assert.equal(at + 6, tonumber(t:match('stopped %(asked in the REPL%) at iteration (%d+)')))
    p:close()
    os.remove(pidfile)
  end)
end)

describe('bin/crescent options', function()
  it('prints its usage for --help, its version and build for --version, and refuses an unknown option', function()
    local out, code = H.shell('bin/crescent --help')
    assert.are.equal(0, code, out)
    assert.truthy(out:find('usage: crescent [file.lua', 1, true), out)
    out, code = H.shell('bin/crescent --version')
    assert.are.equal(0, code, out)
    assert.truthy(out:find('crescent ' .. H.cr.version .. ' (' .. H.cr.features() .. ')', 1, true), out)
    out, code = H.shell('bin/crescent --bogus 2>&1')
    assert.are.equal(2, code, out)
    assert.truthy(out:find("unknown option '--bogus'", 1, true), out)
    -- every command has --help ('--help' was once taken for a run folder)
    out, code = H.shell('bin/crescent report --help')
    assert.are.equal(0, code, out)
    assert.truthy(out:find('usage: crescent report [folder ...]', 1, true), out)
    out, code = H.shell('bin/crescent report --bogus 2>&1')
    assert.are.equal(2, code, out)
    assert.truthy(out:find("crescent report: unknown option '--bogus'", 1, true), out)
  end)
end)

describe('who()', function()
  it("lists every variable the user made, task included, and none of the session's own names", function()
    local out = H.sink()
    local s = require('crescent.repl').session { out = out }
    s:eval('task = 42')
    s:eval('w = cr.zeros(2, 3)')
    out.text = ''
    s:who()
    local text = out.text
    assert.truthy(text:find('task%s+42'), text)
    assert.truthy(text:find('w%s+tensor %[2, 3%]'), text)
    for _, own in ipairs { 'cr', 'print', 'help', 'who', 'exit' } do
      assert.is_nil(text:find('%f[%w_]' .. own .. '%s'), own .. ' listed: ' .. text)
    end
    s:eval('print = 1')   -- the user's own value shows
    out.text = ''
    s:who()
    assert.truthy(out.text:find('print%s+1'), out.text)
  end)
end)

describe('? help', function()
  local function ask(s, q)
    s.out = H.sink()
    s:eval(q)
    return s.out.text
  end

  it('documents methods made by a factory, classes by their constructor, modules and tensor properties', function()
    local s = require('crescent.repl').session()
    s:eval('x = cr.zeros(2)')
    local sum = ask(s, '? x:sum')
    assert.truthy(sum:find('t:sum(dims, keepdim)', 1, true), sum)
    assert.truthy(sum:find('ops/reduce.lua', 1, true), sum)
    local conv = ask(s, '? cr.nn.Conv2d')
    assert.truthy(conv:find('nn.Conv2d(in, out, kernel_size', 1, true), conv)
    assert.is_nil(conv:find('the stateless and weight-holding layers', 1, true), conv)
    local nn = ask(s, '? cr.nn')
    assert.truthy(nn:find('crescent.nn — ', 1, true), nn)
    local grad = ask(s, '? x.grad')   -- nil now, documented all the same
    assert.truthy(grad:find('t.grad: the gradient backward() accumulated', 1, true), grad)
    assert.truthy(ask(s, '? x.shape'):find('t.shape: the sizes', 1, true))
    assert.truthy(ask(s, '? nosuch'):find('nosuch is nil', 1, true))
  end)
end)

describe('REPL errors', function()
  it("show the error and the user's frames, not crescent's own", function()
    local out = H.sink()
    local s = require('crescent.repl').session { out = out }
    s:eval('x = cr.zeros(2, 3);')
    s:eval('function f() local y = x:mm(x); return y end')
    out.text = ''
    s:eval('f()')
    local text = out.text
    assert.truthy(text:find('mm: shapes [2, 3] and [2, 3] cannot be multiplied', 1, true), text)
    assert.truthy(text:find('stdin:1: in function', 1, true), text)
    assert.is_nil(text:find('lua/crescent/', 1, true), text)
  end)
end)
