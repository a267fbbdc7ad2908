-- wandb_import_spec — tools/wandb_import.py takes a run folder into Weights & Biases through
-- wandb's public API: with a stand-in `wandb` module that records the calls, the run's
-- config, every row of metrics.jsonl against its iteration and results.json as the summary
-- (always: it needs only python3); with the real package from PyPI (make pydeps; pending
-- without it) in offline mode, the import ends with an offline run in the folder that
-- `wandb sync` uploads later.
local cjson = require 'cjson'
local read = H.read_file

local tmp = H.tmpdir('wandb')
teardown(tmp.remove)

local run_dir = tmp.path('runs/sup')

-- A small real run folder (config.lua, metrics.jsonl, results.json), made once.
local function run_folder()
  if io.open(run_dir .. '/metrics.jsonl') then return run_dir end
  local out, code = H.shell('luajit recipes/supervised.lua train.epochs=1 data.limit=256 model.width=4 ' ..
    'train.log_every=1 checkpoint.save=false run.dir=' .. tmp.path('runs') .. ' run.name=sup')
  assert(code == 0, out)
  return run_dir
end

-- A stand-in wandb package: every call appended to calls.json as it happens.
local FAKE = [[
import json, os
_path = os.environ['FAKE_WANDB_CALLS']
def _note(*call):
    calls = json.load(open(_path)) if os.path.exists(_path) else []
    calls.append(list(call))
    json.dump(calls, open(_path, 'w'))
class _Summary(dict):
    def update(self, d): _note('summary', d)
class _Run:
    def __init__(self): self.summary, self.dir = _Summary(), 'fake-dir'
    def define_metric(self, name, step_metric=None): _note('define_metric', name, step_metric)
    def log(self, values): _note('log', values)
    def finish(self): _note('finish')
def init(**kw):
    _note('init', {k: v for k, v in kw.items()})
    return _Run()
]]

describe('tools/wandb_import.py', function()
  it('logs the config, every metrics.jsonl row against its iteration, and results.json as the summary', function()
    local folder = run_folder()
    os.execute("mkdir -p '" .. tmp.path('fake/wandb') .. "'")
    tmp.write('fake/wandb/__init__.py', FAKE)
    local calls_path = tmp.path('calls.json')
    local out, code = H.shell(string.format("PYTHONPATH='%s' FAKE_WANDB_CALLS='%s' python3 tools/wandb_import.py '%s'",
      tmp.path('fake'), calls_path, folder))
    assert.are.equal(0, code, out)
    assert.truthy(out:find("wandb_import: '" .. folder .. "' -> W&B run 'sup'", 1, true), out)
    local calls = cjson.decode(read(calls_path))
    local init = calls[1]
    assert.are.equal('init', init[1])
    assert.are.same({ 'sup', 'crescent', folder }, { init[2].name, init[2].project, init[2].dir })
    assert.are.equal(1, init[2].config.train.epochs)         -- config.lua, read by crescent's loader
    assert.are.same({ 'define_metric', '*', 'iteration' }, calls[3])
    local rows = {}
    for l in read(folder .. '/metrics.jsonl'):gmatch('[^\n]+') do rows[#rows + 1] = cjson.decode(l) end
    local logs = {}
    for _, c in ipairs(calls) do if c[1] == 'log' then logs[#logs + 1] = c[2] end end
    assert.are.equal(#rows, #logs)
    for k, row in ipairs(rows) do
      assert.are.equal(row.iteration, logs[k].iteration)
      assert.is_nil(logs[k].phase)
      for name, v in pairs(row) do
        if type(v) == 'number' then assert.are.equal(v, logs[k][name], name) end
      end
    end
    local results = cjson.decode(read(folder .. '/results.json'))
    local summary = calls[#calls - 1]
    assert.are.equal('summary', summary[1])
    assert.are.equal(results.test_top1, summary[2].test_top1)
    assert.are.same({ 'finish' }, calls[#calls])
  end)

  it('names a folder that is not a run, and a missing wandb package', function()
    local out, code = H.shell(string.format("python3 tools/wandb_import.py '%s'", tmp.dir))
    assert.are.equal(1, code, out)
    assert.truthy(out:find("has no metrics.jsonl: give a crescent run folder", 1, true), out)
    -- -S keeps site-packages (and any wandb) out
    out, code = H.shell(string.format("python3 -S tools/wandb_import.py '%s'", run_folder()))
    assert.are.equal(1, code, out)
    assert.truthy(out:find('the wandb package is not installed: pip install wandb', 1, true), out)
  end)

  it('with the real wandb package, offline: an offline run in the folder, for `wandb sync` later', function()
    local python = os.getenv('CRESCENT_PYTHON') or 'python3'
    if os.execute(python .. " -c 'import wandb' >/dev/null 2>&1") ~= 0 then
      pending('the wandb package is absent (make pydeps installs it; CRESCENT_PYTHON picks the python)')
      return
    end
    local folder = run_folder()
    local out, code = H.shell(string.format("WANDB_MODE=offline WANDB_SILENT=true HOME='%s' timeout 300 %s " ..
      "tools/wandb_import.py '%s'", tmp.dir, python, folder))
    assert.are.equal(0, code, out)
    local p = io.popen(string.format("ls '%s'/wandb/offline-run-*/run-*.wandb 2>/dev/null", folder))
    local file = p:read('*l')
    p:close()
    assert.truthy(file, 'no offline run in ' .. folder .. '/wandb:\n' .. out)
    local f = assert(io.open(file, 'rb'))
    local size = f:seek('end')
    f:close()
    assert.is_true(size > 0, file)
  end)
end)
