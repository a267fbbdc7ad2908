-- crescent.repl.readline — line input for the REPL: GNU readline (libreadline.so.8,
-- Debian's libreadline8) through the FFI when the input is a terminal, with history in a
-- file and tab completion from a Lua function; plain reads from a file handle otherwise
-- (a pipe, a script, or no readline).
--
--   local input = readline.open{history = '~/.crescent_history', complete = fn, tty = path}
--   local line = input:read('> ')   -- nil at end of input; input.interrupted after a Ctrl-C
--   input:close()
-- complete(line_before_word, word) -> array of whole words that may replace `word`.
local ffi = require 'ffi'

ffi.cdef [[
typedef struct FILE FILE;
typedef char *crescent_rl_entry_fn(const char *, int);
typedef char **crescent_rl_completion_fn(const char *, int, int);
typedef int crescent_rl_getc_fn(FILE *);
char *readline(const char *prompt);
void add_history(const char *line);
int read_history(const char *filename);
int write_history(const char *filename);
int history_truncate_file(const char *filename, int nlines);
char **rl_completion_matches(const char *text, crescent_rl_entry_fn *entry);
void rl_replace_line(const char *text, int clear_undo);
extern crescent_rl_completion_fn *rl_attempted_completion_function;
extern crescent_rl_getc_fn *rl_getc_function;
extern int rl_catch_signals;
extern const char *rl_basic_word_break_characters;
extern const char *rl_readline_name;
extern char *rl_line_buffer;
extern int rl_attempted_completion_over;
extern int rl_completion_append_character;
extern int rl_done;
extern FILE *rl_instream;
extern FILE *rl_outstream;
int isatty(int fd);
int fileno(FILE *stream);
long read(int fd, void *buf, unsigned long count);
FILE *fopen(const char *path, const char *mode);
int fclose(FILE *stream);
char *strdup(const char *s);
void free(void *p);
]]

local C = ffi.C
local loop = require 'crescent.engine.loop'

local M = {}

local HISTORY_LINES = 2000
-- Lua's operators and brackets end a word; '.' and ':' do not (x:me<TAB>), nor '/' (paths)
local WORD_BREAKS = ffi.new('char[?]', 32, " \t\n\"'`<>=;|&{}(),+-*%^~[]#")

local ok_rl, rl = pcall(ffi.load, 'libreadline.so.8')
if not ok_rl then rl = nil end

local function expand_home(path)
  if path and path:sub(1, 2) == '~/' then return (os.getenv('HOME') or '.') .. path:sub(2) end
  return path
end

-- ---- plain input: a Lua file handle --------------------------------------------------------
local Plain = {}
Plain.__index = Plain

function Plain:read(prompt)
  if self.echo_prompt then
    self.out:write(prompt)
    self.out:flush()
  end
  return self.file:read('*l')
end
function Plain:close()
  if self.own then self.file:close() end
end

-- ---- readline --------------------------------------------------------------------------------
local Readline = {}
Readline.__index = Readline

-- The one readline session of the process (readline's state is global).
local active

local candidates, next_candidate = {}, 1
local entry_cb = ffi.cast('crescent_rl_entry_fn *', function(_, state)
  if state == 0 then next_candidate = 1 end
  local c = candidates[next_candidate]
  next_candidate = next_candidate + 1
  if c == nil then return nil end
  return C.strdup(c)
end)

local completion_cb = ffi.cast('crescent_rl_completion_fn *', function(text, start, stop)
  rl.rl_attempted_completion_over = 1 -- never fall back to readline's file names
  rl.rl_completion_append_character = 0
  if not active or not active.complete then return nil end
  local line = ffi.string(rl.rl_line_buffer, stop)
  local ok, list = pcall(active.complete, line:sub(1, start), ffi.string(text))
  if not ok or type(list) ~= 'table' or #list == 0 then return nil end
  candidates = list
  return rl.rl_completion_matches(text, entry_cb)
end)

-- readline's keys come from here: a Ctrl-C (the REPL's SIGINT guard interrupts the read
-- with EINTR) empties the line and ends it, so readline returns at once
local EINTR = 4
local key = ffi.new('unsigned char[1]')
local getc_cb = ffi.cast('crescent_rl_getc_fn *', function(stream)
  local fd = C.fileno(stream)
  while true do
    local n = C.read(fd, key, 1)
    if n == 1 then return key[0] end
    if n == 0 or ffi.errno() ~= EINTR then return -1 end -- end of input
    if loop.sigint_taken() then
      if active then active.interrupted = true end
      rl.rl_replace_line('', 0)
      return 10 -- newline: accept the (now empty) line
    end
  end
end)

-- readline() calls back into Lua (completion, signals): never from a compiled trace
local function read_line(prompt)
  local p = rl.readline(prompt)
  if p == nil then return nil end
  local s = ffi.string(p)
  C.free(p)
  return s
end
jit.off(read_line)

function Readline:read(prompt)
  active = self
  self.interrupted = false
  local line = read_line(prompt)
  if line and line:match('%S') and line ~= self.last then
    rl.add_history(line)
    self.last = line
    self.added = self.added + 1
  end
  return line
end

function Readline:close()
  if self.history and self.added > 0 then
    rl.write_history(self.history)
    rl.history_truncate_file(self.history, HISTORY_LINES)
  end
  if self.tty_in ~= nil then
    rl.rl_instream, rl.rl_outstream = nil, nil
    C.fclose(self.tty_in)
    C.fclose(self.tty_out)
  end
  if active == self then active = nil end
end

-- opts.history: the history file (nil: none); opts.complete: the completion function;
-- opts.tty: read and write this terminal (the attach case: stdin may not be it);
-- opts.file: read lines from this Lua file handle instead; opts.out: where a plain
-- input echoes its prompt.
function M.open(opts)
  opts = opts or {}
  if opts.file then
    return setmetatable({ file = opts.file, out = opts.out or io.stdout, echo_prompt = false }, Plain)
  end
  local tty_in, tty_out
  if opts.tty then
    tty_in, tty_out = C.fopen(opts.tty, 'r'), C.fopen(opts.tty, 'w')
    if tty_in == nil or tty_out == nil then
      if tty_in ~= nil then C.fclose(tty_in) end
      if tty_out ~= nil then C.fclose(tty_out) end
      error('crescent.repl: cannot open the terminal ' .. opts.tty .. ' (the run has none: start it in a ' ..
        'terminal, or under tmux/screen, to attach)', 0)
    end
  end
  local terminal = tty_in ~= nil or C.isatty(0) == 1
  if not rl or not terminal then
    if tty_in ~= nil then
      C.fclose(tty_in)
      C.fclose(tty_out)
      local f = assert(io.open(opts.tty, 'r'))
      return setmetatable({ file = f, own = true, out = opts.out or io.stdout, echo_prompt = true }, Plain)
    end
    return setmetatable({ file = io.stdin, out = opts.out or io.stdout, echo_prompt = terminal }, Plain)
  end
  local self = setmetatable({ complete = opts.complete, history = expand_home(opts.history), added = 0,
                              tty_in = tty_in, tty_out = tty_out, readline = true }, Readline)
  if tty_in ~= nil then rl.rl_instream, rl.rl_outstream = tty_in, tty_out end
  rl.rl_readline_name = 'crescent'
  rl.rl_basic_word_break_characters = WORD_BREAKS
  rl.rl_attempted_completion_function = completion_cb
  rl.rl_catch_signals = 0 -- SIGINT stays the REPL's guard (getc_cb sees it)
  rl.rl_getc_function = getc_cb
  if self.history then rl.read_history(self.history) end
  return self
end

M.available = rl ~= nil

return M
