-- io_spec — safetensors files (cr.save, cr.load, cr.io.load_into): round trips of every
-- dtype, views, 0-dim and empty tensors; the exact bytes of a tiny file against bytes
-- built here by hand; every validation error on hand-made files; fuzzing (every
-- truncation, random byte flips: errors, never a crash); atomic writes; loading into
-- models (strict / non-strict, prefixes, skip patterns, shape mismatches, dtype casts);
-- a resnet18 saved and loaded computes the same outputs. Files written by Python's
-- safetensors are read when that module is installed (pending otherwise).
local ffi = require 'ffi'
local cr = H.cr
local nn = cr.nn

local tmpdir = H.tmpdir('io')
teardown(tmpdir.remove)
local tmp = tmpdir.dir
local path = tmpdir.path

local write = tmpdir.write
local read = H.read_file
local function u64le(n)
  local b = {}
  for i = 1, 8 do
    b[i] = n % 256
    n = math.floor(n / 256)
  end
  return string.char(unpack(b))
end
local function f32_bytes(...)
  local vals = { ... }
  local a = ffi.new('float[?]', #vals, vals)
  return ffi.string(a, 4 * #vals)
end
-- A file from a header text and data bytes (header length = #header unless given).
local function st_file(name, header, data, len)
  return write(name, u64le(len or #header) .. header .. (data or ''))
end
-- One tensor entry of a header.
local function entry(name, dtype, shape, b, e)
  return string.format('"%s":{"dtype":"%s","shape":[%s],"data_offsets":[%d,%d]}', name, dtype,
    table.concat(shape, ','), b, e)
end
local SIZES = { f32 = 4, f64 = 8, f16 = 2, bf16 = 2, i64 = 8, i32 = 4, u8 = 1, bool = 1 }
local function raw(t)
  t = t:contiguous()
  return ffi.string(t:data_ptr(), t:numel() * SIZES[t.dtype])
end
local function assert_same_tensor(got, want, what)
  assert(cr.is_tensor(got), (what or '') .. ': not loaded')
  assert.equal(want.dtype, got.dtype, what)
  assert.same(want.shape, got.shape, what)
  assert.equal(raw(want), raw(got), what)
end
local keys = require('crescent.util').sorted_keys
local function ls(dir)
  local p = io.popen('ls -A ' .. dir)
  local out = {}
  for line in p:lines() do out[#out + 1] = line end
  p:close()
  table.sort(out)
  return out
end

describe('cr.save / cr.load', function()
  it('round-trips every dtype exactly, with metadata', function()
    local tensors = {
      f32 = cr.tensor({ { 1.5, -2, 0 }, { 1e-30, 3e38, -0.0 } }),
      f64 = cr.tensor({ math.pi, -1e300, 2 ^ -1070 }, { dtype = 'f64' }),
      f16 = cr.tensor({ 0.5, -65504, 2 ^ -14, 1 }, { dtype = 'f16' }),
      bf16 = cr.tensor({ 1, -3.5, 1e38 }, { dtype = 'bf16' }),
      i64 = cr.tensor({ -2 ^ 53, 2 ^ 53, 0, -1 }, { dtype = 'i64' }),
      i32 = cr.tensor({ { -2147483648, 2147483647 } }, { dtype = 'i32' }),
      u8 = cr.tensor({ 0, 1, 254, 255 }, { dtype = 'u8' }),
      bool = cr.tensor({ true, false, true }),
    }
    local p = path('all.safetensors')
    assert.equal(p, cr.save(p, tensors, { epoch = '3', note = 'ünïcode "quoted"\n', empty = '' }))
    local got, meta = cr.load(p)
    assert.same(keys(tensors), keys(got))
    for name, t in pairs(tensors) do assert_same_tensor(got[name], t, name) end
    assert.same({ epoch = '3', note = 'ünïcode "quoted"\n', empty = '' }, meta)
    -- the loaded tensors are fresh storage
    got.f32:fill_(7)
    assert.equal(1.5, cr.load(p).f32:totable()[1][1])
  end)

  it('writes views from contiguous copies; 0-dim and empty tensors round-trip', function()
    local base = cr.arange(24, { dtype = 'f32' }):view(2, 3, 4)
    local tensors = {
      transposed = base:transpose(0, 2),
      stepped = base:slice(2, 0, 4, 2),
      narrowed = base:narrow(0, 1, 1), -- contiguous, with a storage offset
      selected = base:select(1, 2),
      expanded = cr.tensor({ 1, 2 }):view(2, 1):expand(2, 3),
      scalar = cr.tensor(42, { dtype = 'i64' }),
      empty = cr.zeros({ 0 }),
      empty3 = cr.zeros({ 2, 0, 3 }, { dtype = 'f64' }),
    }
    assert.is_false(tensors.transposed:is_contiguous())
    local p = cr.save(path('views.safetensors'), tensors)
    local got = cr.load(p)
    for name, t in pairs(tensors) do
      assert_same_tensor(got[name], t, name)
      if t:numel() > 0 then assert.is_true(got[name]:is_contiguous(), name) end
    end
    assert.same({}, got.scalar.shape)
    assert.equal(42, got.scalar:item())
    assert.same({ 2, 0, 3 }, got.empty3.shape)
    -- only empty tensors: the data section is empty
    local e = cr.save(path('only_empty.safetensors'), { a = cr.zeros({ 0, 5 }) })
    assert.same({ 0, 5 }, cr.load(e).a.shape)
    local none = cr.save(path('none.safetensors'), {})
    assert.same({}, (cr.load(none)))
  end)

  it('lays the file out exactly: length, padding, sorted names, offsets, data', function()
    local tensors = { b = cr.tensor({ 1, 2 }, { dtype = 'f32' }), a = cr.tensor({ 1, 2, 3 }, { dtype = 'u8' }) }
    local p = cr.save(path('tiny.safetensors'), tensors, { k = 'v' })
    local header = '{"__metadata__":{"k":"v"},'
      .. '"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},'
      .. '"b":{"dtype":"F32","shape":[2],"data_offsets":[3,11]}}'
    while (8 + #header) % 8 ~= 0 do header = header .. ' ' end
    local want = u64le(#header) .. header .. string.char(1, 2, 3) .. f32_bytes(1, 2)
    assert.equal(want, read(p))
    assert.equal(0, (8 + #header) % 8)
    -- the same tensors given in another order (a list of pairs) give the same bytes
    local q = cr.save(path('tiny2.safetensors'), { { 'b', tensors.b }, { 'a', tensors.a } }, { k = 'v' })
    assert.equal(want, read(q))
    -- no metadata: no "__metadata__" key; 0-dim shape is []
    local r = cr.save(path('tiny3.safetensors'), { s = cr.tensor(true) })
    local h3 = '{"s":{"dtype":"BOOL","shape":[],"data_offsets":[0,1]}}'
    while (8 + #h3) % 8 ~= 0 do h3 = h3 .. ' ' end
    assert.equal(u64le(#h3) .. h3 .. string.char(1), read(r))
  end)

  it('escapes names and metadata as JSON and reads escapes back', function()
    local name = 'tab\there "q" back\\slash \1 é'
    local p = cr.save(path('esc.safetensors'), { [name] = cr.ones({ 1 }) }, { ['k\n'] = 'v/\2' })
    local s = read(p)
    assert.truthy(s:find('"tab\\there \\"q\\" back\\\\slash \\u0001 é"', 1, true))
    local got, meta = cr.load(p)
    assert.same({ name }, keys(got))
    assert.same({ ['k\n'] = 'v/\2' }, meta)
    -- \u escapes, surrogate pairs and \/ written by other encoders
    local h = '{"__metadata__":{"x":"\\u00e9\\ud83d\\ude00\\/"},' .. entry('w\\u0041', 'U8', { 1 }, 0, 1) .. '}'
    local got2, meta2 = cr.load(st_file('esc2.safetensors', h, '\7'))
    assert.same({ 'wA' }, keys(got2))
    assert.same({ x = 'é😀/' }, meta2)
  end)

  it('refuses bad arguments with messages that say what to pass', function()
    local t = cr.ones({ 2 })
    local p = path('bad_args.safetensors')
    H.assert_error(function() cr.save(nil, { a = t }) end, 'save: path must be a file name')
    H.assert_error(function() cr.save(p, 5) end, 'save: tensors must be a table')
    H.assert_error(function() cr.save(p, { a = 3 }) end, "save: 'a' is a number, expected a tensor")
    H.assert_error(function() cr.save(p, { [1] = t }) end, 'entry 1 of the list must be a pair {name, tensor}')
    H.assert_error(function() cr.save(p, { { 'a', t }, b = t }) end, "mixes a list of {name, tensor} pairs with the key 'b'")
    H.assert_error(function() cr.save(p, { { 'a', t }, { 'a', t } }) end, "two tensors are named 'a'")
    H.assert_error(function() cr.save(p, { __metadata__ = t }) end, "'__metadata__' is reserved")
    H.assert_error(function() cr.save(p, { ['\255'] = t }) end, 'is not valid UTF-8')
    H.assert_error(function() cr.save(p, { a = t }, { epoch = 3 }) end,
      "save: metadata 'epoch' is a number; the format stores only strings")
    H.assert_error(function() cr.save(p, { a = t }, { [1] = 'x' }) end, 'metadata keys must be strings')
    H.assert_error(function() cr.save(p, { a = t }, 'x') end, 'metadata must be a table string -> string')
    H.assert_error(function() cr.save(p, { a = t }, { k = 'a\0b' }) end, 'NUL')
    H.assert_error(function() cr.save(tmp .. '/no/such/dir/x.safetensors', { a = t }) end,
      "cannot create '" .. tmp .. '/no/such/dir/x.safetensors.tmp.', 'No such file or directory')
    H.assert_error(function() cr.load(path('absent.safetensors')) end, 'absent.safetensors', 'cannot open')
    H.assert_error(function() cr.load(tmp) end, 'a directory')
    H.assert_error(function() cr.load(7) end, 'load: path must be a file name')
    -- errors point at the caller's line
    local ok, err = pcall(cr.save, p, { a = 3 })
    assert.is_false(ok)
    assert.falsy(tostring(err):find('lua/crescent/', 1, true))
  end)

  it('accepts a module: its state_dict', function()
    local m = nn.Linear(3, 2)
    local got = cr.load(cr.save(path('linear.safetensors'), m))
    assert.same({ 'bias', 'weight' }, keys(got))
    assert_same_tensor(got.weight, m.weight:detach())
  end)

  it('is reachable as cr.io.save / cr.io.load', function()
    assert.equal(cr.io.save, cr.save)
    assert.equal(cr.io.load, cr.load)
  end)
end)

describe('the safetensors reader refuses malformed files', function()
  local function refuses(name, header, data, frags, len)
    local p = st_file(name, header, data, len)
    H.assert_error(function() cr.load(p) end, "load: '" .. p .. "'", unpack(frags))
  end
  local F32x2 = f32_bytes(1, 2)

  it('checks the header length', function()
    local p = write('short.safetensors', 'abc')
    H.assert_error(function() cr.load(p) end, p, '3 bytes, too short')
    refuses('absurd.safetensors', '{}', '', { 'absurd header length 200000000' }, 200000000)
    refuses('long.safetensors', '{}', '', { 'header length is 1000 bytes but the file has only 2' }, 1000)
    refuses('huge.safetensors', '{}', '', { 'absurd header length' }, 2 ^ 63)
  end)

  it('checks that the header is a JSON object', function()
    refuses('json1.safetensors', '{"a":', '', { 'the header is not valid JSON' })
    refuses('json2.safetensors', '{"a" {}}', '', { 'not valid JSON', "expected ':'" })
    refuses('json3.safetensors', '[1, 2]', '', { 'the header is not a JSON object (it starts with an array)' })
    refuses('json4.safetensors', '', '', { 'not a JSON object' })
    refuses('json5.safetensors', '{} x', '', { "unexpected bytes after the header's JSON object" })
    refuses('json6.safetensors', '{}\0', '', { 'unexpected bytes after' })
    refuses('json7.safetensors', '{"a\1":{}}', '', { 'raw control character' })
    refuses('json8.safetensors', '{"\255":{}}', '', { 'not valid UTF-8' })
    refuses('json9.safetensors', '{"\\ud800":{}}', '', { 'surrogate' })
    refuses('json10.safetensors', '{"\\q":{}}', '', { 'unknown escape' })
    refuses('json11.safetensors', '{"a":{"dtype":"F32","shape":[01],"data_offsets":[0,4]}}', '', { 'not valid JSON' })
    refuses('json12.safetensors', '{' .. entry('a', 'F32', { 2 }, 0, 8) .. ',}', F32x2, { 'not valid JSON' })
  end)

  it('checks dtypes, naming the tensor', function()
    refuses('dt1.safetensors', '{' .. entry('w', 'X32', { 2 }, 0, 8) .. '}', F32x2, { "tensor 'w'", "unknown dtype 'X32'" })
    refuses('dt2.safetensors', '{' .. entry('w', 'I16', { 4 }, 0, 8) .. '}', F32x2,
      { "tensor 'w' has dtype I16, which crescent does not have" })
    refuses('dt3.safetensors', '{"w":{"dtype":4,"shape":[2],"data_offsets":[0,8]}}', F32x2,
      { "tensor 'w': dtype must be a string, got a number" })
  end)

  it('checks the keys of each entry', function()
    refuses('key1.safetensors', '{"w":{"shape":[2],"data_offsets":[0,8]}}', F32x2, { "tensor 'w' has no 'dtype'" })
    refuses('key2.safetensors', '{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}}', F32x2,
      { "tensor 'w': unknown key 'x'" })
    refuses('key3.safetensors', '{"w":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F32x2,
      { "key 'dtype' appears twice" })
    refuses('key4.safetensors', '{"w":[1]}', F32x2, { "tensor 'w': expected an object {dtype, shape, data_offsets}" })
    refuses('key5.safetensors', '{"__metadata__":{"k":1},' .. entry('w', 'F32', { 2 }, 0, 8) .. '}', F32x2,
      { "__metadata__: the value of 'k' must be a string", 'got a number' })
    refuses('key6.safetensors', '{"__metadata__":{},"__metadata__":{}}', '', { "'__metadata__' twice" })
    refuses('key7.safetensors', '{"__metadata__":{"k":"a","k":"b"}}', '', { "has the key 'k' twice" })
    refuses('key8.safetensors', '{"__metadata__":[]}', '', { '__metadata__ must be an object of strings' })
  end)

  it('checks shapes and offsets are integer arrays', function()
    local function bad(name, shape, offsets, frags)
      refuses(name, '{"w":{"dtype":"F32","shape":' .. shape .. ',"data_offsets":' .. offsets .. '}}', F32x2, frags)
    end
    bad('sh1.safetensors', '"2"', '[0,8]', { "tensor 'w': shape must be an array of integers, got a string" })
    bad('sh2.safetensors', '[1.5]', '[0,8]', { "tensor 'w': shape holds 1.5; it must hold non-negative integers" })
    bad('sh3.safetensors', '[-2]', '[0,8]', { 'shape holds -2' })
    bad('sh4.safetensors', '[2e0]', '[0,8]', { 'shape holds 2e0' })
    bad('sh5.safetensors', '[null]', '[0,8]', { 'shape must hold integers, got null' })
    bad('sh6.safetensors', '[1,1,1,1,1,1,1,1,2]', '[0,8]', { 'shape has more than 8 entries' })
    bad('sh7.safetensors', '[99999999999999999999]', '[0,8]', { 'out of range' })
    bad('sh8.safetensors', '[4611686018427387904,2]', '[0,8]', { 'absurd' })
    bad('of1.safetensors', '[2]', '[0]', { "tensor 'w': data_offsets has 1 entries; it must be [begin, end]" })
    bad('of2.safetensors', '[2]', '[0,8,8]', { 'data_offsets has more than 2 entries' })
    bad('of3.safetensors', '[2]', '[0,"8"]', { 'data_offsets must hold integers, got a string' })
    bad('of4.safetensors', '[2]', '{}', { 'data_offsets must be an array of integers, got an object' })
    bad('of5.safetensors', '[2]', '[8,0]', { 'data_offsets [8, 0] end before they begin' })
    bad('of6.safetensors', '[3]', '[0,8]', { 'data_offsets [0, 8] span 8 bytes, but shape [3] of F32 needs 12' })
    bad('of7.safetensors', '[2]', '[0,99999999999999999999]', { 'out of range' })
  end)

  it('checks that the offsets tile the data section', function()
    local function two(a, b)
      return '{' .. entry('a', 'F32', { 2 }, a, a + 8) .. ',' .. entry('b', 'F32', { 2 }, b, b + 8) .. '}'
    end
    refuses('tile1.safetensors', two(0, 4), f32_bytes(1, 2, 3),
      { "the data of tensor 'b' [4, 12) overlaps that of 'a' [0, 8)" })
    refuses('tile2.safetensors', two(0, 12), f32_bytes(1, 2, 3, 4, 5),
      { 'data bytes [8, 12) belong to no tensor', "before tensor 'b'" })
    refuses('tile3.safetensors', two(4, 12), f32_bytes(1, 2, 3, 4, 5), { 'data bytes [0, 4) belong to no tensor' })
    refuses('tile4.safetensors', two(0, 8), f32_bytes(1, 2, 3),
      { "tensor 'b' needs data bytes [8, 16)", 'only 12 bytes', 'truncated' })
    refuses('tile5.safetensors', two(0, 8), f32_bytes(1, 2, 3, 4, 5), { '4 bytes of trailing garbage' })
    refuses('tile6.safetensors', '{}', 'x', { '1 bytes of trailing garbage' })
    refuses('tile7.safetensors', two(0, 0), f32_bytes(1, 2), { 'overlaps' })
  end)

  it('refuses duplicate names and BOOL bytes other than 0 and 1', function()
    refuses('dup.safetensors', '{' .. entry('a', 'U8', { 1 }, 0, 1) .. ',' .. entry('a', 'U8', { 1 }, 1, 2) .. '}',
      '\1\2', { "the header names tensor 'a' twice" })
    refuses('bool.safetensors', '{' .. entry('m', 'BOOL', { 3 }, 0, 3) .. '}', '\1\0\2',
      { "tensor 'm' is BOOL but its byte 2 is 2" })
  end)

  it('reads headers with other whitespace, key order and no padding', function()
    local h = '{ "b" : { "data_offsets" : [ 1 , 9 ] , "shape" : [ 2 ] , "dtype" : "F32" } ,\n'
      .. '\t"a":{"shape":[1],"dtype":"U8","data_offsets":[0,1]}}'
    local got = cr.load(st_file('ws.safetensors', h, '\5' .. f32_bytes(3, 4)))
    assert.same({ 3, 4 }, got.b:totable())
    assert.same({ 5 }, got.a:totable())
  end)
end)

describe('fuzzed safetensors files', function()
  -- A valid small file: two dtypes, a bool, a 0-dim tensor, metadata.
  local function sample()
    local p = cr.save(path('fuzz_src.safetensors'), {
      w = cr.tensor({ { 1, 2 }, { 3, 4 } }), m = cr.tensor({ true, false }),
      s = cr.tensor(5, { dtype = 'i64' }), e = cr.zeros({ 0 }),
    }, { step = '10' })
    return read(p)
  end

  it('raises on every truncation, never crashes', function()
    local s = sample()
    cr.load(write('fuzz_full.safetensors', s)) -- the intact file loads
    for len = 0, #s - 1 do
      local p = write('fuzz_trunc.safetensors', s:sub(1, len))
      local ok, err = pcall(cr.load, p)
      assert(not ok, 'a file truncated to ' .. len .. ' bytes loaded')
      assert(tostring(err):find("load: '" .. p .. "'", 1, true), tostring(err))
    end
  end)

  it('raises or loads on 200 random byte flips, never crashes', function()
    local s = sample()
    local state = 12345 -- a small LCG: the same flips every run
    local function rand(n)
      state = (state * 1103515245 + 12345) % 2147483648
      return state % n
    end
    local errors = 0
    for _ = 1, 200 do
      local pos = rand(#s) + 1
      local flip = rand(255) + 1
      local bytes = s:sub(1, pos - 1) .. string.char(bit.bxor(s:byte(pos), flip)) .. s:sub(pos + 1)
      local p = write('fuzz_flip.safetensors', bytes)
      local ok, err = pcall(cr.load, p)
      if not ok then
        errors = errors + 1
        assert(tostring(err):find("load: '" .. p .. "'", 1, true), tostring(err))
      end
    end
    assert(errors > 100, 'only ' .. errors .. ' of 200 flips were refused')
  end)
end)

describe('atomic writes', function()
  it('leaves no temporary file, replaces the old file, and keeps it when a save fails', function()
    local dir = tmp .. '/atomic'
    os.execute('mkdir -p ' .. dir)
    local p = dir .. '/m.safetensors'
    cr.save(p, { a = cr.ones({ 2 }) })
    assert.same({ 'm.safetensors' }, ls(dir))
    cr.save(p, { b = cr.zeros({ 3 }) })
    assert.same({ 'm.safetensors' }, ls(dir))
    assert.same({ 'b' }, keys(cr.load(p)))
    local before = read(p)
    H.assert_error(function() cr.save(p, { { 'x', cr.ones({ 1 }) }, { 'x', cr.ones({ 1 }) } }) end, 'named')
    H.assert_error(function() cr.save(p, { x = cr.ones({ 1 }) }, { k = '\255' }) end, 'UTF-8')
    assert.equal(before, read(p))
    assert.same({ 'm.safetensors' }, ls(dir))
  end)
end)

describe('cr.io.load_into', function()
  local function model()
    return nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
  end
  local function filled(m, v)
    cr.no_grad(function()
      for _, e in ipairs(m:named_state()) do e[2]:fill_(v) end
    end)
    return m
  end
  local function all_equal(m, v) -- over the float tensors (num_batches_tracked is i64)
    for _, e in ipairs(m:named_state()) do
      for _, x in ipairs(e[2]:is_floating_point() and H.flat(e[2]) or {}) do
        if x ~= v then return false, e[1] end
      end
    end
    return true
  end

  it('loads a file by name, removing and adding prefixes', function()
    local src = filled(model(), 2)
    local ddp = {}
    for name, t in pairs(src:state_dict()) do ddp['module.' .. name] = t end
    local p = cr.save(path('ddp.safetensors'), ddp)
    local dst = filled(model(), 0)
    local report = cr.io.load_into(dst, p, { remove_prefix = 'module.' })
    assert.equal(#dst:named_state(), report.loaded)
    assert.same({}, report.missing)
    assert.same({}, report.unexpected)
    assert.same({}, report.mismatched)
    assert.is_true((all_equal(dst, 2)))
    assert.equal('loaded 7 tensors', cr.io.format_report(report))
    -- add_prefix: a Linear's own weights into the Sequential's first child
    local lin = filled(nn.Linear(2, 3), 5)
    local q = cr.save(path('lin.safetensors'), lin)
    local dst2 = filled(model(), 0)
    local r2 = cr.io.load_into(dst2, q, { add_prefix = '0.', strict = false })
    assert.equal(2, r2.loaded)
    assert.same({ '1.weight', '1.bias', '1.running_mean', '1.running_var', '1.num_batches_tracked' }, r2.missing)
    assert.same({ 5, 5, 5 }, dst2['0'].bias:totable())
    assert.equal('loaded 2 tensors; 5 missing (1.weight, 1.bias, 1.running_mean, ... (5 in all))',
      cr.io.format_report(r2))
  end)

  it('strict: lists missing, unexpected and mismatched names and modifies nothing', function()
    local t = filled(model(), 1):state_dict()
    t['1.running_var'] = nil
    t['extra.weight'] = cr.zeros({ 1 })
    t['0.weight'] = cr.ones({ 3, 5 })
    local p = cr.save(path('bad_model.safetensors'), t)
    local dst = filled(model(), 0)
    H.assert_error(function() cr.io.load_into(dst, p) end,
      "load_into: the file '" .. p .. "' does not match Sequential",
      'missing keys: 1.running_var', 'unexpected keys: extra.weight',
      'shape mismatch for 0.weight: the model has [3, 2], the file [3, 5]', 'strict = false')
    assert.is_true((all_equal(dst, 0))) -- nothing copied
    local report = cr.io.load_into(dst, p, { strict = false })
    assert.equal(5, report.loaded)
    assert.same({ '1.running_var' }, report.missing)
    assert.same({ 'extra.weight' }, report.unexpected)
    assert.same({ { '0.weight', '[3, 2]', '[3, 5]' } }, report.mismatched)
    assert.same({ 1, 1, 1 }, dst['0'].bias:totable())
    assert.same({ 0, 0, 0 }, dst['1'].running_var:totable())
    assert.equal('loaded 5 tensors; 1 missing (1.running_var); 1 unexpected (extra.weight); '
      .. '1 shape mismatch (0.weight: model [3, 2], got [3, 5])', cr.io.format_report(report))
  end)

  it('skips names matching Lua patterns, on both sides', function()
    local t = filled(model(), 3):state_dict()
    t['0.weight'] = cr.ones({ 9 }) -- would mismatch
    t['head.x'] = cr.ones({ 1 })   -- would be unexpected
    t['1.running_var'] = nil       -- would be missing
    local dst = filled(model(), 0)
    local report = cr.io.load_into(dst, t, { skip = { '^0%.weight$', '^head%.', 'running_var' } })
    assert.equal(5, report.loaded)
    assert.same({}, report.missing)
    assert.same({}, report.unexpected)
    assert.same({}, report.mismatched)
    assert.same({ 0, 0, 0, 0, 0, 0 }, H.flat(dst['0'].weight))
    assert.same({ 3, 3, 3 }, dst['0'].bias:totable())
    -- a single pattern string works too
    local r2 = cr.io.load_into(filled(model(), 0), t, { skip = '^[0h]', strict = false })
    assert.same({ '1.running_var' }, r2.missing)
  end)

  it('converts dtypes, and takes tables, pair lists and modules as the source', function()
    local src = model():double()
    filled(src, 0.25)
    local p = cr.save(path('f64.safetensors'), src)
    assert.equal('f64', cr.load(p)['0.weight'].dtype)
    local dst = filled(model(), 0)
    cr.io.load_into(dst, p)
    assert.equal('f32', dst['0'].weight.dtype)
    assert.is_true((all_equal(dst, 0.25)))
    local d2 = filled(model(), 0)
    cr.io.load_into(d2, { { '0.bias', cr.full({ 3 }, 4) } }, { strict = false })
    assert.same({ 4, 4, 4 }, d2['0'].bias:totable())
    local d3 = filled(model(), 0)
    assert.equal(7, cr.io.load_into(d3, filled(model(), 6)).loaded)
    assert.is_true((all_equal(d3, 6)))
  end)

  it('refuses bad arguments clearly', function()
    local m = model()
    H.assert_error(function() cr.io.load_into({}, 'x') end, 'load_into: the first argument must be a module')
    H.assert_error(function() cr.io.load_into(m, 5) end, 'the second argument must be a file name')
    H.assert_error(function() cr.io.load_into(m, {}, { strictt = true }) end, "unknown option 'strictt'")
    H.assert_error(function() cr.io.load_into(m, {}, { strict = 'yes' }) end, 'strict must be a boolean')
    H.assert_error(function() cr.io.load_into(m, {}, { skip = { '[' } }) end, "skip pattern '[' is not a valid Lua pattern")
    H.assert_error(function() cr.io.load_into(m, { ['a.w'] = cr.ones({ 1 }), ['b.a.w'] = cr.ones({ 1 }) },
      { remove_prefix = 'b.' }) end, "'a.w' and 'b.a.w' both become 'a.w'")
    H.assert_error(function() cr.io.load_into(m, path('absent.safetensors')) end, 'cannot open')
    H.assert_error(function() cr.io.format_report(nil) end, 'format_report: expected the report')
  end)

  it('a resnet18 saved and loaded computes the same outputs in eval', function()
    local opts = { stem = 'cifar', width = 8, in_channels = 1, num_classes = 0 }
    cr.manual_seed(3)
    local a = nn.models.resnet18(opts)
    a:train()
    a(cr.randn({ 4, 1, 12, 12 })) -- moves the BN running stats
    local p = cr.save(path('r18.safetensors'), a, { arch = 'resnet18' })
    cr.manual_seed(4)
    local b = nn.models.resnet18(opts)
    local report = cr.io.load_into(b, p)
    assert.equal(#a:named_state(), report.loaded)
    a:eval(); b:eval()
    local x = cr.randn({ 2, 1, 12, 12 })
    H.assert_close(b(x), a(x), 0, 0)
    local _, meta = cr.load(p)
    assert.same({ arch = 'resnet18' }, meta)
    -- byte-reproducible: saving the loaded model gives the same file
    assert.equal(read(p), read(cr.save(path('r18b.safetensors'), b, { arch = 'resnet18' })))
  end)
end)

describe('files written by Python safetensors', function()
  local python = os.getenv('CRESCENT_PYTHON') or 'python3'
  local function have_safetensors()
    return os.execute(python .. ' -c "import safetensors.numpy, numpy" >/dev/null 2>&1') == 0
  end

  it('reads them, and Python reads ours', function()
    if not have_safetensors() then
      pending('Python safetensors/numpy absent (pip install safetensors numpy; CRESCENT_PYTHON picks the python)')
      return
    end
    local ours = cr.save(path('ours.safetensors'), { w = cr.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = 'f32' }),
      i = cr.tensor({ -7, 9 }, { dtype = 'i64' }), m = cr.tensor({ true, false }) }, { k = 'v' })
    local theirs = path('theirs.safetensors')
    local script = path('interop.py')
    write('interop.py', table.concat({
      'import sys, numpy as np',
      'from safetensors.numpy import save_file, load_file',
      'from safetensors import safe_open',
      'd = load_file(sys.argv[1])',
      'assert d["w"].dtype == np.float32 and d["w"].tolist() == [[1, 2], [3, 4]], d',
      'assert d["i"].dtype == np.int64 and d["i"].tolist() == [-7, 9], d',
      'assert d["m"].dtype == np.bool_ and d["m"].tolist() == [True, False], d',
      'with safe_open(sys.argv[1], "np") as f: assert f.metadata() == {"k": "v"}, f.metadata()',
      'save_file({"a": np.arange(6, dtype=np.float64).reshape(2, 3), "b": np.array([1, 255], dtype=np.uint8),',
      '           "c": np.array(2.5, dtype=np.float16), "d": np.zeros((0, 2), dtype=np.int32)},',
      '          sys.argv[2], metadata={"from": "python"})',
      'save_file({"b": np.array([1, 2], dtype=np.float32), "a": np.array([[3], [4], [5]], dtype=np.float32)},',
      '          sys.argv[3], metadata={"k": "v"})',
    }, '\n'))
    local same = path('same_py.safetensors')
    local pipe = io.popen(python .. ' ' .. script .. ' ' .. ours .. ' ' .. theirs .. ' ' .. same .. ' 2>&1; echo "status=$?"')
    local out = pipe:read('*a')
    pipe:close()
    assert(out:find('status=0', 1, true), out)
    local got, meta = cr.load(theirs)
    assert.same({ from = 'python' }, meta)
    assert.equal('f64', got.a.dtype)
    assert.same({ { 0, 1, 2 }, { 3, 4, 5 } }, got.a:totable())
    assert.same({ 1, 255 }, got.b:totable())
    assert.equal('f16', got.c.dtype)
    assert.equal(2.5, got.c:item())
    assert.same({ 0, 2 }, got.d.shape)
    -- one dtype: the reference writer's order is by name, as ours, so the bytes agree
    local mine = cr.save(path('same_cr.safetensors'), { b = cr.tensor({ 1, 2 }, { dtype = 'f32' }),
      a = cr.tensor({ { 3 }, { 4 }, { 5 } }, { dtype = 'f32' }) }, { k = 'v' })
    assert.equal(read(same), read(mine))
  end)
end)
