-- bench/learning_parity.lua — does crescent learn as well as independent PyTorch code?
-- Trains one method with the same settings on both sides, crescent's recipe and
-- bench/ssl_reference_torch.py (MoCo v2, SwAV and SimCLR written from the authors' code),
-- for each seed, and prints both kNN top-1 figures, their mean difference and the train
-- times. The settings are the method's row of PARITY (the settings of issue 18) over the
-- recipe's defaults; the crescent side runs the recipe with them as a --config file, the
-- PyTorch side gets the whole resolved config (cr.config.load) as JSON, so both read the
-- same values. Run folders, configs and logs go to build/parity/.
--
--   luajit bench/learning_parity.lua moco 5                 # 5 epochs, seeds 0 and 1
--   luajit bench/learning_parity.lua swav 5 seeds=0 side=crescent
--   luajit bench/learning_parity.lua simclr 1 limit=2048    # a quick look on 2048 images
--
-- The PyTorch side needs a current PyTorch with torchvision: `make torchenv` installs them
-- from PyPI into build/torchenv (or set CRESCENT_TORCH_PYTHON to a python that has them).
-- Last line: JSON {"bench": "learning_parity", "method", "epochs", "crescent": [top1 per
-- seed], "pytorch": [...], "crescent_mean", "pytorch_mean", "difference", "crescent_seconds",
-- "pytorch_seconds"}.
local root = (debug.getinfo(1, 'S').source:match('^@(.*)/bench/[^/]*$') or '.')
package.path = root .. '/lua/?.lua;' .. root .. '/lua/?/init.lua;' .. package.path
local cr = require 'crescent'
local cjson = require 'cjson'
local settings = dofile(root .. '/bench/parity_settings.lua')

local USAGE = 'usage: luajit bench/learning_parity.lua moco|swav|simclr [epochs] [seeds=0,1] ' ..
  '[side=both|crescent|pytorch] [limit=N]'

local function fail(msg)
  io.stderr:write('learning_parity: ', msg, '\n', USAGE, '\n')
  os.exit(2)
end

local method = arg[1]
if not settings.PARITY[method] then fail('the first argument must be moco, swav or simclr, got ' .. tostring(method)) end
local epochs = tonumber(arg[2] or 5)
if not epochs or epochs < 1 or epochs ~= math.floor(epochs) then fail('epochs must be a positive integer') end
local opts = { seeds = '0,1', side = 'both', limit = '0' }
for i = 3, #arg do
  local k, v = arg[i]:match('^([%w_]+)=(.*)$')
  if not k or opts[k] == nil then fail("unknown argument '" .. arg[i] .. "'") end
  opts[k] = v
end
if opts.side ~= 'both' and opts.side ~= 'crescent' and opts.side ~= 'pytorch' then
  fail('side must be both, crescent or pytorch')
end
local seeds = {}
for s in opts.seeds:gmatch('[^,]+') do
  seeds[#seeds + 1] = tonumber(s) or fail('seeds must be a list of integers like 0,1')
end
local limit = tonumber(opts.limit) or fail('limit must be an integer')

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

-- Runs a command, its output teed into `log`; returns the last line printed on stdout
-- decoded as JSON.
local function run(cmd, log)
  io.stderr:write('$ ', cmd, '\n')
  local ok = os.execute(string.format("bash -c 'set -o pipefail; %s 2>%s | tee %s >&2'", cmd, log, log .. '.out'))
  if ok ~= 0 and ok ~= true then error('learning_parity: this run failed; its log is ' .. log, 0) end
  local last
  for line in io.lines(log .. '.out') do if line:match('^{') then last = line end end
  if not last then error('learning_parity: no JSON line from the run; its log is ' .. log, 0) end
  return cjson.decode(last)
end

local function mean(xs)
  local s = 0
  for _, x in ipairs(xs) do s = s + x end
  return #xs > 0 and s / #xs or nil
end

local py = opts.side ~= 'crescent' and python() or nil
local result = { bench = 'learning_parity', method = method, epochs = epochs, seeds = seeds, crescent = {},
                 pytorch = {}, crescent_seconds = {}, pytorch_seconds = {} }
for _, seed in ipairs(seeds) do
  local name = string.format('%s-e%d-s%d%s', method, epochs, seed, limit > 0 and ('-l' .. limit) or '')
  local overrides = settings.overrides(method, {
    train = { epochs = epochs, seed = seed, log_every = 50 },
    data = { limit = limit },
    run = { dir = out_dir .. '/runs', name = name },
  })
  local recipe = root .. '/recipes/' .. method .. '.lua'
  local cfg = cr.config.load(recipe, overrides)
  local base = out_dir .. '/' .. name
  cr.config.write(base .. '.lua', overrides)
  local f = assert(io.open(base .. '.json', 'w'))
  f:write(cjson.encode(cfg))
  f:close()
  if opts.side ~= 'pytorch' then
    os.execute('rm -rf ' .. out_dir .. '/runs/' .. name)   -- a fresh run, not a resumed one
    local r = run(string.format('luajit %s --config %s', recipe, base .. '.lua'), base .. '.crescent.log')
    table.insert(result.crescent, r.knn_top1)
    table.insert(result.crescent_seconds, r.train_seconds)
  end
  if py then
    local r = run(string.format('%s %s/bench/ssl_reference_torch.py --method %s --config %s', py, root, method,
      base .. '.json'), base .. '.pytorch.log')
    table.insert(result.pytorch, r.knn_top1)
    table.insert(result.pytorch_seconds, r.train_seconds)
    result.torch = r.torch
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
print(cjson.encode(result))
