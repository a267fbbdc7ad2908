-- spec/matrix/run.lua — the combination matrix's driver (spec/matrix_spec.lua): each
-- training recipe, run as a user runs it (the recipe file itself, its `arg` set), with
-- each precision and SyncBatchNorm setting asked for, alone or under `mpirun -np 2`:
--
--   luajit spec/matrix/run.lua <dir> <recipes> <amps> <sync_bns> [epochs] [per_rank_limit]
--   mpirun -np 2 luajit spec/matrix/run.lua /tmp/m swav,moco off,bf16 true,false
--
-- For each combination: a reference run of `epochs` epochs (2 by default) on a few
-- samples, then the same run stopped after 3 steps (a hook's request_stop, which
-- checkpoints as a preemption does) and started again, which resumes from its folder and
-- trains to the end. The resumed run must end with its reference's checkpoint bit for bit
-- (every tensor: weights, buffers, optimizer state, queues), and every loss logged must be
-- finite. Rank 0 prints 'ok <combination> ...' or 'FAIL <combination>: <why>'; the exit
-- status is the number of failures (an error in a recipe ends the job, naming it).
local root = debug.getinfo(1, 'S').source:match('^@(.*)/spec/matrix/[^/]*$') or '.'
package.path = root .. '/lua/?.lua;' .. root .. '/lua/?/init.lua;' .. package.path
local cr = require 'crescent'
local cjson = require 'cjson'

local function list(s) local out = {} for x in tostring(s):gmatch('[^,]+') do out[#out + 1] = x end return out end
local dir, recipes, amps, sync_bns = arg[1], list(arg[2]), list(arg[3]), list(arg[4])
local epochs, limit = tonumber(arg[5] or '2'), tonumber(arg[6] or '32')
local STOP_AT = 3
assert(dir and #recipes > 0 and #amps > 0 and #sync_bns > 0,
  'usage: luajit spec/matrix/run.lua <dir> <recipes> <amps> <sync_bns> [epochs] [per_rank_limit]')

-- A few samples per rank, a narrow trunk, a small batch; what each method needs to fit
-- them (queues and memories shorter than the data, fewer clusters than samples).
local W = tonumber(os.getenv('OMPI_COMM_WORLD_SIZE') or os.getenv('PMI_SIZE') or '1')
local BATCH = 8
local COMMON = { 'model.width=4', 'data.batch_size=' .. BATCH, 'data.limit=' .. limit * W,
                 'train.threads=' .. math.max(1, math.floor(2 / W)), 'train.log_every=1', 'checkpoint.async=false',
                 'knn.k=5', 'dist.timeout=60' }
local OWN = {
  supervised = { 'knn.k=', 'optim.warmup_epochs=0' },   -- (an empty value: the key is dropped)
  moco = { 'moco.queue_length=' .. 2 * BATCH * W, 'moco.bn_splits=2' },
  npid = { 'npid.negatives=8' },
  deepcluster_v2 = { "'deepcluster_v2.num_prototypes={4,5}'", 'deepcluster_v2.kmeans_iterations=2' },
  swav = { 'swav.num_prototypes=8', 'swav.freeze_prototypes_iterations=2' },
  dino = { 'model.patch=7', 'dino.out_dim=32', 'dino.hidden_dim=32', 'dino.bottleneck_dim=16', "'crops.num={2,2}'" },
  byol = { 'model.hidden_dim=64', 'model.out_dim=32' },
  barlow_twins = { 'model.hidden_dim=64', 'model.out_dim=64' },
}

-- The recipe's argument list for one run.
local function args_of(recipe, amp, sync_bn, name)
  local out = { 'train.epochs=' .. epochs, 'train.amp=' .. amp, 'dist.sync_bn=' .. sync_bn, 'run.dir=' .. dir,
                'run.name=' .. name }
  local drop = {}
  for _, a in ipairs(OWN[recipe] or {}) do
    local k = a:match('^([%w_.]+)=$')
    if k then drop[k] = true end
  end
  for _, a in ipairs(COMMON) do
    local k = a:match('^([%w_.]+)=')
    if not drop[k] then out[#out + 1] = a end
  end
  for _, a in ipairs(OWN[recipe] or {}) do
    if not a:match('=$') then out[#out + 1] = (a:gsub("^'(.*)'$", '%1')) end
  end
  return out
end

-- Runs recipes/<recipe>.lua in this process with `args` as its command line; with
-- stop_at, a hook asks the run to stop after that many steps. A recipe's error (which
-- recipe.run.main prints and would exit on) comes back as an error.
local real_train, real_exit = cr.train, os.exit
local function run_recipe(recipe, args, stop_at)
  local argv = { [0] = root .. '/recipes/' .. recipe .. '.lua' }
  for i, a in ipairs(args) do argv[i] = a end
  _G.arg = argv
  cr.train = function(task)
    if stop_at then
      task:add_hook { name = 'matrix_stop', after_step = function(_, t)
        if t.phase_name == 'train' and t.iteration == stop_at then t:request_stop('matrix: cut') end
      end }
    end
    return real_train(task)
  end
  os.exit = function(code) error('the recipe exited with status ' .. tostring(code), 0) end -- luacheck: ignore 122
  local ok, err = pcall(dofile, argv[0])
  cr.train, os.exit = real_train, real_exit -- luacheck: ignore 122
  if not ok then error(string.format('%s %s: %s', recipe, table.concat(args, ' '), tostring(err)), 0) end
end

local rank = function() return cr.dist.is_initialized() and cr.dist.rank() or 0 end

local function compare(a_path, b_path)
  local a, b = cr.load(a_path), cr.load(b_path)
  local n = 0
  for name, t in pairs(a) do
    local u = b[name]
    if not u then return false, 'only the reference has ' .. name end
    if t.dtype ~= u.dtype or table.concat(t.shape, ',') ~= table.concat(u.shape, ',') then
      return false, name .. ' differs in dtype or shape'
    end
    if t:numel() > 0 then
      local same = t:is_floating_point() and (t:double() - u:double()):abs():max():item() == 0
        or not t:is_floating_point() and (t:long() - u:long()):abs():max():item() == 0
      if not same then return false, name .. ' differs after the resume' end
    end
    n = n + 1
  end
  for name in pairs(b) do if not a[name] then return false, 'only the resumed run has ' .. name end end
  return true, n
end

local function losses_finite(path)
  local f = io.open(path)
  if not f then return false, 'no ' .. path end
  local n = 0
  for line in f:lines() do
    local rec = cjson.decode(line)
    if rec.loss ~= nil then
      if rec.loss == cjson.null or rec.loss ~= rec.loss then f:close() return false, 'a NaN loss at ' .. rec.iteration end
      n = n + 1
    end
  end
  f:close()
  return n > 0, n > 0 and n or 'no loss logged'
end

local failures = 0
for _, recipe in ipairs(recipes) do
  for _, amp in ipairs(amps) do
    for _, sync_bn in ipairs(sync_bns) do
      local combo = string.format('%s ranks=%d amp=%s sync_bn=%s', recipe, W, amp, sync_bn)
      local name = string.format('%s_%d_%s_%s', recipe, W, amp, sync_bn)
      local t0 = cr.engine.loop.now()
      run_recipe(recipe, args_of(recipe, amp, sync_bn, name .. '_ref'))
      run_recipe(recipe, args_of(recipe, amp, sync_bn, name), STOP_AT)   -- stops after step 3
      run_recipe(recipe, args_of(recipe, amp, sync_bn, name))            -- resumes, to the end
      if rank() == 0 then
        local ref, cut = dir .. '/' .. name .. '_ref', dir .. '/' .. name
        local ok, why = compare(ref .. '/checkpoints/latest.safetensors', cut .. '/checkpoints/latest.safetensors')
        local fin, n = losses_finite(cut .. '/metrics.jsonl')
        local log = io.open(cut .. '/log.txt'):read('*a')
        local resumed = log:find("resumed from '[^']*ckpt%-e%d+%-i0*" .. STOP_AT .. "%.safetensors'") ~= nil
        if ok and fin and resumed then
          print(string.format('ok %s (%d tensors bit for bit after the resume, %d losses, %.1fs)', combo, why, n,
            cr.engine.loop.now() - t0))
        else
          failures = failures + 1
          print(string.format('FAIL %s: %s', combo, not ok and why or not fin and tostring(n) or
            'the second start did not resume from step ' .. STOP_AT))
        end
      end
    end
  end
end
if cr.dist.is_initialized() then cr.dist.barrier() end
io.stdout:flush()
os.exit(failures)
