-- bench/parity_components.lua — crescent and the independent PyTorch implementations
-- (bench/ssl_reference_torch.py) stepped on identical weights and identical inputs,
-- compared component by component: the loss of each step, every parameter's gradient,
-- the parameters and BatchNorm buffers after the optimizer steps (SGD with momentum and
-- weight decay, the lr schedule, SwAV's prototype freeze and normalisation, MoCo's
-- momentum update and queue), and the kNN of one set of features. Where learning differs,
-- this says which part computes something else.
--
--   luajit bench/parity_components.lua                 # moco, swav and simclr, 3 steps each
--   luajit bench/parity_components.lua moco steps=5
--   luajit bench/parity_components.lua byol steps=60 limit=15360 warmup=0.5
--   luajit bench/parity_components.lua byol losses epochs=2 limit=0 warmup=1
-- limit: images (so iterations per epoch); warmup: epochs of lr warm-up (default 0, so the
-- lr moves). `losses`: the loss of every step of a whole run only, both sides in f32 on
-- the same batches, as 50-step means: whether they stay together over a run's horizon.
--
-- crescent runs its own recipe task for `steps` iterations by hand (task:step), with the
-- settings of bench/parity_settings.lua on 1024 images (warm-up off, so the lr moves),
-- and writes the initial weights, the batches it drew and what it computed to
-- build/parity/components/<method>/; the twin loads the weights and the batches, steps
-- the same way and writes its figures beside them. MoCo's key shuffle is the identity on
-- both sides here (it is random otherwise), and the twin's split BatchNorm groups samples
-- n = j (mod splits) where crescent's takes consecutive ones, so the twin gets the batch
-- reordered to put the same samples in each group (the loss is a mean over the batch, so
-- nothing else changes); its keys are put back in crescent's order before the queue is
-- compared. The twin steps twice, in f64 (the reference) and in f32: crescent's distance
-- from the f64 figures is shown beside PyTorch's own f32 distance, so f32 rounding, which
-- a few steps of a contrastive loss amplify, is told apart from computing something else.
-- Needs the twin's Python (`make torchenv`, or CRESCENT_TORCH_PYTHON).
local root = (debug.getinfo(1, 'S').source:match('^@(.*)/bench/[^/]*$') or '.')
package.path = root .. '/lua/?.lua;' .. root .. '/lua/?/init.lua;' .. package.path
local cr = require 'crescent'
local cjson = require 'cjson'
local settings = dofile(root .. '/bench/parity_settings.lua')

local methods, steps, limit, warmup, epochs, losses_only = {}, 3, 1024, 0, 1, false
for _, a in ipairs(arg) do
  local key, n = a:match('^(%a+)=([%d.]+)$')
  if key == 'steps' then steps = tonumber(n)
  elseif key == 'limit' then limit = tonumber(n)
  elseif key == 'warmup' then warmup = tonumber(n)
  elseif key == 'epochs' then epochs = tonumber(n)
  elseif a == 'losses' then losses_only = true
  elseif settings.PARITY[a] then methods[#methods + 1] = a
  else
    io.stderr:write("parity_components: unknown argument '", a, "'\nusage: luajit bench/parity_components.lua ",
      '[moco] [swav] [simclr] [byol] [barlow_twins] [steps=N] [limit=IMAGES] [warmup=EPOCHS] [epochs=N] [losses]\n')
    os.exit(2)
  end
end
if #methods == 0 then methods = { 'moco', 'swav', 'simclr' } end

local py = os.getenv('CRESCENT_TORCH_PYTHON') or (root .. '/build/torchenv/bin/python')
local have = os.execute(py .. ' -c "import torch, torchvision, safetensors" 2>/dev/null')
if have ~= 0 and have ~= true then
  io.stderr:write('parity_components: ', py, ' lacks torch, torchvision or safetensors; run `make torchenv`\n')
  os.exit(2)
end

local function named(list, into, prefix)
  for _, np in ipairs(list) do into[prefix .. np[1]] = np[2]:detach():clone() end
  return into
end

-- Steps crescent's task and writes what the twin needs and what crescent computed.
local function run_crescent(method, dir)
  os.execute('rm -rf ' .. dir .. ' && mkdir -p ' .. dir)
  local overrides = settings.overrides(method, {
    train = { epochs = epochs, seed = 0, log_every = 1000 }, data = { limit = limit },
    optim = { warmup_epochs = warmup }, run = { dir = dir .. '/runs', name = 'run' }, knn = { every = 0 },
  })
  local cfg = cr.config.load(root .. '/recipes/' .. method .. '.lua', overrides)
  local f = assert(io.open(dir .. '/config.json', 'w'))
  f:write(cjson.encode(cfg))
  f:close()
  local task = cr.recipe.ssl.task(method, cfg)
  local model = task.method
  local init = named(model:named_parameters(), {}, '')
  named(model:named_buffers(), init, '')
  if method == 'moco' then init.queue = model.queue:buffer():clone() end
  cr.save(dir .. '/init.safetensors', init)
  local randperm = cr.randperm
  cr.randperm = function(n, o) return cr.arange(n, { dtype = 'i64', device = o and o.device }) end
  local inputs, grads, losses, after = {}, {}, {}, {}
  task:add_hook { name = 'parity_capture', priority = 99,
    before_step = function(_, t)
      if t.phase_name ~= 'train' then return end
      for v, x in ipairs(t.batch.input) do inputs[string.format('step%d.view%d', t.iteration, v - 1)] = x:clone() end
    end,
    after_backward = function(_, t)
      losses[#losses + 1] = t.loss_value
      if losses_only then return end
      for _, np in ipairs(model:named_parameters()) do
        if np[2].grad then grads[string.format('step%d.%s', t.iteration, np[1])] = np[2].grad:clone() end
      end
    end,
    after_step = function(_, t)
      if losses_only then return end
      for _, np in ipairs(model:named_parameters()) do
        after[string.format('step%d.%s', t.iteration - 1, np[1])] = np[2]:detach():clone()
      end
    end }
  if losses_only then steps = task.train_loader:num_batches() * epochs end
  local ok, err = pcall(task.step, task, steps)
  cr.randperm = randperm
  if not ok then error(err, 0) end
  cr.save(dir .. '/inputs.safetensors', inputs)
  local final = named(model:named_parameters(), {}, '')
  named(model:named_buffers(), final, '')
  if method == 'moco' then final.queue = model.queue:buffer():clone() end
  return { losses = losses, grads = grads, after = after, final = final, init = init, cfg = cfg }
end

-- The weighted kNN of crescent and of the twin on the same random features.
local function knn_features(dir)
  cr.manual_seed(3)
  local centres = cr.randn({ 10, 32 })
  local train_y = cr.randint(0, 10, { 2000 })
  local test_y = cr.randint(0, 10, { 500 })
  local train = centres:index_select(0, train_y) + cr.randn({ 2000, 32 }) * 1.5
  local test = centres:index_select(0, test_y) + cr.randn({ 500, 32 }) * 1.5
  cr.save(dir .. '/knn.safetensors', { train = train, test = test, train_y = train_y, test_y = test_y })
  return cr.ssl.knn_classify(train, train_y, test, test_y, { k = 200, temperature = 0.1 })
end

-- The augmentation: crescent's crop draws and views of the first N train images, per
-- crop group of the recipe's multi-crop, and for 500 of them the crop resampled with the
-- jitter off (for the pixel comparison with PIL); the twin compares (--augment).
local function augment_samples(cfg, dir)
  local N, M = 4000, 500
  local train = cr.data.fashion_mnist { split = 'train', limit = N }
  local mc = cr.recipe.ssl.views(cfg, train)
  local scales = {}
  for i = 1, #cfg.crops.size do scales[i] = { cfg.crops.min_scale[i], cfg.crops.max_scale[i] } end
  local plain = cr.data.transforms.multicrop { size_crops = cfg.crops.size, num_crops = cfg.crops.num,
    crop_scales = scales, flip = cfg.augment.flip, mean = 0, std = 1 }
  local index = cr.arange(N, { dtype = 'i64' })
  local seed = cfg.train.seed
  local stats = { mean = train.mean, std = train.std }
  local views = mc:apply(train.images, index, seed, 0, stats)
  local resampled = plain:apply(train.images:narrow(0, 0, M), index:narrow(0, 0, M), seed, 0)
  local H, W = train.images.shape[2], train.images.shape[3]
  local mean, std = type(train.mean) == 'table' and train.mean[1] or train.mean,
    type(train.std) == 'table' and train.std[1] or train.std
  local out = {}
  for g, grp in ipairs(mc.groups) do
    local crop = grp.first
    local cols = { area = {}, log_ratio = {}, centre_x = {}, centre_y = {}, flip = {}, jitter = {}, brightness = {},
                   contrast = {} }
    local boxes = {}
    for i = 0, N - 1 do
      local d = mc:draw(H, W, seed, 0, i, crop)
      cols.area[i + 1] = d.height * d.width / (H * W)
      cols.log_ratio[i + 1] = math.log(d.width / d.height)
      cols.centre_x[i + 1], cols.centre_y[i + 1] = d.left + d.width / 2, d.top + d.height / 2
      cols.flip[i + 1], cols.jitter[i + 1] = d.flip and 1 or 0, d.jitter and 1 or 0
      cols.brightness[i + 1], cols.contrast[i + 1] = d.brightness, d.contrast
      if i < M then boxes[i + 1] = { i, d.top, d.left, d.height, d.width, d.flip and 1 or 0 } end
    end
    for k, v in pairs(cols) do out[string.format('g%d.%s', g - 1, k)] = cr.tensor(v, { dtype = 'f64' }) end
    local px = (views[crop + 1]:reshape({ N, -1 }) * std + mean) * 255
    local m1 = px:mean(1)
    out[string.format('g%d.view_mean', g - 1)] = m1
    out[string.format('g%d.view_std', g - 1)] = ((px * px):mean(1) - m1 * m1):clamp(0, math.huge):sqrt()
    out[string.format('g%d.index', g - 1)] = index:narrow(0, 0, N):double()
    out[string.format('g%d.boxes', g - 1)] = cr.tensor(boxes, { dtype = 'f64' })
    out[string.format('g%d.resampled', g - 1)] = resampled[crop + 1]:reshape({ M, grp.h, grp.w }):contiguous()
  end
  cr.save(dir .. '/augment.safetensors', out)
end

-- Each compared quantity: crescent's distance from the twin run in f64 (the reference),
-- beside PyTorch's own f32 distance from it. Distances are max |x - ref| over a group of
-- tensors, divided by the largest |ref| of the group (so a gradient that is zero in exact
-- arithmetic, a bias before BatchNorm, does not count on its own). A row fails when
-- crescent is further than SLACK times PyTorch's f32, and further than FLOOR.
local SLACK, FLOOR = 10, 1e-5
local rows, failed = {}, false
local function row(method, what, cr_err, pt_err)
  local ok = cr_err <= math.max(SLACK * pt_err, FLOOR)
  failed = failed or not ok
  rows[#rows + 1] = { method = method, what = what, crescent = cr_err, pytorch_f32 = pt_err, ok = ok }
  print(string.format('  %-6s %-58s crescent %.1e  pytorch f32 %.1e  %s', method, what, cr_err, pt_err,
    ok and 'ok' or 'DIFFERS'))
end

-- Distances of crescent's and the twin's f32 tensors (name -> tensor, the names of
-- `names`) from the f64 twin's, relative to the group's largest reference value.
local function distances(names, mine, ref, f32, prefix)
  local scale, dc, dp, worst, wname = 0, 0, 0, -1, nil
  for _, name in ipairs(names) do
    local r = ref[prefix .. name]
    if not r then error('the twin has no ' .. prefix .. name .. ' (crescent has one)', 0) end
    r = r:double()
    scale = math.max(scale, r:abs():max():item())
    local a = (mine[name]:double() - r):abs():max():item()
    dc = math.max(dc, a)
    dp = math.max(dp, (f32[prefix .. name]:double() - r):abs():max():item())
    if a > worst then worst, wname = a, name end
  end
  if scale == 0 then scale = 1 end
  return dc / scale, dp / scale, wname
end

local function sorted_names(t, pattern)
  local out = {}
  for name in pairs(t) do
    if not pattern or name:match(pattern) then out[#out + 1] = name end
  end
  table.sort(out)
  return out
end

-- Runs the twin on dir/<config> with its mode's arguments, its output into dir/twin_<log>.log;
-- a failure ends the bench naming that log.
local function run_twin(method, dir, config, args, log)
  local ok = os.execute(string.format('%s %s/bench/ssl_reference_torch.py --method %s --config %s/%s %s > %s/twin_%s.log 2>&1',
    py, root, method, dir, config, args, dir, log))
  if ok ~= 0 and ok ~= true then
    io.stderr:write(string.format('parity_components: the twin failed; see %s/twin_%s.log\n', dir, log))
    os.exit(1)
  end
end

-- losses: the loss of every step of a whole run (epochs over `limit` images), crescent
-- against the twin in f32 on the same batches, as means over windows of 50 steps: whether
-- the two stay together over a run's horizon, beyond the steps compared tensor by tensor.
local function compare_losses(method, dir, c)
  run_twin(method, dir, 'config.json', string.format('--compare %s --dtype float32 --losses-only', dir), 'float32')
  local theirs = cr.load(dir .. '/twin_float32.safetensors').losses:totable()
  local worst = 0
  for w = 0, math.floor((#c.losses - 1) / 50) do
    local a, b, n = 0, 0, 0
    for i = w * 50 + 1, math.min(#c.losses, w * 50 + 50) do a, b, n = a + c.losses[i], b + theirs[i], n + 1 end
    a, b = a / n, b / n
    worst = math.max(worst, math.abs(a - b) / math.abs(b))
    print(string.format('  %-6s steps %4d-%-4d mean loss  crescent %.4f  pytorch f32 %.4f  (%+.2f%%)', method, w * 50,
      w * 50 + n - 1, a, b, 100 * (a - b) / b))
  end
  rows[#rows + 1] = { method = method, what = 'loss over the run, worst 50-step window', crescent = worst, ok = true }
end

for _, method in ipairs(methods) do
  local dir = root .. '/build/parity/components/' .. method
  print(string.format('== %s: %s on identical weights and batches', method,
    losses_only and 'every step of the run' or (steps .. ' steps')))
  local c = run_crescent(method, dir)
  if losses_only then
    compare_losses(method, dir, c)
    goto next_method
  end
  local knn_top1 = method == 'moco' and knn_features(dir) or nil
  local twin = {}
  for _, dtype in ipairs { 'float64', 'float32' } do
    run_twin(method, dir, 'config.json', string.format('--compare %s --dtype %s', dir, dtype), dtype)
    twin[dtype] = cr.load(dir .. '/twin_' .. dtype .. '.safetensors')
  end
  augment_samples(c.cfg, dir)
  run_twin(method, dir, 'config.json', '--augment ' .. dir, 'augment')
  local f = assert(io.open(dir .. '/augment.json'))
  for _, r in ipairs(cjson.decode(f:read('*a'))) do
    local pass = r.distance <= r.limit
    failed = failed or not pass
    rows[#rows + 1] = { method = method, what = 'crop group ' .. r.group .. ': ' .. r.what, crescent = r.crescent,
                        pytorch = r.pytorch, distance = r.distance, limit = r.limit, ok = pass }
    print(string.format('  %-6s crops %d: %-47s crescent %8.4f  pytorch %8.4f  distance %.4f (limit %.4f)  %s',
      method, r.group, r.what, r.crescent, r.pytorch, r.distance, r.limit, pass and 'ok' or 'DIFFERS'))
  end
  f:close()
  local ref, f32 = twin.float64, twin.float32
  -- the initial weights: the spread of crescent's against that of the twin's own draw
  -- (tensors of at least 1000 values: a smaller sample's std wanders more than 10%)
  do
    local worst, wname = 0, nil
    for name, t in pairs(c.init) do
      local theirs = ref['init_std.' .. name]
      if theirs and t:numel() >= 1000 then
        local r = math.abs(math.log(t:double():std():item() / theirs:item()))
        if r > worst then worst, wname = r, name end
      end
    end
    local pass = worst <= math.log(1.1)
    failed = failed or not pass
    rows[#rows + 1] = { method = method, what = 'initial weights: std ratio', crescent = math.exp(worst), ok = pass }
    print(string.format('  %-6s %-58s worst std ratio %.3f (%s)  %s', method, 'initial weights, crescent / pytorch',
      math.exp(worst), wname, pass and 'ok' or 'DIFFERS'))
  end
  -- the lr of every iteration of a whole parity run (5 epochs on every image, warm-up on)
  do
    local cfg = cr.config.load(root .. '/recipes/' .. method .. '.lua', settings.overrides(method, {
      train = { epochs = 5, seed = 0 }, run = { dir = dir .. '/runs', name = 'schedule' } }))
    local out = assert(io.open(dir .. '/schedule_config.json', 'w'))
    out:write(cjson.encode(cfg))
    out:close()
    local task = cr.recipe.ssl.task(method, cfg)
    local total = task.train_loader:num_batches() * cfg.train.epochs
    run_twin(method, dir, 'schedule_config.json', '--lr-schedule ' .. dir .. '/lr_schedule.json', 'schedule')
    local g = assert(io.open(dir .. '/lr_schedule.json'))
    local theirs = cjson.decode(g:read('*a'))
    g:close()
    local worst = #theirs == total and 0 or math.huge
    for it = 0, math.min(total, #theirs) - 1 do
      worst = math.max(worst, math.abs(task.schedules.lr:at(it, total) - theirs[it + 1]))
    end
    local pass = worst <= 1e-9 * cfg.optim.lr
    failed = failed or not pass
    rows[#rows + 1] = { method = method, what = 'lr schedule', crescent = worst, ok = pass }
    print(string.format('  %-6s %-58s max |difference| %.1e over %d iterations  %s', method,
      'lr of every iteration, 5 epochs with warm-up', worst, total, pass and 'ok' or 'DIFFERS'))
  end
  local rl, pl = ref.losses:totable(), f32.losses:totable()
  for i, l in ipairs(c.losses) do
    row(method, string.format('loss of step %d (%.5f)', i - 1, l), math.abs(l - rl[i]) / math.abs(rl[i]),
      math.abs(pl[i] - rl[i]) / math.abs(rl[i]))
  end
  for s = 0, steps - 1 do
    for _, kind in ipairs { { 'grad.', c.grads, 'gradients' }, { 'after.', c.after, 'parameters after the update' } } do
      local prefix, mine, label = kind[1], kind[2], kind[3]
      local names = sorted_names(mine, '^step' .. s .. '%.')
      for _, name in ipairs(sorted_names(ref, '^' .. prefix:gsub('%.', '%%.') .. 'step' .. s .. '%.')) do
        if not mine[name:sub(#prefix + 1)] then
          error('crescent has no ' .. name .. ' (the twin has one)', 0)
        end
      end
      local dc, dp, worst = distances(names, mine, ref, f32, prefix)
      row(method, string.format('%s, step %d (worst: %s)', label, s, worst:gsub('^step%d+%.', '')), dc, dp)
    end
  end
  local groups, order = {}, {}
  for _, name in ipairs(sorted_names(c.final)) do
    local kind = name == 'queue' and 'queue' or name:match('running_') and 'BatchNorm running stats' or
      name:match('num_batches') and 'BatchNorm batch counts' or name:match('^key_') and 'key encoder (momentum update)'
      or 'parameters at the end'
    if not groups[kind] then groups[kind], order[#order + 1] = {}, kind end
    table.insert(groups[kind], name)
  end
  for _, kind in ipairs(order) do
    local dc, dp, worst = distances(groups[kind], c.final, ref, f32, 'final.')
    row(method, string.format('%s (worst: %s)', kind, worst), dc, dp)
  end
  if knn_top1 then
    row('knn', string.format('top-1 on shared features (%.2f%%)', knn_top1), math.abs(knn_top1 - ref.knn_top1:item()),
      math.abs(f32.knn_top1:item() - ref.knn_top1:item()))
  end
  ::next_method::
end
print(cjson.encode({ bench = 'parity_components', steps = steps, slack = SLACK, rows = rows, ok = not failed }))
