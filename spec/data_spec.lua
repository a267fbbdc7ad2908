-- data_spec — cr.data: the IDX reader (every type, gzip and plain, every validation
-- error), Fashion-MNIST (sizes, labels, search order, the missing-data message; pending
-- where the files are absent), batch assembly and augmentation against the layout that
-- crescent_data.h documents, and the Loader: reproducible per (seed, epoch), independent
-- of the thread count and of the global RNG stream, drop_last, limit, resume position.
local ffi = require 'ffi'
local cr = H.cr
local C = cr.C
local data = require 'crescent.data'

pcall(ffi.cdef, 'int setenv(const char *name, const char *value, int overwrite); int unsetenv(const char *name);')

-- ---- files ---------------------------------------------------------------------------
local tmpdir = H.tmpdir('data')
teardown(tmpdir.remove)
local tmp = tmpdir.dir
local path = tmpdir.path
local write = tmpdir.write
local function gzip(name)   -- name -> name.gz, the plain file kept
  assert(os.execute('gzip -kf ' .. path(name)) == 0)
  return path(name) .. '.gz'
end
local function be32(v) return string.char(bit.band(bit.rshift(v, 24), 255), bit.band(bit.rshift(v, 16), 255),
  bit.band(bit.rshift(v, 8), 255), bit.band(v, 255)) end
local function header(code, dims)
  local s = string.char(0, 0, code, #dims)
  for _, d in ipairs(dims) do s = s .. be32(d) end
  return s
end
local function bytes(list) return string.char(unpack(list)) end
local err_of = H.error_of


describe('read_idx', function()
  it('reads u8 images and labels, plain and gzip, with the header shape', function()
    local px = {}
    for i = 0, 11 do px[#px + 1] = i * 20 end
    write('img', header(0x08, { 3, 2, 2 }) .. bytes(px))
    for _, p in ipairs { path('img'), gzip('img') } do
      local t = data.read_idx(p)
      assert.are.same({ 3, 2, 2 }, t.shape)
      assert.are.equal('u8', t.dtype)
      assert.are.same({ { { 0, 20 }, { 40, 60 } }, { { 80, 100 }, { 120, 140 } }, { { 160, 180 }, { 200, 220 } } },
        t:totable())
    end
    write('lab', header(0x08, { 4 }) .. bytes { 9, 0, 3, 255 })
    assert.are.same({ 9, 0, 3, 255 }, data.read_idx(gzip('lab')):totable())
  end)

  it('reads the signed and float types big-endian, widening i8/i16 to i32', function()
    write('i8', header(0x09, { 3 }) .. bytes { 0x7f, 0x80, 0xff })
    local t = data.read_idx(path('i8'))
    assert.are.equal('i32', t.dtype)
    assert.are.same({ 127, -128, -1 }, t:totable())
    write('i16', header(0x0B, { 3 }) .. bytes { 0x01, 0x02, 0xff, 0xfe, 0x80, 0x00 })
    assert.are.same({ 258, -2, -32768 }, data.read_idx(path('i16')):totable())
    write('i32', header(0x0C, { 2, 1 }) .. bytes { 0, 1, 0, 0, 0xff, 0xff, 0xff, 0xfd })
    t = data.read_idx(gzip('i32'))
    assert.are.same({ 2, 1 }, t.shape)
    assert.are.same({ { 65536 }, { -3 } }, t:totable())
    -- f32 1.5 = 3fc00000, -2.25 = c0100000; f64 0.1 = 3fb999999999999a
    write('f32', header(0x0D, { 2 }) .. bytes { 0x3f, 0xc0, 0, 0, 0xc0, 0x10, 0, 0 })
    t = data.read_idx(path('f32'))
    assert.are.equal('f32', t.dtype)
    assert.are.same({ 1.5, -2.25 }, t:totable())
    write('f64', header(0x0E, { 1 }) .. bytes { 0x3f, 0xb9, 0x99, 0x99, 0x99, 0x99, 0x99, 0x9a })
    t = data.read_idx(gzip('f64'))
    assert.are.equal('f64', t.dtype)
    assert.are.equal(0.1, t:totable()[1])
  end)

  it('accepts an empty data set (a zero dim)', function()
    write('empty', header(0x08, { 0, 28, 28 }))
    assert.are.same({ 0, 28, 28 }, data.read_idx(path('empty')).shape)
  end)

  -- each error names the file and the problem
  local function expect(p, ...)
    local e = err_of(data.read_idx, p)
    assert.truthy(e:find(p, 1, true), 'message should name the file: ' .. e)
    for _, frag in ipairs { ... } do
      assert.truthy(e:find(frag, 1, true), 'message should say "' .. frag .. '": ' .. e)
    end
  end

  it('refuses a missing file, a directory and a non-string', function()
    expect(path('nope.gz'), 'cannot open', 'No such file')
    expect(tmp, 'is a directory')
    assert.truthy(err_of(data.read_idx, 42):find('expected a file name', 1, true))
  end)

  it('refuses bad magic, unknown types and bad dim counts', function()
    expect(write('short', bytes { 0, 0 }), 'truncated', 'magic')
    expect(write('magic', bytes { 0x1f, 0x8c, 8, 1 }), 'not an IDX file', 'bad magic 1f 8c 08 01')
    expect(write('type', header(0x0A, { 1 }) .. bytes { 0 }), 'unknown IDX data type 0x0a')
    expect(write('nd0', bytes { 0, 0, 8, 0 }), 'declares 0 dims')
    expect(write('nd9', bytes { 0, 0, 8, 9 }), 'declares 9 dims', '1 to 8')
    expect(write('hdr', bytes { 0, 0, 8, 3, 0, 0, 0, 2 }), 'truncated inside its header', '3 dims need 12 bytes')
  end)

  it('refuses data that does not match the header: short, long, absurd', function()
    write('trunc', header(0x08, { 2, 2, 2 }) .. bytes { 1, 2, 3, 4, 5 })
    expect(path('trunc'), 'declares [2, 2, 2] u8 = 8 data bytes', 'holds 5', 'truncated')
    expect(gzip('trunc'), 'truncated', '8 data bytes', 'holds 5')
    write('long', header(0x0C, { 1 }) .. bytes { 0, 0, 0, 1, 9 })
    expect(path('long'), 'holds 5', 'extra bytes')
    expect(gzip('long'), 'extra bytes', 'after the 4 data bytes')
    expect(write('absurd', header(0x0E, { 0xffffffff, 0xffffffff, 2 })), 'absurd header', 'corrupt')
    -- a small gzip file cannot hold 1 GB: refused before anything is allocated
    write('big', header(0x08, { 1000000, 1000 }) .. bytes { 1, 2, 3 })
    expect(gzip('big'), 'more than a', 'gzip file can hold')
  end)

  it('refuses a corrupt or cut gzip stream', function()
    local body = {}
    for i = 1, 4000 do body[i] = (i * 7919) % 251 end
    write('cut', header(0x08, { 4000 }) .. bytes(body))
    local gz = io.open(gzip('cut'), 'rb'):read('*a')
    expect(write('cut2.gz', gz:sub(1, math.floor(#gz / 2))), 'truncated', '4000 data bytes')
    local bad = gz:sub(1, 40) .. string.rep('\255', 16) .. gz:sub(57)
    expect(write('bad.gz', bad), 'corrupt gzip data')
  end)
end)

-- ---- Fashion-MNIST --------------------------------------------------------------------
local function fashion_or_pending(opts)
  local ok, ds = pcall(data.fashion_mnist, opts)
  if ok then return ds end
  if tostring(ds):find('was not found', 1, true) then
    pending('Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)')
    return nil
  end
  error(ds, 0)
end

describe('fashion_mnist', function()
  it('reads the real train and test splits: sizes, dtypes, labels, statistics', function()
    local train = fashion_or_pending { split = 'train' }
    if not train then return end
    local test = data.fashion_mnist { split = 'test' }
    assert.are.equal(60000, #train)
    assert.are.equal(10000, #test)
    assert.are.same({ 60000, 28, 28 }, train.images.shape)
    assert.are.equal('u8', train.images.dtype)
    assert.are.same({ 60000 }, train.labels.shape)
    assert.are.equal('i64', train.labels.dtype)
    assert.are.equal(10, train.num_classes)
    assert.are.equal(0.2860, train.mean)
    assert.are.equal(0.3530, train.std)
    assert.are.equal('fashion_mnist', train.name)
    -- figures computed once with python3's gzip module from the same files
    assert.are.same({ 9, 0, 0, 3, 0, 2, 7, 2, 5, 5 }, train.labels:narrow(0, 0, 10):totable())
    assert.are.same({ 9, 2, 1, 1, 6, 1, 4, 6, 5, 7 }, test.labels:narrow(0, 0, 10):totable())
    assert.are.equal(76247, train.images:select(0, 0):long():sum():item())
    assert.are.equal(0, train.labels:min():item())
    assert.are.equal(9, train.labels:max():item())
    local counts = cr.one_hot(train.labels, 10):sum(0):totable()
    assert.are.same({ 6000, 6000, 6000, 6000, 6000, 6000, 6000, 6000, 6000, 6000 }, counts)
    assert.is_true(math.abs(train.images:float():mean():item() / 255 - 0.28604) < 1e-4)
  end)

  it('limit keeps the first N samples as views', function()
    local ds = fashion_or_pending { split = 'test', limit = 100 }
    if not ds then return end
    assert.are.equal(100, #ds)
    assert.are.same({ 100, 28, 28 }, ds.images.shape)
    assert.are.same({ 9, 2, 1 }, ds.labels:narrow(0, 0, 3):totable())
    assert.are.equal(10000, #data.fashion_mnist { split = 'test', limit = 0 })
    assert.are.equal(10000, #data.fashion_mnist { split = 'test', limit = 20000 })
  end)

  -- tiny stand-ins with the real names, to test the search order without the real data
  local function fake_root(dir, n, label)
    os.execute('mkdir -p ' .. dir)
    local px, lab = {}, {}
    for i = 1, n * 784 do px[i] = i % 256 end
    for i = 1, n do lab[i] = label end
    for _, split in ipairs { { 'train', n }, { 't10k', n } } do
      local f = assert(io.open(dir .. '/' .. split[1] .. '-images-idx3-ubyte', 'wb'))
      f:write(header(0x08, { n, 28, 28 }) .. bytes(px))
      f:close()
      f = assert(io.open(dir .. '/' .. split[1] .. '-labels-idx1-ubyte', 'wb'))
      f:write(header(0x08, { n }) .. bytes(lab))
      f:close()
      os.execute('gzip -f ' .. dir .. '/' .. split[1] .. '-*')
    end
  end

  it('looks in opts.root, then $CRESCENT_DATA (and its fashion-mnist/), then the defaults', function()
    fake_root(path('rootA'), 3, 4)
    fake_root(path('envB/fashion-mnist'), 5, 7)
    local old = os.getenv('CRESCENT_DATA')
    C.setenv('CRESCENT_DATA', path('envB'), 1)
    local ok, e = pcall(function()
      local a = data.fashion_mnist { root = path('rootA') }
      assert.are.equal(3, #a)
      assert.are.same({ 4, 4, 4 }, a.labels:totable())
      assert.are.equal(path('rootA'), a.root)
      local b = data.fashion_mnist { split = 'test' }
      assert.are.equal(5, #b)
      assert.are.equal(path('envB/fashion-mnist'), b.root)
      assert.are.equal(5, #data.fashion_mnist { root = '' })   -- '' (a config default) = search
    end)
    if old then C.setenv('CRESCENT_DATA', old, 1) else C.unsetenv('CRESCENT_DATA') end
    assert(ok, e)
  end)

  it('a missing data set says where it looked and how to get it', function()
    local e = err_of(data.fashion_mnist, { root = path('nowhere') })
    assert.truthy(e:find(path('nowhere'), 1, true), e)
    assert.truthy(e:find('train-images-idx3-ubyte.gz', 1, true), e)
    assert.truthy(e:find('apt-get install dataset-fashion-mnist', 1, true), e)
    assert.truthy(e:find('CRESCENT_DATA', 1, true), e)
    -- without a root, every place of the search order is listed
    local old = os.getenv('CRESCENT_DATA')
    C.setenv('CRESCENT_DATA', path('nowhere'), 1)
    local ok, msg = pcall(data.fashion_mnist, {})
    if old then C.setenv('CRESCENT_DATA', old, 1) else C.unsetenv('CRESCENT_DATA') end
    if not ok then   -- (succeeds when ./data/fashion-mnist or the Debian package has it)
      assert.truthy(msg:find('$CRESCENT_DATA', 1, true), msg)
      assert.truthy(msg:find('/usr/share/datasets/fashion-mnist', 1, true), msg)
      assert.truthy(msg:find('./data/fashion-mnist', 1, true), msg)
    end
  end)

  it('refuses bad options and bad files', function()
    assert.truthy(err_of(data.fashion_mnist, { split = 'val' }):find("split must be 'train' or 'test'", 1, true))
    assert.truthy(err_of(data.fashion_mnist, { limt = 3 }):find("unknown option 'limt'", 1, true))
    assert.truthy(err_of(data.fashion_mnist, { limit = -1 }):find('non-negative integer', 1, true))
    local dir = path('badlabels')
    fake_root(dir, 2, 12)
    local e = err_of(data.fashion_mnist, { root = dir })
    assert.truthy(e:find('label 12 of sample 0 is outside 0..9', 1, true), e)
  end)
end)

-- ---- batch assembly ---------------------------------------------------------------------
-- A synthetic set: n images [H, W] whose pixel (i, y, x) = (i * 31 + y * 7 + x * 3) % 256.
local function synthetic(n, h, w, opts)
  opts = opts or {}
  local t = cr.empty({ n, h, w }, { dtype = 'u8' })
  local p = ffi.cast('uint8_t *', t:data_ptr())
  for i = 0, n - 1 do
    for y = 0, h - 1 do
      for x = 0, w - 1 do p[(i * h + y) * w + x] = (i * 31 + y * 7 + x * 3) % 256 end
    end
  end
  local lab = {}
  for i = 1, n do lab[i] = (i - 1) % 10 end
  local labels = cr.tensor(lab, { dtype = 'i64' })
  return data.TensorDataset { images = t, labels = labels, mean = opts.mean or 0.25, std = opts.std or 0.5,
                              num_classes = 10, name = 'synthetic' }
end
local function pixel(i, y, x) return (i * 31 + y * 7 + x * 3) % 256 end

-- The key mixing of crescent_data.h in 64-bit FFI arithmetic (modular, like C).
local function mix(x)
  x = ffi.cast('uint64_t', x)
  x = bit.bxor(x, bit.rshift(x, 30)) * 0xbf58476d1ce4e5b9ULL
  x = bit.bxor(x, bit.rshift(x, 27)) * 0x94d049bb133111ebULL
  return bit.bxor(x, bit.rshift(x, 31))
end
local SHUFFLE, AUGMENT = 0x53687566666c6531ULL, 0x4175676d656e7431ULL
local function words(n, key, counter)
  local w = ffi.new('uint32_t[?]', n)
  C.cr_rng_philox_words(w, n, key, counter)
  return w
end

local function raw_batch(ds, rows, aug)
  local idx = cr.tensor(rows, { dtype = 'i64' })
  local mean, std = ffi.new('double[1]', ds.mean), ffi.new('double[1]', ds.std)
  local box = ffi.new('cr_tensor*[2]')
  if C.cr_data_make_batch(box, box + 1, ds.images, ds.labels, idx, mean, std, aug) ~= 0 then
    error(ffi.string(C.cr_last_error()), 0)
  end
  return ffi.gc(box[0], C.cr_tensor_free), ffi.gc(box[1], C.cr_tensor_free)
end

describe('batch assembly', function()
  it('gathers the rows and normalises (x / 255 - mean) / std', function()
    local ds = synthetic(7, 3, 4)
    local rows = { 5, 0, 6, 5 }
    local input, target = raw_batch(ds, rows)
    assert.are.same({ 4, 1, 3, 4 }, input.shape)
    assert.are.equal('f32', input.dtype)
    assert.are.same({ 5, 0, 6, 5 }, target:totable())
    local got = input:totable()
    for b, i in ipairs(rows) do
      for y = 0, 2 do
        for x = 0, 3 do
          local want = (pixel(i, y, x) / 255 - 0.25) / 0.5
          assert.is_true(math.abs(got[b][1][y + 1][x + 1] - want) < 1e-6)
        end
      end
    end
  end)

  it('takes [N, C, H, W] images with one mean/std per channel', function()
    local imgs = cr.tensor({ { { { 0, 255 } }, { { 51, 102 } } } }, { dtype = 'u8' })   -- [1, 2, 1, 2]
    local ds = data.TensorDataset { images = imgs, mean = { 0, 0.2 }, std = { 1, 0.1 } }
    local loader = data.Loader(ds, { batch_size = 1, shuffle = false })
    local batch = loader:iter(0)()
    H.assert_close(batch.input, { { { { 0, 1 } }, { { 0, 2 } } } }, 1e-6)
    assert.is_nil(batch.target)
  end)

  it('crops with zero padding and flips exactly as crescent_data.h documents', function()
    local ds = synthetic(9, 5, 6)
    local aug = ffi.new('cr_data_augment', { pad = 2, hflip = 1, seed = 11, epoch = 3 })
    local rows = { 8, 1, 4, 0, 7 }
    local input = raw_batch(ds, rows, aug):totable()
    local zero = (0 - 0.25) / 0.5
    local flips, shifts = 0, 0
    for b, i in ipairs(rows) do
      local w = words(4, mix(bit.bxor(ffi.cast('uint64_t', 11), AUGMENT)), bit.lshift(3ULL, 32) + i)
      local dy = tonumber(bit.rshift(ffi.cast('uint64_t', w[0]) * 5, 32)) - 2
      local dx = tonumber(bit.rshift(ffi.cast('uint64_t', w[1]) * 5, 32)) - 2
      local flip = w[2] >= 2 ^ 31
      if flip then flips = flips + 1 end
      if dx ~= 0 or dy ~= 0 then shifts = shifts + 1 end
      for y = 0, 4 do
        for x = 0, 5 do
          local sy, sx = y + dy, (flip and 5 - x or x) + dx
          local want = (sy < 0 or sy >= 5 or sx < 0 or sx >= 6) and zero or (pixel(i, sy, sx) / 255 - 0.25) / 0.5
          assert.is_true(math.abs(input[b][1][y + 1][x + 1] - want) < 1e-6,
            string.format('sample %d pixel (%d, %d)', i, y, x))
        end
      end
    end
    assert.is_true(flips > 0 and flips < #rows)   -- both cases exercised by this seed
    assert.is_true(shifts > 0)
  end)

  it('gives the same bytes on 1 and 2 threads, with and without augmentation', function()
    local ds = synthetic(200, 48, 48)   -- 128 x 48 x 48 pixels: enough to go parallel
    local rows = {}
    for i = 1, 128 do rows[i] = (i * 37) % 200 end
    local aug = ffi.new('cr_data_augment', { pad = 4, hflip = 1, seed = 5, epoch = 1 })
    local old = cr.get_num_threads()
    local outs = {}
    for _, n in ipairs { 1, 2 } do
      cr.set_num_threads(n)
      outs[n] = { raw_batch(ds, rows), (raw_batch(ds, rows, aug)) }
    end
    cr.set_num_threads(old)
    assert.are.equal(0, (outs[1][1] - outs[2][1]):abs():max():item())
    assert.are.equal(0, (outs[1][2] - outs[2][2]):abs():max():item())
  end)

  it('refuses bad indices, images and statistics with clear messages', function()
    local ds = synthetic(4, 2, 2)
    local e = err_of(raw_batch, ds, { 1, 4 })
    assert.truthy(e:find('index[1] = 4 is out of range for 4 images', 1, true), e)
    e = err_of(raw_batch, ds, { -1 })
    assert.truthy(e:find('index[0] = -1', 1, true), e)
    local bad = data.TensorDataset { images = ds.images, std = 0 }
    e = err_of(raw_batch, bad, { 0 })
    assert.truthy(e:find('std must be finite and non-zero', 1, true), e)
    e = err_of(data.TensorDataset, { images = cr.zeros({ 2, 2, 2 }) })
    assert.truthy(e:find('images must be a u8 tensor', 1, true), e)
  end)
end)

-- ---- the loader ---------------------------------------------------------------------------
local function indices(loader, epoch, start)
  local out = {}
  for batch in loader:iter(epoch, start) do out[#out + 1] = batch.index:totable() end
  return out
end
local function rng_state()
  local s, o = ffi.new('uint64_t[1]'), ffi.new('uint64_t[1]')
  C.cr_rng_get_state(s, o)
  return tonumber(s[0]), tonumber(o[0])
end

describe('Loader', function()
  it('gives batches {input, target, index} in the documented shapes', function()
    local ds = synthetic(50, 28, 28)
    local loader = data.Loader(ds, { batch_size = 16 })
    assert.are.equal(3, loader:num_batches())
    local n = 0
    for batch in loader:iter(0) do
      n = n + 1
      assert.are.same({ 16, 1, 28, 28 }, batch.input.shape)
      assert.are.same({ 16 }, batch.target.shape)
      assert.are.equal('i64', batch.target.dtype)
      assert.are.same({ 16 }, batch.index.shape)
      assert.are.equal(n - 1, batch.batch)
      assert.are.equal(0, batch.epoch)
      -- the targets are the labels of the rows named by index
      local idx, tg = batch.index:totable(), batch.target:totable()
      for k = 1, 16 do assert.are.equal(idx[k] % 10, tg[k]) end
    end
    assert.are.equal(3, n)
  end)

  it('is reproducible per (seed, epoch): same batches again, other epochs and seeds differ', function()
    local ds = synthetic(64, 4, 4)
    local a = data.Loader(ds, { batch_size = 8, seed = 3 })
    local b = data.Loader(ds, { batch_size = 8, seed = 3 })
    assert.are.same(indices(a, 2), indices(b, 2))
    assert.are.same(indices(a, 2), indices(a, 2))
    assert.are_not.same(indices(a, 2), indices(a, 3))
    assert.are_not.same(indices(a, 2), indices(data.Loader(ds, { batch_size = 8, seed = 4 }), 2))
    -- the inputs too, with augmentation on
    local x = data.Loader(ds, { batch_size = 8, seed = 3, augment = true })
    local y = data.Loader(ds, { batch_size = 8, seed = 3, augment = true })
    local ix, iy = x:iter(1), y:iter(1)
    for _ = 1, 8 do
      local bx, by = ix(), iy()
      assert.are.equal(0, (bx.input - by.input):abs():max():item())
    end
  end)

  it('follows the documented Fisher-Yates order', function()
    local n, seed, epoch = 37, 9, 4
    local w = words(n, mix(mix(bit.bxor(ffi.cast('uint64_t', seed), SHUFFLE)) + epoch), 0)
    local p = {}
    for i = 0, n - 1 do p[i] = i end
    for i = n - 1, 1, -1 do
      local j = tonumber(bit.rshift(ffi.cast('uint64_t', w[i]) * (i + 1), 32))
      p[i], p[j] = p[j], p[i]
    end
    local want = {}
    for i = 0, n - 1 do want[i + 1] = p[i] end
    local loader = data.Loader(synthetic(n, 1, 1), { batch_size = n, seed = seed })
    assert.are.same(want, loader:order(epoch):totable())
  end)

  it('cr_data_buffer_shuffle follows its documented buffer and word order', function()
    local BUFFER = 0x4275666665723031ULL
    local function shuffled(stream, buffer, seed, epoch)
      local box = ffi.new('cr_tensor*[1]')
      if C.cr_data_buffer_shuffle(box, cr.tensor(stream, { dtype = 'i64' }), buffer, seed, epoch) ~= 0 then
        error(ffi.string(C.cr_last_error()), 0)
      end
      return ffi.gc(box[0], C.cr_tensor_free):totable()
    end
    local stream = {}
    for i = 1, 40 do stream[i] = 100 + 3 * i end
    local seed, epoch, buffer = 4, 2, 6
    local w = words(64, mix(mix(bit.bxor(ffi.cast('uint64_t', seed), BUFFER)) + epoch), 0)
    local pool, want, k = {}, {}, 0
    local function pick(n)
      local slot = tonumber(bit.rshift(ffi.cast('uint64_t', w[k]) * n, 32)) + 1
      k = k + 1
      return slot
    end
    for _, row in ipairs(stream) do
      if #pool < buffer then pool[#pool + 1] = row
      else
        local j = pick(buffer)
        want[#want + 1] = pool[j]
        pool[j] = row
      end
    end
    while #pool > 0 do
      local j = pick(#pool)
      want[#want + 1] = pool[j]
      pool[j] = pool[#pool]
      pool[#pool] = nil
    end
    assert.are.same(want, shuffled(stream, buffer, seed, epoch))
    assert.are.same(stream, shuffled(stream, 1, seed, epoch))        -- a buffer of one: the stream itself
    assert.are_not.same(want, shuffled(stream, buffer, seed, epoch + 1))
    H.assert_error(function() shuffled(stream, 0, seed, epoch) end, 'buffer = 0 must be in [1, 2^32)')
  end)

  it('visits each sample once per epoch; shuffle = false keeps the data set order', function()
    local ds = synthetic(23, 2, 2)
    local seen = {}
    for _, idx in ipairs(indices(data.Loader(ds, { batch_size = 5, drop_last = false }), 7)) do
      for _, i in ipairs(idx) do
        assert.is_nil(seen[i])
        seen[i] = true
      end
    end
    for i = 0, 22 do assert.is_true(seen[i]) end
    local plain = indices(data.Loader(ds, { batch_size = 10, shuffle = false, drop_last = false }), 5)
    assert.are.same({ { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 }, { 10, 11, 12, 13, 14, 15, 16, 17, 18, 19 }, { 20, 21, 22 } },
      plain)
  end)

  it('drop_last drops the short last batch; off, the last batch is short', function()
    local ds = synthetic(10, 2, 2)
    local on = data.Loader(ds, { batch_size = 4 })
    local off = data.Loader(ds, { batch_size = 4, drop_last = false })
    assert.are.equal(2, on:num_batches())
    assert.are.equal(3, off:num_batches())
    local sizes = {}
    for batch in off:iter(0) do sizes[#sizes + 1] = batch.input:size(0) end
    assert.are.same({ 4, 4, 2 }, sizes)
    assert.are.equal(2, #indices(on, 0))
  end)

  it('does not depend on the thread count', function()
    local ds = synthetic(300, 48, 48)
    local old = cr.get_num_threads()
    local res = {}
    for _, n in ipairs { 1, 2 } do
      cr.set_num_threads(n)
      local loader = data.Loader(ds, { batch_size = 120, seed = 1, augment = { pad = 3, flip = true } })
      res[n] = {}
      for batch in loader:iter(2) do res[n][#res[n] + 1] = batch.input end
    end
    cr.set_num_threads(old)
    for k = 1, 2 do assert.are.equal(0, (res[1][k] - res[2][k]):abs():max():item()) end
  end)

  it('neither reads nor moves the global RNG stream', function()
    local ds = synthetic(40, 3, 3)
    cr.manual_seed(123)
    local s0, o0 = rng_state()
    local first = indices(data.Loader(ds, { batch_size = 8, augment = true }), 1)
    local s1, o1 = rng_state()
    assert.are.equal(s0, s1)
    assert.are.equal(o0, o1)
    cr.manual_seed(999)
    cr.rand(1000)
    assert.are.same(first, indices(data.Loader(ds, { batch_size = 8, augment = true }), 1))
  end)

  it('resumes at a saved position: iter(epoch, start_batch) and state_dict', function()
    local ds = synthetic(48, 2, 2)
    local loader = data.Loader(ds, { batch_size = 8, seed = 2 })
    local full = indices(loader, 5)
    assert.are.same({ full[4], full[5], full[6] }, indices(loader, 5, 3))
    -- stop after two batches, save, resume in a new loader
    local it = loader:iter(5)
    it()
    it()
    local saved = loader:state_dict()
    assert.are.same({ epoch = 5, batch = 2, seed = 2 }, saved)
    local again = data.Loader(ds, { batch_size = 8, seed = 2 })
    again:load_state_dict(saved)
    assert.are.same({ full[3], full[4], full[5], full[6] }, indices(again))
    assert.are.same({ epoch = 6, batch = 0, seed = 2 }, again:state_dict())
    assert.truthy(err_of(data.Loader(ds, { batch_size = 8, seed = 7 }).load_state_dict,
      data.Loader(ds, { batch_size = 8, seed = 7 }), saved):find('saved with seed 2', 1, true))
    assert.truthy(err_of(loader.iter, loader, 0, 7):find('start_batch must be an integer in [0, 6]', 1, true))
  end)

  it('runs the transform on each batch', function()
    local ds = synthetic(8, 2, 2)
    local loader = data.Loader(ds, { batch_size = 4, transform = function(b) b.input = b.input * 0; b.tag = 1 end })
    for batch in loader:iter(0) do
      assert.are.equal(1, batch.tag)
      assert.are.equal(0, batch.input:abs():sum():item())
    end
  end)

  it('honours a data set limit', function()
    local ds = synthetic(100, 2, 2):head(30)
    assert.are.equal(30, #ds)
    local loader = data.Loader(ds, { batch_size = 8 })
    assert.are.equal(3, loader:num_batches())
    for _, idx in ipairs(indices(loader, 0)) do
      for _, i in ipairs(idx) do assert.is_true(i < 30) end
    end
  end)

  it('holds out a fixed random part of a data set (a validation split)', function()
    local function same(a, b) return a.shape[1] == b.shape[1] and (a:double() - b:double()):abs():max():item() == 0 end
    local ds = synthetic(100, 2, 2)
    local rest, val = ds:hold_out(20, 0)
    assert.are.equal(80, #rest)
    assert.are.equal(20, #val)
    -- every sample lands in exactly one part, each part in the original order
    local seen = {}
    for _, part in ipairs { rest, val } do
      local prev = -1
      for i = 0, #part - 1 do
        local key = part.images:select(0, i):contiguous():view(-1):totable()
        local id = table.concat(key, ',') .. '|' .. part.labels:select(0, i):item()
        assert.is_nil(seen[id])
        seen[id] = true
        local where
        for j = 0, #ds - 1 do
          if same(ds.images:select(0, j), part.images:select(0, i)) then where = j break end
        end
        assert.is_true(where > prev)
        prev = where
      end
    end
    -- the same seed holds out the same samples; another seed others
    local _, again = ds:hold_out(20, 0)
    assert.is_true(same(again.images, val.images))
    local _, other = ds:hold_out(20, 1)
    assert.is_false(same(other.images, val.images))
    assert.truthy(err_of(ds.hold_out, ds, 100, 0):find('held-out count must be an integer in [1, 100)', 1, true))
  end)

  it('takes a range of samples as views (a rank share)', function()
    local ds = synthetic(10, 2, 2)
    local part = ds:range(3, 4)
    assert.are.equal(4, #part)
    assert.are.equal(0, (part.images - ds.images:narrow(0, 3, 4)):abs():max():item())
    assert.are.same(ds.labels:narrow(0, 3, 4):totable(), part.labels:totable())
    assert.truthy(err_of(ds.range, ds, 8, 3):find('are not within the 10 samples', 1, true))
  end)

  it('refuses bad options with the fix', function()
    local ds = synthetic(10, 2, 2)
    assert.truthy(err_of(data.Loader, ds, { batchsize = 4 }):find("unknown option 'batchsize'", 1, true))
    assert.truthy(err_of(data.Loader, ds, { batch_size = 0 }):find('batch_size must be a positive integer', 1, true))
    assert.truthy(err_of(data.Loader, ds, { batch_size = 11 }):find('fewer than batch_size 11', 1, true))
    assert.truthy(err_of(data.Loader, ds, { shuffle = 'yes' }):find('shuffle must be a boolean', 1, true))
    local e = err_of(data.Loader, ds, { batch_size = 2, augment = { pad = 2, rotate = 1 } })
    assert.truthy(e:find("unknown augment option 'rotate'", 1, true), e)
    assert.truthy(err_of(data.Loader, {}, {}):find('expected a data set', 1, true))
  end)

  it('assembles a real Fashion-MNIST epoch quickly', function()
    local ds = fashion_or_pending { split = 'test' }
    if not ds then return end
    local loader = data.Loader(ds, { batch_size = 256, augment = true })
    local t0 = os.clock()
    local n = 0
    for batch in loader:iter(0) do n = n + batch.input:size(0) end
    assert.are.equal(39 * 256, n)
    assert.is_true(os.clock() - t0 < 2.0)
  end)
end)
