-- crescent.profiler — times every op, backward rule and named region the main thread
-- runs while it is on (csrc/core/profile.c), and writes what it saw as a Chrome trace
-- (chrome://tracing, https://ui.perfetto.dev) and as a table of the ops that took the most
-- time. When off, an op pays one branch for it.
--
--   cr.profiler.start()                   -- or start{gpu = 0}: GPU times of cuda:0's work
--   ... forward, backward, step ...
--   cr.profiler.stop()
--   cr.profiler.chrome_trace('trace.json')
--   print(cr.profiler.table(15))          -- op, calls, self ms, total ms, share of the time
--   local r = cr.profiler.begin('data'); ...; cr.profiler.finish(r)   -- a named region
--
-- In a recipe: train.profile=<first step>:<count> (cr.hooks.profile).
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local util = require 'crescent.util'

local M = {}

-- opts.gpu = i: each span's time is the GPU time of the work it queued on cuda:i (timing
-- events on the device's compute stream, read at stop, which waits for the device), not
-- the host's: what a GPU step costs op by op while the host runs ahead of it.
function M.start(opts)
  if opts ~= nil and type(opts) ~= 'table' then
    error('profiler.start: opts must be a table such as {gpu = 0} or nil, got ' .. type(opts), 2)
  end
  local gpu = opts and opts.gpu
  if gpu == nil then return util.check(C.cr_profile_start()) end
  if type(gpu) ~= 'number' or gpu < 0 or gpu ~= math.floor(gpu) then
    error('profiler.start: gpu must be a device index (0 for cuda:0), got ' .. tostring(gpu), 2)
  end
  util.check(C.cr_profile_start_gpu(gpu))
end
function M.stop() C.cr_profile_stop() end
function M.active() return C.cr_profile_active() end

-- A named region (a step, the optimizer): its handle for finish (nil when off).
function M.begin(name)
  local i = C.cr_profile_begin(tostring(name))
  if i < 0 then return nil end
  return i
end

function M.finish(handle)
  if handle then C.cr_profile_end(handle) end
end

-- Every recorded span: {name, start_us, dur_us, self_us, depth}, in start order.
function M.events()
  local out = {}
  local name = ffi.new('const char*[1]')
  local start, dur, self_t = ffi.new('double[1]'), ffi.new('double[1]'), ffi.new('double[1]')
  local depth = ffi.new('int[1]')
  for i = 0, tonumber(C.cr_profile_count()) - 1 do
    util.check(C.cr_profile_event(i, name, start, dur, self_t, depth))
    out[#out + 1] = { name = ffi.string(name[0]), start_us = start[0], dur_us = dur[0], self_us = self_t[0],
                      depth = depth[0] }
  end
  return out
end

-- Writes the spans as Chrome trace JSON (complete events, one thread) to path.
function M.chrome_trace(path, events)
  events = events or M.events()
  local f, err = io.open(path, 'w')
  if not f then error(string.format("profiler: cannot write '%s' (%s)", path, tostring(err)), 0) end
  f:write('{"displayTimeUnit": "ms", "traceEvents": [\n')
  for i, e in ipairs(events) do
    f:write(string.format('{"name": %s, "ph": "X", "ts": %.3f, "dur": %.3f, "pid": 1, "tid": 1}%s\n',
      util.json(e.name), e.start_us, e.dur_us, i < #events and ',' or ''))
  end
  f:write(']}\n')
  f:close()
end

-- Per name: calls, self and total microseconds; sorted by self time, the largest first.
function M.summary(events)
  events = events or M.events()
  local by, total = {}, 0
  for _, e in ipairs(events) do
    local s = by[e.name]
    if not s then
      s = { name = e.name, calls = 0, self_us = 0, total_us = 0 }
      by[e.name] = s
    end
    s.calls, s.self_us, s.total_us = s.calls + 1, s.self_us + e.self_us, s.total_us + e.dur_us
    if e.depth == 0 then total = total + e.dur_us end
  end
  local rows = {}
  for _, s in pairs(by) do rows[#rows + 1] = s end
  table.sort(rows, function(a, b) return a.self_us > b.self_us end)
  return rows, total
end

-- The n names with the most self time, as a text table (share: of the top-level spans' time).
function M.table(n, events)
  local rows, total = M.summary(events)
  local lines = { string.format('%-28s %8s %10s %10s %7s', 'op', 'calls', 'self ms', 'total ms', 'self %') }
  for i = 1, math.min(n or 20, #rows) do
    local r = rows[i]
    lines[#lines + 1] = string.format('%-28s %8d %10.2f %10.2f %6.1f%%', r.name, r.calls, r.self_us / 1e3,
      r.total_us / 1e3, total > 0 and 100 * r.self_us / total or 0)
  end
  return table.concat(lines, '\n')
end

return M
