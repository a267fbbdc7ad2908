-- crescent.engine.checkpoint — a whole training run in one safetensors file, and back.
--
--   checkpoint.save(task, path, {best = {...}})  -> path
--   checkpoint.load(task, path)                  restores the run; errors name the file
--   checkpoint.list(dir)    -> {{path =, name =, epoch =, iteration =}}, newest first
--   checkpoint.newest_valid(dir, warn) -> path, metadata (or nil): corrupt files are
--                                         skipped, each with a warning naming it
--   checkpoint.point(dir, link, file)   atomically points dir/link at dir/file (symlink)
--
-- The file holds, as tensors: the model's parameters and persistent buffers under their
-- own names (so PyTorch's safetensors.torch.load_file and cr.io.load_into read the model
-- as it is), the optimizer's buffers as optimizer.<parameter>.<buffer>, and the method's
-- state beyond parameters (SwAV's and MoCo's queues) as method_state.<key>.buffer.
-- __metadata__ holds format = 'crescent.checkpoint', the crescent version, the config
-- (Lua source) and `trainer`, a JSON object: iteration, epoch, samples_seen, the sampler
-- position {epoch, batch, seed}, the RNG state, the optimizer's steps and param groups,
-- the queues' pointers, the state of hooks that have state_dict(), the f16 loss scaler's
-- scale and counters, the metrics so far and the best checkpoint. Together they make resume exact: N steps, save, load in a new
-- process, M steps equals N + M steps, bit for bit on CPU with the same thread count
-- (the data pipeline draws each sample's randomness from (seed, epoch, index), and the
-- lr and momentum schedules are functions of the iteration).
local ffi = require 'ffi'
local cjson = require 'cjson'
local cr = require 'crescent'
local C = require('crescent.ffi').C
local util = require 'crescent.util'

pcall(ffi.cdef, [[
int symlink(const char *target, const char *linkpath);
int getpid(void);
char *strerror(int errnum);
]])

local M = {}

M.FORMAT = 'crescent.checkpoint'
local OPT_PREFIX, STATE_PREFIX, HOOK_PREFIX = 'optimizer.', 'method_state.', 'hook_state.'
M.OPT_PREFIX, M.STATE_PREFIX, M.HOOK_PREFIX = OPT_PREFIX, STATE_PREFIX, HOOK_PREFIX
local NAME_PATTERN = '^ckpt%-e(%d+)%-i(%d+)%.safetensors$'

-- The file name of a checkpoint taken at this point of the run.
-- epoch: where the run resumes, i.e. epochs done (the sampler's epoch when the task has one).
function M.resume_epoch(task)
  local l = task.train_loader
  if l and l.state_dict then return l:state_dict().epoch end
  return task.epoch
end

function M.file_name(task)
  return string.format('ckpt-e%04d-i%09d.safetensors', M.resume_epoch(task), task.iteration)
end

-- u64 <-> decimal text (JSON numbers lose precision above 2^53).
local function u64_text(v) return (tostring(ffi.cast('uint64_t', v)):gsub('ULL$', '')) end
local function text_u64(s)
  local v = ffi.new('uint64_t', 0)
  for d in tostring(s):gmatch('%d') do v = v * 10 + (d:byte() - 48) end
  return v
end

local function rng_state()
  local seed, offset = ffi.new('uint64_t[1]'), ffi.new('uint64_t[1]')
  C.cr_rng_get_state(seed, offset)
  return { seed = u64_text(seed[0]), offset = u64_text(offset[0]) }
end

local function method_of(task)
  local m = task.model
  if type(m) == 'table' and type(m.extra_state) == 'function' then return m end
  return nil
end

local sorted_keys = util.sorted_keys

-- ---- save ----------------------------------------------------------------------------

-- tensors (list of {name, tensor}) and the trainer state of the task now.
function M.state(task)
  local tensors, own = {}, {}
  local function add(name, t)
    if own[name] then
      error(string.format("checkpoint: two tensors would be saved as '%s'; rename the module's '%s'", name, name), 0)
    end
    own[name] = true
    tensors[#tensors + 1] = { name, t }
  end
  if task.model and task.model.named_state then
    for _, e in ipairs(task.model:named_state()) do
      local name = e[1]
      if name:sub(1, #OPT_PREFIX) == OPT_PREFIX or name:sub(1, #STATE_PREFIX) == STATE_PREFIX or
          name:sub(1, #HOOK_PREFIX) == HOOK_PREFIX then
        error(string.format("checkpoint: the model's '%s' clashes with the checkpoint's own '%s', '%s' and '%s' " ..
          'keys; rename that submodule', name, OPT_PREFIX, STATE_PREFIX, HOOK_PREFIX), 0)
      end
      add(name, e[2])
    end
  end
  local trainer = {
    iteration = task.iteration, epoch = M.resume_epoch(task), samples_seen = task.samples_seen,
    rng = rng_state(), metrics = {}, hooks = {},
  }
  for k, v in pairs(task.metrics or {}) do
    if type(v) ~= 'number' or (v == v and v ~= math.huge and v ~= -math.huge) then trainer.metrics[k] = v end
  end
  if task.train_loader and task.train_loader.state_dict then trainer.loader = task.train_loader:state_dict() end
  local opt = task.optimizer
  if opt and opt.state_dict then
    local sd = opt:state_dict()
    trainer.optimizer = { steps = {}, param_groups = sd.param_groups }
    for _, pname in ipairs(sorted_keys(sd.state)) do
      for _, k in ipairs(sorted_keys(sd.state[pname])) do
        local v = sd.state[pname][k]
        if k == 'step' then trainer.optimizer.steps[pname] = v
        else add(OPT_PREFIX .. pname .. '.' .. k, v) end
      end
    end
  end
  local method = method_of(task)
  if method then
    trainer.method_state = {}
    local es = method:extra_state()
    for _, key in ipairs(sorted_keys(es)) do
      local fields = {}
      for k, v in pairs(es[key]) do
        if cr.is_tensor(v) then add(STATE_PREFIX .. key .. '.' .. k, v) else fields[k] = v end
      end
      trainer.method_state[key] = fields
    end
  end
  for _, h in ipairs(task.hooks or {}) do
    if type(h.state_dict) == 'function' and h.name then trainer.hooks[h.name] = h:state_dict() end
    -- a hook's tensors (the EMA of the weights): hook_state.<hook>.<key>
    if type(h.tensor_state) == 'function' and h.name then
      local ts = h:tensor_state()
      for _, key in ipairs(sorted_keys(ts)) do add(HOOK_PREFIX .. h.name .. '.' .. key, ts[key]) end
    end
  end
  if task.scaler then trainer.loss_scaler = task.scaler:state_dict() end
  return tensors, trainer
end

local function contents(task, extra)
  local tensors, trainer = M.state(task)
  trainer.best = extra and extra.best or nil
  return tensors, {
    format = M.FORMAT, crescent = tostring(cr.version), trainer = cjson.encode(trainer),
    config = type(task.config) == 'table' and cr.config.dump(task.config) or nil,
    env = extra and extra.env or nil,
  }
end

-- Writes the task's checkpoint to path (atomically: cr.save). extra.best is stored too.
function M.save(task, path, extra)
  cr.save(path, contents(task, extra))
  return path
end

-- The same checkpoint, taken now (copies of every tensor) and written by a thread of its
-- own while training goes on: returns the job (cr.io.save_async; job:wait()).
function M.save_async(task, path, extra)
  return cr.io.save_async(path, contents(task, extra))
end

-- ---- load ----------------------------------------------------------------------------

-- The config a crescent checkpoint was written with (its metadata), as a table; nil for
-- a file without one (a converted PyTorch state dict, an export).
function M.stored_config(path)
  local _, metadata = cr.load(path)
  local text = metadata and metadata.config
  if type(text) ~= 'string' then return nil end
  local f = loadstring(text, '=' .. path .. ' (config)')
  if not f then return nil end
  setfenv(f, {})
  local ok, cfg = pcall(f)
  return ok and type(cfg) == 'table' and cfg or nil
end

local function bad(path, msg) error(string.format("checkpoint '%s': %s", path, msg), 0) end

-- The trainer state of a loaded file (checked to be a crescent checkpoint).
local function trainer_of(path, metadata)
  if metadata.format ~= M.FORMAT then
    bad(path, "is not a crescent checkpoint (its metadata has no format = '" .. M.FORMAT ..
      "'); to start from a model's weights use model.init=" .. path)
  end
  local ok, trainer = pcall(cjson.decode, metadata.trainer or '')
  if not ok or type(trainer) ~= 'table' then bad(path, "its 'trainer' metadata is not a JSON object") end
  for _, k in ipairs { 'iteration', 'epoch', 'samples_seen' } do
    local v = trainer[k]
    if type(v) ~= 'number' or v < 0 or v ~= math.floor(v) then
      bad(path, string.format("trainer.%s must be a non-negative integer, got %s", k, tostring(v)))
    end
  end
  local ls = trainer.loader
  if ls ~= nil and (type(ls) ~= 'table' or type(ls.epoch) ~= 'number' or type(ls.batch) ~= 'number') then
    bad(path, "trainer.loader must be {epoch =, batch =, seed =}, got " .. cjson.encode(ls))
  end
  -- the parts that are applied without a further check must have their shape
  local function want(good, what)
    if not good then bad(path, 'trainer.' .. what .. '; the file is corrupt or from another program') end
  end
  local function table_of(v, check)
    if type(v) ~= 'table' then return false end
    for k, x in pairs(v) do
      if type(k) ~= 'string' or not check(x) then return false end
    end
    return true
  end
  local function scalar(x) local t = type(x) return t == 'number' or t == 'string' or t == 'boolean' end
  local function any_table(x) return type(x) == 'table' end
  local rng = trainer.rng
  want(rng == nil or (type(rng) == 'table' and tostring(rng.seed or ''):match('^%d+$') and
    tostring(rng.offset or ''):match('^%d+$')), 'rng must be {seed =, offset =} with decimal integers')
  want(trainer.metrics == nil or table_of(trainer.metrics, scalar), 'metrics must map names to numbers or strings')
  want(trainer.hooks == nil or type(trainer.hooks) == 'table', 'hooks must be a table of hook states')
  want(trainer.loss_scaler == nil or type(trainer.loss_scaler) == 'table', 'loss_scaler must be a table')
  want(trainer.method_state == nil or table_of(trainer.method_state, any_table),
    'method_state must map keys to tables of fields')
  local o = trainer.optimizer
  want(o == nil or (type(o) == 'table' and (o.steps == nil or table_of(o.steps, function(x)
    return type(x) == 'number' and x >= 0 end)) and (o.param_groups == nil or type(o.param_groups) == 'table')),
    'optimizer must be {steps = {<parameter> = n}, param_groups = {...}}')
  -- a file named by the trainer (ckpt-e<epoch>-i<iteration>) must hold that point of the run
  local name_epoch, name_iter = (path:match('([^/]*)$')):match(NAME_PATTERN)
  if name_epoch then
    local epoch = ls and ls.epoch or trainer.epoch
    if tonumber(name_iter) ~= trainer.iteration or tonumber(name_epoch) ~= epoch then
      bad(path, string.format('its name says epoch %d, iteration %d, but its state says epoch %d, iteration %d; ' ..
        'it was renamed or corrupted', tonumber(name_epoch), tonumber(name_iter), epoch, trainer.iteration))
    end
  end
  return trainer
end

-- Restores the task from the file: model, optimizer, method state, RNG, sampler position,
-- counters, hooks' state and metrics. Everything is checked against the task before the
-- model changes; an error names the file and the key.
function M.load(task, path)
  local tensors, metadata = cr.load(path)
  local trainer = trainer_of(path, metadata)
  local model_sd, opt_state, method_state, hook_tensors = {}, {}, {}, {}
  for name, t in pairs(tensors) do
    if name:sub(1, #OPT_PREFIX) == OPT_PREFIX then
      local pname, buf = name:sub(#OPT_PREFIX + 1):match('^(.+)%.([^.]+)$')
      if not pname then bad(path, "tensor '" .. name .. "' is not optimizer.<parameter>.<buffer>") end
      opt_state[pname] = opt_state[pname] or {}
      opt_state[pname][buf] = t
    elseif name:sub(1, #HOOK_PREFIX) == HOOK_PREFIX then
      local hook, key = name:sub(#HOOK_PREFIX + 1):match('^([^.]+)%.(.+)$')
      if not hook then bad(path, "tensor '" .. name .. "' is not hook_state.<hook>.<key>") end
      hook_tensors[hook] = hook_tensors[hook] or {}
      hook_tensors[hook][key] = t
    elseif name:sub(1, #STATE_PREFIX) == STATE_PREFIX then
      local key, field = name:sub(#STATE_PREFIX + 1):match('^(.+)%.([^.]+)$')
      if not key then bad(path, "tensor '" .. name .. "' is not method_state.<key>.<field>") end
      method_state[key] = method_state[key] or {}
      method_state[key][field] = t
    else
      model_sd[name] = t
    end
  end
  -- the sampler position first (a different data seed would visit another order)
  local ls = trainer.loader
  if ls and task.train_loader and task.train_loader.load_state_dict then
    local ok, err = pcall(task.train_loader.load_state_dict, task.train_loader, ls)
    if not ok then bad(path, tostring(err) .. '; resume with the seed it was saved with (train.seed)') end
  end
  -- then the model (a strict load checks every name and shape before it copies), so a
  -- checkpoint of another model is reported as such; then the optimizer and the method
  -- state, whose loads also check before they change anything. An error ends the resume.
  if task.model and task.model.load_state_dict then
    local ok, err = pcall(task.model.load_state_dict, task.model, model_sd,
      { what = 'resume', source = "the checkpoint '" .. path .. "'", source_short = 'the checkpoint' })
    if not ok then
      bad(path, tostring(err) .. '; it was saved from another model: resume with the config it was saved with, ' ..
        'or start fresh with run.resume=false')
    end
  end
  local opt = task.optimizer
  if opt and opt.load_state_dict then
    local saved = trainer.optimizer
    if not saved then bad(path, 'has no optimizer state but the task has an optimizer') end
    for pname, st in pairs(opt_state) do st.step = (saved.steps or {})[pname] end
    for pname, step in pairs(saved.steps or {}) do
      if not opt_state[pname] then opt_state[pname] = { step = step } end
    end
    local ok, err = pcall(opt.load_state_dict, opt, { state = opt_state, param_groups = saved.param_groups })
    if not ok then bad(path, tostring(err)) end
  end
  local method = method_of(task)
  if method then
    for key, fields in pairs(trainer.method_state or {}) do
      method_state[key] = method_state[key] or {}
      for k, v in pairs(fields) do method_state[key][k] = v end
    end
    if next(method_state) ~= nil or next(method:extra_state()) ~= nil then
      if type(method.load_extra_state) ~= 'function' then
        bad(path, 'holds method state but the model has no load_extra_state(state)')
      end
      local ok, err = pcall(method.load_extra_state, method, method_state)
      if not ok then bad(path, tostring(err)) end
    end
  end
  for _, h in ipairs(task.hooks or {}) do
    local ts = h.name and hook_tensors[h.name]
    if ts and type(h.load_tensor_state) == 'function' then
      local ok, err = pcall(h.load_tensor_state, h, ts)
      if not ok then bad(path, tostring(err)) end
    end
  end
  -- the rest was checked above (trainer_of) or names the file when it fails
  local rng = trainer.rng
  if rng then C.cr_rng_set_state(text_u64(rng.seed), text_u64(rng.offset)) end
  task.iteration, task.samples_seen = trainer.iteration, trainer.samples_seen
  if ls and task.train_loader and task.train_loader.load_state_dict then
    task.epoch = ls.epoch
    task._resume_batch = ls.batch > 0 and ls.batch or nil
  else
    task.epoch = trainer.epoch
  end
  for k, v in pairs(trainer.metrics or {}) do task.metrics[k] = v end
  if task.scaler and trainer.loss_scaler then
    local ok, err = pcall(task.scaler.load_state_dict, task.scaler, trainer.loss_scaler)
    if not ok then bad(path, 'trainer.loss_scaler: ' .. tostring(err)) end
  end
  for _, h in ipairs(task.hooks or {}) do
    local s = h.name and (trainer.hooks or {})[h.name]
    if s ~= nil and type(h.load_state_dict) == 'function' then
      local ok, err = pcall(h.load_state_dict, h, s)
      if not ok then bad(path, string.format('trainer.hooks.%s: %s', h.name, tostring(err))) end
    end
  end
  task.resumed_from = path
  return trainer
end

-- ---- the checkpoint folder -----------------------------------------------------------

-- The checkpoint files of a folder, newest (highest iteration) first; {} when the folder
-- does not exist, an error when it cannot be read.
function M.list(dir)
  -- no folder yet: no checkpoints. Asked before listing, not after a failed listing: rank
  -- 0 may make the folder meanwhile, while another rank looks for checkpoints
  if not util.path_exists(dir) then return {} end
  local ok, entries = pcall(util.list_dir, dir)
  if not ok then
    -- a folder that cannot be read must not look empty (a resume would start afresh and
    -- the next save would fail)
    error(string.format("checkpoint: cannot list the folder '%s' (%s); check its permissions", dir,
      tostring(entries)), 0)
  end
  local out = {}
  for _, e in ipairs(entries) do
    local ep, it = e.name:match(NAME_PATTERN)
    if ep and not e.dir then
      out[#out + 1] = { name = e.name, path = dir .. '/' .. e.name, epoch = tonumber(ep), iteration = tonumber(it) }
    end
  end
  table.sort(out, function(a, b)
    if a.iteration ~= b.iteration then return a.iteration > b.iteration end
    return a.name > b.name
  end)
  return out
end

local function default_warn(msg)
  util.end_live_line()
  io.stderr:write('crescent: warning: ', msg, '\n')
end

-- The newest checkpoint of dir that reads and validates; each one skipped (truncated,
-- corrupt, not a checkpoint) is reported through warn(message).
function M.newest_valid(dir, warn)
  warn = warn or default_warn
  for _, c in ipairs(M.list(dir)) do
    local ok, err = pcall(function()
      local _, metadata = cr.load(c.path)
      trainer_of(c.path, metadata)
    end)
    if ok then return c.path end
    warn(string.format("skipping the checkpoint '%s': %s", c.path, (tostring(err):gsub('^checkpoint .-: ', ''))))
  end
  return nil
end

-- dir/link becomes a symlink to `file` (a name in dir), replaced atomically (rename).
function M.point(dir, link, file)
  local tmp = string.format('%s/.%s.tmp.%d', dir, link, ffi.C.getpid())
  os.remove(tmp)
  if ffi.C.symlink(file, tmp) ~= 0 then
    error(string.format("checkpoint: cannot create the link '%s' in '%s' (%s)", link, dir,
      ffi.string(ffi.C.strerror(ffi.errno()))), 0)
  end
  local ok, err = os.rename(tmp, dir .. '/' .. link)
  if not ok then
    os.remove(tmp)
    error(string.format("checkpoint: cannot point '%s/%s' at '%s' (%s)", dir, link, file, tostring(err)), 0)
  end
end

return M
