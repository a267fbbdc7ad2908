-- crescent.engine.dry_run — the pre-flight of a recipe (`--dry-run`, or run.dry_run=true):
-- the task is built as for training (config checked, data sets read, model and
-- optimizer made, the run folder's checkpoints and config compared), then cr.train
-- prints what the run would be and the process exits 0 without a step, a file written
-- or a folder moved.
--
--   luajit recipes/swav.lua --dry-run train.epochs=20 'crops.num={2,6}'
--   luajit recipes/linear_eval.lua --dry-run model.init=...   (M.report: a recipe without a task)
--
-- The report: the resolved config (as config.lua would hold it), the model's parameters
-- per top-level module, the data (samples, batches per epoch), the steps, the optimizer
-- and how the run would start (the folder's newest checkpoint, run.resume_from,
-- model.init or from scratch).
local cr = require 'crescent'
local ckpt = require 'crescent.engine.checkpoint'

local M = {}

-- Whether the task was configured for a dry run.
function M.requested(task)
  local run = type(task.config) == 'table' and task.config.run
  return type(run) == 'table' and run.dry_run == true
end

local function millions(n) return string.format('%.3fM', n / 1e6) end

local function count(params, trainable_only)
  local n = 0
  for _, p in ipairs(params) do
    if not trainable_only or p[2].requires_grad then n = n + p[2]:numel() end
  end
  return n
end

-- The report's first lines: the resolved config, as config.lua would hold it.
local function config_lines(cfg)
  local out = { 'dry run: the resolved config' }
  for line in cr.config.dump(cfg):gmatch('[^\n]+') do out[#out + 1] = '  ' .. line end
  return out
end
local LAST = 'dry run: nothing was trained or written'

-- The report's lines for task (iterations_per_epoch already counted by the trainer).
function M.lines(task)
  local cfg = task.config
  local out = config_lines(cfg)
  local function add(fmt, ...) out[#out + 1] = string.format(fmt, ...) end
  local model = task.model
  if model and model.named_parameters then
    local all = model:named_parameters()
    add('model: %s, %s parameters (%s trainable)', model.__name or 'module', millions(count(all)),
      millions(count(all, true)))
    for _, c in ipairs(model:named_children()) do
      local ps = c[2]:named_parameters()
      if #ps > 0 then add('  %-20s %-18s %s', c[1], c[2].__name or 'module', millions(count(ps))) end
    end
  end
  local loader, test = task.train_loader, task.test_loader
  local nb = task.iterations_per_epoch or 0
  local function size(l) return l and l.size and tostring(l:size()) or '?' end
  local eval_part = ''
  if task.test_set then eval_part = string.format(', %d %s samples for the kNN', #task.test_set, task.eval_name or 'test')
  elseif test then eval_part = string.format(', %s test samples', size(test)) end
  add('data: %s train samples, %d batches of %s per epoch%s', size(loader), nb,
    tostring(loader and loader.batch_size or '?'), eval_part)
  local k = task.accum_steps or 1
  add('steps: %d (%d epochs x %d batches%s)', nb * task.epochs, task.epochs, nb,
    k > 1 and string.format(', an optimizer step every %d', k) or '')
  local opt = task.optimizer
  if opt then
    local g = opt.param_groups and opt.param_groups[1] or {}
    add('optimizer: %s, lr %s (peak), weight decay %s, %d parameter groups', opt.__name or 'optimizer',
      tostring(task.peak_lr or g.lr), tostring(g.weight_decay), opt.param_groups and #opt.param_groups or 0)
  end
  for _, h in ipairs(task.hooks or {}) do
    if h.name == 'checkpoint' then
      local newest = h.resume and ckpt.newest_valid(h.dir, function() end)
      if newest then add("start: would resume from '%s'", newest)
      elseif h.resume_from then add("start: would resume from run.resume_from '%s'", h.resume_from)
      elseif cfg.model and cfg.model.init and cfg.model.init ~= '' then
        add("start: would load the weights of model.init '%s'", cfg.model.init)
      else add('start: from scratch (train.seed %s)', tostring(cfg.train and cfg.train.seed)) end
      add('run folder: %s (%s)', h.dir:gsub('/checkpoints$', ''), h.writes and 'checkpoints every ' ..
        h.every_epochs .. ' epoch(s)' or 'no checkpoints')
    end
  end
  out[#out + 1] = LAST
  return out
end

local function print_and_exit(lines)
  io.stdout:write(table.concat(lines, '\n'), '\n')
  io.stdout:flush()
  os.exit(0)
end

-- Prints the report and exits 0.
function M.finish(task) print_and_exit(M.lines(task)) end

-- A recipe without a task (linear_eval, extract): the resolved config, its own lines, the
-- last line; exits 0.
function M.report(cfg, lines)
  local out = config_lines(cfg)
  for _, l in ipairs(lines) do out[#out + 1] = l end
  out[#out + 1] = LAST
  print_and_exit(out)
end

return M
