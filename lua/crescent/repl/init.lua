-- crescent.repl — the interactive crescent (bin/crescent): LuaJIT with the package bound as
-- `cr`, line editing and history (readline), tab completion, multi-line input, results
-- that print by themselves (a trailing `;` keeps them quiet), each command timed, errors
-- with their traceback that leave the session alive, `? expr` for help from the sources'
-- documentation comments, who() for your variables. It also attaches to a running
-- training (train.repl_on_signal, `kill -USR2 <pid>`): M.attach(task) runs between two
-- steps, and leaving it resumes the run.
--
--   require('crescent.repl').start()                         -- what bin/crescent does
--   local s = require('crescent.repl').session{out = f}; s:eval('x = 1 + 1')
local cr = require 'crescent'
local loop = require 'crescent.engine.loop'
local readline = require 'crescent.repl.readline'
local complete = require 'crescent.repl.complete'
local help = require 'crescent.repl.help'
local show = require 'crescent.repl.show'
local util = require 'crescent.util'

local M = {}

local Session = {}
Session.__index = Session


local function format_seconds(s)
  if s < 1e-3 then return string.format('%.0f us', s * 1e6) end
  if s < 1 then return string.format('%.1f ms', s * 1e3) end
  return string.format('%.2f s', s)
end

-- A one-line summary of a value for who().
local function summary(v)
  if cr.is_tensor(v) then
    return string.format('tensor [%s] %s %s', table.concat(v.shape, ', '), v.dtype, v.device)
  end
  if cr.nn.is_module(v) then return v.__name .. ' (module)' end
  if type(v) == 'table' then
    local n = 0
    for _ in pairs(v) do n = n + 1 end
    return string.format('table (%d entries)', n)
  end
  local s = show.value(v)
  return #s > 60 and s:sub(1, 57) .. '...' or s
end

-- A new session: opts.out (a file handle; default io.stdout), opts.bind (extra globals,
-- e.g. {task = task}).
function M.session(opts)
  opts = opts or {}
  local self = setmetatable({ out = opts.out or io.stdout, done = false }, Session)
  local env = setmetatable({}, { __index = _G })
  env.cr = cr
  env.print = function(...)
    local n, parts = select('#', ...), {}
    for i = 1, n do parts[i] = tostring((select(i, ...))) end
    util.end_live_line()
    self.out:write(table.concat(parts, '\t'), '\n')
  end
  env.help = function(v) self:write(help.text(v, 'value')) end
  env.who = function() self:who() end
  env.exit = function() self.done = true end
  -- what who() leaves out: the session's own names while they hold its values (a user's
  -- `print = ...` or `task = ...` shows); bound names (an attached run's task) show too
  self.own = { cr = env.cr, print = env.print, help = env.help, who = env.who, exit = env.exit }
  for k, v in pairs(opts.bind or {}) do env[k] = v end
  self.env = env
  return self
end

-- Output starts on a line of its own: a training's live progress line (task:step(n) in
-- the session, or the run it attached to) ends first.
function Session:write(s)
  util.end_live_line()
  self.out:write(s, '\n')
end

-- who(): the globals this session made, with a summary each.
function Session:who()
  local names = {}
  for k, v in pairs(self.env) do
    if type(k) == 'string' and not rawequal(self.own[k], v) then names[#names + 1] = k end
  end
  table.sort(names)
  if #names == 0 then return self:write('(no variables yet)') end
  for _, k in ipairs(names) do self:write(string.format('  %-16s %s', k, summary(self.env[k]))) end
end

-- The chunk for src: an expression (whose values print) or statements. Returns f, kind
-- ('expression' | 'statements'), or nil, 'incomplete' | error message.
function Session:compile(src)
  local f = loadstring('return ' .. src, '=stdin')
  if f then return setfenv(f, self.env), 'expression' end
  -- `local x = ...` at the prompt: a global, so that it outlives its line
  local body = src:gsub('^%s*local%s+function%s', 'function '):gsub('^%s*local%s+([%a_][%w_%s,]*=)', '%1')
  local g, err = loadstring(body, '=stdin')
  if g then return setfenv(g, self.env), 'statements', body end
  if err:sub(-7) == "'<eof>'" then return nil, 'incomplete' end
  return nil, err
end

-- The assigned names of `a, b.c = ...` (printed after it runs), or nil.
local function assigned(src)
  local lhs = src:match('^%s*([%a_][%w_%.%s,]-)%s*=[^=]')
  if not lhs then return nil end
  local names = {}
  for name in lhs:gmatch('[^,%s]+') do
    if not name:match('^[%a_][%w_]*[%w_%.]*$') or not loadstring('return ' .. name) then return nil end
    names[#names + 1] = name
  end
  return names
end

-- The traceback of an error in the user's code, without the REPL's own frames.
-- The error and the frames of the user's code: crescent's own frames (lua/crescent/,
-- installed or not), error() itself and the REPL's are left out, so a traceback starts
-- where the user's code called in. CRESCENT_TRACEBACK=full keeps every frame.
local FULL_TRACEBACK = os.getenv('CRESCENT_TRACEBACK') == 'full'
local function internal_frame(line)
  return line:find('lua/crescent/', 1, true) or line:find('5.1/crescent/', 1, true)
    or line:find("[C]: in function 'error'", 1, true) or line:find("[C]: in function 'assert'", 1, true)
end
local function traceback(e)
  local tb = debug.traceback(tostring(e), 2)
  local keep = {}
  for line in tb:gmatch('[^\n]+') do
    if line:find('crescent/repl/init.lua', 1, true) or line:find("in function 'xpcall'", 1, true) then break end
    local frame = line:match('^%s') ~= nil
    if not line:match('^%s*%[builtin#') and not line:match('%(tail call%)')
       and (FULL_TRACEBACK or not (frame and internal_frame(line))) then
      keep[#keep + 1] = line
    end
  end
  if keep[#keep] == 'stack traceback:' then keep[#keep] = nil end
  return table.concat(keep, '\n')
end

local function interrupt_check()
  if loop.sigint_taken() then error('interrupted (Ctrl-C)', 2) end
end

local function pack(...) return { n = select('#', ...), ... } end

-- Runs f, with a Ctrl-C interrupting it (between instructions of interpreted code):
-- {n = count, ok, results...}.
local function run_guarded(f)
  debug.sethook(interrupt_check, '', 100000)
  local res = pack(xpcall(f, traceback))
  debug.sethook()
  return res
end

-- One complete input: `? expr` (help) or Lua. Returns false when src is an incomplete
-- chunk (more lines needed), true otherwise.
function Session:eval(src)
  local query = src:match('^%s*%?%s*(.-)%s*$')
  if query then
    if query == '' then
      self:write('? expr shows the documentation of a function, module or tensor, e.g. ? cr.conv2d')
      return true
    end
    local f = loadstring('return ' .. query:gsub(':([%a_][%w_]*)$', '.%1'), '=help')
    local ok, v = false, nil
    if f then ok, v = pcall(setfenv(f, self.env)) end
    if not ok then
      self:write('? needs an expression, e.g. ? cr.conv2d or ? x:sum; got ' .. query)
      return true
    end
    -- x.grad, x.shape: a tensor's property, whatever its value now
    local obj_src, key = query:match('^(.-)%.([%a_][%w_]*)$')
    local g = obj_src and loadstring('return ' .. obj_src, '=help')
    local okp, obj = false, nil
    if g then okp, obj = pcall(setfenv(g, self.env)) end
    local prop = okp and cr.is_tensor(obj) and help.property_text(key, query)
    self:write(prop or help.text(v, query))
    return true
  end
  local quiet = src:match(';%s*$') ~= nil
  local f, kind, body = self:compile(src)
  if not f and kind == 'incomplete' then return false end
  if not f then
    self:write(kind)
    return true
  end
  local t0 = loop.now()
  local res = run_guarded(f)
  local dt = loop.now() - t0
  if not res[1] then
    self:write(tostring(res[2]))
  elseif not quiet then
    local shown = {}
    if kind == 'expression' then
      for i = 2, res.n do shown[#shown + 1] = show.value(res[i]) end
    else
      for _, name in ipairs(assigned(body) or {}) do
        local g = loadstring('return ' .. name)
        local ok, v = pcall(setfenv(g, self.env))
        if ok then shown[#shown + 1] = show.value(v) end
      end
    end
    if #shown > 0 then self:write(table.concat(shown, '\n')) end
  end
  self:write('-- ' .. format_seconds(dt))
  return true
end

-- Reads and evaluates until end of input or exit(). opts.input: a readline.open() input.
function Session:loop(input)
  local buffer = nil
  loop.sigint_guard(true)
  while not self.done do
    util.end_live_line() -- the prompt on a line of its own
    local line = input:read(buffer and '>> ' or '> ')
    if input.interrupted or (line == nil and loop.sigint_taken()) then
      self:write(buffer and '(input dropped)' or '')
      buffer = nil
    elseif line == nil then
      break
    else
      local src = buffer and (buffer .. '\n' .. line) or line
      if src:match('^%s*$') then
        buffer = nil
      elseif self:eval(src) then
        buffer = nil
      else
        buffer = src
      end
    end
  end
  loop.sigint_guard(false)
  self.done = false
end

local function history_file()
  local h = os.getenv('CRESCENT_HISTORY')
  if h == '' then return nil end
  return h or '~/.crescent_history'
end

-- bin/crescent: the REPL on this terminal (or lines from stdin when it is not one).
-- opts.session: go on with this session (bin/crescent file.lua ran the file in it).
function M.start(opts)
  opts = opts or {}
  local s = opts.session or M.session(opts)
  local input = readline.open { history = history_file(),
                                complete = function(before, word) return complete.words(s.env, before, word) end }
  if input.readline then
    s:write(string.format('crescent %s on %s: `cr` is the package. ? expr for help, who() for your ' ..
      'variables, Ctrl-D to leave.', cr.version, jit.version))
  end
  s:loop(input)
  input:close()
  if input.readline then s:write('') end
  return s
end

local function is_terminal(fd)
  return require('ffi').C.isatty(fd) == 1
end

-- Attached to a run between two steps (Task:_attach): the REPL on the terminal that
-- started the run, with `task` bound; returning resumes the run.
function M.attach(task)
  local out, own_out = io.stdout, false
  if not is_terminal(1) then
    out = io.open('/dev/tty', 'w')
    if not out then
      io.stderr:write('crescent: SIGUSR2, but this run has no terminal to open the REPL on; going on\n')
      return
    end
    own_out = true
  end
  local s = M.session { out = out, bind = { task = task } }
  local ok, input = pcall(readline.open, {
    history = history_file(), tty = not is_terminal(0) and '/dev/tty' or nil, out = out,
    complete = function(before, word) return complete.words(s.env, before, word) end })
  if not ok then
    io.stderr:write(tostring(input), '\n')
    if own_out then out:close() end
    return
  end
  s:write(string.format('crescent: attached at iteration %d (epoch %d, %s phase). `task` is the run; ' ..
    'change what you like, then Ctrl-D (or exit()) resumes training.', task.iteration, task.epoch,
    tostring(task.phase_name)))
  s:loop(input)
  input:close()
  s:write('crescent: detached; training goes on')
  if own_out then out:close() end
end

return M
