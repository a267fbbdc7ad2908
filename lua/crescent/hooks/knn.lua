-- crescent.hooks.knn — the weighted kNN monitor of self-supervised training (InstDisc /
-- DINO): every `every` train epochs and at the end of training, the features of a train
-- set (the memory bank) and a test set, from the frozen network in eval mode, are
-- classified by crescent.ssl.knn's classify (k = 200, cosine, temperature 0.1). The figures go
-- into the storage (knn/top1, knn/top5) and task.metrics (knn_top1, knn_top5), and a line
-- is printed. at_start = true also measures the network before the first step (the
-- random-init baseline: task.metrics.knn_top1_init). On a terminal (tty = true, default:
-- stdout is one) the live line counts the images whose features are done. The iteration
-- of the last measure
-- travels in checkpoints, so a finished run started again reports its final figures
-- without measuring (or logging) them twice.
--
--   task:add_hook(cr.hooks.knn{train_set = ds, test_set = ds_test, every = 1,
--                              forward = function(x) return method:features(x) end})
local cr = require 'crescent'
local now = require('crescent.engine.loop').now
local features = require 'crescent.ssl.features'
local knn = require 'crescent.ssl.knn'
local live_line = require 'crescent.hooks.live_line'

local Knn = {}
Knn.__index = Knn

function Knn:measure(task, label)
  local t0 = now()
  local opts = { batch_size = self.batch_size, forward = self.forward }
  local model = self.model or task.model
  local total, base, shown_at = #self.train_set + #self.test_set, 0, -math.huge
  if self.tty then
    opts.progress = function(done)
      local t = now()
      if t - shown_at < 0.2 and base + done < total then return end
      shown_at = t
      live_line.show(self.out, string.format('knn %s: features %d/%d', label, base + done, total))
    end
  end
  -- the weights evaluation uses (an EMA's average when the task keeps one)
  local function both()
    base = 0
    local a, b = features.extract(model, self.train_set, opts)
    base = #self.train_set
    local c, d = features.extract(model, self.test_set, opts)
    return a, b, c, d
  end
  local ftr, ytr, fte, yte
  if task.with_eval_weights then ftr, ytr, fte, yte = task:with_eval_weights(both) else ftr, ytr, fte, yte = both() end
  if not ytr or not yte then
    error('knn: the train and test sets need labels', 0)
  end
  local top1, top5 = knn.classify(ftr, ytr, fte, yte, { k = self.k, temperature = self.temperature })
  local secs = now() - t0
  live_line.write(self.out, string.format('knn %s: top1 %.2f%%  top5 %.2f%%  (k %d, T %g, %d train / %d %s, %.1fs)\n',
    label, top1, top5, self.k, self.temperature, #self.train_set, #self.test_set, self.test_name, secs))
  self.out:flush()
  return top1, top5
end

function Knn:before_train(task)
  self.last_epoch = nil
  if self.at_start and task.iteration == 0 then
    local top1, top5 = self:measure(task, 'at init')
    task.metrics.knn_top1_init, task.metrics.knn_top5_init = top1, top5
  end
end

function Knn:record(task, label)
  local top1, top5 = self:measure(task, label)
  local opts = { smoothing_hint = false }
  task.storage:put_scalar('knn/top1', top1, opts)
  task.storage:put_scalar('knn/top5', top5, opts)
  task.metrics.knn_top1, task.metrics.knn_top5 = top1, top5
  self.last_epoch = task.epoch
  self.measured_at = task.iteration
end

function Knn:state_dict() return { measured_at = self.measured_at } end
function Knn:load_state_dict(s) self.measured_at = s.measured_at end

function Knn:after_phase(task)
  if task.phase_name ~= 'train' or self.every == 0 then return end
  -- a phase a signal or a stop request ended: the epoch may be cut short, and a
  -- preempted run must reach its checkpoint within the grace period, not after a kNN
  if task.signal or task.stop_requested then return end
  local done = task.epoch + 1  -- epochs finished, this one included
  if done % self.every == 0 and done < task.epochs then
    self:record(task, string.format('epoch %d/%d', done, task.epochs))
  end
end

function Knn:after_train(task)
  -- a run stopped by a signal exits quickly (it resumes later); a failed one has no figures
  if task.signal or task.exception ~= nil then return end
  if task.iteration == 0 and self.at_start then  -- nothing trained: the init figures stand
    task.metrics.knn_top1, task.metrics.knn_top5 = task.metrics.knn_top1_init, task.metrics.knn_top5_init
    return
  end
  if not self.at_end then return end
  local m = task.metrics
  if self.measured_at == task.iteration and m.knn_top1 then
    -- resumed from the checkpoint written after this measure: the run had ended
    live_line.write(self.out, string.format('knn final: top1 %.2f%%  top5 %.2f%%  (measured when the run ended, at ' ..
      'iteration %d)\n', m.knn_top1, m.knn_top5 or 0 / 0, task.iteration))
    self.out:flush()
    return
  end
  self:record(task, 'final')
end

-- The monitor's options that are a recipe's knn section too (declared once, here).
local OPTIONS = cr.config.options('knn', {
  { 'k', 'integer', 200, 'neighbours of the kNN monitor', min = 1 },
  { 'temperature', 'number', 0.1, "the kNN's vote temperature, exp(similarity / T)", above = 0 },
  { 'every', 'integer', 0, 'a kNN every N epochs too (0: at the end only)', min = 0 },
  { 'at_start', 'boolean', false, 'a kNN of the network at init (the random baseline)' },
})

-- What the monitor takes beside them: the data, the network, where it writes.
local WIRING = { train_set = true, test_set = true, at_end = true, forward = true, model = true, batch_size = true,
                 out = true, priority = true, test_name = true, tty = true }

-- cr.hooks.knn{train_set =, test_set =, every = 0 (epochs; 0: at the end only), k = 200,
--              temperature = 0.1, at_start = false, at_end = true, forward = fn(x) -> [B, D]
--              (default task.model(x)), model = (the module put in eval mode; default
--              task.model), batch_size = 500, out = io.stdout, priority = 60,
--              test_name = 'test' (what the printed line calls test_set: 'val' for a held-out part),
--              tty = (out is a terminal's stdout): the live progress line of the feature pass}
-- cr.hooks.knn.options: the declarations of k, temperature, every and at_start.
local function knn_hook(_, given)
  if type(given) ~= 'table' then error('knn: give {train_set = , test_set = , ...}', 2) end
  local opts = cr.config.take(OPTIONS, 'knn', given, WIRING)
  for _, f in ipairs { 'train_set', 'test_set' } do
    if not cr.data.is_dataset(opts[f]) then
      error('knn: ' .. f .. ' must be a data set with labels (cr.data.fashion_mnist{...}, ...), got ' ..
        type(opts[f]), 2)
    end
  end
  local tty = opts.tty
  if tty == nil then tty = (opts.out == nil or opts.out == io.stdout) and live_line.stdout_is_tty() end
  return setmetatable({
    name = 'knn', priority = opts.priority or 60, train_set = opts.train_set, test_set = opts.test_set,
    every = opts.every, k = opts.k, temperature = opts.temperature, at_start = opts.at_start,
    at_end = opts.at_end ~= false,
    forward = opts.forward, model = opts.model, batch_size = opts.batch_size or 500, out = opts.out or io.stdout,
    test_name = opts.test_name or 'test', tty = tty,
  }, Knn)
end

return setmetatable({ options = OPTIONS }, { __call = knn_hook })
