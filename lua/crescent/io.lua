-- crescent.io — tensors and model weights on disk, in the safetensors format (read and
-- written in C with strict validation: csrc/io/, the format in csrc/include/crescent_io.h).
--
--   cr.save(path, tensors, metadata)  tensors = {name = tensor}, a list of {name, tensor}
--                                     pairs, or a module (its state_dict); metadata = a
--                                     table string -> string (JSON-encode richer values)
--   cr.load(path) -> tensors (name -> tensor), metadata (string -> string)
--   cr.io.load_into(model, path_or_tensors, {remove_prefix = 'module.', add_prefix = '',
--                   skip = {patterns}, strict = true}) -> report
--   cr.io.format_report(report) -> one line
--
-- Files are byte-reproducible (tensors sorted by name) and written atomically (a temp
-- file renamed over the target), so a crash never leaves half a checkpoint.
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local Tensor = require 'crescent.tensor'
local util = require 'crescent.util'

local is_tensor = Tensor.op_helpers.is_tensor

local M = {}

-- made once: see tensor.lua on C type strings
local names_ct = ffi.typeof('const char*[?]')
local tensors_ct = ffi.typeof('cr_tensor*[?]')
local file_box_ct = ffi.typeof('cr_io_file*[1]')

local function fail(msg) error(msg, util.user_level()) end

local function is_module(v)
  local mt = type(v) == 'table' and getmetatable(v)
  return mt and mt.__is_module == true or false
end

local function kind(v)
  if is_tensor(v) then return 'a tensor' end
  if is_module(v) then return 'a module' end
  return 'a ' .. type(v)
end

-- {name = tensor} or {{name, tensor}, ...} -> list of names, list of tensors (in the
-- table's order; the C writer sorts by name).
local function entries_of(what, tensors)
  if is_module(tensors) then tensors = tensors:state_dict() end
  if type(tensors) ~= 'table' then
    fail(what .. ': tensors must be a table name -> tensor, a list of {name, tensor} pairs or a module, got '
      .. kind(tensors))
  end
  local names, list = {}, {}
  local n = #tensors
  if n > 0 then
    for k in pairs(tensors) do
      if type(k) ~= 'number' or k < 1 or k > n or k ~= math.floor(k) then
        fail(string.format("%s: the tensors table mixes a list of {name, tensor} pairs with the key '%s'; "
          .. 'use one form', what, tostring(k)))
      end
    end
    for i = 1, n do
      local e = tensors[i]
      if type(e) ~= 'table' or type(e[1]) ~= 'string' or not is_tensor(e[2]) then
        fail(string.format('%s: entry %d of the list must be a pair {name, tensor}, got %s', what, i,
          type(e) == 'table' and ('{' .. kind(e[1]) .. ', ' .. kind(e[2]) .. '}') or kind(e)))
      end
      names[i], list[i] = e[1], e[2]
    end
  else
    for k, v in pairs(tensors) do
      if type(k) ~= 'string' then
        fail(string.format('%s: tensor names must be strings, got the key %s (%s)', what, tostring(k), type(k)))
      end
      if not is_tensor(v) then
        fail(string.format("%s: '%s' is %s, expected a tensor", what, k, kind(v)))
      end
      names[#names + 1], list[#list + 1] = k, v
    end
  end
  return names, list
end

local function json_escape(c)
  if c == '"' then return '\\"' end
  if c == '\\' then return '\\\\' end
  return string.format('\\u%04x', c:byte())
end
local function json_string(s) return '"' .. s:gsub('[%c"\\]', json_escape) .. '"' end

-- The metadata as a JSON object text; the C writer checks it and sorts the keys.
local function metadata_json(what, metadata)
  if metadata == nil then return nil end
  if type(metadata) ~= 'table' or is_module(metadata) then
    fail(what .. ': metadata must be a table string -> string, got ' .. kind(metadata))
  end
  local parts = {}
  for k, v in pairs(metadata) do
    if type(k) ~= 'string' then
      fail(string.format('%s: metadata keys must be strings, got %s (%s)', what, tostring(k), type(k)))
    end
    if type(v) ~= 'string' then
      fail(string.format("%s: metadata '%s' is %s; the format stores only strings (use tostring, "
        .. "or cjson.encode for tables)", what, k, kind(v)))
    end
    parts[#parts + 1] = json_string(k) .. ':' .. json_string(v)
  end
  return '{' .. table.concat(parts, ',') .. '}'
end

local function check_path(what, path)
  if type(path) ~= 'string' or path == '' then
    fail(what .. ': path must be a file name (a non-empty string), got ' .. kind(path))
  end
end

-- cr.save(path, tensors, metadata): see the top of this file.
-- What save and save_async pass to C: the names, the tensors (host(t) of each), their
-- count and the metadata JSON, with the C arrays. The Lua values stay referenced by the
-- caller's locals until the C call returns.
local function save_args(what, path, tensors, metadata, host)
  check_path(what, path)
  local names, list = entries_of(what, tensors)
  local meta = metadata_json(what, metadata)
  local n = #names
  for i = 1, n do list[i] = host(list[i]) end
  local cnames, ctensors = ffi.new(names_ct, n + 1), ffi.new(tensors_ct, n + 1)
  for i = 1, n do cnames[i - 1], ctensors[i - 1] = names[i], list[i] end
  return cnames, ctensors, n, meta, names, list
end

-- GPU tensors are written from host copies
local function on_host(t) return t.device ~= 'cpu' and t:cpu() or t end

function M.save(path, tensors, metadata)
  local cnames, ctensors, n, meta, names, list = save_args('save', path, tensors, metadata, on_host) -- luacheck: ignore 211
  util.retry(C.cr_io_save_safetensors(path, cnames, ctensors, n, meta),
    C.cr_io_save_safetensors, path, cnames, ctensors, n, meta)
  return path
end

-- cr.io.save_async(path, tensors, metadata) -> a job: the same file, written by a thread
-- of its own from copies taken now, so the caller goes on at once (a checkpoint off the
-- step path). job:done() tells whether it has finished; job:wait() waits and raises the
-- write's error, if any (a job nobody waits for is waited for when collected).
local Job = {}
Job.__index = Job

function Job:done() return self.ptr == nil or C.cr_io_save_done(self.ptr) end

function Job:wait()
  local p = self.ptr
  if p == nil then return self.path end
  self.ptr, self.copies = nil, nil
  ffi.gc(p, nil)
  if C.cr_io_save_wait(p) ~= 0 then fail(ffi.string(C.cr_last_error())) end
  return self.path
end

-- A contiguous host copy that shares no memory with t: the writer thread only reads it.
local function snapshot(t)
  local c = t:detach():contiguous() -- may share t's memory: copied below
  return c.device == 'cpu' and c:clone() or c:cpu()
end

function M.save_async(path, tensors, metadata)
  local cnames, ctensors, n, meta, _, copies = save_args('save_async', path, tensors, metadata, snapshot)
  local box = ffi.new('cr_io_save_job*[1]')
  util.retry(C.cr_io_save_async(box, path, cnames, ctensors, n, meta), C.cr_io_save_async, box, path, cnames,
    ctensors, n, meta)
  return setmetatable({ ptr = ffi.gc(box[0], C.cr_io_save_wait), path = path, copies = copies }, Job)
end

-- cr.io.save_npy(path, tensor): one tensor as a NumPy .npy file (format 1.0, C order,
-- little-endian), for numpy.load. bf16 has no NumPy dtype: convert it first (:float()).
local NPY_DESCR = { f32 = '<f4', f64 = '<f8', f16 = '<f2', i64 = '<i8', i32 = '<i4', u8 = '|u1', bool = '|b1' }
local NPY_SIZE = { f32 = 4, f64 = 8, f16 = 2, i64 = 8, i32 = 4, u8 = 1, bool = 1 }

function M.save_npy(path, t)
  check_path('save_npy', path)
  if not is_tensor(t) then fail('save_npy: expected a tensor, got ' .. kind(t)) end
  local descr = NPY_DESCR[t.dtype]
  if not descr then
    fail(string.format("save_npy: NumPy has no dtype for %s; convert it first (t:float())", t.dtype))
  end
  local c = t:detach():contiguous()
  if c.device ~= 'cpu' then c = c:cpu() end
  local dims = {}
  for i, d in ipairs(c.shape) do dims[i] = tostring(d) end
  local shape = #dims == 1 and ('(' .. dims[1] .. ',)') or ('(' .. table.concat(dims, ', ') .. ')')
  local header = string.format("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape)
  local total = 10 + #header + 1 -- magic, version, length, header and its newline
  header = header .. string.rep(' ', (64 - total % 64) % 64) .. '\n'
  local tmp = path .. '.tmp'
  local f, err = io.open(tmp, 'wb')
  if not f then fail(string.format("save_npy: cannot write '%s' (%s)", tmp, tostring(err))) end
  f:write('\147NUMPY\1\0', string.char(#header % 256, math.floor(#header / 256)), header)
  f:write(ffi.string(c:data_ptr(), c:numel() * NPY_SIZE[c.dtype]))
  f:close()
  local ok, rerr = os.rename(tmp, path)
  if not ok then fail(string.format("save_npy: cannot write '%s' (%s)", path, tostring(rerr))) end
  return path
end

-- cr.load(path) -> tensors (name -> tensor), metadata (string -> string)
function M.load(path)
  check_path('load', path)
  local box = ffi.new(file_box_ct)
  util.retry(C.cr_io_load_safetensors(box, path), C.cr_io_load_safetensors, box, path)
  local f = ffi.gc(box[0], C.cr_io_file_free)
  local tensors, metadata = {}, {}
  for i = 0, tonumber(C.cr_io_file_count(f)) - 1 do
    tensors[ffi.string(C.cr_io_file_name(f, i))] = util.own(C.cr_io_file_tensor(f, i))
  end
  for i = 0, tonumber(C.cr_io_file_metadata_count(f)) - 1 do
    metadata[ffi.string(C.cr_io_file_metadata_key(f, i))] = ffi.string(C.cr_io_file_metadata_value(f, i))
  end
  C.cr_io_file_free(ffi.gc(f, nil))
  return tensors, metadata
end

local LOAD_OPTS = { remove_prefix = 'string', add_prefix = 'string', skip = 'table', strict = 'boolean',
                    select_prefix = 'string' }

local function check_load_opts(opts)
  if opts == nil then return {} end
  if type(opts) ~= 'table' then fail('load_into: options must be a table, got ' .. kind(opts)) end
  for k, v in pairs(opts) do
    local want = LOAD_OPTS[k]
    if not want then
      fail(string.format("load_into: unknown option '%s'; options are select_prefix, remove_prefix, add_prefix, skip, " ..
        'strict', tostring(k)))
    end
    local ok = type(v) == want or (k == 'skip' and type(v) == 'string')
    if not ok then
      fail(string.format('load_into: %s must be a %s, got %s', k,
        k == 'skip' and 'Lua pattern or a list of them' or want, kind(v)))
    end
  end
  return opts
end

-- BatchNorm's step counter 'num_batches_tracked' (an i64 count of training batches, used
-- only by momentum = false) is not a weight, and files and models disagree about it:
-- PyTorch checkpoints from before 0.4.1 (torchvision's classic ImageNet weights) lack it,
-- and a file may carry one that the model does not have. So a counter of the file that the
-- model lacks is dropped, and a counter of the model that the file lacks (while the file has
-- that layer's running_mean) keeps its value; neither makes strict loading fail, and both
-- are listed as ignored. Names matching the user's skip patterns are left to those.
-- Returns the sorted ignored names and the skip list to pass on.
local COUNTER = 'num_batches_tracked'
local function counter_owner(name)
  if name == COUNTER then return '' end
  return name:match('^(.*%.)' .. COUNTER .. '$')
end

local function ignore_step_counters(model, sd, user_skip)
  local patterns = type(user_skip) == 'string' and { user_skip } or user_skip or {}
  local function user_skips(name)
    for _, p in ipairs(patterns) do
      local ok, found = pcall(string.find, name, p)
      if ok and found then return true end
    end
    return false
  end
  local own = {}
  for _, e in ipairs(model:named_state()) do own[e[1]] = true end
  local ignored, skip = {}, {}
  for i, p in ipairs(patterns) do skip[i] = p end
  for name in pairs(sd) do
    if counter_owner(name) and not own[name] and not user_skips(name) then ignored[#ignored + 1] = name end
  end
  for _, name in ipairs(ignored) do sd[name] = nil end
  for name in pairs(own) do
    local owner = counter_owner(name)
    if owner and sd[name] == nil and sd[owner .. 'running_mean'] ~= nil and not user_skips(name) then
      ignored[#ignored + 1] = name
      skip[#skip + 1] = '^' .. name:gsub('%p', '%%%0') .. '$'
    end
  end
  table.sort(ignored)
  if #skip == 0 and user_skip == nil then skip = nil end
  return ignored, skip
end

-- cr.io.load_into(model, path_or_tensors, opts) -> report: loads by name into the model's
-- parameters and persistent buffers (Module:load_state_dict: in place under no_grad,
-- converting dtypes). With opts.select_prefix only the file's names that start with it
-- are taken, without it (a trunk out of a whole method's checkpoint: 'trunk.'). Each name
-- then loses opts.remove_prefix when it starts with it, and gains opts.add_prefix; names
-- (of the file, after that, or of the model) matching a Lua pattern of opts.skip are left
-- alone. Strict (the default): any missing,
-- unexpected or mismatched name is an error listing them, and nothing is modified.
-- BatchNorm step counters present on one side only are ignored (see above).
-- report = {loaded = n, missing = {names}, unexpected = {names}, ignored = {names},
--           mismatched = {{name, model_shape, file_shape}}} (shapes as '[3, 2]').
function M.load_into(model, src, opts)
  if not is_module(model) then fail('load_into: the first argument must be a module, got ' .. kind(model)) end
  opts = check_load_opts(opts)
  local sd, source, short
  if type(src) == 'string' then
    local metadata
    sd, metadata = M.load(src)
    source, short = "the file '" .. src .. "'", 'the file'
    if metadata.format == 'crescent.checkpoint' then
      -- a training checkpoint: the model is under its own names; the optimizer's buffers
      -- and the method's queues (engine/checkpoint.lua) are not weights
      for name in pairs(sd) do
        if name:sub(1, 10) == 'optimizer.' or name:sub(1, 13) == 'method_state.' then sd[name] = nil end
      end
    end
  elseif is_module(src) then
    sd, source, short = src:state_dict(), 'the module ' .. src.__name, 'the source'
  elseif type(src) == 'table' then
    local names, list = entries_of('load_into', src)
    sd, source, short = {}, 'the tensors', 'the tensors'
    for i, name in ipairs(names) do sd[name] = list[i] end
  else
    fail('load_into: the second argument must be a file name, a table name -> tensor or a module, got ' .. kind(src))
  end
  local select = opts.select_prefix
  if select and select ~= '' then
    local picked = {}
    for name, t in pairs(sd) do
      if name:sub(1, #select) == select then picked[name:sub(#select + 1)] = t end
    end
    if next(picked) == nil then
      fail(string.format("load_into: no name of %s starts with select_prefix '%s'", source, select))
    end
    sd = picked
  end
  local remove, add = opts.remove_prefix, opts.add_prefix or ''
  local renamed, from = {}, {}
  for name, t in pairs(sd) do
    local new = name
    if remove and remove ~= '' and new:sub(1, #remove) == remove then new = new:sub(#remove + 1) end
    new = add .. new
    if from[new] then
      local a, b = from[new], name
      if a > b then a, b = b, a end
      fail(string.format("load_into: '%s' and '%s' both become '%s' after the prefix change", a, b, new))
    end
    renamed[new], from[new] = t, name
  end
  local ignored, skip = ignore_step_counters(model, renamed, opts.skip)
  local report, loaded = model:load_state_dict(renamed, { strict = opts.strict, skip = skip,
    what = 'load_into', source = source, source_short = short })
  report.loaded, report.ignored = loaded, ignored
  return report
end

-- cr.io.format_report(report) -> 'loaded 60 tensors; 2 missing (fc.weight, fc.bias); ...'
function M.format_report(report)
  if type(report) ~= 'table' then fail('format_report: expected the report of load_into, got ' .. kind(report)) end
  local missing, unexpected = report.missing or {}, report.unexpected or {}
  local mismatched = report.mismatched or {}
  local loaded = report.loaded
  local parts = { string.format('loaded %s tensor%s', tostring(loaded or '?'), loaded == 1 and '' or 's') }
  if #missing > 0 then parts[#parts + 1] = string.format('%d missing (%s)', #missing, util.short_list(missing, 3)) end
  if #unexpected > 0 then parts[#parts + 1] = string.format('%d unexpected (%s)', #unexpected, util.short_list(unexpected, 3)) end
  local ignored = report.ignored or {}
  if #ignored > 0 then parts[#parts + 1] = string.format('%d ignored (%s)', #ignored, util.short_list(ignored, 3)) end
  if #mismatched > 0 then
    local shown = {}
    for i = 1, math.min(#mismatched, 3) do
      local m = mismatched[i]
      shown[i] = string.format('%s: model %s, got %s', m[1], m[2], m[3])
    end
    local s = table.concat(shown, '; ')
    if #mismatched > 3 then s = s .. string.format('; ... (%d in all)', #mismatched) end
    parts[#parts + 1] = string.format('%d shape mismatch%s (%s)', #mismatched, #mismatched == 1 and '' or 'es', s)
  end
  return table.concat(parts, '; ')
end

return M
