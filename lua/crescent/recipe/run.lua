-- crescent.recipe.run — the run folder of a training recipe, run.dir/<run.name>:
-- config.lua (the resolved config, loadable with --config), env.txt (versions, CPU, GPU),
-- log.txt (what the run printed: keep_log), results.json (the final figures:
-- write_results), metrics.jsonl and TensorBoard events (their hooks), and checkpoints/
-- (the checkpoint hook, which also resumes from there). The config keys a recipe merges:
--
--   run.resume = true             resume from the newest valid checkpoint of the folder
--                                 (given the config it was started with: another one
--                                 is an error that lists the keys that differ, beyond
--                                 RESUME_MAY_CHANGE); false starts afresh, moving an
--                                 earlier run's folder aside to <folder>.old-<UTC time>
--                                 (never overwritten)
--   checkpoint.save = true        write checkpoints (false: none, and no resume)
--   checkpoint.every_epochs = 1, checkpoint.every_iters = 0 (0: never), checkpoint.keep = 3,
--   checkpoint.best = ''          a task.metrics key (knn_top1, test_top1) to keep the best by
--   checkpoint.async = true       written by a thread while training goes on
--
-- How a run starts, in big_vision's order, said in one line: the newest checkpoint of
-- its folder (run.resume), else run.resume_from = <checkpoint> (weights, optimizer,
-- counters: the run goes on from there in its own folder), else model.init = <file>
-- (weights only: fine-tuning; model.init_prefix 'auto' takes the keys under 'trunk.' when
-- the file has them and the model has none, as an SSL checkpoint into a plain network;
-- init_remove_prefix, init_add_prefix, init_skip (Lua patterns) and init_strict as
-- cr.io.load_into), else from scratch.
--
--   local schema = cr.config.schema(cr.recipe.run.BASE, cr.recipe.run.TRAINING, cr.data.sources.options, ...)
--   local dir, env = cr.recipe.run.prepare(cfg, cr.recipe.run.dir(cfg, 'supervised'))
--   task:add_hook(cr.recipe.run.checkpoint_hook(cfg, dir, env))   -- starts the run; writes checkpoints
--   cr.recipe.run.keep_log(cfg, dir)      -- log.txt;  cr.recipe.run.write_results(cfg, dir, t) -- results.json
-- Every key, with its description: M.BASE, M.INIT and M.TRAINING below (and --help).
--   local device = cr.recipe.run.setup(cfg)   -- first thing: device, threads, seed
local cr = require 'crescent'
local util = require 'crescent.util'
local ckpt = require 'crescent.engine.checkpoint'

local M = {}

local options = cr.config.options

-- The keys every recipe has: the run's length, device, precision, seed and threads, and
-- its folder.
M.BASE = options('train', {
  { 'epochs', 'integer', 10, 'epochs to train (0: an evaluation-only run)', min = 0 },
  { 'device', { 'auto', 'cpu', 'cuda' }, 'auto', 'auto: the first usable GPU, else the CPU (one line says which and why)' },
  { 'amp', { 'off', 'bf16', 'f16', 'auto' }, 'auto', 'mixed precision: forward and loss under autocast; f16 adds a ' ..
    'loss scaler; auto: bf16 where the device computes it natively (a GPU, a CPU with AVX512-BF16), else off' },
  { 'deterministic', 'boolean', false, 'GPU: only algorithms that give the same bits every run' },
  { 'seed', 'integer', 0, 'the seed of the weights, the shuffle and the augmentations', min = 0 },
  { 'threads', 'integer', 0, 'CPU threads (0: every core)', min = 0 },
  { 'repl_on_signal', 'boolean', false, '`kill -USR2 <pid>` opens the REPL at the next step boundary' },
})
for _, o in ipairs(options('run', {
  { 'name', 'string', '', "the run folder's name ('': the recipe's)" },
  { 'dir', 'string', 'runs', 'where run folders go' },
  -- --dry-run sets it: build everything, report, exit 0 (crescent/engine/dry_run.lua)
  { 'dry_run', 'boolean', false, 'build everything, print the plan, exit without training (--dry-run)' },
})) do M.BASE[#M.BASE + 1] = o end

-- model.init and its keys, for the training recipes and the frozen-feature ones.
M.INIT = options('model', {
  { 'init', 'string', '', 'start from the weights of this safetensors file (fine-tuning)' },
  { 'init_prefix', 'string', 'auto', "take the file's keys under this prefix (auto: trunk. for an SSL checkpoint " ..
    'into a plain network)' },
  { 'init_remove_prefix', 'string', '', "strip this prefix from the file's names (PyTorch's module.)" },
  { 'init_add_prefix', 'string', '', "add this prefix to the file's names" },
  { 'init_skip', 'list', {}, 'Lua patterns of names left alone on both sides', elem = 'string' },
  { 'init_strict', 'boolean', true, 'refuse missing, unexpected or mismatched keys' },
})

-- The training recipes' keys: resuming, checkpoints, the weights' EMA (hooks/ema.lua),
-- freezing (hooks/freeze.lua), profiling (hooks/profile.lua), logs (hooks/csv.lua).
M.TRAINING = {}
for _, list in ipairs {
  options('run', {
    { 'resume', 'boolean', true, 'go on from the newest checkpoint of the run folder (false: start afresh, the ' ..
      'earlier run moved aside)' },
    { 'resume_from', 'string', '', 'when the folder has none: go on from this checkpoint of another run' },
  }),
  options('model', {
    { 'ema', 'number', 0, 'keep an exponential moving average of the weights with this momentum (0: none)',
      min = 0, max = 0.999999999 },
    { 'ema_eval', 'boolean', true, 'test phases and the kNN use the average' },
    { 'freeze', 'string', '', 'a Lua pattern of parameter names kept fixed, their modules in eval mode' },
    { 'freeze_iters', 'integer', 0, 'model.freeze for the first N steps (0: the whole run)', min = 0 },
  }),
  options('train', {
    { 'profile', 'string', '', "'<first>:<count>': a Chrome trace and op table of those steps" },
    { 'log_every', 'integer', 50, 'a progress line, metrics and diagnostics every N steps', min = 1 },
  }),
  options('log', {
    { 'csv', 'boolean', false, 'also write metrics.csv: the metrics as one wide table (spreadsheets, pandas)' },
  }),
  options('checkpoint', {
    { 'save', 'boolean', true, 'write checkpoints (false: none, and no resume from the folder)' },
    { 'every_epochs', 'integer', 1, 'a checkpoint every N epochs (0: never)', min = 0 },
    { 'every_iters', 'integer', 0, 'and every N steps (0: never)', min = 0 },
    { 'keep', 'integer', 3, 'keep the newest N checkpoints (and the best)', min = 1 },
    { 'best', 'string', '', "the task.metrics key that picks best.safetensors ('': none)" },
    { 'async', 'boolean', true, 'write checkpoints on a thread of their own while training goes on' },
  }),
} do
  for _, o in ipairs(list) do M.TRAINING[#M.TRAINING + 1] = o end
end

-- M.main(fn): runs a recipe's body (what follows its config). An error there prints one
-- line, its message (which names the key or file and the fix), and exits with status 1;
-- CRESCENT_TRACEBACK=1 prints where it was raised too.
function M.main(fn)
  local ok, err = xpcall(fn, function(e)
    return { msg = tostring(e), trace = debug.traceback(tostring(e), 2) }
  end)
  if ok then return end
  util.end_live_line()
  -- Ctrl-C before the loop took the signals over (start-up: data, model, checkpoints):
  -- LuaJIT's own handler raised 'interrupted!'; exit as a shell expects of SIGINT
  if err.msg:match('interrupted!$') and os.getenv('CRESCENT_TRACEBACK') ~= '1' then
    io.stderr:write('crescent: interrupted (Ctrl-C) during start-up; nothing was trained\n')
    io.stderr:flush()
    os.exit(130)
  end
  if os.getenv('CRESCENT_TRACEBACK') == '1' then
    io.stderr:write('error: ', err.trace, '\n')
  else
    -- a position inside crescent's own modules tells the user nothing: the message names the problem
    local msg = err.msg:gsub('^[^\n:]*lua/crescent/[^\n:]*:%d+: ', '')
    io.stderr:write('error: ', msg, '\n(CRESCENT_TRACEBACK=1 shows where it was raised)\n')
  end
  io.stderr:flush()
  os.exit(1)
end

local MAX_NAME = 200   -- a file name holds 255 bytes; a folder moved aside adds '.old-<UTC time>'

-- The folder of this run: run.dir/<run.name, or `default_name`>. The name is one folder
-- name, so the run stays inside run.dir.
function M.dir(cfg, default_name)
  local name = cfg.run.name ~= '' and cfg.run.name or default_name
  if name:find('/', 1, true) or name == '.' or name == '..' or name:find('%z') then
    error(string.format("config: run.name '%s' must be one folder name, without '/' (and not . or ..), so that the " ..
      "run stays inside run.dir ('%s'); to put runs elsewhere, set run.dir", name, cfg.run.dir), 0)
  end
  if #name > MAX_NAME then
    error(string.format('config: run.name is %d characters long; give at most %d (file systems hold 255 per name, and ' ..
      'a run moved aside adds a suffix)', #name, MAX_NAME), 0)
  end
  return cfg.run.dir .. '/' .. name
end

local exists = util.file_exists

-- cfg.run[key] when the recipe has that key (a frozen-feature recipe has no resume or
-- dry run): an optional read.
local function run_option(cfg, key)
  local run = rawget(cfg, 'run')
  return type(run) == 'table' and rawget(run, key) or nil
end

-- The run's device check (train.device, with one line about the choice, and
-- train.deterministic on a GPU), the distributed group when a launcher started k ranks
-- (crescent/dist/setup.lua), thread count and seed: first thing a recipe does. Returns
-- the device ('cpu' or 'cuda:N') the model goes to; an unusable device is an error that
-- says why.
function M.setup(cfg)
  local ok, device, line = pcall(cr.cuda.resolve, cfg.train.device)
  if not ok then error(device, 0) end
  -- under a launcher with k ranks: join them; the GPU is the local rank's (dist/setup.lua)
  local rank_device = require('crescent.dist.setup').init(cfg, device)
  if rank_device ~= device then
    line = string.format('train.device=%s: %s, the GPU of local rank %d', cfg.train.device, rank_device,
      cr.dist.local_rank())
    device = rank_device
  end
  if line then print(line) end
  if device ~= 'cpu' then cr.cuda.set_deterministic(cfg.train.deterministic) end
  if cfg.train.threads > 0 then cr.set_num_threads(cfg.train.threads) end
  cr.manual_seed(cfg.train.seed)
  return device
end

-- Keys that may differ when a run resumes: how it runs, not what it computes.
M.RESUME_MAY_CHANGE = {
  ['train.threads'] = true, ['train.device'] = true, ['train.log_every'] = true, ['train.repl_on_signal'] = true,
  ['data.root'] = true, ['data.workers'] = true, ['run.dir'] = true, ['run.resume'] = true, ['run.dry_run'] = true,
  ['dist.timeout'] = true, ['dist.quiet'] = true, ['dist.bucket_mb'] = true,
  ['checkpoint.keep'] = true, ['checkpoint.every_epochs'] = true, ['checkpoint.every_iters'] = true,
  ['train.profile'] = true, ['checkpoint.async'] = true, ['log.csv'] = true,
}

-- Refuses to resume the run in `dir` under a config other than the one it was started
-- with (its config.lua), naming the keys that differ and the two ways forward.
local function check_same_config(cfg, dir)
  local path = dir .. '/config.lua'
  if not exists(path) then return end
  local ok, earlier = pcall(cr.config.load, path)
  if not ok then
    error(string.format("run.resume: cannot read the earlier run's config '%s' (%s); start afresh with " ..
      'run.resume=false (the earlier run is moved aside) or pick another run.name', path, tostring(earlier)), 0)
  end
  local lines, longer = {}, false
  for _, d in ipairs(cr.config.diff(earlier, cfg)) do
    -- a key the earlier config lacks came with a newer crescent: nothing to compare it with
    if not M.RESUME_MAY_CHANGE[d[1]] and d[2] ~= nil then
      lines[#lines + 1] = string.format('  %s: %s in the run, %s now', d[1], cr.config.format_value(d[2]),
        cr.config.format_value(d[3]))
      longer = longer or d[1] == 'train.epochs' and type(d[3]) == 'number' and d[3] > d[2]
    end
  end
  if #lines == 0 then return end
  -- more epochs: a run of its own that goes on from this one's last checkpoint (its lr
  -- schedule spans the new length, so it is another run, not this one resumed)
  local name = dir:match('([^/]+)$')
  local ways = longer and string.format("To train it longer, start a new run from its last checkpoint: run.name=%s_%s " ..
    "run.resume_from=%s/checkpoints/latest.safetensors (weights, optimizer and counters go on from there). Or start " ..
    'afresh there with run.resume=false (the earlier run is moved aside to a .old- folder)', name,
    tostring(cfg.train.epochs) .. 'ep', dir)
    or "Either start afresh there with run.resume=false (the earlier run is moved aside to a .old- folder) or give " ..
    'this run another run.name'
  error(string.format("run.resume: the run in '%s' was started with another config, so it cannot go on with this " ..
    'one; %d key%s differ%s:\n%s\n%s', dir, #lines, #lines == 1 and '' or 's', #lines == 1 and 's' or '',
    table.concat(lines, '\n'), ways), 0)
end

-- Makes the run folder ready: with run.resume = false, an earlier run there (one with
-- checkpoints) is moved aside first; with run.resume = true its config must match
-- (check_same_config); then config.lua and env.txt (cr.env) are written.
-- Returns the folder and the environment report. In a distributed run rank 0 does this and
-- the other ranks wait for it (they get no report: they write no checkpoints).
function M.prepare(cfg, dir, out)
  local dist = require 'crescent.dist.comm'
  if not dist.is_main() then
    dist.barrier()
    return dir, nil
  end
  local dir_ready, env = M._prepare(cfg, dir, out)
  dist.barrier()
  return dir_ready, env
end

function M._prepare(cfg, dir, out)
  out = out or io.stdout
  if run_option(cfg, 'dry_run') then -- nothing moved or written; a resume under another config is still an error
    if run_option(cfg, 'resume') and #ckpt.list(dir .. '/checkpoints') > 0 then check_same_config(cfg, dir) end
    return dir, nil
  end
  if not run_option(cfg, 'resume') and #ckpt.list(dir .. '/checkpoints') > 0 then
    local aside = dir .. '.old-' .. os.date('!%Y%m%d-%H%M%S')
    local n = 1
    while exists(aside) do n = n + 1 aside = dir .. '.old-' .. os.date('!%Y%m%d-%H%M%S') .. '-' .. n end
    local ok, err = os.rename(dir, aside)
    if not ok then
      error(string.format("run.resume=false: cannot move the earlier run '%s' aside to '%s' (%s); move or delete " ..
        'it, or pick another run.name', dir, aside, tostring(err)), 0)
    end
    out:write(string.format("run.resume=false: the earlier run in '%s' was moved to '%s'\n", dir, aside))
  elseif #ckpt.list(dir .. '/checkpoints') > 0 then
    check_same_config(cfg, dir)
  end
  util.mkdir_p(dir)
  cr.config.write(dir .. '/config.lua', cfg)
  local env = cr.env.report()
  local f, err = io.open(dir .. '/env.txt', 'w')
  if not f then error(string.format("cannot write '%s/env.txt' (%s)", dir, tostring(err)), 0) end
  f:write(cr.env.format(env), '\n')
  f:close()
  return dir, env
end

-- From now on, a copy of everything this process prints (stdout and stderr, children's
-- too) goes to <dir>/log.txt, appended, progress lines in their last state (csrc/io/tee.c;
-- stopped at exit). Rank 0 alone keeps it; a dry run keeps none.
function M.keep_log(cfg, dir)
  if run_option(cfg, 'dry_run') or not require('crescent.dist.comm').is_main() then return end
  util.check(require('crescent.ffi').C.cr_tee_start(dir .. '/log.txt'))
end

-- The run's final figures (the JSON last line) also as <dir>/results.json, written
-- atomically (rank 0; not in a dry run).
function M.write_results(cfg, dir, results)
  if run_option(cfg, 'dry_run') or not require('crescent.dist.comm').is_main() then return end
  local tmp = dir .. '/results.json.tmp'
  local f, err = io.open(tmp, 'w')
  if not f then error(string.format("cannot write '%s' (%s)", tmp, tostring(err)), 0) end
  f:write(util.json(results), '\n')
  f:close()
  local ok, rerr = os.rename(tmp, dir .. '/results.json')
  if not ok then error(string.format("cannot write '%s/results.json' (%s)", dir, tostring(rerr)), 0) end
end

-- model.freeze on `model`, before its optimizer is made: for the whole run (freeze_iters
-- 0) the parameters stop requiring grad and their modules stay in eval mode
-- (Module:freeze); for the first freeze_iters steps, the hook returned (nil otherwise)
-- drops their grads and keeps their modules in eval mode. One line says what froze.
function M.freeze(cfg, model)
  local m = cfg.model
  if not m or (m.freeze or '') == '' then return nil end
  local n = 0
  for _, np in ipairs(model:named_parameters()) do
    if np[1]:find(m.freeze) then n = n + np[2]:numel() end
  end
  if n == 0 then
    local names = {}
    for i, np in ipairs(model:named_parameters()) do if i <= 4 then names[i] = "'" .. np[1] .. "'" end end
    error(string.format("model.freeze: no parameter name matches the Lua pattern '%s'; names look like %s", m.freeze,
      table.concat(names, ', ')), 0)
  end
  print(string.format("model.freeze: %.3fM parameters matching '%s' fixed %s", n / 1e6, m.freeze,
    m.freeze_iters > 0 and ('for the first ' .. m.freeze_iters .. ' steps') or 'for the whole run'))
  if m.freeze_iters == 0 then
    model:freeze(m.freeze)
    return nil
  end
  return cr.hooks.freeze { pattern = m.freeze, iterations = m.freeze_iters, modes = true }
end

-- The writers of the run folder `dir`: TensorBoard events, metrics.jsonl, and metrics.csv
-- with log.csv; every cfg.train.log_every steps.
function M.add_log_hooks(task, cfg, dir)
  local every = cfg.train.log_every
  task:add_hook(cr.hooks.tensorboard { dir = dir, every = every })
  task:add_hook(cr.hooks.jsonl { path = dir .. '/metrics.jsonl', every = every })
  if cfg.log.csv then task:add_hook(cr.hooks.csv { path = dir .. '/metrics.csv', every = every }) end
end

-- The EMA hook of model.ema for the task's model, or nil when model.ema is 0.
function M.ema_hook(cfg, model)
  local m = cfg.model
  if not m or (m.ema or 0) == 0 then return nil end
  return cr.hooks.ema { model = model, momentum = m.ema, evaluate = m.ema_eval }
end

-- The hook of train.profile='<first>:<count>' writing into the run folder, or nil.
function M.profile_hook(cfg, dir)
  local first, count = cr.hooks.profile.parse(cfg.train and cfg.train.profile)
  if not first then return nil end
  return cr.hooks.profile { first = first, count = count, dir = dir }
end

-- model.init at start-up, for the training and the frozen-feature recipes alike: the file
-- is there and is a safetensors file; returns the model section of the config stored in
-- it (a crescent checkpoint's), or nil. A bad file is one line naming the fix.
function M.init_config(m)
  local path = m.init
  if not exists(path) then
    error(string.format("model.init: no file '%s'; give a safetensors file (a run's " ..
      'checkpoints/latest.safetensors, or one cr.save wrote)', path), 0)
  end
  local ok, saved = pcall(ckpt.stored_config, path)
  if not ok then
    error(string.format("model.init: '%s' is not a safetensors file crescent can read (%s); give a run's " ..
      'checkpoints/latest.safetensors, or a file cr.save wrote', path,
      (tostring(saved):gsub("^load: '[^']*': ", ''):gsub('; the file is corrupt or not safetensors$', ''))), 0)
  end
  return saved and type(saved.model) == 'table' and saved.model or nil
end

-- The keys that say which trunk a model.* section builds, and whether key k matters for
-- the architecture `arch` (a ViT has no width or stem, a ResNet no patch; a stem of
-- 'auto' follows the image size, so it is compared only against another named stem).
M.TRUNK_KEYS = { 'arch', 'width', 'stem', 'patch' }
local function trunk_key_matters(k, arch, mine, theirs)
  local vit = type(arch) == 'string' and arch:sub(1, 4) == 'vit_'
  if k == 'patch' then return vit end
  if k == 'width' then return not vit end
  if k == 'stem' then return not vit and mine ~= 'auto' and theirs ~= 'auto' end
  return true
end

-- The trunk keys whose value in `m` (cfg.model) differs from the stored config's `saved`:
-- a list of {key, mine, theirs}, the architecture first (which keys matter is the stored
-- trunk's architecture's question).
function M.trunk_differences(m, saved)
  local out = {}
  if not saved then return out end
  local arch = saved.arch or m.arch
  for _, k in ipairs(M.TRUNK_KEYS) do
    local mine, theirs = m[k], saved[k]
    if theirs ~= nil and mine ~= theirs and trunk_key_matters(k, arch, mine, theirs) then
      out[#out + 1] = { k, mine, theirs }
    end
  end
  return out
end

-- A training recipe's model.init check at start-up (the checkpoint hook's builder runs it,
-- so --dry-run does too): the file (init_config), and a crescent checkpoint's trunk is the
-- one cfg.model builds. A trunk that differs is one line naming the key.
function M.check_init(m)
  local d = M.trunk_differences(m, M.init_config(m))[1]
  if d then
    error(string.format("model.init: model.%s=%s, but the trunk in '%s' has %s = %s (the config it was trained " ..
      'with); give model.%s=%s to start from it, or a checkpoint of this trunk', d[1], tostring(d[2]), m.init, d[1],
      tostring(d[3]), d[1], tostring(d[3])), 0)
  end
end

-- The weights of the file m.init (a safetensors file: a checkpoint, an export, a
-- converted PyTorch state dict) into `model`, by the model.init_* keys of `m`; a
-- checkpoint's optimizer and method state are not weights and are left out. Returns the
-- line that says what was loaded. With m.init_strict, names that are missing, unexpected
-- or of another shape are one line with their counts and first names (the run then stops,
-- so what was loaded meanwhile does not matter).
function M.load_weights(model, m)
  local path = m.init
  M.init_config(m)
  local prefix = m.init_prefix
  if prefix == 'auto' then
    prefix = ''
    local has_trunk = false
    for _, np in ipairs(model:named_parameters()) do has_trunk = has_trunk or np[1]:sub(1, 6) == 'trunk.' end
    if not has_trunk then
      for name in pairs(cr.load(path)) do
        if name:sub(1, 6) == 'trunk.' then prefix = 'trunk.' break end
      end
    end
  end
  local skip = {}
  for _, internal in ipairs { ckpt.OPT_PREFIX, ckpt.STATE_PREFIX, ckpt.HOOK_PREFIX } do
    -- a checkpoint's own keys are not weights, unless init_prefix picks them (the EMA's)
    if prefix:sub(1, #internal) ~= internal then skip[#skip + 1] = '^' .. internal:gsub('%.', '%%.') end
  end
  for _, pat in ipairs(type(m.init_skip) == 'string' and { m.init_skip } or m.init_skip or {}) do skip[#skip + 1] = pat end
  local ok, report = pcall(cr.io.load_into, model, path, { select_prefix = prefix, remove_prefix = m.init_remove_prefix,
    add_prefix = m.init_add_prefix, skip = skip, strict = false })
  if not ok then error(string.format("model.init '%s': %s", path, tostring(report)), 0) end
  local text = cr.io.format_report(report)
  if m.init_strict and (#report.missing > 0 or #report.unexpected > 0 or #report.mismatched > 0) then
    error(string.format("model.init '%s' does not fit the model: %s; model.init_strict=false loads the names that " ..
      "match, model.init_skip=\"{'^fc%%.'}\" leaves the names that match its patterns alone", path,
      text:gsub('^loaded %d+ tensors?; ', '')), 0)
  end
  return string.format("model.init: %s from '%s'%s", text, path,
    prefix ~= '' and (" (keys under '" .. prefix .. "')") or '')
end

-- The checkpoint hook of the run folder: it starts the run (the order at the top of this
-- file) and, with checkpoint.save (the default), writes its checkpoints.
-- env: the report prepare() returned, stored in every checkpoint's metadata.
function M.checkpoint_hook(cfg, dir, env)
  local c = cfg.checkpoint
  local m = cfg.model
  local init = m and m.init ~= '' and function(task) return M.load_weights(task.model, m) end or nil
  -- a bad model.init stops the run at start-up, unless the run goes on from elsewhere
  local resumes = cfg.run.resume and c.save and #ckpt.list(dir .. '/checkpoints') > 0
  if init and not resumes and cfg.run.resume_from == '' then M.check_init(m) end
  return cr.hooks.checkpoint { dir = dir .. '/checkpoints', every_epochs = c.every_epochs,
    every_iters = c.every_iters, keep = c.keep, best = c.best, resume = cfg.run.resume and c.save,
    resume_from = cfg.run.resume_from ~= '' and cfg.run.resume_from or nil, init = init, save = c.save,
    seed = cfg.train and cfg.train.seed, env = env and cr.env.json(env), async = c.async }
end

return M
