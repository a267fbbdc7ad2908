-- crescent.hooks — the built-in hooks. A hook is any table with event methods
-- (before_train, before_phase, before_step, after_forward, after_backward, after_step,
-- after_phase, after_train, on_exception; each fn(self, task)) and a priority (0 runs
-- first … 100 last, default 50). These constructors return such tables.
local M = {}
M.schedule = require 'crescent.hooks.schedule'    -- LR / param schedules (priority 10)
M.timer = require 'crescent.hooks.timer'          -- iteration time, img/s, ETA (20)
M.console = require 'crescent.hooks.console'      -- progress line / periodic lines (90)
M.nan_guard = require 'crescent.hooks.nan_guard'  -- stop on NaN/Inf loss, grads, params (5)
M.freeze = require 'crescent.hooks.freeze'        -- drop named grads for N iterations (30)
M.eval = require 'crescent.hooks.eval'            -- top-1/top-5 over test phases (40)
M.knn = require 'crescent.hooks.knn'              -- kNN monitor of SSL features (60)
M.diagnostics = require 'crescent.hooks.diagnostics'  -- grad/param/update norms, lr, memory, time split (85)
M.tensorboard = require 'crescent.hooks.tensorboard'  -- TensorBoard event files (95)
M.jsonl = require 'crescent.hooks.jsonl'          -- metrics.jsonl, a line per logged step (95)
M.csv = require 'crescent.hooks.csv'              -- metrics.csv, the same rows as one wide table (95)
M.checkpoint = require 'crescent.hooks.checkpoint'  -- checkpoints, retention, auto-resume (98)
M.ema = require 'crescent.hooks.ema'              -- an EMA of the weights, evaluated with (3)
M.profile = require 'crescent.hooks.profile'      -- op-level profile of a few steps, Chrome trace (1)

-- The usual set for a supervised run: schedule, timer, NaN guard, eval (when there is
-- a test loader) and the console writer.
function M.defaults(task, opts)
  opts = opts or {}
  local hs = { M.schedule(), M.timer(), M.nan_guard { every = opts.nan_every or 50 } }
  if task.test_loader then hs[#hs + 1] = M.eval { topk = opts.topk } end
  hs[#hs + 1] = M.console { every = opts.log_every or 50 }
  for _, h in ipairs(hs) do task:add_hook(h) end
  return hs
end

return M
