-- bench/learning_parity.lua — does crescent learn as well as independent PyTorch code?
-- Trains one method with the same settings on both sides, crescent's recipe and
-- bench/ssl_reference_torch.py (MoCo v2, SwAV, SimCLR, BYOL and Barlow Twins written from
-- the authors' code; DINO: bench/dino_torch.py, on timm's ViT), for each seed, and prints both kNN top-1 figures, their mean
-- difference and the train times. The settings are the method's row of PARITY (the settings of the parity comparison) over the
-- recipe's defaults; the crescent side runs the recipe with them as a --config file, the
-- PyTorch side gets the whole resolved config (cr.config.load) as JSON, so both read the
-- same values. Run folders, configs and logs go to build/parity/.
--
--   luajit bench/learning_parity.lua all 5                  # every method, seeds 0 and 1: docs/results/learning_parity.md
--   luajit bench/learning_parity.lua moco 5                 # 5 epochs, seeds 0 and 1
--   luajit bench/learning_parity.lua swav 5 seeds=0 side=crescent
--   luajit bench/learning_parity.lua simclr 1 limit=2048    # a quick look on 2048 images
--   luajit bench/learning_parity.lua all 5 threads=1 together=true   # both sides at once, a core each
--   luajit bench/learning_parity.lua all 5 reuse=true       # keep every finished run of the same settings
--   luajit bench/learning_parity.lua dino 1 seeds=0 threads=1 together=true data.val_split=10000 model.patch=7
--
-- Arguments with a dotted key (model.patch=7, data.val_split=10000, 'crops.size={28,14}')
-- are recipe config overrides on top of the method's PARITY row, typed and checked as the
-- recipe's own command line does; both sides get them (their runs' names carry a hash of
-- them, so they do not overwrite the plain settings' runs). base=recipe starts from the
-- recipe's own defaults instead of the PARITY row (the seed, epochs, limit and threads
-- still set as above).
--
-- reuse=true takes a side's figure from its earlier log when that run finished and was
-- given the same resolved config, so a table can be gathered over several sittings (or
-- an interrupted one continued); every other side and seed runs.
--
-- The PyTorch side needs a current PyTorch with torchvision (and timm for DINO): `make
-- torchenv` installs them from PyPI into build/torchenv (or set CRESCENT_TORCH_PYTHON to a
-- python that has them).
-- Then a Markdown table (docs/results/learning_parity.md's), and a JSON line per method {"bench":
-- "learning_parity", "method", "epochs", "crescent": [top1 per seed], "pytorch": [...],
-- "crescent_mean", "pytorch_mean", "difference", "crescent_seconds", "pytorch_seconds"}.
local root = (debug.getinfo(1, 'S').source:match('^@(.*)/bench/[^/]*$') or '.')
package.path = root .. '/lua/?.lua;' .. root .. '/lua/?/init.lua;' .. package.path
local cr = require 'crescent'
local cjson = require 'cjson'
local settings = dofile(root .. '/bench/parity_settings.lua')

local USAGE = 'usage: luajit bench/learning_parity.lua moco|swav|simclr|byol|barlow_twins|dino|all [epochs] [seeds=0,1] ' ..
  '[side=both|crescent|pytorch] [limit=N] [threads=N] [together=true|false] [reuse=true|false] ' ..
  '[base=parity|recipe] [section.key=value ...]'

local function fail(msg)
  io.stderr:write('learning_parity: ', msg, '\n', USAGE, '\n')
  os.exit(2)
end

local methods = arg[1] == 'all' and { 'moco', 'swav', 'simclr', 'byol', 'barlow_twins' } or { arg[1] }
if not settings.PARITY[methods[1]] then
  fail('the first argument must be moco, swav, simclr, byol, barlow_twins, dino or all, got ' .. tostring(arg[1]))
end
local epochs = tonumber(arg[2] or 5)
if not epochs or epochs < 1 or epochs ~= math.floor(epochs) then fail('epochs must be a positive integer') end
local opts = { seeds = '0,1', side = 'both', limit = '0', threads = '0', together = 'false', reuse = 'false',
               base = 'parity' }
local config_args = {}   -- section.key=value: recipe config overrides
for i = 3, #arg do
  local k, v = arg[i]:match('^([%w_]+)=(.*)$')
  if k and opts[k] ~= nil then
    opts[k] = v
  elseif arg[i]:match('^[%w_]+%.[%w_.]+=') then
    config_args[#config_args + 1] = arg[i]
  else
    fail("unknown argument '" .. arg[i] .. "'")
  end
end
if opts.side ~= 'both' and opts.side ~= 'crescent' and opts.side ~= 'pytorch' then
  fail('side must be both, crescent or pytorch')
end
local seeds = {}
for s in opts.seeds:gmatch('[^,]+') do
  seeds[#seeds + 1] = tonumber(s) or fail('seeds must be a list of integers like 0,1')
end
local limit = tonumber(opts.limit) or fail('limit must be an integer')
local threads = tonumber(opts.threads) or fail('threads must be an integer (0: all cores)')
if opts.together ~= 'true' and opts.together ~= 'false' then fail('together must be true or false') end
local together = opts.together == 'true'
if opts.reuse ~= 'true' and opts.reuse ~= 'false' then fail('reuse must be true or false') end
local reuse = opts.reuse == 'true'
if opts.base ~= 'parity' and opts.base ~= 'recipe' then fail('base must be parity or recipe') end
if together and opts.side ~= 'both' then fail('together=true runs both sides at once; leave side=both') end

local out_dir = root .. '/build/parity'
os.execute('mkdir -p ' .. out_dir)

local function python()
  local p = os.getenv('CRESCENT_TORCH_PYTHON') or (root .. '/build/torchenv/bin/python')
  local ok = os.execute(p .. ' -c "import torch, torchvision" 2>/dev/null')
  if ok ~= 0 and ok ~= true then
    fail(p .. ' has no torch and torchvision; run `make torchenv` (PyPI) or set CRESCENT_TORCH_PYTHON')
  end
  return p
end

-- The last line of a run's stdout (log .. '.out') that is a JSON object, decoded.
local function last_json(log)
  local last
  for line in io.lines(log .. '.out') do if line:match('^{') then last = line end end
  if not last then error('learning_parity: no JSON line from the run; its log is ' .. log, 0) end
  return cjson.decode(last)
end

-- Runs {cmd, log} pairs, one after the other or (together) at the same time, stdout of
-- each into log .. '.out' (and, alone, onto stderr), stderr into log; returns the JSON
-- last line of each.
local function run(jobs, at_once)
  local parts = {}
  for i, j in ipairs(jobs) do
    io.stderr:write('$ ', j[1], '\n')
    parts[i] = string.format('(%s) 2>%s | tee %s %s', j[1], j[2], j[2] .. '.out', at_once and '>/dev/null &' or '>&2')
  end
  local script = 'set -o pipefail; ' .. table.concat(parts, at_once and ' ' or '; ') .. (at_once and ' wait' or '')
  local ok = os.execute("bash -c '" .. script .. "'")
  local out = {}
  for i, j in ipairs(jobs) do
    local good, r = pcall(last_json, j[2])
    if not good then error(r .. ((ok ~= 0 and ok ~= true) and ' (the run failed)' or ''), 0) end
    out[i] = r
  end
  return out
end

local function deep_equal(a, b)
  if type(a) ~= 'table' or type(b) ~= 'table' then return a == b end
  for k, v in pairs(a) do if not deep_equal(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

-- The config an earlier run of `base` was given (decoded), or nil.
local function earlier_config(base)
  local f = io.open(base .. '.json')
  if not f then return nil end
  local text = f:read('*a')
  f:close()
  local ok, cfg = pcall(cjson.decode, text)
  return ok and cfg or nil
end

-- overrides with the command line's section.key=value arguments on top, typed and checked
-- by the recipe's own declarations (cr.config.parse over the resolved config).
local function with_config_args(recipe, overrides)
  if #config_args == 0 then return overrides end
  local base, declared = cr.config.load(recipe, overrides)
  local ok, cfg = pcall(cr.config.parse, config_args, declared.schema:with(base), { exit_on_error = false })
  if not ok then fail(tostring(cfg)) end
  local out = cr.config.merge(overrides)
  for _, d in ipairs(cr.config.diff(base, cfg)) do cr.config.set(out, d[1], d[3]) end
  return out
end

-- A short tag of the command line's config overrides for run names ('' without any).
local function config_tag()
  if #config_args == 0 then return '' end
  local h = 5381
  for c in table.concat(config_args, ' '):gmatch('.') do h = (h * 33 + c:byte()) % 4294967296 end
  return string.format('-x%08x', h)
end

local function mean(xs)
  local s = 0
  for _, x in ipairs(xs) do s = s + x end
  return #xs > 0 and s / #xs or nil
end

local py = opts.side ~= 'crescent' and python() or nil

local function record(result, side, r)
  table.insert(result[side], r.knn_top1)
  table.insert(result[side .. '_seconds'], r.train_seconds)
  if r.torch then result.torch = r.torch end
end

-- Both sides of one method for every seed: the result table (kNN and train seconds per seed).
local function compare(method)
  local result = { bench = 'learning_parity', method = method, epochs = epochs, seeds = seeds, crescent = {},
                   pytorch = {}, crescent_seconds = {}, pytorch_seconds = {} }
  for _, seed in ipairs(seeds) do
    local name = string.format('%s-e%d-s%d%s%s%s', method, epochs, seed, limit > 0 and ('-l' .. limit) or '',
      opts.base == 'recipe' and '-recipe' or '', config_tag())
    local recipe = root .. '/recipes/' .. method .. '.lua'
    local run_settings = {
      train = { epochs = epochs, seed = seed, log_every = 50, threads = threads },
      data = { limit = limit },
      run = { dir = out_dir .. '/runs', name = name },
    }
    local overrides = with_config_args(recipe, opts.base == 'parity' and settings.overrides(method, run_settings)
      or run_settings)
    local cfg = cr.config.load(recipe, overrides)
    local base = out_dir .. '/' .. name
    local same_settings = reuse and deep_equal(earlier_config(base), cjson.decode(cjson.encode(cfg)))
    -- a finished earlier run of this side with the same config, or nil
    local function finished(log)
      if not same_settings then return nil end
      local ok, r = pcall(last_json, log)
      return ok and r or nil
    end
    cr.config.write(base .. '.lua', overrides)
    local f = assert(io.open(base .. '.json', 'w'))
    f:write(cjson.encode(cfg))
    f:close()
    local jobs, sides, reused = {}, {}, {}
    for _, side in ipairs({ 'crescent', 'pytorch' }) do
      local log = base .. '.' .. side .. '.log'
      local r = (opts.side == 'both' or opts.side == side) and finished(log)
      if r then
        io.stderr:write(string.format('reusing %s: %s, seed %d, kNN top-1 %.2f%%\n', log .. '.out', side, seed,
          r.knn_top1))
        record(result, side, r)
        reused[side] = true
      end
    end
    if opts.side ~= 'pytorch' and not reused.crescent then
      os.execute('rm -rf ' .. out_dir .. '/runs/' .. name)   -- a fresh run, not a resumed one
      jobs[#jobs + 1] = { string.format('luajit %s --config %s', recipe, base .. '.lua'), base .. '.crescent.log' }
      sides[#sides + 1] = 'crescent'
    end
    if py and not reused.pytorch then
      local twin = method == 'dino' and string.format('%s/bench/dino_torch.py', root)
        or string.format('%s/bench/ssl_reference_torch.py --method %s', root, method)
      jobs[#jobs + 1] = { string.format('%s %s --config %s', py, twin, base .. '.json'), base .. '.pytorch.log' }
      sides[#sides + 1] = 'pytorch'
    end
    if together then
      local rs = run(jobs, true)
      for i, side in ipairs(sides) do record(result, side, rs[i]) end
    else
      for i, side in ipairs(sides) do record(result, side, run({ jobs[i] }, false)[1]) end
    end
  end
  result.crescent_mean, result.pytorch_mean = mean(result.crescent), mean(result.pytorch)
  if result.crescent_mean and result.pytorch_mean then result.difference = result.crescent_mean - result.pytorch_mean end
  print(string.format('%s, %d epochs, seeds %s:', method, epochs, table.concat(seeds, ',')))
  for i, seed in ipairs(seeds) do
    print(string.format('  seed %d: crescent %s (%s s train)   pytorch %s (%s s train)', seed,
      tostring(result.crescent[i] or '-'), tostring(result.crescent_seconds[i] or '-'),
      tostring(result.pytorch[i] or '-'), tostring(result.pytorch_seconds[i] or '-')))
  end
  if result.difference then
    print(string.format('  mean: crescent %.2f%%  pytorch %.2f%%  difference %+.2f points', result.crescent_mean,
      result.pytorch_mean, result.difference))
  end
  io.stdout:flush()
  return result
end

local function figures(xs, fmt)
  local out = {}
  for i, x in ipairs(xs) do out[i] = string.format(fmt, x) end
  return #out > 0 and table.concat(out, ', ') or '-'
end

local results = {}
for _, method in ipairs(methods) do results[#results + 1] = compare(method) end
-- the learning table of docs/results/learning_parity.md
print(string.format('\n| method, %d epochs | crescent kNN top-1 (seeds %s) | PyTorch %s kNN top-1 | difference | ' ..
  'crescent train s | PyTorch train s |', epochs, table.concat(seeds, ', '), results[1].torch or ''))
print('|---|---|---|---|---|---|')
for _, r in ipairs(results) do
  print(string.format('| %s | %s (mean %s) | %s (mean %s) | %s | %s | %s |', r.method, figures(r.crescent, '%.2f'),
    r.crescent_mean and string.format('%.2f', r.crescent_mean) or '-', figures(r.pytorch, '%.2f'),
    r.pytorch_mean and string.format('%.2f', r.pytorch_mean) or '-',
    r.difference and string.format('%+.2f', r.difference) or '-', figures(r.crescent_seconds, '%.0f'),
    figures(r.pytorch_seconds, '%.0f')))
end
for _, r in ipairs(results) do print(cjson.encode(r)) end
