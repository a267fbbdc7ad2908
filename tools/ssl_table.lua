-- tools/ssl_table.lua — the table of the self-supervised methods (README, docs/results/methods.md):
-- each method's recipe trained with its defaults, then recipes/linear_eval.lua on its
-- checkpoint (a kNN and a linear probe of the frozen trunk), beside the same two probes of
-- the untrained network and of the raw pixels. Prints a markdown table (kNN top-1, its gain
-- over the untrained network, linear top-1, the recipe's wall time, the share of the CPU
-- time the hypervisor stole meanwhile, img/s); the last line is one JSON object with the rows.
--
--   luajit tools/ssl_table.lua                               # the eight ResNet methods, ~1.5 hours on 2 cores
--   luajit tools/ssl_table.lua methods=byol,npid             # some of them
--   luajit tools/ssl_table.lua methods=simclr data.val_split=10000 train.epochs=1
--   luajit tools/ssl_table.lua report=true                   # the table of what has run, running nothing
--
-- KEY=VALUE arguments with a dot go to every recipe; data.*, model.arch/width/stem and
-- train.threads/train.device go to linear_eval as well (the untrained network's probe
-- builds its trunk from them; a trained one's comes from its checkpoint). Everything lands
-- in runs/ssl_table (dir=): <method> (the recipe's run), <method>_probe (its probe),
-- init_probe and pixels_probe, each with its results.json and log, and ssl_table.json: how
-- the run went here (wall time, whether it resumed, the CPU steal meanwhile, when it
-- finished). A run whose folder already holds a results.json is not run again, so a table
-- that was killed goes on where it stopped (a killed recipe resumes from its checkpoint,
-- and its wall time is then that of the last part only: the row says so); remove a folder
-- to measure that row again; the folder keeps the arguments it was made with and refuses
-- others. Times are comparable
-- only between rows run alone on the same machine with the same threads.
local root = (debug.getinfo(1, 'S').source:match('^@(.*)/tools/[^/]*$') or '.')
package.path = root .. '/lua/?.lua;' .. root .. '/lua/?/init.lua;' .. package.path
local cjson = require 'cjson'
local cr = require 'crescent'
local util = require 'crescent.util'
local now = require('crescent.engine.loop').now
local checkpoint = require 'crescent.engine.checkpoint'

-- the ResNet methods: DINO trains a ViT, whose untrained-network row would be another network
local ALL = {}
for _, m in ipairs(cr.ssl.METHODS) do if m ~= 'dino' then ALL[#ALL + 1] = m end end
local IS_METHOD = {}
for _, m in ipairs(ALL) do IS_METHOD[m] = true end
-- the recipe keys linear_eval takes too: the data, the untrained network's trunk, the machine
local PROBE_KEYS = { ['model.arch'] = true, ['model.width'] = true, ['model.stem'] = true, ['train.threads'] = true,
                     ['train.device'] = true }
local USAGE = 'usage: luajit tools/ssl_table.lua [methods=all|' .. table.concat(ALL, ',') .. '] [dir=runs/ssl_table] '
  .. '[report=false] [KEY=VALUE ... for the recipes]'

local function fail(msg)
  io.stderr:write('ssl_table: ', msg, '\n', USAGE, '\n')
  os.exit(2)
end

-- The arguments: the tool's own (methods, dir, report) and the recipes' (with a dot).
local methods, dir, report, recipe_args, probe_args = ALL, 'runs/ssl_table', false, {}, {}
for _, a in ipairs(arg) do
  local k, v = a:match('^([%w_%.]+)=(.*)$')
  if not k then fail('arguments are KEY=VALUE, got ' .. a) end
  if k == 'methods' then
    if v ~= 'all' then
      methods = {}
      for m in v:gmatch('[^,]+') do
        if not IS_METHOD[m] then
          fail('unknown method ' .. m .. '; the methods are ' .. table.concat(ALL, ', '))
        end
        methods[#methods + 1] = m
      end
    end
  elseif k == 'dir' then
    dir = v
  elseif k == 'report' then
    if v ~= 'true' and v ~= 'false' then fail('report is true or false, got ' .. v) end
    report = v == 'true'
  elseif k:find('.', 1, true) then
    recipe_args[#recipe_args + 1] = a
    if PROBE_KEYS[k] or k:match('^data%.') then probe_args[#probe_args + 1] = a end
  else
    fail('unknown option ' .. k .. ' (the tool takes methods=, dir= and report=; recipe keys have a dot, e.g. train.epochs=1)')
  end
end

local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- The machine's CPU counters (/proc/stat's first line: user nice system idle iowait irq
-- softirq steal), to tell how much of a run's time the hypervisor took (steal) or other
-- work shared; nil where there is no /proc/stat.
local function cpu_counters()
  local f = io.open('/proc/stat')
  if not f then return nil end
  local line = f:read('*l')
  f:close()
  local t = {}
  for n in line:gmatch('%d+') do t[#t + 1] = tonumber(n) end
  return t
end

-- The share of the CPUs' time between two cpu_counters() readings that the hypervisor
-- stole (percent).
local function steal_percent(a, b)
  if not a or not b or not a[8] then return nil end
  local total = 0
  for i = 1, 8 do total = total + (b[i] - a[i]) end
  return total > 0 and 100 * (b[8] - a[8]) / total or nil
end

-- A JSON file of a run folder, or nil when absent; a file that does not parse stops the
-- tool with its name and the fix.
local function read_json(path)
  if not util.file_exists(path) then return nil end
  local ok, value = pcall(cjson.decode, util.read_file(path))
  if not ok then fail(string.format("'%s' does not parse (%s): remove its folder to run it again", path, value)) end
  return value
end

-- Runs `luajit <script> args...` in run.dir=dir run.name=name unless that run finished
-- before (its results.json) or report=true; echoes its output to stderr. Returns
-- results.json with `how` (the run folder's ssl_table.json: seconds, resumed,
-- steal_percent, finished), or nil and 'failed' or 'not run'.
local function run(script, name, args)
  local run_dir = dir .. '/' .. name
  local results = read_json(run_dir .. '/results.json')
  if results then
    io.stderr:write(string.format('ssl_table: %s done before (%s), reused\n', name, run_dir))
    results.how = read_json(run_dir .. '/ssl_table.json') or {}
    return results
  end
  if report then return nil, 'not run' end
  local words = { 'luajit', quote(root .. '/' .. script), quote('run.dir=' .. dir), quote('run.name=' .. name) }
  for _, a in ipairs(args) do words[#words + 1] = quote(a) end
  local cmd = table.concat(words, ' ') .. ' 2>&1'
  io.stderr:write('ssl_table: ', cmd, '\n')
  local resumed = #checkpoint.list(run_dir .. '/checkpoints') > 0
  local t0, counters = now(), cpu_counters()
  local p = io.popen(cmd)
  for line in p:lines() do io.stderr:write(line, '\n') end
  p:close()
  results = read_json(run_dir .. '/results.json')
  if not results then
    io.stderr:write(string.format('ssl_table: %s failed: no %s/results.json (its output is above)\n', name, run_dir))
    return nil, 'failed'
  end
  results.how = { seconds = now() - t0, resumed = resumed or nil, steal_percent = steal_percent(counters, cpu_counters()),
                  finished = os.date('!%Y-%m-%d %H:%M') }
  local tmp = run_dir .. '/ssl_table.json.tmp'
  local f = assert(io.open(tmp, 'w'))
  f:write(cjson.encode(results.how))
  f:close()
  assert(os.rename(tmp, run_dir .. '/ssl_table.json'))
  return results
end

local function pct(x) return type(x) == 'number' and string.format('%.2f%%', x) or '—' end
local function minutes(s)
  if not s then return '—' end
  return string.format('%d min %d s', math.floor(s / 60), math.floor(s % 60))
end

-- One folder holds one table: the arguments it was made with are kept in args.json.
local args_path, args_text = dir .. '/args.json', cjson.encode(recipe_args)
if util.file_exists(args_path) and util.read_file(args_path) ~= args_text then
  fail(string.format("%s holds a table made with the arguments %s, not %s: give another dir= or remove %s", dir,
    util.read_file(args_path), args_text, dir))
end
if not report then
  os.execute('mkdir -p ' .. quote(dir))
  local f = assert(io.open(args_path, 'w'))
  f:write(args_text)
  f:close()
end

-- probe_args and one more
local function probe_with(extra)
  local args = { unpack(probe_args) }
  args[#args + 1] = extra
  return args
end

local init, init_status = run('recipes/linear_eval.lua', 'init_probe', probe_args)
local pixels, pixels_status = run('recipes/linear_eval.lua', 'pixels_probe', probe_with('model.arch=pixels'))
local init_knn = init and init.knn_top1

local rows = {}
for _, m in ipairs(methods) do
  local trained, status = run('recipes/' .. m .. '.lua', m, recipe_args)
  local probe
  if trained and not trained.checkpoint then
    status = 'no checkpoint to probe'
  elseif trained then
    probe, status = run('recipes/linear_eval.lua', m .. '_probe', probe_with('model.init=' .. trained.checkpoint))
  end
  rows[#rows + 1] = { method = m, knn_top1 = probe and probe.knn_top1, linear_top1 = probe and probe.linear_top1,
                      recipe_knn_top1 = trained and trained.knn_top1, img_per_s = trained and trained.img_per_s,
                      epochs = trained and trained.epochs,
                      evaluated_on = probe and probe.evaluated_on, status = status or 'done' }
  if trained then
    for k, v in pairs(trained.how) do rows[#rows][k] = v end
  end
end

print('')
print('| method | kNN top-1 | over init | linear top-1 | wall time | CPU stolen | img/s | epochs |')
print('|---|---|---|---|---|---|---|---|')
for _, r in ipairs(rows) do
  local gain = (r.knn_top1 and init_knn) and string.format('%+.2f', r.knn_top1 - init_knn) or '—'
  print(string.format('| %s | %s | %s | %s | %s%s | %s | %s | %s |', r.method, pct(r.knn_top1), gain,
    pct(r.linear_top1), r.status == 'done' and minutes(r.seconds) or r.status, r.resumed and ' (resumed)' or '',
    r.steal_percent and string.format('%.0f%%', r.steal_percent) or '—',
    r.img_per_s and string.format('%.0f', r.img_per_s) or '—', r.epochs or '—'))
end
print(string.format('| untrained network | %s | | %s | | | | |', pct(init_knn), pct(init and init.linear_top1)))
print(string.format('| raw pixels | %s | | %s | | | | |', pct(pixels and pixels.knn_top1), pct(pixels and pixels.linear_top1)))
print(cjson.encode({ tool = 'ssl_table', rows = rows, init = init, pixels = pixels,
                     evaluated_on = init and init.evaluated_on, args = recipe_args }))
local failed = init_status == 'failed' or pixels_status == 'failed'
for _, r in ipairs(rows) do failed = failed or r.status == 'failed' end
if failed then
  io.stderr:write('ssl_table: some runs failed (their rows say so; their output is above)\n')
  os.exit(1)
end
