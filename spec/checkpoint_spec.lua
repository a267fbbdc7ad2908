-- spec/checkpoint_spec.lua — checkpoints and exact resume (crescent/engine/checkpoint.lua,
-- crescent/hooks/checkpoint.lua, crescent/recipe/run.lua): N + M steps in one run equal
-- N steps, a new task resumed from the checkpoint, then M steps, bit for bit — for a
-- supervised model with dropout, momentum and an lr schedule, for SwAV with its queue and
-- for MoCo with its key encoder, queue and shuffle-BN; the file's contents; retention,
-- the latest/best links; corrupt checkpoints skipped with a warning; run.resume=false
-- moving an earlier run aside; errors that name the file.
local cr = H.cr
local nn = cr.nn
local ckpt = cr.engine.checkpoint

local tmp = H.tmpdir('checkpoint')
teardown(tmp.remove)

-- a supervised task on synthetic 3x4x4 images: 24 samples, batches of 4 (6 per epoch)
local function supervised_task(dir, opts)
  opts = opts or {}
  cr.manual_seed(opts.init_seed or 11)
  local ds = cr.data.synthetic { n = 24, shape = { 3, 4, 4 }, num_classes = 3, seed = 5 }
  local loader = cr.data.Loader(ds, { batch_size = 4, shuffle = true, seed = 3 })
  local model = nn.Sequential(nn.Flatten(), nn.Linear(48, opts.hidden or 16), nn.ReLU(), nn.Dropout(0.3),
    nn.Linear(opts.hidden or 16, 3))
  local opt = cr.optim.SGD(model:named_parameters(), { lr = 0.1, momentum = 0.9, weight_decay = 1e-4 })
  local task = cr.engine.Task {
    model = model, optimizer = opt, epochs = opts.epochs or 3, test_every = 0, train_loader = loader,
    loss = function(out, batch) return cr.cross_entropy(out, batch.target) end,
    schedules = { lr = cr.schedule.warmup_cosine { warmup = 0.2, from = 0, peak = 0.1, to = 0.001 } },
  }
  task:add_hook(cr.hooks.schedule())
  task:add_hook(cr.hooks.checkpoint { dir = dir, every_epochs = opts.every_epochs or 1,
    every_iters = opts.every_iters or 0, keep = opts.keep or 3, verbose = false, warn = opts.warn,
    resume = opts.resume, best = opts.best, resume_from = opts.resume_from, init = opts.init, save = opts.save,
    async = opts.async })
  if opts.stop_at then
    task:add_hook { name = 'stop', after_step = function(_, t)
      if t.iteration == opts.stop_at then t:request_stop('spec') end
    end }
  end
  return task
end

local function state_of(module)
  local out = {}
  for _, e in ipairs(module:named_state()) do out[e[1]] = e[2]:clone() end
  return out
end

local function assert_bitwise_equal(a, b)
  local n = 0
  for name, t in pairs(a) do
    assert(b[name], 'missing ' .. name)
    local diff = (t - b[name]):abs():max():item()
    assert(diff == 0, string.format("'%s' differs by %g", name, diff))
    n = n + 1
  end
  assert.is_true(n > 0)
end

describe('exact resume', function()
  it('supervised: 18 steps = 8 steps, a resumed new task, 10 steps (dropout, momentum, schedule)', function()
    local full = supervised_task(tmp.path('full'))
    cr.train(full)
    assert.are.equal(18, full.iteration)

    local dir = tmp.path('cut')
    local first = supervised_task(dir, { every_iters = 8, stop_at = 8 })
    cr.train(first)
    assert.are.equal(8, first.iteration)
    local newest = ckpt.list(dir)[1]
    assert.are.equal('ckpt-e0001-i000000008.safetensors', newest.name)   -- epoch 1, batch 2 of 6

    local resumed = supervised_task(dir, { init_seed = 99 })   -- another init: only the file can make it equal
    resumed:add_hook(cr.hooks.timer())
    local steps = 0
    resumed:add_hook { name = 'count', after_step = function() steps = steps + 1 end }
    cr.train(resumed)
    assert.are.equal(newest.path, resumed.resumed_from)
    assert.are.equal(10, steps)
    assert.are.equal(18, resumed.iteration)
    assert.are.equal(3, resumed.epoch)
    assert.are.equal(40, resumed.metrics.train_samples)   -- img/s counts this run's 10 steps of 4
    assert_bitwise_equal(state_of(full.model), state_of(resumed.model))
    -- the optimizer's momentum too
    local a, b = full.optimizer:state_dict().state, resumed.optimizer:state_dict().state
    for name, st in pairs(a) do
      assert.are.equal(0, (st.momentum_buffer - b[name].momentum_buffer):abs():max():item())
      assert.are.equal(st.step, b[name].step)
    end
  end)

  local function ssl_config(method, dir, extra)
    local over = {
      data = { name = 'synthetic', size = 16, limit = 64, batch_size = 16 },
      train = { epochs = 2, threads = 1, log_every = 100 }, model = { width = 4, hidden_dim = 16, out_dim = 8 },
      knn = { k = 5 }, crops = { size = { 16, 8 }, num = { 2, 2 } },
      run = { dir = dir, name = method }, checkpoint = { every_iters = 3 },
    }
    if method == 'swav' then over.swav = { queue_length = 32, freeze_prototypes_iterations = 2 } end
    if method ~= 'swav' and method ~= 'deepcluster_v2' and method ~= 'dino' then
      over.crops = { size = { 16 }, num = { 2 }, min_scale = { 0.2 }, max_scale = { 1 } }
    end
    if method == 'deepcluster_v2' then over.deepcluster_v2 = { num_prototypes = { 5, 5 } } end
    if method == 'dino' then over.dino = { out_dim = 16, hidden_dim = 16, bottleneck_dim = 8, freeze_last_layer = 0 } end
    if method == 'npid' then over.crops.num, over.npid = { 1 }, { bank_init = 'features' } end
    if method == 'moco' then
      over.moco = { queue_length = 32, cosine_momentum = true, bn_splits = 2 }
    end
    return cr.config.check(cr.config.merge(over, extra or {}), cr.recipe.ssl.schema(method))
  end

  for _, method in ipairs(cr.ssl.METHODS) do
    it(method .. ': 8 steps = 3 steps, resumed, 5 steps, with its state and every parameter bit for bit', function()
      local full
      do
        full = cr.recipe.ssl.task(method, ssl_config(method, tmp.path('') .. method .. '_full'))
        cr.train(full)
      end
      assert.are.equal(8, full.iteration)
      local dir = tmp.path('') .. method .. '_cut'
      do
        local first = cr.recipe.ssl.task(method, ssl_config(method, dir))
        first:add_hook { name = 'stop', after_step = function(_, t) if t.iteration == 3 then t:request_stop('spec') end end }
        cr.train(first)
      end
      local resumed
      do
        resumed = cr.recipe.ssl.task(method, ssl_config(method, dir))
        cr.train(resumed)
      end
      assert.is_truthy(resumed.resumed_from:find('i000000003', 1, true))
      assert.are.equal(8, resumed.iteration)
      assert_bitwise_equal(state_of(full.model), state_of(resumed.model))
      local qa, qb = full.model:extra_state(), resumed.model:extra_state()
      local stateful = { swav = true, moco = true, npid = true, deepcluster_v2 = true }   -- queues, banks, memory
      assert.are.equal(stateful[method] == true, next(qa) ~= nil)
      for key, q in pairs(qa) do
        for field, v in pairs(q) do
          if cr.is_tensor(v) then
            assert.are.equal(0, (v - qb[key][field]):abs():max():item(), key .. '.' .. field)
          else
            assert.are.equal(v, qb[key][field], key .. '.' .. field)
          end
        end
      end
    end)
  end

  it('train.epochs=0 with model.init: an evaluation-only run gives the kNN of the run it loads', function()
    local trained = cr.recipe.ssl.task('simclr', ssl_config('simclr', tmp.path('') .. 'eval_src'))
    cr.train(trained)
    local path = tmp.path('') .. 'eval_src/simclr/checkpoints/latest.safetensors'
    local only = cr.recipe.ssl.task('simclr', ssl_config('simclr', tmp.path('') .. 'eval_only',
      { train = { epochs = 0 }, model = { init = path }, knn = { at_start = true } }))
    -- the after_train kNN (a slow one) counts into the JSON's seconds
    only:add_hook { name = 'slow_end', priority = 95, after_train = function()
      local t0 = cr.engine.loop.now()
      while cr.engine.loop.now() - t0 < 0.3 do end
    end }
    cr.train(only)
    assert.are.equal(0, only.iteration)
    assert.is_number(trained.metrics.knn_top1)
    assert.are.equal(trained.metrics.knn_top1, only.metrics.knn_top1)
    local results = cr.recipe.ssl.finish(only)
    assert.is_true(results.seconds >= 0.3, tostring(results.seconds))
  end)
end)

describe('the checkpoint file', function()
  it('holds the model under its own names, the optimizer, and the trainer state as JSON', function()
    local dir = tmp.path('file')
    local task = supervised_task(dir, { epochs = 1 })
    cr.train(task)
    local tensors, meta = cr.load(dir .. '/latest.safetensors')
    assert.are.equal('crescent.checkpoint', meta.format)
    assert.is_truthy(tensors['1.weight'])
    assert.is_truthy(tensors['optimizer.1.weight.momentum_buffer'])
    local trainer = require('cjson').decode(meta.trainer)
    assert.are.equal(6, trainer.iteration)
    assert.are.same({ epoch = 1, batch = 0, seed = 3 }, trainer.loader)
    assert.is_string(trainer.rng.seed)
    -- cr.io.load_into a bare model reads the model part
    local m = nn.Sequential(nn.Flatten(), nn.Linear(48, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3))
    cr.io.load_into(m, dir .. '/latest.safetensors')   -- strict: the optimizer's tensors are not weights
    assert.are.equal(0, (m['1'].weight - task.model['1'].weight):abs():max():item())
  end)

  it('keeps the newest `keep` and the best, with latest and best links', function()
    local dir = tmp.path('keep')
    local task = supervised_task(dir, { epochs = 3, every_iters = 2, keep = 2, best = 'score' })
    local scores = { [2] = 5, [4] = 9, [6] = 1 }   -- best at iteration 4
    task:add_hook { name = 'score', priority = 90, after_step = function(_, t)
      if scores[t.iteration] then t.metrics.score = scores[t.iteration] end
    end }
    cr.train(task)
    local names = {}
    for _, c in ipairs(ckpt.list(dir)) do names[#names + 1] = c.iteration end
    assert.are.same({ 18, 16, 4 }, names)
    local _, latest = cr.load(dir .. '/latest.safetensors')
    assert.are.equal(18, require('cjson').decode(latest.trainer).iteration)
    local _, best = cr.load(dir .. '/best.safetensors')
    assert.are.equal(4, require('cjson').decode(best.trainer).iteration)
  end)
end)

describe('a checkpoint whose trainer state is mutated', function()
  it('loads or is refused with a message naming the file, never a Lua error from inside (300 mutations)', function()
    local cjson = require 'cjson'
    local dir = tmp.path('mutate')
    cr.train(supervised_task(dir, { epochs = 1 }))
    local src = ckpt.list(dir)[1].path
    local tensors, meta = cr.load(src)
    local base = cjson.decode(meta.trainer)
    local seed = 12345
    local function rand(n) -- a small LCG: the same mutations every run
      seed = (seed * 1103515245 + 12345) % 2147483648
      return seed % n + 1
    end
    local junk = { -1, 0, 1.5, 2 ^ 60, 'x', '', true, false, {}, { 1, 2 }, { a = 'b' }, cjson.null }
    local function paths(v, prefix, out)
      for k, x in pairs(v) do
        local p = prefix and (prefix .. '\0' .. k) or tostring(k)
        out[#out + 1] = p
        if type(x) == 'table' then paths(x, p, out) end
      end
      return out
    end
    local all = paths(base, nil, {})
    table.sort(all)
    local target = dir .. '/mutated.safetensors'
    for m = 1, 300 do
      local t = cjson.decode(meta.trainer)
      local keys = {}
      local where = all[rand(#all)]
      for part in (where .. '\0'):gmatch('([^%z]*)%z') do keys[#keys + 1] = part end
      local node = t
      for i = 1, #keys - 1 do node = node[tonumber(keys[i]) or keys[i]] end
      local last = tonumber(keys[#keys]) or keys[#keys]
      local r = rand(#junk + 1)
      if r > #junk then node[last] = nil else node[last] = junk[r] end
      local md = {}
      for k, v in pairs(meta) do md[k] = v end
      md.trainer = cjson.encode(t)
      cr.save(target, tensors, md)
      local ok, err = pcall(ckpt.load, supervised_task(tmp.path('mutate_into'), { epochs = 1, save = false }), target)
      if not ok then
        assert(tostring(err):find("checkpoint '" .. target .. "'", 1, true),
          'mutation ' .. m .. ' (' .. where:gsub('%z', '.') .. '): ' .. tostring(err))
      end
    end
  end)
end)

describe('auto-resume', function()
  it('skips a truncated newest checkpoint with a warning that names it', function()
    local dir = tmp.path('corrupt')
    cr.train(supervised_task(dir, { epochs = 2 }))
    local list = ckpt.list(dir)
    assert.are.equal(12, list[1].iteration)
    local f = io.open(list[1].path, 'rb')
    local bytes = f:read('*a')
    f:close()
    f = io.open(list[1].path, 'wb')
    f:write(bytes:sub(1, #bytes - 100))
    f:close()
    local warnings = {}
    local task = supervised_task(dir, { epochs = 2, warn = function(m) warnings[#warnings + 1] = m end })
    cr.train(task)
    assert.are.equal(1, #warnings)
    assert.is_truthy(warnings[1]:find(list[1].path, 1, true))
    assert.are.equal(list[2].path, task.resumed_from)
  end)

  it('skips a checkpoint whose name and state disagree, and stops when none can be read', function()
    local dir = tmp.path('renamed')
    cr.train(supervised_task(dir, { epochs = 2 }))
    local list = ckpt.list(dir)
    assert.are.equal(12, list[1].iteration)
    -- a copy of the iteration-6 file under a later name: its state says 6, its name 18
    local later = dir .. '/ckpt-e0003-i000000018.safetensors'
    assert(os.execute(string.format("cp '%s' '%s'", list[2].path, later)) == 0)
    local warnings = {}
    local task = supervised_task(dir, { epochs = 2, warn = function(m) warnings[#warnings + 1] = m end })
    cr.train(task)
    assert.is_truthy(warnings[1]:find('its name says epoch 3, iteration 18, but its state says epoch 1, iteration 6',
      1, true), warnings[1])
    assert.are.equal(list[1].path, task.resumed_from)
    -- every checkpoint unreadable: an error, not a silent start from scratch
    for _, c in ipairs(ckpt.list(dir)) do
      local f = io.open(c.path, 'wb')
      f:write('not a checkpoint')
      f:close()
    end
    local msg = H.error_of(function() cr.train(supervised_task(dir, { epochs = 2, warn = function() end })) end)
    assert.is_truthy(msg:find("run.resume: no checkpoint in '" .. dir .. "' could be read", 1, true), msg)
    cr.train(supervised_task(dir, { epochs = 1, resume = false }))   -- unless asked to start afresh
  end)

  it('finds a folder it cannot write, or a latest.safetensors that is a folder, before the first step', function()
    local dir = tmp.path('blocked')
    assert(os.execute("mkdir -p '" .. dir .. "/latest.safetensors'") == 0)
    local task = supervised_task(dir, { epochs = 1 })
    local msg = H.error_of(function() cr.train(task) end)
    assert.is_truthy(msg:find("latest.safetensors' is a folder", 1, true), msg)
    assert.are.equal(0, task.iteration)
    local file = tmp.write('a_file', 'x')
    msg = H.error_of(function() cr.train(supervised_task(file .. '/ckpt', { epochs = 1 })) end)
    assert.is_truthy(msg:find('checkpoint: cannot write in the folder', 1, true), msg)
  end)

  it('refuses a checkpoint of another model, naming the file and the key', function()
    local dir = tmp.path('other')
    cr.train(supervised_task(dir, { epochs = 1 }))
    local task = supervised_task(dir, { epochs = 2, hidden = 8 })
    local msg = H.error_of(function() cr.train(task) end)
    assert.is_truthy(msg:find('ckpt-e0001-i000000006.safetensors', 1, true), msg)
    assert.is_truthy(msg:find('1.weight', 1, true), msg)
  end)

  it('run.resume=false moves an earlier run aside instead of overwriting it', function()
    local cfg = { run = { dir = tmp.path('runs'), name = 'exp', resume = false } }
    local dir = tmp.path('runs/exp')
    cr.train(supervised_task(dir .. '/checkpoints', { epochs = 1 }))
    local said = {}
    cr.recipe.run.prepare(cfg, dir, { write = function(_, s) said[#said + 1] = s end })
    assert.is_truthy(said[1] and said[1]:find('moved', 1, true))
    assert.are.same({}, ckpt.list(dir .. '/checkpoints'))
    local moved = said[1]:match("to '([^']+)'")
    assert.are.equal(1, #ckpt.list(moved .. '/checkpoints'))
    assert.are.same(cfg, dofile(dir .. '/config.lua'))
    assert.is_truthy(H.read_file(dir .. '/env.txt'):find('LuaJIT', 1, true))
  end)

  it('refuses to resume a run under another config, naming the keys that differ and the ways forward', function()
    local dir = tmp.path('runs/changed')
    local cfg = { run = { dir = tmp.path('runs'), name = 'changed', resume = true }, optim = { lr = 0.1 },
                  crops = { num = { 2, 6 } }, train = { threads = 1, epochs = 1 } }
    cr.recipe.run.prepare(cfg, dir)
    cr.train(supervised_task(dir .. '/checkpoints', { epochs = 1 }))
    -- the same config, or one that changes only how it runs: it goes on
    local again = cr.config.merge(cfg, { train = { threads = 2 } })
    cr.recipe.run.prepare(again, dir)
    local other = cr.config.merge(cfg, { optim = { lr = 0.2 }, crops = { num = { 2, 4 } }, model = { width = 8 } })
    local msg = H.error_of(function() cr.recipe.run.prepare(other, dir) end)
    assert.is_truthy(msg:find("the run in '" .. dir .. "' was started with another config", 1, true), msg)
    -- (model.width, absent from the earlier config, is a key of a newer crescent: not compared)
    assert.is_truthy(msg:find('2 keys differ:\n  crops.num: {2, 6} in the run, {2, 4} now\n' ..
      '  optim.lr: 0.1 in the run, 0.2 now\n', 1, true), msg)
    assert.is_truthy(msg:find('run.resume=false', 1, true) and msg:find('another run.name', 1, true), msg)
    -- more epochs than the run was started with: the way to train it longer is named
    msg = H.error_of(function() cr.recipe.run.prepare(cr.config.merge(cfg, { train = { epochs = 5 } }), dir) end)
    assert.is_truthy(msg:find('train.epochs: 1 in the run, 5 now', 1, true), msg)
    assert.is_truthy(msg:find('To train it longer, start a new run from its last checkpoint: run.name=changed_5ep ' ..
      'run.resume_from=' .. dir .. '/checkpoints/latest.safetensors', 1, true), msg)
    assert.are.same(again, dofile(dir .. '/config.lua')) -- the folder still describes its training
    -- starting afresh moves the earlier run aside and takes the new config
    local fresh = cr.config.merge(other, { run = { resume = false } })
    cr.recipe.run.prepare(fresh, dir, { write = function() end })
    assert.are.same(fresh, dofile(dir .. '/config.lua'))
  end)
end)

describe('async checkpoints', function()

  it('are the same files, bit for bit, as synchronous ones, with the same links and retention', function()
    local sync = supervised_task(tmp.path('sync'), { every_iters = 4, keep = 2 })
    cr.train(sync)
    local async = supervised_task(tmp.path('async'), { every_iters = 4, keep = 2, async = true })
    cr.train(async)
    local a, b = ckpt.list(tmp.path('sync')), ckpt.list(tmp.path('async'))
    assert.are.equal(#a, #b)
    for i = 1, #a do
      assert.are.equal(a[i].name, b[i].name)
      assert.is_true(H.read_file(a[i].path) == H.read_file(b[i].path), a[i].name)
    end
    assert.are.equal(H.read_file(tmp.path('sync') .. '/latest.safetensors'),
      H.read_file(tmp.path('async') .. '/latest.safetensors'))
  end)

  it('a write that fails stops the run at a later step, naming the file', function()
    local dir = tmp.path('vanishes')
    local t = supervised_task(dir, { every_iters = 2, async = true })
    -- once the run has started, the folder becomes a file: no checkpoint can be made in it
    t:add_hook { before_step = function(_, task)
      if task.iteration == 1 then
        assert(os.execute("rm -rf '" .. dir .. "' && touch '" .. dir .. "'") == 0)
      end
    end }
    local err = H.error_of(function() cr.train(t) end)
    assert.truthy(err:find('checkpoint: writing ' .. dir .. '/ckpt-e0000-i000000002.safetensors (every 2 iterations) ' ..
      'failed', 1, true), err)
    assert.is_true(t.iteration >= 3 and t.iteration < 18, 'stopped at ' .. t.iteration)
  end)
end)

describe('how a run starts: its folder, run.resume_from, model.init, scratch', function()
  local function lines_of(f)
    local said = {}
    local real = io.stdout
    io.stdout = { write = function(_, ...) for _, x in ipairs { ... } do said[#said + 1] = x end end, -- luacheck: ignore 122
                  flush = function() end }
    local ok, err = pcall(f)
    io.stdout = real -- luacheck: ignore 122
    assert(ok, err)
    return table.concat(said)
  end

  it("run.resume_from goes on from another run's checkpoint, bit for bit like an uninterrupted run", function()
    local full = supervised_task(tmp.path('rf_full'))
    cr.train(full)
    local first = supervised_task(tmp.path('rf_first'), { every_iters = 8, stop_at = 8 })
    cr.train(first)
    local from = ckpt.list(tmp.path('rf_first'))[1].path
    local before = #ckpt.list(tmp.path('rf_first'))
    local went_on = supervised_task(tmp.path('rf_next'), { init_seed = 99, resume_from = from })
    local said = lines_of(function() cr.train(went_on) end)
    assert.is_truthy(said:find("resumed from '" .. from .. "': epoch 1/3, iteration 8 (run.resume_from)", 1, true), said)
    assert.are.equal(18, went_on.iteration)
    assert_bitwise_equal(state_of(full.model), state_of(went_on.model))
    assert.are.equal(before, #ckpt.list(tmp.path('rf_first')))  -- its own folder gets the checkpoints
    assert.is_true(#ckpt.list(tmp.path('rf_next')) > 0)
    -- the run folder's own checkpoint comes first, and says so
    local again = supervised_task(tmp.path('rf_next'), { resume_from = from })
    said = lines_of(function() cr.train(again) end)
    assert.is_truthy(said:find('(training already complete) (the run folder has checkpoints: run.resume_from and ' ..
      'model.init are not used)', 1, true), said)
    local missing = supervised_task(tmp.path('rf_none'), { resume_from = tmp.path('nothing.safetensors') })
    H.assert_error(function() cr.train(missing) end, "run.resume_from: no file '" .. tmp.path('nothing.safetensors'))
  end)

  it('model.init loads weights only: the optimizer and the counters start afresh', function()
    local done = supervised_task(tmp.path('init_src'), { epochs = 1 })
    cr.train(done)
    local path = tmp.path('init_src') .. '/latest.safetensors'
    local m = cr.config.merge(cr.config.schema(cr.recipe.run.INIT).defaults.model, { init = path })
    local weights
    local tuned = supervised_task(tmp.path('init_ft'), { init_seed = 99, epochs = 1, init = function(task)
      local line = cr.recipe.run.load_weights(task.model, m)
      weights = state_of(task.model)
      return line
    end })
    local said = lines_of(function() cr.train(tuned) end)
    assert.is_truthy(said:find("model.init: loaded 4 tensors from '" .. path .. "'", 1, true), said)
    assert_bitwise_equal(state_of(done.model), weights)
    assert.are.equal(6, tuned.iteration)  -- one epoch of its own, from iteration 0
    -- a file that does not fit names the keys and the two ways out
    local other = nn.Sequential(nn.Flatten(), nn.Linear(48, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3), nn.Linear(3, 2))
    -- one line: the counts and first names of each kind, then the two ways out
    local msg = H.error_of(function() cr.recipe.run.load_weights(other, m) end)
    assert.is_truthy(msg:find("model.init '" .. path .. "' does not fit the model: 2 missing (5.weight, 5.bias); " ..
      'model.init_strict=false loads the names that match', 1, true), msg)
    assert.is_nil(msg:find('\n'), msg)
    local loose = cr.config.merge(m, { init_skip = { '^5%.' } })
    assert.is_truthy(cr.recipe.run.load_weights(other, loose):find('loaded 4 tensors', 1, true))
    H.assert_error(function() cr.recipe.run.load_weights(other, cr.config.merge(m, { init = tmp.path('no.safetensors') })) end,
      "model.init: no file '")
  end)

  it('model.init is checked at start-up: a missing file, a file that is not safetensors, another trunk', function()
    local m = cr.config.schema(cr.recipe.run.INIT).defaults.model
    local function check(over) return H.error_of(function() cr.recipe.run.check_init(cr.config.merge(m, over)) end) end
    assert.is_truthy(check({ init = tmp.path('no.safetensors') }):find("model.init: no file '", 1, true))
    local text = tmp.write('notes.md', '# not weights\n' .. string.rep('x', 64))
    local msg = check({ init = text })
    assert.is_truthy(msg:find("model.init: '" .. text .. "' is not a safetensors file crescent can read (", 1, true), msg)
    assert.is_nil(msg:find('\n'), msg)
    -- a crescent checkpoint's config names its trunk: another arch or width is one line
    local ckpt_path = tmp.path('trunk.safetensors')
    cr.save(ckpt_path, { w = cr.zeros({ 1 }) }, { config = cr.config.dump({ model = { arch = 'resnet18', width = 4,
      stem = 'cifar', patch = 4 } }) })
    local mine = { init = ckpt_path, arch = 'resnet50', width = 4, stem = 'auto', patch = 7 }
    msg = check(mine)
    assert.is_truthy(msg:find("model.init: model.arch=resnet50, but the trunk in '" .. ckpt_path .. "' has arch = " ..
      'resnet18 (the config it was trained with); give model.arch=resnet18', 1, true), msg)
    msg = check({ init = ckpt_path, arch = 'resnet18', width = 16, stem = 'auto', patch = 7 })
    assert.is_truthy(msg:find('model.width=16, but the trunk', 1, true), msg)
    -- a stem of 'auto' and a ResNet's unused patch size are no conflict
    cr.recipe.run.check_init(cr.config.merge(m, { init = ckpt_path, arch = 'resnet18', width = 4, stem = 'auto',
      patch = 7 }))
  end)

  it('from scratch says so, with the seed; save = false starts but writes nothing', function()
    local t = supervised_task(tmp.path('scratch'), { epochs = 1, save = false })
    t.hooks[#t.hooks].verbose, t.hooks[#t.hooks].seed = true, 11
    local said = lines_of(function() cr.train(t) end)
    assert.is_truthy(said:find('from scratch (train.seed 11)', 1, true), said)
    assert.are.same({}, ckpt.list(tmp.path('scratch')))
  end)
end)

describe('preemption of a recipe', function()
  it('SIGTERM checkpoints and exits 0; running again resumes and ends bit for bit like an uninterrupted run', function()
    local ok, err = pcall(cr.data.fashion_mnist, { split = 'test', limit = 1 })
    if not ok then pending('Fashion-MNIST is absent: ' .. tostring(err)) return end
    local runs = tmp.path('recipe_runs')
    local args = 'train.epochs=1 data.limit=2048 data.batch_size=8 model.width=4 train.log_every=1 train.threads=1 ' ..
                 'run.dir=' .. runs
    local function run(name, kill)
      local script = string.format('luajit recipes/supervised.lua %s run.name=%s > %s/%s.out 2> %s/%s.err & pid=$!\n',
        args, name, tmp.dir, name, tmp.dir, name)
      if kill then   -- once the first step is logged (bounded wait: 60 s)
        script = script .. string.format('i=0; while [ ! -s %s/%s/metrics.jsonl ] && [ $i -lt 600 ]; do ' ..
          'sleep 0.1; i=$((i+1)); done; kill -TERM $pid\n', runs, name)
      end
      local p = io.popen(script .. 'wait $pid; echo $?')
      local status = tonumber(p:read('*a'):match('(%d+)%s*$'))
      p:close()
      local out = H.read_file(string.format('%s/%s.out', tmp.dir, name))
      local last = require('cjson').decode(out:match('([^\n]+)\n?$'))
      return status, last, out, H.read_file(string.format('%s/%s.err', tmp.dir, name))
    end
    local status, last, _, errout = run('cut', true)
    assert.are.equal(0, status, errout)
    assert.are.equal('SIGTERM', last.preempted, errout)
    assert.is_truthy(errout:find('SIGTERM', 1, true))
    local cut_at = ckpt.list(runs .. '/cut/checkpoints')[1]
    assert.is_truthy(cut_at and cut_at.iteration < 256, 'the run ended before the signal came')
    local out
    status, last, out = run('cut', false)
    assert.are.equal(0, status)
    assert.is_nil(last.preempted)
    assert.is_truthy(out:find("resumed from '" .. cut_at.path, 1, true), out)
    status = run('whole', false)
    assert.are.equal(0, status)
    local a = cr.load(runs .. '/cut/checkpoints/latest.safetensors')
    local b = cr.load(runs .. '/whole/checkpoints/latest.safetensors')
    local n = 0
    for name, t in pairs(b) do
      assert.are.equal(0, (t:double() - a[name]:double()):abs():max():item(), name)
      n = n + 1
    end
    assert.is_true(n > 100)
  end)
end)
