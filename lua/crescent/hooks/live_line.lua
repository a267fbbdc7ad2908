-- crescent.hooks.live_line — the one live progress line a terminal shows (the console
-- hook's, rewritten with \r), and the rule that keeps other output off it: a hook that
-- prints while the line is up ends it first (write), so no text is glued onto it. Whether
-- a line is up on stdout is kept in C (cr_console_*), so the loop's signal lines, the
-- REPL and warnings (util.end_live_line) end it too. The line is cut to the terminal's
-- width, read at every refresh (a resized window is followed), so it never wraps and
-- leaves half lines behind.
--   live_line.show(out, text)   -- (re)draw the live line (cols: the width, else the terminal's)
--   live_line.finish(out)       -- end it with a newline (no-op when none is up)
--   live_line.write(out, ...)   -- ordinary output: the live line (stdout's too) ends first
--   live_line.stdout_is_tty()   -- whether stdout is a terminal of this process alone (where
--                                  a live line belongs: not under a launcher's ranks)
local ffi = require 'ffi'

pcall(ffi.cdef, [[
int isatty(int fd);
]])
pcall(ffi.cdef, [[
struct crescent_winsize { unsigned short ws_row, ws_col, ws_xpixel, ws_ypixel; };
int ioctl(int fd, unsigned long request, ...);
]])
local TIOCGWINSZ = 0x5413   -- Linux
local winsize_ct = ffi.typeof('struct crescent_winsize')
local C = require('crescent.ffi').C

-- The descriptor stdout reaches the screen through: the original one while the run
-- folder's log.txt copy (recipe.run.keep_log) has made fd 1 a pipe; asking the pipe gave
-- no width, so every recipe's live line went uncut and wrapped.
local function terminal_fd() return C.cr_tee_original_fd(1) end

local M = {}
local shown = setmetatable({}, { __mode = 'k' })   -- out -> width of the line on screen

-- The terminal's columns (stdout's, through the log copy), or nil when it does not say.
function M.columns()
  local ws = winsize_ct()
  local ok, r = pcall(ffi.C.ioctl, terminal_fd(), TIOCGWINSZ, ws)
  if ok and r == 0 and ws.ws_col > 0 then return ws.ws_col end
  return tonumber(os.getenv('COLUMNS'))
end

-- Under a launcher (mpirun, srun, torchrun-style variables) stdout is not the user's
-- terminal even where it is one: OpenMPI gives each rank a pseudo-terminal while mpirun's
-- own output goes to a pipe or a Slurm file, where \r-rewritten lines would pile up.
local function launched()
  local ok, info = pcall(require('crescent.dist.launcher').detect)
  return ok and info.launcher ~= 'single'
end

function M.stdout_is_tty()
  local ok, r = pcall(function() return ffi.C.isatty(terminal_fd()) end)
  return ok and r == 1 and not launched()
end

-- The width of the line up on `out`, or nil. stdout's may have been ended from elsewhere
-- (cr_console_end_live_line).
local function up(out)
  if shown[out] and out == io.stdout and C.cr_console_live_line_up() == 0 then shown[out] = nil end
  return shown[out]
end

function M.show(out, text, cols)
  cols = cols or M.columns()
  if cols and #text > cols - 1 then text = text:sub(1, cols - 1) end
  local pad = math.max(0, (up(out) or 0) - #text)
  out:write('\r', text, string.rep(' ', pad))
  out:flush()
  shown[out] = #text
  if out == io.stdout then C.cr_console_set_live_line(1) end
end

function M.finish(out)
  if up(out) then
    out:write('\n')
    out:flush()
    shown[out] = nil
    if out == io.stdout then C.cr_console_set_live_line(0) end
  end
end

function M.write(out, ...)
  M.finish(io.stdout)
  M.finish(out)
  out:write(...)
end

return M
