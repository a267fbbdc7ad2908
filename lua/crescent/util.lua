-- crescent.util — the glue every binding file uses: status checks that raise Lua errors
-- with the C message, ownership of returned handles (ffi.gc, plus GC nudges because
-- tensor bytes live outside the Lua heap), dtype names and shape arguments.
local ffi = require 'ffi'
local C = require('crescent.ffi').C

local M = {}

pcall(ffi.cdef, 'int mkdir(const char *path, unsigned int mode);')
-- mkdir -p: every missing folder of the path, mode 755. What cannot be made shows up when
-- a file is created in it, with the message that names the folder.
function M.mkdir_p(dir)
  local path = dir:sub(1, 1) == '/' and '' or nil
  for part in dir:gmatch('[^/]+') do
    path = path and (path .. '/' .. part) or part
    ffi.C.mkdir(path, tonumber('755', 8))
  end
end

M.box = ffi.new('cr_tensor*[4]')      -- out-parameters of single calls
local shape_buf = ffi.new('int64_t[8]')
local shape_buf2 = ffi.new('int64_t[8]')

-- Ends the console's live progress line when one is up on stdout (crescent.hooks.live_line),
-- so that a message printed next starts on a line of its own: call it before a warning.
function M.end_live_line() C.cr_console_end_live_line() end

-- Errors point at the user's line: the first caller outside lua/crescent/ (the
-- argument is ignored and kept for callers that pass the old fixed level).
local function user_level()
  for level = 3, 40 do
    local info = debug.getinfo(level, 'S')
    if not info then return 0 end
    if not info.source:find('lua/crescent/', 1, true) then return level - 1 end
  end
  return 0
end
M.user_level = user_level

local function raise()
  error(ffi.string(C.cr_last_error()), user_level())
end
M.raise = raise

function M.check(st)
  if st ~= 0 then raise() end
end

-- Tensor bytes are invisible to the Lua GC: every so often ask C whether enough bytes
-- were allocated since the last collection that garbage should be collected now.
-- The hint is one relaxed atomic load in C, cheap enough to ask on every handle.
local free_fn, gc_hint = C.cr_tensor_free, C.cr_memory_gc_hint
function M.own(p)
  if gc_hint() ~= 0 then collectgarbage('collect') end
  return ffi.gc(p, free_fn)
end

-- A failed allocation collects garbage and retries once before raising.
function M.retry(st, f, ...)
  if st == 2 then
    collectgarbage('collect')
    collectgarbage('collect')
    st = f(...)
  end
  if st ~= 0 then raise() end
end

M.dtypes = {
  f32 = C.CR_DT_F32, float32 = C.CR_DT_F32, float = C.CR_DT_F32,
  f64 = C.CR_DT_F64, float64 = C.CR_DT_F64, double = C.CR_DT_F64,
  f16 = C.CR_DT_F16, float16 = C.CR_DT_F16, half = C.CR_DT_F16,
  bf16 = C.CR_DT_BF16, bfloat16 = C.CR_DT_BF16,
  i64 = C.CR_DT_I64, int64 = C.CR_DT_I64, long = C.CR_DT_I64,
  i32 = C.CR_DT_I32, int32 = C.CR_DT_I32, int = C.CR_DT_I32,
  u8 = C.CR_DT_U8, uint8 = C.CR_DT_U8, byte = C.CR_DT_U8,
  bool = C.CR_DT_BOOL,
}

function M.dtype(name, default)
  if name == nil then return default or C.CR_DT_F32 end
  if type(name) == 'number' then return name end
  local dt = M.dtypes[name]
  if not dt then
    error("unknown dtype '" .. tostring(name) .. "'; use f32, f64, f16, bf16, i64, i32, u8 or bool", 3)
  end
  return dt
end

-- 'cpu' | 'cuda' | 'cuda:N' -> device type, index; nil for anything else.
function M.parse_device(name)
  if name == 'cpu' then return C.CR_DEV_CPU, 0 end
  if name == 'cuda' then return C.CR_DEV_CUDA, 0 end
  local index = type(name) == 'string' and tonumber(name:match('^cuda:(%d+)$'))
  if index then return C.CR_DEV_CUDA, index end
  return nil
end

-- The same, with an error naming a bad name.
function M.device(name, level)
  local dev, index = M.parse_device(name)
  if not dev then
    error("unknown device '" .. tostring(name) .. "'; use 'cpu', 'cuda' or 'cuda:N'", (level or 2) + 1)
  end
  return dev, index
end

-- 'cpu' or 'cuda:N' (what t.device says) for a device name: 'cuda' is cuda:0.
function M.device_string(name, level)
  local dev, index = M.device(name, (level or 2) + 1)
  return dev == C.CR_DEV_CPU and 'cpu' or 'cuda:' .. index
end

function M.dtype_name(dt)
  return ffi.string(C.cr_dtype_name(dt))
end

-- Shapes come as a table {2, 3} or as numbers (2, 3). Returns ndim, int64_t[8].
local function fill_shape(buf, what, ...)
  local first = ...
  local n, get
  if type(first) == 'table' then
    n = #first
    get = function(i) return first[i] end
  else
    n = select('#', ...)
    local args = { ... }
    get = function(i) return args[i] end
  end
  if n > 8 then error(what .. ': at most 8 dims, got ' .. n, 4) end
  for i = 1, n do
    local v = get(i)
    if type(v) ~= 'number' then
      error(what .. ': size ' .. i .. ' is ' .. tostring(v) .. ', expected a number', 4)
    end
    if v ~= math.floor(v) then
      error(what .. ': size ' .. i .. ' is ' .. v .. ', expected an integer', 4)
    end
    buf[i - 1] = v
  end
  return n, buf
end
function M.shape_arg(what, ...) return fill_shape(shape_buf, what, ...) end
function M.shape_arg2(what, ...) return fill_shape(shape_buf2, what, ...) end

-- Splits a trailing options table from shape varargs: zeros(2, 3, {dtype='f64'}).
function M.split_opts(...)
  local n = select('#', ...)
  local last = select(n, ...)
  if n >= 1 and type(last) == 'table' and (#last == 0 and next(last) ~= nil) then
    return last, n - 1
  end
  return nil, n
end

-- Bitmask of dims for reductions: nil = all; a number or a table of numbers (0-based,
-- negative from the end).
function M.dims_mask(what, dims, ndim)
  if dims == nil then return 0 end
  if type(dims) == 'number' then dims = { dims } end
  if type(dims) ~= 'table' then error(what .. ': dim must be a number or a table of numbers', 3) end
  if ndim == 0 then return 0 end
  local mask = 0
  for _, d in ipairs(dims) do
    if type(d) ~= 'number' or d ~= math.floor(d) then
      error(string.format('%s: dims must be integers, got %s', what, tostring(d)), 3)
    end
    local dd = d < 0 and d + ndim or d
    if dd < 0 or dd >= math.max(ndim, 1) then
      error(string.format('%s: dim %s out of range for a %d-dim tensor', what, tostring(d), ndim), 3)
    end
    local b = bit.lshift(1, dd)
    if bit.band(mask, b) ~= 0 then
      error(string.format('%s: dim %d appears more than once in the list of dims', what, dd), 3)
    end
    mask = bit.bor(mask, b)
  end
  return mask
end


-- "1 thread", "2 threads": a count and its noun.
function M.count_of(n, noun) return n .. ' ' .. noun .. (n == 1 and '' or 's') end

-- ---- files and names --------------------------------------------------------------------

-- The entries of a folder (cr.data.images.list_dir, the checkpoint folder): a list of
-- {name =, dir = true|false}, sorted by name.
local charp1_ct, int64_1_ct = ffi.typeof('char *[1]'), ffi.typeof('int64_t[1]')
function M.list_dir(path)
  if type(path) ~= 'string' then error('list_dir: expected a folder name, got ' .. type(path), 2) end
  local pp, plen = ffi.new(charp1_ct), ffi.new(int64_1_ct)
  if C.cr_dir_list(pp, plen, path) ~= 0 then raise() end
  local s = ffi.string(pp[0], plen[0])
  C.cr_dir_list_free(pp[0])
  local out = {}
  for kind, name in s:gmatch('([df])([^%z]*)%z') do out[#out + 1] = { name = name, dir = kind == 'd' } end
  table.sort(out, function(a, b) return a.name < b.name end)
  return out
end

pcall(ffi.cdef, 'int access(const char *path, int mode);')
-- Whether something (a file, a folder) is at path, readable or not (access(2), F_OK).
function M.path_exists(path) return type(path) == 'string' and ffi.C.access(path, 0) == 0 end

-- Whether path can be opened for reading.
function M.file_exists(path)
  local f = io.open(path, 'rb')
  if f then f:close() end
  return f ~= nil
end

-- A whole file's bytes, or nil when it cannot be read.
function M.read_file(path)
  local f = io.open(path, 'rb')
  if not f then return nil end
  local s = f:read('*a')
  f:close()
  return s
end

-- Edit distance (insert, delete, substitute: 1 each).
function M.edit_distance(a, b)
  local la, lb = #a, #b
  if la == 0 then return lb end
  if lb == 0 then return la end
  local prev, cur = {}, {}
  for j = 0, lb do prev[j] = j end
  for i = 1, la do
    cur[0] = i
    local ca = a:byte(i)
    for j = 1, lb do
      local cost = ca == b:byte(j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev, cur = cur, prev
  end
  return prev[lb]
end

-- 'a, b, c, ... (N in all)': the first `max` (default 8) of a list, for messages.
function M.short_list(xs, max)
  max = max or 8
  local shown = {}
  for i = 1, math.min(#xs, max) do shown[i] = xs[i] end
  local s = table.concat(shown, ', ')
  if #xs > max then s = s .. string.format(', ... (%d in all)', #xs) end
  return s
end

-- The string keys of t, sorted: for messages that list the known names, and for output
-- that must not change from run to run.
function M.sorted_keys(t)
  local ks = {}
  for k in pairs(t) do
    if type(k) == 'string' then ks[#ks + 1] = k end
  end
  table.sort(ks)
  return ks
end

-- The key of the set `known` (key -> anything) nearest to word, for "did you mean"
-- messages; nil when none is within max(2, #word / 3) edits. Ties go to the first in
-- sorted order, so the message does not change from run to run.
function M.nearest(word, known)
  local best, best_d = nil, math.huge
  for _, k in ipairs(M.sorted_keys(known)) do
    local d = M.edit_distance(word, k)
    if d < best_d then best, best_d = k, d end
  end
  if best and best_d <= math.max(2, math.floor(#word / 3)) then return best end
  return nil
end


-- One JSON text of v: objects with their keys sorted, numbers as the shortest text that
-- reads back exactly (NaN and infinities: null), '/' unescaped (lua-cjson escapes it), so
-- equal values give equal text (metrics.jsonl, JSON last lines, checkpoint metadata).
function M.json(v)
  local t = type(v)
  if t == 'table' then
    if next(v) == nil then return '[]' end
    if #v > 0 then
      local parts = {}
      for i, x in ipairs(v) do parts[i] = M.json(x) end
      return '[' .. table.concat(parts, ',') .. ']'
    end
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    local parts = {}
    for i, k in ipairs(keys) do parts[i] = M.json(tostring(k)) .. ':' .. M.json(v[k]) end
    return '{' .. table.concat(parts, ',') .. '}'
  elseif t == 'string' then
    return (require('cjson').encode(v):gsub('\\/', '/'))   -- every '/' cjson writes follows its backslash
  elseif t == 'number' then
    if v ~= v or v == math.huge or v == -math.huge then return 'null' end
    if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return string.format('%d', v) end
    for digits = 15, 16 do   -- the shortest text that reads back exactly
      local text = string.format('%.' .. digits .. 'g', v)
      if tonumber(text) == v then return text end
    end
    return string.format('%.17g', v)
  elseif t == 'boolean' then
    return tostring(v)
  end
  return 'null'
end

return M
