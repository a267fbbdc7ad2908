-- crescent.engine.run — the run folder of a training recipe, run.dir/<run.name>:
-- config.lua (the resolved config, loadable with --config), env.txt (versions, CPU, GPU),
-- metrics.jsonl and TensorBoard events (their hooks), and checkpoints/ (the checkpoint
-- hook, which also resumes from there). The config keys a recipe merges:
--
--   run.resume = true             resume from the newest valid checkpoint of the folder;
--                                 false starts afresh, moving an earlier run's folder
--                                 aside to <folder>.old-<UTC time> (never overwritten)
--   checkpoint.save = true        write checkpoints (false: none, and no resume)
--   checkpoint.every_epochs = 1, checkpoint.every_iters = 0 (0: never), checkpoint.keep = 3,
--   checkpoint.best = ''          a task.metrics key (knn_top1, test_top1) to keep the best by
--
--   local defaults = cr.config.merge(cr.config.common(), cr.engine.run.defaults{best = 'test_top1'})
--   local dir, env = cr.engine.run.prepare(cfg, cr.engine.run.dir(cfg, 'supervised'))
--   task:add_hook(cr.engine.run.checkpoint_hook(cfg, dir, env))   -- nil: checkpoint.save=false
--   local device = cr.engine.run.setup(cfg)   -- first thing: device, threads, seed
local cr = require 'crescent'
local util = require 'crescent.util'
local ckpt = require 'crescent.engine.checkpoint'

local M = {}

function M.defaults(opts)
  return {
    run = { resume = true },
    checkpoint = { save = true, every_epochs = 1, every_iters = 0, keep = 3, best = opts and opts.best or '' },
  }
end

M.types = {
  ['run.resume'] = 'boolean',
  ['checkpoint.every_epochs'] = { type = 'integer', min = 0 },
  ['checkpoint.every_iters'] = { type = 'integer', min = 0 },
  ['checkpoint.keep'] = { type = 'integer', min = 1 },
  ['checkpoint.best'] = 'string',
}

-- The folder of this run: run.dir/<run.name, or `default_name`>.
function M.dir(cfg, default_name)
  local name = cfg.run.name ~= '' and cfg.run.name or default_name
  return cfg.run.dir .. '/' .. name
end

local exists = util.file_exists

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

-- Makes the run folder ready: with run.resume = false, an earlier run there (one with
-- checkpoints) is moved aside first; then config.lua and env.txt (cr.env) are written.
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
  if not cfg.run.resume and #ckpt.list(dir .. '/checkpoints') > 0 then
    local aside = dir .. '.old-' .. os.date('!%Y%m%d-%H%M%S')
    local n = 1
    while exists(aside) do n = n + 1 aside = dir .. '.old-' .. os.date('!%Y%m%d-%H%M%S') .. '-' .. n end
    local ok, err = os.rename(dir, aside)
    if not ok then
      error(string.format("run.resume=false: cannot move the earlier run '%s' aside to '%s' (%s); move or delete " ..
        'it, or pick another run.name', dir, aside, tostring(err)), 0)
    end
    out:write(string.format("run.resume=false: the earlier run in '%s' was moved to '%s'\n", dir, aside))
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

-- The checkpoint hook of cfg.checkpoint for the run folder (nil with checkpoint.save = false).
-- env: the report prepare() returned, stored in every checkpoint's metadata.
function M.checkpoint_hook(cfg, dir, env)
  local c = cfg.checkpoint
  if not c.save then return nil end
  return cr.hooks.checkpoint { dir = dir .. '/checkpoints', every_epochs = c.every_epochs,
    every_iters = c.every_iters, keep = c.keep, best = c.best, resume = cfg.run.resume,
    env = env and cr.env.json(env) }
end

return M
