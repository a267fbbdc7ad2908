-- loop_contract_spec — the fields the C step loop (csrc/loop/loop.c) shares with Lua are
-- written down once, in loop.c's contract table (loop.contract): every task, timing and
-- option field the file names is listed there and every listed field is used; a new Task
-- holds what the contract says Task writes; the trainer's options are the listed ones.
local cr = require 'crescent'
local loop = require 'crescent.engine.loop'
local root = require('crescent.native_files').root

local function read(path)
  local f = assert(io.open(root .. '/' .. path))
  local s = f:read('*a')
  f:close()
  return s
end

local TABLES = { RUN_TASK = 'task', RUN_TIMING = 'timing', RUN_OPTS = 'opts' }

-- The {table .. '.' .. key} that loop.c reads or writes on the task, its timing table and
-- the options, as the source spells them.
local function fields_in_source()
  local src, used = read('csrc/loop/loop.c'), {}
  for slot, rest in src:gmatch('[%w_]+%(L, (RUN_[%u]+), ([^;]-)%)') do
    local t = TABLES[slot]
    if t then
      for key in rest:gmatch('"([%w_]+)"') do used[t .. '.' .. key] = true end
    end
  end
  -- the timing table read from the task at argument 1 (loop.new)
  for key in src:gmatch('lua_getfield%(L, 1, "([%w_]+)"%)') do used['task.' .. key] = true end
  return used
end

local function contract()
  local listed = {}
  for _, f in ipairs(loop.contract) do listed[f.table .. '.' .. f.key] = f end
  return listed
end

describe('the loop/Task contract (loop.contract, csrc/loop/loop.c)', function()
  it('lists every field loop.c names, and only those', function()
    local used, listed = fields_in_source(), contract()
    assert.is_true(used['task.iteration'] and used['timing.data_total'] and used['opts.epochs'])
    for name in pairs(used) do assert.truthy(listed[name], name .. ' is used in loop.c but not in its contract') end
    for name in pairs(listed) do assert.truthy(used[name], name .. ' is in the contract but loop.c does not use it') end
    for _, f in ipairs(loop.contract) do
      assert.is_true(#f.writer > 0 and #f.reader > 0, f.key)
    end
  end)

  it('a new Task holds every field the contract says Task writes', function()
    local model = cr.nn.Linear(2, 2)
    local task = cr.engine.Task { model = model, optimizer = cr.optim.SGD(model:parameters(), { lr = 0.1 }),
                                  loss = function(out) return out:sum() end, train_loader = { iter = function() end } }
    for _, f in ipairs(loop.contract) do
      if f.table == 'task' and f.writer:find('^Task') then
        assert.is_not_nil(task[f.key], 'task.' .. f.key)
      elseif f.table == 'timing' then
        assert.are.equal('number', type(task.timing[f.key]), 'task.timing.' .. f.key)
      end
    end
  end)

  it("the trainer passes the loop exactly the contract's options", function()
    local body = read('lua/crescent/engine/trainer.lua'):match('local function loop_options%(task, nb%)(.-)\nend\n')
    assert.truthy(body, 'trainer.lua: loop_options not found')
    local given = {}
    for key in body:gsub('%-%-[^\n]*', ''):gmatch('([%w_]+) =[^=]') do given[key] = true end
    for _, f in ipairs(loop.contract) do
      if f.table == 'opts' then
        assert.is_true(given[f.key] == true, 'loop_options does not set ' .. f.key)
        given[f.key] = nil
      end
    end
    assert.are.same({}, given)
  end)
end)
