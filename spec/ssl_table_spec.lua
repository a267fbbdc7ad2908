-- spec/ssl_table_spec.lua — tools/ssl_table.lua, the README's table of SSL methods by one
-- command: on a tiny synthetic set, a method's row holds its recipe's kNN and its linear
-- probe, finished runs are reused, report=true runs nothing, a folder made with other
-- arguments is refused, and a run that fails marks its row and the exit status.
local cjson = require 'cjson'

local TINY = 'data.name=synthetic data.size=16 data.limit=256 data.batch_size=64 train.epochs=1 model.width=4 '
  .. 'train.threads=1'

-- Runs the tool; returns its stdout lines, its stderr and its exit status.
local function ssl_table(args)
  local err = os.tmpname()
  local p = assert(io.popen('luajit tools/ssl_table.lua ' .. args .. ' 2>' .. err .. '; echo "exit=$?"'))
  local lines = {}
  for line in p:lines() do lines[#lines + 1] = line end
  p:close()
  local f = assert(io.open(err))
  local stderr = f:read('*a')
  f:close()
  os.remove(err)
  local status = tonumber(table.remove(lines):match('^exit=(%d+)$'))
  return lines, stderr, status
end

describe('tools/ssl_table.lua', function()
  local dir = os.tmpname()
  os.remove(dir)
  teardown(function() os.execute("rm -rf '" .. dir .. "'") end)

  it('trains a method, probes it and the two baselines, and reuses finished runs', function()
    local lines, stderr, status = ssl_table('dir=' .. dir .. ' methods=simclr ' .. TINY)
    assert.are.equal(0, status, stderr)
    local out = cjson.decode(lines[#lines])
    local row = out.rows[1]
    assert.are.equal('simclr', row.method)
    -- the probe's kNN is the recipe's own final kNN: the same features, the same vote
    assert.is_near(row.recipe_knn_top1, row.knn_top1, 1e-3)
    assert.is_true(row.linear_top1 >= 0 and row.linear_top1 <= 100)
    assert.is_true(row.seconds > 0)
    assert.are.equal('resnet18', out.init.model)
    assert.are.equal('pixels', out.pixels.model)
    local table_row
    for _, l in ipairs(lines) do table_row = table_row or (l:match('^| simclr |') and l) end
    assert.truthy(table_row, 'no simclr row in\n' .. table.concat(lines, '\n'))
    assert.truthy(table_row:find(string.format('%.2f%%', row.knn_top1), 1, true))
    assert.truthy(table_row:find(string.format('%+.2f', row.knn_top1 - out.init.knn_top1), 1, true))

    local again, stderr2, status2 = ssl_table('dir=' .. dir .. ' methods=simclr ' .. TINY)
    assert.are.equal(0, status2, stderr2)
    assert.truthy(stderr2:find('simclr done before', 1, true))
    local out2 = cjson.decode(again[#again])
    assert.are.equal(row.knn_top1, out2.rows[1].knn_top1)
    assert.are.equal(row.seconds, out2.rows[1].seconds)   -- a reused row keeps the time it ran in
  end)

  it('report=true prints the table of what has run and runs nothing', function()
    local lines, stderr, status = ssl_table('dir=' .. dir .. ' methods=simclr,npid report=true ' .. TINY)
    assert.are.equal(0, status, stderr)
    local text = table.concat(lines, '\n')
    assert.truthy(text:find('| npid | — | — | — | not run | — |', 1, true), text)
    local out = cjson.decode(lines[#lines])
    assert.are.equal('done', out.rows[1].status)
    assert.are.equal('not run', out.rows[2].status)
    assert.is_nil(io.open(dir .. '/npid/results.json'))
  end)

  it('refuses a folder made with other arguments, naming both', function()
    local _, stderr, status = ssl_table('dir=' .. dir .. ' methods=simclr ' .. TINY .. ' train.seed=3')
    assert.are.equal(2, status)
    assert.truthy(stderr:find('holds a table made with the arguments', 1, true))
    assert.truthy(stderr:find('train.seed=3', 1, true))
  end)

  it('names an unknown method and option', function()
    local _, stderr, status = ssl_table('methods=linear_eval')
    assert.are.equal(2, status)
    assert.truthy(stderr:find('unknown method linear_eval; the methods are swav', 1, true))
    _, stderr, status = ssl_table('epochs=3')
    assert.are.equal(2, status)
    assert.truthy(stderr:find('unknown option epochs', 1, true))
  end)

  it('marks a run that failed and exits with 1', function()
    local bad = dir .. '_bad'
    local lines, stderr, status = ssl_table('dir=' .. bad .. ' methods=simclr ' .. TINY .. ' simclr.temperature=-1')
    os.execute("rm -rf '" .. bad .. "'")
    assert.are.equal(1, status)
    assert.truthy(stderr:find('simclr failed', 1, true))
    assert.truthy(table.concat(lines, '\n'):find('| simclr | — | — | — | failed | — |', 1, true))
  end)
end)
