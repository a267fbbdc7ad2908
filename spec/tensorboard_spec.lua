-- tensorboard_spec — TensorBoard event files written in C (csrc/io/tfevents.c) and the
-- metrics writers: CRC-32C against published vectors; files read back by a reader built
-- here (TFRecord frames with both masked CRCs checked by a CRC-32C written in Lua, and the
-- Event / Summary / Value protobuf fields decoded by hand); bad folders and tags; the
-- tensorboard, jsonl and csv hooks on tiny training runs. TensorBoard's own loader reads our
-- file when Python's tensorboard is installed (pending otherwise).
local ffi = require 'ffi'
local bit = require 'bit'
local cjson = require 'cjson'
local cr = H.cr
local nn = cr.nn
local C = require('crescent.ffi').C
local Writer = cr.hooks.tensorboard.Writer

local tmpdir = H.tmpdir('tb')
teardown(tmpdir.remove)
local tmp = tmpdir.dir
local dir_n = 0
local function new_dir()
  dir_n = dir_n + 1
  return tmp .. '/run' .. dir_n
end

local read = H.read_file

-- ---- an independent reader --------------------------------------------------------------
local crc_table = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do
    if bit.band(c, 1) == 1 then c = bit.bxor(bit.rshift(c, 1), 0x82F63B78) else c = bit.rshift(c, 1) end
  end
  crc_table[i] = c
end
local function lua_crc32c(s)
  local c = -1
  for i = 1, #s do
    c = bit.bxor(crc_table[bit.band(bit.bxor(c, s:byte(i)), 0xFF)], bit.rshift(c, 8))
  end
  return bit.tobit(bit.bnot(c))
end
local function masked(s)
  local c = lua_crc32c(s)
  return bit.tobit(bit.bor(bit.rshift(c, 15), bit.lshift(c, 17)) + 0xa282ead8)
end
local function u32le(s, i)
  local a, b, c, d = s:byte(i, i + 3)
  return bit.tobit(a + b * 256 + c * 65536 + d * 16777216)
end

local function le_cast(bytes, ctype)
  local buf = ffi.new('uint8_t[8]')
  ffi.copy(buf, bytes, #bytes)
  return tonumber(ffi.cast(ctype .. '*', buf)[0])
end

-- protobuf fields of a message: list of {field, wire, value}; varints as int64 numbers
local function pb_fields(s)
  local out, i = {}, 1
  local function varint()
    local v, shift = ffi.new('uint64_t', 0), 0
    while true do
      local b = s:byte(i)
      assert(b, 'varint runs past the end')
      i = i + 1
      v = v + bit.lshift(ffi.new('uint64_t', bit.band(b, 0x7F)), shift)
      shift = shift + 7
      if b < 0x80 then break end
      assert(shift < 70, 'varint longer than 10 bytes')
    end
    return v
  end
  while i <= #s do
    local key = tonumber(varint())
    local field, wire = math.floor(key / 8), key % 8
    local v
    if wire == 0 then v = tonumber(ffi.cast('int64_t', varint()))
    elseif wire == 1 then v = le_cast(s:sub(i, i + 7), 'double'); i = i + 8
    elseif wire == 5 then v = le_cast(s:sub(i, i + 3), 'float'); i = i + 4
    elseif wire == 2 then
      local n = tonumber(varint())
      v = s:sub(i, i + n - 1)
      assert(#v == n, 'length-delimited field runs past the end')
      i = i + n
    else error('unexpected wire type ' .. wire) end
    out[#out + 1] = { field = field, wire = wire, value = v }
  end
  return out
end

-- The events of a file: {wall_time, step, file_version, scalars = {{tag, value}}}
local function read_events(path)
  local s, i, events = read(path), 1, {}
  while i <= #s do
    assert(i + 11 <= #s, 'truncated record header')
    local len8 = s:sub(i, i + 7)
    assert.equal(masked(len8), u32le(s, i + 8), 'length CRC')
    local n = le_cast(len8, 'uint64_t')
    local data = s:sub(i + 12, i + 11 + n)
    assert.equal(n, #data, 'truncated record')
    assert.equal(masked(data), u32le(s, i + 12 + n), 'data CRC')
    i = i + 16 + n
    local ev = { scalars = {} }
    for _, f in ipairs(pb_fields(data)) do
      if f.field == 1 then assert.equal(1, f.wire); ev.wall_time = f.value
      elseif f.field == 2 then assert.equal(0, f.wire); ev.step = f.value
      elseif f.field == 3 then assert.equal(2, f.wire); ev.file_version = f.value
      elseif f.field == 5 then
        assert.equal(2, f.wire)
        for _, sv in ipairs(pb_fields(f.value)) do
          assert.equal(1, sv.field)
          local tag, value
          for _, vf in ipairs(pb_fields(sv.value)) do
            if vf.field == 1 then tag = vf.value elseif vf.field == 2 then assert.equal(5, vf.wire); value = vf.value end
          end
          ev.scalars[#ev.scalars + 1] = { tag, value }
        end
      else error('unexpected Event field ' .. f.field) end
    end
    events[#events + 1] = ev
  end
  return events
end

-- tag -> list of {step, value} over a file's scalar events
local function series(path)
  local out = {}
  for k, ev in ipairs(read_events(path)) do
    if k > 1 then
      for _, sv in ipairs(ev.scalars) do
        out[sv[1]] = out[sv[1]] or {}
        table.insert(out[sv[1]], { ev.step, sv[2] })
      end
    end
  end
  return out
end

local function f32(x) return tonumber(ffi.new('float', x)) end

describe('CRC-32C', function()
  it('matches the published vectors', function()
    local function crc(s) return bit.tobit(C.cr_crc32c(s, #s)) end
    assert.equal(bit.tobit(0xE3069283), crc('123456789'))
    assert.equal(bit.tobit(0x8A9136AA), crc(string.rep('\0', 32)))
    assert.equal(bit.tobit(0x62A8AB43), crc(string.rep('\255', 32)))
    local inc = {}
    for k = 0, 31 do inc[#inc + 1] = string.char(k) end
    assert.equal(bit.tobit(0x46DD794E), crc(table.concat(inc)))
    assert.equal(0, crc(''))
    -- the reader's Lua CRC agrees with C
    for _, s in ipairs { '123456789', 'brain.Event:2', string.rep('xyz', 333) } do
      assert.equal(crc(s), lua_crc32c(s))
    end
  end)
end)

describe('the event file writer', function()
  it('writes scalars that read back exactly', function()
    local dir = new_dir()
    local t0 = os.time()
    local w = Writer.open(dir)
    local long_tag = 'long/' .. string.rep('t', 300)   -- a two-byte length varint
    w:add_scalar('loss', 0.625, 10, 1700000000.25)
    w:add_scalar('lr', 0.1, 20, 1700000001.5)
    w:add_scalar('knn/top1', 87.5, 2 ^ 40)
    w:add_scalar('neg', -3.25, -1)
    w:add_scalar(long_tag, 1e30, 0)
    w:close()
    w:close()   -- twice is fine
    assert.truthy(w.path:match('^' .. dir:gsub('%p', '%%%0') .. '/events%.out%.tfevents%.%d+%..+$'), w.path)
    local secs = tonumber(w.path:match('tfevents%.(%d+)%.'))
    assert.is_true(secs >= t0 and secs <= os.time() + 1)
    local ev = read_events(w.path)
    assert.equal(6, #ev)
    assert.equal('brain.Event:2', ev[1].file_version)
    assert.is_nil(ev[1].step)
    assert.equal(0, #ev[1].scalars)
    assert.is_true(math.abs(ev[1].wall_time - os.time()) < 5)
    local want = { { 'loss', 0.625, 10 }, { 'lr', f32(0.1), 20 }, { 'knn/top1', 87.5, 2 ^ 40 }, { 'neg', -3.25, -1 },
                   { long_tag, f32(1e30), 0 } }
    for k, x in ipairs(want) do
      local e = ev[k + 1]
      assert.is_nil(e.file_version)
      assert.equal(1, #e.scalars)
      assert.equal(x[1], e.scalars[1][1])
      assert.equal(x[2], e.scalars[1][2])
      assert.equal(x[3], e.step)
    end
    assert.equal(1700000000.25, ev[2].wall_time)
    assert.equal(1700000001.5, ev[3].wall_time)
    assert.is_true(math.abs(ev[4].wall_time - os.time()) < 5)   -- default: now
  end)

  it('buffers until flush, and never overwrites another file', function()
    local dir = new_dir()
    local a, b = Writer.open(dir), Writer.open(dir)
    assert.are_not.equal(a.path, b.path)
    local header = #read(a.path)   -- the file_version record is written at open
    a:add_scalar('x', 1, 1)
    assert.equal(header, #read(a.path))
    a:flush()
    assert.is_true(#read(a.path) > header)
    -- more than the buffer holds goes out on its own
    for k = 1, 3000 do b:add_scalar('some/longer/tag/name', k, k) end
    assert.is_true(#read(b.path) > 65536 / 2)
    b:close()
    a:close()
    local s = series(b.path)['some/longer/tag/name']
    assert.equal(3000, #s)
    assert.same({ 3000, 3000 }, s[3000])
    assert.same({ { 1, 1 } }, series(a.path).x)
  end)

  it('names a bad folder, tag or closed writer', function()
    local file = tmp .. '/a_file'
    assert(io.open(file, 'w')):close()
    H.assert_error(function() Writer.open(file .. '/sub') end, "cannot create an event file in '" .. file .. "/sub'")
    H.assert_error(function() Writer.open(file) end, "'" .. file .. "'", 'must be a folder')
    H.assert_error(function() Writer.open('') end, 'dir must be a folder name')
    -- C alone does not create folders: a missing one is named, with the fix
    local box = ffi.new('cr_tb_writer*[1]')
    assert.are_not.equal(0, C.cr_tb_open(box, tmp .. '/missing'))
    local msg = ffi.string(C.cr_last_error())
    assert.truthy(msg:find(tmp .. "/missing'", 1, true) and msg:find('create the folder first', 1, true), msg)
    local w = Writer.open(new_dir())
    H.assert_error(function() w:add_scalar('', 1, 1) end, 'the tag is empty')
    H.assert_error(function() w:add_scalar('bad\255tag', 1, 1) end, 'not valid UTF-8')
    H.assert_error(function() w:add_scalar(string.rep('a', 2000), 1, 1) end, 'the limit is 1024')
    H.assert_error(function() w:add_scalar('x', 'one', 1) end, "value of 'x' must be a number")
    H.assert_error(function() w:add_scalar('x', 1, 1.5) end, "step of 'x' must be an integer")
    w:close()
    H.assert_error(function() w:add_scalar('x', 1, 1) end, 'closed writer')
    assert.equal(1, #read_events(w.path))
  end)
end)

-- ---- the hooks ----------------------------------------------------------------------------
local function batches(n, b)
  local list = {}
  cr.manual_seed(1)
  for i = 1, n do list[i] = { input = cr.randn(b, 3), target = cr.randint(0, 2, { b }) } end
  return list
end
local list_loader = H.list_loader
local function linear_task(args)
  cr.manual_seed(7)
  local model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
  local opt = cr.optim.SGD(model:named_parameters(), { lr = 0.1, momentum = 0.9 })
  return cr.engine.Task {
    model = model, optimizer = opt, epochs = args.epochs or 2, test_every = 1,
    loss = args.loss or function(out, batch) return cr.cross_entropy(out, batch.target) end,
    train_loader = list_loader(batches(3, 2)), test_loader = list_loader(batches(1, 2)),
  }
end

describe('the tensorboard and jsonl hooks', function()
  it('log train scalars every N steps and at epoch ends, and test figures after test phases', function()
    local dir = new_dir()
    local t = linear_task {}
    t:add_hook(cr.hooks.timer())
    t:add_hook(cr.hooks.schedule())
    t:add_hook(cr.hooks.eval { topk = { 1 } })
    local tb = t:add_hook(cr.hooks.tensorboard { dir = dir, every = 2 })
    t:add_hook(cr.hooks.jsonl { path = dir .. '/logs/metrics.jsonl', every = 2 })
    cr.train(t)
    assert.is_nil(tb.writer)   -- closed at the end
    local s = series(tb.path)
    -- 3 steps per epoch, every 2: iterations 2, 3 | 4, 6
    for _, tag in ipairs { 'loss', 'time', 'data_time', 'img_per_s', 'lr' } do
      assert.truthy(s[tag], tag)
      local steps = {}
      for k, x in ipairs(s[tag]) do steps[k] = x[1] end
      assert.same({ 2, 3, 4, 6 }, steps, tag)
    end
    assert.same({ 3, 6 }, { s['test/top1'][1][1], s['test/top1'][2][1] })
    assert.same({ 3, 6 }, { s['test/loss'][1][1], s['test/loss'][2][1] })
    assert.equal(f32(t.storage:latest('test/top1')), s['test/top1'][2][2])
    assert.equal(f32(t.storage:smoothed('loss')), s.loss[4][2])
    assert.equal(f32(0.1), s.lr[1][2])

    local text = read(dir .. '/logs/metrics.jsonl')
    assert.truthy(text:find('"test/top1":', 1, true), text)   -- no '\/' escapes
    local lines = {}
    for l in text:gmatch('[^\n]+') do lines[#lines + 1] = cjson.decode(l) end
    assert.equal(6, #lines)
    local shape = {}
    for k, l in ipairs(lines) do shape[k] = l.phase .. ':' .. l.iteration .. ':' .. l.epoch end
    assert.same({ 'train:2:0', 'train:3:0', 'test:3:0', 'train:4:1', 'train:6:1', 'test:6:1' }, shape)
    assert.is_nil(lines[3].loss)
    assert.equal(t.storage:latest('test/top1'), lines[6]['test/top1'])
    assert.is_nil(lines[5]['test/top1'])
    for _, k in ipairs { 1, 2, 4, 5 } do
      assert.equal(f32(lines[k].loss), s.loss[k < 3 and k or k - 1][2])
      assert.truthy(lines[k].img_per_s and lines[k].data_time and lines[k].lr)
    end
  end)

  it("write the task's config once, as text for TensorBoard's text plugin", function()
    local dir = new_dir()
    local t = linear_task {}
    t.config = { optim = { lr = 0.125 }, run = { name = 'tb_text' } }
    local tb = t:add_hook(cr.hooks.tensorboard { dir = dir, every = 2 })
    cr.train(t)
    local f = assert(io.open(tb.path, 'rb'))
    local bytes = f:read('*a')
    f:close()
    local _, n = bytes:gsub('config', '')
    assert.are.equal(1, n)
    assert.truthy(bytes:find('text', 1, true))
    assert.truthy(bytes:find('lr = 0.125', 1, true), 'the dumped config')
  end)

  it('refuse hyper-parameters that are not numbers, strings or booleans, and unknown session statuses', function()
    local w = Writer.open(new_dir())
    H.assert_error(function() w:add_hparams({ crops = { 2, 6 } }) end,
      "tensorboard: hyper-parameter 'crops' must be a number, string or boolean under a string name, got table")
    H.assert_error(function() w:add_hparams(5) end, 'tensorboard: add_hparams takes a table of name = value, got number')
    H.assert_error(function() w:end_session('done') end,
      "tensorboard: end_session's status is 'success', 'failure' or 'running', got done")
    w:add_hparams({})
    w:close()
    H.assert_error(function() w:add_hparams({ lr = 1 }) end, 'tensorboard: add_hparams on a closed writer')
  end)

  it('append to metrics.jsonl across runs, and write NaN as null', function()
    local dir = new_dir()
    local path = dir .. '/metrics.jsonl'
    for run = 1, 2 do
      local t = linear_task { epochs = 1, loss = function(out, batch)
        local l = cr.cross_entropy(out, batch.target)
        if run == 2 then l = l * (0 / 0) end
        return l
      end }
      t:add_hook(cr.hooks.jsonl { path = path, every = 3 })
      cr.train(t)
    end
    local lines = {}
    for l in read(path):gmatch('[^\n]+') do lines[#lines + 1] = l end
    assert.equal(2, #lines)   -- one train line per run (no eval hook: the test phase puts nothing)
    assert.is_number(cjson.decode(lines[1]).loss)
    assert.truthy(lines[2]:find('"loss":null', 1, true), lines[2])
    assert.equal(cjson.null, cjson.decode(lines[2]).loss)
  end)

  it('close the file on an error, with what was logged on disk', function()
    local dir = new_dir()
    local t = linear_task {}
    t:add_hook { after_step = function(_, task) if task.iteration == 3 then error('boom', 0) end end }
    local tb = t:add_hook(cr.hooks.tensorboard { dir = dir, every = 1 })
    local js = t:add_hook(cr.hooks.jsonl { path = dir .. '/m.jsonl', every = 1 })
    H.assert_error(function() cr.train(t) end, 'boom')
    assert.is_nil(tb.writer)
    assert.is_nil(js.file)
    local steps = {}
    for _, x in ipairs(series(tb.path).loss) do steps[#steps + 1] = x[1] end
    assert.same({ 1, 2 }, steps)
    local _, n = read(dir .. '/m.jsonl'):gsub('\n', '')
    assert.equal(2, n)
  end)

  it('name bad options and unusable paths', function()
    H.assert_error(function() cr.hooks.tensorboard {} end, 'dir must be a folder name')
    H.assert_error(function() cr.hooks.tensorboard { dir = 'x', every = 0 } end, 'every must be a positive integer')
    H.assert_error(function() cr.hooks.tensorboard { dir = 'x', evry = 2 } end, "unknown option 'evry'")
    H.assert_error(function() cr.hooks.jsonl { path = 'runs/' } end, 'path must be a file name')
    local file = tmp .. '/plain_file'
    assert(io.open(file, 'w')):close()
    local t = linear_task {}
    t:add_hook(cr.hooks.tensorboard { dir = file .. '/tb' })
    H.assert_error(function() cr.train(t) end, "tensorboard: cannot create an event file in '" .. file .. "/tb'")
    t = linear_task {}
    t:add_hook(cr.hooks.jsonl { path = file .. '/m.jsonl' })
    H.assert_error(function() cr.train(t) end, "jsonl: cannot open '" .. file .. "/m.jsonl' for appending")
  end)
end)

describe('the csv hook (metrics.csv, log.csv=true)', function()
  local function rows_of(path)
    local out = {}
    for l in read(path):gmatch('[^\n]+') do
      local row = {}
      for field in (l .. ','):gmatch('([^,]*),') do row[#row + 1] = field end
      out[#out + 1] = row
    end
    return out
  end

  it("holds metrics.jsonl's rows as one wide table; a new scalar adds a column, a resumed run goes on", function()
    local dir = new_dir()
    local t = linear_task {}
    t:add_hook(cr.hooks.timer())
    t:add_hook(cr.hooks.eval { topk = { 1 } })
    t:add_hook(cr.hooks.jsonl { path = dir .. '/metrics.jsonl', every = 2 })
    t:add_hook(cr.hooks.csv { path = dir .. '/metrics.csv', every = 2 })
    cr.train(t)
    local rows = rows_of(dir .. '/metrics.csv')
    local header = rows[1]
    assert.same({ 'iteration', 'epoch', 'phase' }, { header[1], header[2], header[3] })
    local col = {}
    for i, name in ipairs(header) do col[name] = i end
    assert.truthy(col.loss and col['test/top1'] and col.img_per_s, table.concat(header, ','))
    local jsonl = {}
    for l in read(dir .. '/metrics.jsonl'):gmatch('[^\n]+') do jsonl[#jsonl + 1] = cjson.decode(l) end
    assert.equal(#jsonl, #rows - 1)   -- the same rows as metrics.jsonl, in its order
    for k, line in ipairs(jsonl) do
      local row = rows[k + 1]
      assert.equal(#header, #row)
      assert.same({ tostring(line.iteration), tostring(line.epoch), line.phase }, { row[1], row[2], row[3] })
      for name, i in pairs(col) do
        if i > 3 then
          if line[name] == nil then assert.equal('', row[i], name)
          else assert.is_true(math.abs(tonumber(row[i]) - line[name]) <= 1e-8 * math.max(1, math.abs(line[name])),
            name) end
        end
      end
    end
    -- a run of the same file again (a resume): the rows so far stay, a NaN loss reads nan
    local again = linear_task { epochs = 1, loss = function(out, batch) return cr.cross_entropy(out, batch.target) *
      (0 / 0) end }
    again:add_hook(cr.hooks.csv { path = dir .. '/metrics.csv', every = 3 })
    cr.train(again)
    local after = rows_of(dir .. '/metrics.csv')
    assert.equal(#rows + 1, #after)
    for k = 2, #rows do assert.same(rows[k], after[k]) end
    assert.equal('nan', after[#after][col.loss])
  end)

  it('refuses a file it did not write, and names bad options', function()
    local dir = new_dir()
    os.execute("mkdir -p '" .. dir .. "'")
    local f = assert(io.open(dir .. '/metrics.csv', 'w'))
    f:write('name,value\nx,1\n')
    f:close()
    local t = linear_task {}
    t:add_hook(cr.hooks.csv { path = dir .. '/metrics.csv' })
    H.assert_error(function() cr.train(t) end, "csv: '" .. dir .. "/metrics.csv' is not a metrics.csv this hook wrote")
    H.assert_error(function() cr.hooks.csv { path = 'runs/' } end, 'path must be a file name')
    H.assert_error(function() cr.hooks.csv { path = 'm.csv', every = 0 } end, 'every must be a positive integer')
  end)

  it('is written by a recipe with log.csv=true', function()
    local dir = new_dir()
    local out, code = H.shell('luajit recipes/supervised.lua train.epochs=1 data.limit=256 model.width=4 ' ..
      'train.log_every=1 log.csv=true checkpoint.save=false run.dir=' .. dir .. ' run.name=csv')
    assert.equal(0, code, out)
    local rows = rows_of(dir .. '/csv/metrics.csv')
    assert.equal('iteration', rows[1][1])
    assert.is_true(#rows >= 3, read(dir .. '/csv/metrics.csv'))
  end)
end)

describe("TensorBoard's own reader", function()
  local python = os.getenv('CRESCENT_PYTHON') or 'python3'
  -- false (and the test pending) where Python's tensorboard is absent
  local function have_tensorboard()
    if os.execute(python .. ' -c "import tensorboard" >/dev/null 2>&1') == 0 then return true end
    pending('Python tensorboard absent (pip install tensorboard; CRESCENT_PYTHON picks the python)')
    return false
  end
  -- runs the Python lines with args; the script must exit 0 (its output is the message)
  local function python_passes(name, lines, args)
    local script = tmp .. '/' .. name .. '.py'
    local f = assert(io.open(script, 'w'))
    f:write(table.concat(lines, '\n'))
    f:close()
    local pipe = io.popen(python .. ' ' .. script .. ' ' .. args .. ' 2>&1; echo "status=$?"')
    local out = pipe:read('*a')
    pipe:close()
    assert(out:find('status=0', 1, true), out)
  end

  it('reads our file: scalars, and text for the text plugin', function()
    if not have_tensorboard() then return end
    local w = Writer.open(new_dir())
    w:add_scalar('loss', 0.5, 7)
    w:add_scalar('test/top1', 91.25, 8)
    w:add_text('config', '    optim = {lr = 0.1} -- ü', 0)
    w:close()
    python_passes('read_events', {
      'import sys',
      'from tensorboard.backend.event_processing import event_file_loader',
      'got = []',
      'for e in event_file_loader.LegacyEventFileLoader(sys.argv[1]).Load():',
      '    if e.file_version: got.append(("version", e.file_version))',
      '    for v in e.summary.value:',
      '        if v.metadata.plugin_data.plugin_name == "text":',
      '            got.append((v.tag, e.step, v.tensor.dtype, v.tensor.string_val[0].decode()))',
      '        else: got.append((v.tag, e.step, v.simple_value))',
      'want = [("version", "brain.Event:2"), ("loss", 7, 0.5), ("test/top1", 8, 91.25),',
      '        ("config", 0, 7, "    optim = {lr = 0.1} -- \\u00fc")]',
      'assert got == want, got',
      'print("read", len(got))',
    }, w.path)
  end)

  it("reads our hyper-parameters with the HParams plugin's own parsers: a writer's, and a run's from its config", function()
    if not have_tensorboard() then return end
    local w = Writer.open(new_dir())
    w:add_hparams({ ['optim.lr'] = 0.1, ['model.arch'] = 'resnet18', ['train.amp'] = false, ['crops.num'] = '[2,6]' },
      1700000000)
    w:end_session('failure')
    w:close()
    local t = linear_task {}
    t.config = { optim = { lr = 0.125, nesterov = true }, crops = { size = { 28, 14 } }, run = { name = 'hp' } }
    local tb = t:add_hook(cr.hooks.tensorboard { dir = new_dir(), every = 2 })
    cr.train(t)
    python_passes('read_hparams', {
      'import sys',
      'from tensorboard.backend.event_processing import event_file_loader',
      'from tensorboard.plugins.hparams import metadata',
      'def sessions(path):',
      '    start, end = None, None',
      '    for e in event_file_loader.LegacyEventFileLoader(path).Load():',
      '        for v in e.summary.value:',
      '            if v.metadata.plugin_data.plugin_name != "hparams": continue',
      '            assert v.tensor.dtype == 1 and len(v.tensor.float_val) == 0, v.tensor',
      '            content = v.metadata.plugin_data.content',
      '            if v.tag == metadata.SESSION_START_INFO_TAG:',
      '                start = metadata.parse_session_start_info_plugin_data(content)',
      '            elif v.tag == metadata.SESSION_END_INFO_TAG:',
      '                end = metadata.parse_session_end_info_plugin_data(content)',
      '    return start, end',
      'start, end = sessions(sys.argv[1])',
      'hp = {k: v.WhichOneof("kind") + "=" + str(getattr(v, v.WhichOneof("kind"))) for k, v in start.hparams.items()}',
      'assert hp == {"optim.lr": "number_value=0.1", "model.arch": "string_value=resnet18",',
      '              "train.amp": "bool_value=False", "crops.num": "string_value=[2,6]"}, hp',
      'assert start.start_time_secs == 1700000000, start',
      'assert end.status == 2 and end.end_time_secs > 1700000000, end',
      'start, end = sessions(sys.argv[2])',
      'hp = {k: getattr(v, v.WhichOneof("kind")) for k, v in start.hparams.items()}',
      'assert hp == {"optim.lr": 0.125, "optim.nesterov": True, "crops.size": "[28,14]", "run.name": "hp"}, hp',
      'assert end.status == 1, end',
      'print("read hparams")',
    }, w.path .. ' ' .. tb.path)
  end)
end)
