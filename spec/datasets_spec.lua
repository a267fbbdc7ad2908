-- datasets_spec — the image data sets on files the spec writes itself:
-- CIFAR-10/100 binary batches (values, labels, limit, search order, every validation
-- error, the missing-data message), the synthetic set (its documented word layout,
-- determinism, learnability), JPEG/PNG decoding (every PNG colour type against the
-- pixels written, grey/RGB conversion against PIL's formula, bilinear resize against a
-- plain-Lua reference, threads), the image folder (class order, resize, corrupt files
-- with and without skip_bad), and each data set through cr.data.Loader.
local ffi = require 'ffi'
local cr = H.cr
local data = require 'crescent.data'
local images = data.images

pcall(ffi.cdef, 'int setenv(const char *name, const char *value, int overwrite); int unsetenv(const char *name);')

local tmpdir = H.tmpdir('datasets')
teardown(tmpdir.remove)
local path = tmpdir.path
local function mkdir(name) assert(os.execute('mkdir -p ' .. path(name)) == 0) end
local write = tmpdir.write
local read = H.read_file
local err_of = H.error_of
local function at(t, ...)
  for _, i in ipairs { ... } do t = t:select(0, i) end
  return t
end
local function has(s, sub) assert(s:find(sub, 1, true), 'expected "' .. sub .. '" in: ' .. s) end
local function with_env(value, f)
  local old = os.getenv('CRESCENT_DATA')
  if value then ffi.C.setenv('CRESCENT_DATA', value, 1) else ffi.C.unsetenv('CRESCENT_DATA') end
  local ok, e = pcall(f)
  if old then ffi.C.setenv('CRESCENT_DATA', old, 1) else ffi.C.unsetenv('CRESCENT_DATA') end
  if not ok then error(e, 0) end
end


-- ---- CIFAR -----------------------------------------------------------------------------
-- Record r of file f: pixel p = (31 f + 7 r + p) % 256; labels as given.
local function pixel(f, r, p) return (31 * f + 7 * r + p) % 256 end
local function record(f, r, labels)
  local t = {}
  for p = 0, 3071 do t[p + 1] = pixel(f, r, p) end
  return string.char(unpack(labels)) .. string.char(unpack(t))
end
local function cifar_file(name, f, labels_list)
  local parts = {}
  for r, labels in ipairs(labels_list) do parts[r] = record(f, r - 1, labels) end
  return write(name, table.concat(parts))
end

local C10 = 'c10/cifar-10-batches-bin'
local c10_train_labels = {}   -- file f (1..5) holds f records, labels (f + r) % 10
mkdir(C10)
for f = 1, 5 do
  local list = {}
  for r = 0, f - 1 do
    list[#list + 1] = { (f + r) % 10 }
    c10_train_labels[#c10_train_labels + 1] = (f + r) % 10
  end
  cifar_file(C10 .. '/data_batch_' .. f .. '.bin', f, list)
end
cifar_file(C10 .. '/test_batch.bin', 9, { { 9 }, { 0 } })

describe('cifar10', function()
  it('reads the five train batches in order: u8 [N, 3, 32, 32] channel-major, i64 labels', function()
    local ds = data.cifar10 { root = path('c10') }   -- the folder holding cifar-10-batches-bin
    assert.are.equal(15, #ds)
    assert.are.same({ 15, 3, 32, 32 }, ds.images.shape)
    assert.are.equal('u8', ds.images.dtype)
    assert.are.equal('i64', ds.labels.dtype)
    assert.are.same(c10_train_labels, ds.labels:totable())
    assert.are.equal(10, ds.num_classes)
    assert.are.equal('airplane', ds.classes[1])
    -- sample 3 = file 3, record 0 (files 1 and 2 hold 1 + 2 records); channel c, row y, column x is byte c*1024 + 32 y + x
    local img = ds.images:select(0, 3)
    for _, cyx in ipairs { { 0, 0, 0 }, { 1, 5, 7 }, { 2, 31, 31 } } do
      local c, y, x = cyx[1], cyx[2], cyx[3]
      assert.are.equal(pixel(3, 0, c * 1024 + 32 * y + x), at(img, c, y, x):item())
    end
  end)

  it('reads the test split, a limit, and the batch folder itself as root', function()
    local ds = data.cifar10 { root = path(C10), split = 'test' }
    assert.are.same({ 9, 0 }, ds.labels:totable())
    assert.are.equal(pixel(9, 1, 100), at(ds.images:view(-1), 3072 + 100):item())
    local lim = data.cifar10 { root = path('c10'), limit = 4 }   -- file 1 (1 record), file 2 (2), 1 of file 3
    assert.are.same({ 4, 3, 32, 32 }, lim.images.shape)
    assert.are.same({ 1, 2, 3, 3 }, lim.labels:totable())
    assert.are.equal(pixel(3, 0, 0), at(lim.images:view(-1), 3 * 3072):item())
  end)

  it('finds the data through $CRESCENT_DATA, and says where it looked and how to get it', function()
    with_env(path('c10'), function()
      assert.are.equal(2, #data.cifar10 { split = 'test' })
    end)
    with_env(path('nowhere'), function()
      local e = err_of(data.cifar10, {})
      has(e, 'the train split was not found')
      has(e, path('nowhere') .. ' ($CRESCENT_DATA)')
      has(e, './data/cifar-10-batches-bin')
      has(e, 'data_batch_1.bin')
      has(e, 'cifar-10-binary.tar.gz')
      has(e, 'does not download')
    end)
  end)

  it('normalises per channel through the Loader', function()
    local ds = data.cifar10 { root = path('c10'), split = 'test' }
    local L = data.Loader(ds, { batch_size = 2, shuffle = false })
    local b = L:iter(0)()
    assert.are.same({ 2, 3, 32, 32 }, b.input.shape)
    assert.are.same({ 9, 0 }, b.target:totable())
    local mean, std = { 0.4914, 0.4822, 0.4465 }, { 0.2470, 0.2435, 0.2616 }
    for c = 0, 2 do
      local want = (pixel(9, 1, c * 1024 + 33) / 255 - mean[c + 1]) / std[c + 1]
      assert(math.abs(at(b.input, 1, c, 1, 1):item() - want) < 1e-5)
    end
  end)

  it('rejects bad files, naming the file and the problem', function()
    mkdir('bad10')
    local p = write('bad10/test_batch.bin', record(0, 0, { 3 }) .. 'xyz')
    local e = err_of(data.cifar10, { root = path('bad10'), split = 'test' })
    has(e, p)
    has(e, 'not a multiple of the 3073-byte record')
    has(e, '1 whole records and 3 bytes over')
    p = cifar_file('bad10/test_batch.bin', 0, { { 3 }, { 10 } })
    e = err_of(data.cifar10, { root = path('bad10'), split = 'test' })
    has(e, p)
    has(e, 'record 1 has label 10, outside 0..9')
    write('bad10/test_batch.bin', '')
    has(err_of(data.cifar10, { root = path('bad10'), split = 'test' }), 'is empty')
    has(err_of(data.cifar10, { root = path('c10'), split = 'val' }), "split must be 'train' or 'test'")
    has(err_of(data.cifar10, { root = path('c10'), limit = -1 }), 'limit must be a non-negative integer')
    has(err_of(data.cifar10, { root = path('c10'), labels = 'fine' }), "unknown option 'labels'")
  end)
end)

describe('cifar100', function()
  mkdir('c100/cifar-100-binary')
  cifar_file('c100/cifar-100-binary/train.bin', 1, { { 19, 99 }, { 0, 0 }, { 7, 42 } })
  cifar_file('c100/cifar-100-binary/test.bin', 2, { { 4, 5 } })
  write('c100/cifar-100-binary/coarse_label_names.txt', 'aquatic_mammals\nfish\n')

  it('reads fine labels by default, coarse on request, and keeps both', function()
    local ds = data.cifar100 { root = path('c100') }
    assert.are.same({ 3, 3, 32, 32 }, ds.images.shape)
    assert.are.same({ 99, 0, 42 }, ds.labels:totable())
    assert.are.equal(100, ds.num_classes)
    assert.are.same({ 19, 0, 7 }, ds.coarse_labels:totable())
    assert.are.equal(pixel(1, 2, 3071), at(ds.images:view(-1), 3 * 3072 - 1):item())
    local co = data.cifar100 { root = path('c100'), labels = 'coarse', limit = 2 }
    assert.are.same({ 19, 0 }, co.labels:totable())
    assert.are.equal(20, co.num_classes)
    assert.are.same({ 'aquatic_mammals', 'fish' }, co.classes)
    assert.are.same({ 5 }, data.cifar100 { root = path('c100'), split = 'test' }.labels:totable())
  end)

  it('checks both label ranges and the 3074-byte record', function()
    mkdir('bad100')
    local p = cifar_file('bad100/test.bin', 0, { { 20, 1 } })
    local e = err_of(data.cifar100, { root = path('bad100'), split = 'test' })
    has(e, p)
    has(e, 'record 0 has coarse label 20, outside 0..19')
    cifar_file('bad100/test.bin', 0, { { 1, 2 }, { 1, 100 } })
    has(err_of(data.cifar100, { root = path('bad100'), split = 'test' }), 'record 1 has fine label 100, outside 0..99')
    -- a CIFAR-10 file read as CIFAR-100: 2 x 3073 bytes is not a multiple of 3074
    write('bad100/test.bin', record(0, 0, { 1 }) .. record(0, 1, { 2 }))
    has(err_of(data.cifar100, { root = path('bad100'), split = 'test' }), 'not a multiple of the 3074-byte record')
    has(err_of(data.cifar100, { root = path('c100'), labels = 'medium' }), "labels must be 'fine'")
    local miss = err_of(data.cifar100, { root = path('c10') })
    has(miss, 'cifar-100-binary.tar.gz')
    has(miss, 'no train.bin')
  end)
end)

-- ---- synthetic ---------------------------------------------------------------------------
describe('synthetic', function()
  it('is deterministic per seed and follows its documented word layout', function()
    local a = data.synthetic { n = 40, shape = { 3, 8, 8 }, num_classes = 4, seed = 7 }
    local b = data.synthetic { n = 40, shape = { 3, 8, 8 }, num_classes = 4, seed = 7 }
    local c = data.synthetic { n = 40, shape = { 3, 8, 8 }, num_classes = 4, seed = 8 }
    assert.are.same({ 40, 3, 8, 8 }, a.images.shape)
    assert.are.equal(0, (a.images:long() - b.images:long()):abs():sum():item())
    assert(((a.images:long() - c.images:long()):abs():sum():item()) > 0)
    local labels = a.labels:totable()
    for i = 1, 40 do assert.are.equal((i - 1) % 4, labels[i]) end
    -- pixel (c=1, y=2, x=5) of sample 6, recomputed from the layout in synthetic.lua
    local key = bit.bxor(ffi.cast('uint64_t', 7), 0x53796e7468657431ULL)
    local cw, w = ffi.new('uint32_t[4]'), ffi.new('uint32_t[?]', 4 + 192)
    local k, i, ch, y, x = 6 % 4, 6, 1, 2, 5
    cr.C.cr_rng_philox_words(cw, 4, key, 0x4000000000000000ULL + k)
    cr.C.cr_rng_philox_words(w, 4 + 192, key, i * 2 ^ 20)
    local colour = 80 * math.cos(2 * math.pi * (k / 4 + ch / 3))
    local theta, f = math.pi * cw[0] / 2 ^ 32, 1 + math.floor(cw[1] / 2 ^ 30)
    local phase = 2 * math.pi * w[0] / 2 ^ 32
    local bright = 4 * (math.floor(w[1] / 2 ^ 24) - 127.5) / 127.5
    local wave = 40 * math.cos(2 * math.pi * f * math.cos(theta) / 8 * x + 2 * math.pi * f * math.sin(theta) / 8 * y + phase)
    local noise = 24 * (math.floor(w[4 + (ch * 8 + y) * 8 + x] / 2 ^ 24) - 127.5) / 127.5
    local v = math.max(0, math.min(255, math.floor(128 + colour + bright + wave + noise + 0.5)))
    assert.are.equal(v, at(a.images, i, ch, y, x):item())
    local g = data.synthetic { n = 3, shape = { 5, 6 } }
    assert.are.same({ 3, 5, 6 }, g.images.shape)
  end)

  it('is learnable: nearest class mean on held-out samples is far above chance', function()
    local ds = data.synthetic { n = 400, shape = { 3, 16, 16 }, num_classes = 10, seed = 0 }
    local x = ds.images:double():view(400, -1)
    local train, test = x:narrow(0, 0, 200), x:narrow(0, 200, 200)
    local means = train:view(20, 10, -1):mean(0)                  -- labels are i % 10
    local d = (test:view(200, 1, -1) - means:view(1, 10, -1)):pow(2):sum(2)
    local _, pred = d:min(1)
    local correct = (pred:eq(ds.labels:narrow(0, 200, 200))):long():sum():item()
    assert(correct >= 180, 'nearest-mean accuracy ' .. correct .. '/200')
  end)

  it('works with the Loader and measures its own mean and std', function()
    local ds = data.synthetic { n = 64, shape = { 3, 8, 8 } }
    local m = ds.images:double():div(255):transpose(0, 1):contiguous():view(3, -1):mean(1):totable()
    for c = 1, 3 do assert(math.abs(ds._mean[c] - m[c]) < 1e-9) end
    local L = data.Loader(ds, { batch_size = 16, augment = true, seed = 3 })
    local n = 0
    for batch in L:iter(0) do
      n = n + 1
      assert.are.same({ 16, 3, 8, 8 }, batch.input.shape)
    end
    assert.are.equal(4, n)
    has(err_of(data.synthetic, { n = -1 }), 'n must be a non-negative integer')
    has(err_of(data.synthetic, { colour = 1 }), "unknown option 'colour'")
  end)
end)

-- ---- decoding ----------------------------------------------------------------------------
local function pattern(c, h, w, salt)
  local t = cr.empty({ c, h, w }, { dtype = 'u8' })
  local p = ffi.cast('uint8_t *', t:data_ptr())
  for i = 0, c * h * w - 1 do p[i] = (i * 37 + salt * 101 + math.floor(i / 7) * 13) % 256 end
  return t
end
local function same(a, b) return (a:long() - b:long()):abs():max():item() == 0 end
local function mean_abs(a, b) return (a:double() - b:double()):abs():mean():item() end

-- The bilinear resize of crescent_images.h, in plain Lua on nested tables [C][H][W].
local function ref_resize(t, oh, ow)
  local C_, H_, W_ = #t, #t[1], #t[1][1]
  local function src(n, on, i)
    local s = (i + 0.5) * (n / on) - 0.5
    if s < 0 then s = 0 end
    local i0 = math.min(math.floor(s), n - 1)
    return i0, i0 < n - 1 and i0 + 1 or i0, s - i0
  end
  local out = {}
  for c = 1, C_ do
    out[c] = {}
    for y = 0, oh - 1 do
      local y0, y1, ly = src(H_, oh, y)
      local row = {}
      for x = 0, ow - 1 do
        local x0, x1, lx = src(W_, ow, x)
        local a, b = t[c][y0 + 1][x0 + 1], t[c][y0 + 1][x1 + 1]
        local e, f = t[c][y1 + 1][x0 + 1], t[c][y1 + 1][x1 + 1]
        local top, bot = a + lx * (b - a), e + lx * (f - e)
        row[x + 1] = math.max(0, math.min(255, math.floor(top + ly * (bot - top) + 0.5)))
      end
      out[c][y + 1] = row
    end
  end
  return out
end

describe('image decoding', function()
  mkdir('img')
  local rgb = pattern(3, 9, 13, 1)

  it('reads back every PNG colour type exactly, alpha dropped, grey repeated', function()
    images.write_png(rgb, path('img/rgb.png'))
    assert(same(images.read(path('img/rgb.png')), rgb))
    local rgba = cr.cat({ rgb, pattern(1, 9, 13, 5) }, 0)
    images.write_png(rgba, path('img/rgba.png'))
    assert(same(images.read(path('img/rgba.png')), rgb))
    local grey = pattern(1, 9, 13, 2)
    images.write_png(grey, path('img/grey.png'))
    assert(same(images.read(path('img/grey.png'), { channels = 1 }), grey))
    assert(same(images.read(path('img/grey.png')), cr.cat({ grey, grey, grey }, 0)))
    images.write_png(cr.cat({ grey, pattern(1, 9, 13, 3) }, 0), path('img/ga.png'))
    assert(same(images.read(path('img/ga.png'), { channels = 1 }), grey))
    -- a palette PNG of 4 colours
    local pal = cr.empty({ 3, 6, 5 }, { dtype = 'u8' })
    local pp = ffi.cast('uint8_t *', pal:data_ptr())
    local colours = { { 255, 0, 0 }, { 0, 128, 0 }, { 10, 20, 30 }, { 200, 200, 7 } }
    for i = 0, 29 do
      local col = colours[(i * 3) % 4 + 1]
      for c = 0, 2 do pp[c * 30 + i] = col[c + 1] end
    end
    images.write_png(pal, path('img/pal.png'), true)
    has(read(path('img/pal.png')), 'PLTE')
    assert(same(images.read(path('img/pal.png')), pal))
    local info = images.probe(path('img/rgba.png'))
    assert.are.same({ format = 'png', height = 9, width = 13, channels = 4 }, info)
  end)

  it('converts RGB to grey with PIL\'s formula', function()
    local g = images.read(path('img/rgb.png'), { channels = 1 })
    local t = rgb:totable()
    for y = 1, 9 do
      for x = 1, 13 do
        local r, gg, b = t[1][y][x], t[2][y][x], t[3][y][x]
        assert.are.equal(math.floor((19595 * r + 38470 * gg + 7471 * b + 32768) / 65536), at(g, 0, y - 1, x - 1):item())
      end
    end
  end)

  it('decodes JPEGs close to what was encoded (quality 100, 4:4:4), grey and colour', function()
    local smooth = cr.empty({ 3, 16, 24 }, { dtype = 'u8' })
    local sp = ffi.cast('uint8_t *', smooth:data_ptr())
    for c = 0, 2 do
      for y = 0, 15 do
        for x = 0, 23 do sp[(c * 16 + y) * 24 + x] = 40 + 60 * c + 4 * x + 2 * y end
      end
    end
    images.write_jpeg(smooth, path('img/rgb.jpg'), 100)
    local j = images.read(path('img/rgb.jpg'))
    assert.are.same({ 3, 16, 24 }, j.shape)
    assert(mean_abs(j, smooth) < 1.5, 'mean abs error ' .. mean_abs(j, smooth))
    images.write_jpeg(smooth:narrow(0, 1, 1), path('img/grey.jpg'), 100)
    assert.are.same({ format = 'jpeg', height = 16, width = 24, channels = 1 }, images.probe(path('img/grey.jpg')))
    local jg = images.read(path('img/grey.jpg'), { channels = 1 })
    assert(mean_abs(jg, smooth:narrow(0, 1, 1)) < 1.5)
  end)

  it('resizes bilinearly exactly like the plain-Lua reference, up and down', function()
    local src = pattern(3, 7, 11, 4)
    for _, s in ipairs { { 4, 5 }, { 13, 17 }, { 7, 3 }, { 1, 1 }, { 7, 11 } } do
      local got = images.resize(src, s)
      assert.are.same(ref_resize(src:totable(), s[1], s[2]), got:totable())
    end
    -- a batch [N, C, H, W] and a strided view go through the same code
    local batch = cr.stack({ src, pattern(3, 7, 11, 9) })
    assert.are.same(ref_resize(at(batch, 1):totable(), 5, 6), at(images.resize(batch, { 5, 6 }), 1):totable())
    local view = src:transpose(1, 2)   -- [3, 11, 7], not contiguous
    assert.are.same(ref_resize(view:totable(), 4, 4), images.resize(view, { 4, 4 }):totable())
    -- decoding with a size = decoding, then resizing
    assert(same(images.read(path('img/rgb.png'), { size = { 5, 20 } }), images.resize(rgb, { 5, 20 })))
  end)

  it('decodes a list of files into one batch, the same on 1 and 2 threads', function()
    local paths = {}
    for i = 1, 12 do
      local p = path(string.format('img/b%02d.%s', i, i % 2 == 0 and 'png' or 'jpg'))
      local img = pattern(3, 10 + i, 12, i)
      if i % 2 == 0 then images.write_png(img, p) else images.write_jpeg(img, p, 90) end
      paths[i] = p
    end
    local old = cr.get_num_threads()
    local out = {}
    for _, n in ipairs { 1, 2 } do
      cr.set_num_threads(n)
      out[n] = images.decode(paths, { size = { 8, 8 } })
    end
    cr.set_num_threads(old)
    assert.are.same({ 12, 3, 8, 8 }, out[1].shape)
    assert(same(out[1], out[2]))
    for i = 1, 12 do
      assert(same(at(out[1], i - 1), images.read(paths[i], { size = { 8, 8 } })))
    end
  end)

  it('names the path of a missing, truncated, corrupt or foreign file', function()
    local jpg = read(path('img/rgb.jpg'))
    local trunc = write('img/trunc.jpg', jpg:sub(1, math.floor(#jpg / 2)))
    local e = err_of(images.read, trunc)
    has(e, trunc)
    has(e, 'corrupt JPEG header')
    local cut = write('img/cut.jpg', jpg:sub(1, #jpg - 40))   -- the scan data ends early
    e = err_of(images.read, cut)
    has(e, cut)
    has(e, 'truncated or corrupt JPEG (Premature end of JPEG file)')
    local garbage = write('img/garbage.png', '\137PNG\r\n\26\n' .. string.rep('\0\1garbage', 20))
    e = err_of(images.read, garbage)
    has(e, garbage)
    has(e, 'corrupt PNG')
    local png = read(path('img/rgb.png'))
    local tpng = write('img/trunc.png', png:sub(1, #png - 30))
    has(err_of(images.read, tpng), tpng)
    local txt = write('img/text.jpg', 'hello, world')
    e = err_of(images.read, txt)
    has(e, txt)
    has(e, 'not a JPEG or PNG file')
    has(err_of(images.read, path('img/none.png')), 'cannot open')
    -- in a batch: an error naming the file, or with skip_bad a zero row and its message
    local list = { path('img/rgb.png'), trunc, path('img/grey.png') }
    has(err_of(images.decode, list, { size = { 4, 4 } }), trunc)
    local out, bad = images.decode(list, { size = { 4, 4 }, skip_bad = true })
    assert.are.equal(1, #bad)
    assert.are.equal(2, bad[1].i)
    has(bad[1].error, trunc)
    assert.are.equal(0, at(out, 1):long():abs():sum():item())
    assert(same(at(out, 0), images.read(path('img/rgb.png'), { size = { 4, 4 } })))
  end)
end)

-- ---- image folder -------------------------------------------------------------------------
describe('image_folder', function()
  -- classes sort in byte order: '10' < '9' < 'Zebra' < 'ant'
  local CLASSES = { 'ant', 'Zebra', '9', '10' }
  local root = 'folder'
  for _, c in ipairs(CLASSES) do mkdir(root .. '/' .. c) end
  mkdir(root .. '/ant/deeper')
  local made = {}
  local function put(rel, img, kind)
    local p = path(root .. '/' .. rel)
    if kind == 'jpg' then images.write_jpeg(img, p, 95) else images.write_png(img, p) end
    made[rel] = img
  end
  put('ant/b.png', pattern(3, 12, 10, 1))
  put('ant/a.JPG', pattern(3, 20, 16, 2), 'jpg')
  put('ant/deeper/c.png', pattern(1, 8, 8, 3))       -- grey, in a sub-folder
  put('Zebra/z.jpeg', pattern(1, 30, 20, 4), 'jpg')  -- grey JPEG
  put('9/x.png', pattern(3, 6, 9, 5))
  put('10/y.png', pattern(3, 12, 12, 6))
  write(root .. '/10/notes.txt', 'not an image')
  write(root .. '/README', 'a stray file at the top is not a class')

  it('maps sorted sub-folder names to classes and walks them like torchvision', function()
    local ds = data.image_folder { root = path(root), size = { 12, 10 } }
    assert.are.same({ '10', '9', 'Zebra', 'ant' }, ds.classes)
    assert.are.same({ ['10'] = 0, ['9'] = 1, Zebra = 2, ant = 3 }, ds.class_to_idx)
    assert.are.equal(4, ds.num_classes)
    local rel = {}
    for i, p in ipairs(ds.paths) do rel[i] = p:sub(#path(root) + 2) end
    assert.are.same({ '10/y.png', '9/x.png', 'Zebra/z.jpeg', 'ant/a.JPG', 'ant/b.png', 'ant/deeper/c.png' }, rel)
    assert.are.same({ 0, 1, 2, 3, 3, 3 }, ds.labels:totable())
    assert.are.same({ 6, 3, 12, 10 }, ds.images.shape)
    -- each row is the file decoded and resized: PNGs exactly, grey repeated to RGB
    assert.are.same(ref_resize(made['10/y.png']:totable(), 12, 10), at(ds.images, 0):totable())
    local grey = ref_resize(made['ant/deeper/c.png']:totable(), 12, 10)[1]
    assert.are.same({ grey, grey, grey }, at(ds.images, 5):totable())
    -- JPEGs close to the resized original
    local zebra = cr.tensor(ref_resize(made['Zebra/z.jpeg']:totable(), 12, 10), { dtype = 'u8' })
    assert(mean_abs(at(ds.images, 2):narrow(0, 0, 1), zebra) < 12)
    assert.are.same({}, ds.skipped)
  end)

  it('reads grey, needs a size when images differ, and feeds the Loader', function()
    local g = data.image_folder { root = path(root), size = 8, channels = 1 }
    assert.are.same({ 6, 1, 8, 8 }, g.images.shape)
    assert.are.same(ref_resize(made['ant/deeper/c.png']:totable(), 8, 8), at(g.images, 5):totable())
    local e = err_of(data.image_folder, { root = path(root) })
    has(e, 'images differ in size')
    has(e, 'pass size = {height, width}')
    local same_size = 'same'
    mkdir(same_size .. '/a')
    mkdir(same_size .. '/b')
    images.write_png(pattern(3, 5, 7, 1), path(same_size .. '/a/1.png'))
    images.write_jpeg(pattern(3, 5, 7, 2), path(same_size .. '/b/2.jpg'), 90)
    local ds = data.image_folder { root = path(same_size) }
    assert.are.same({ 2, 3, 5, 7 }, ds.images.shape)
    local L = data.Loader(ds, { batch_size = 2, shuffle = false })
    local b = L:iter(0)()
    assert.are.same({ 2, 3, 5, 7 }, b.input.shape)
    assert.are.same({ 0, 1 }, b.target:totable())
    local want = (at(pattern(3, 5, 7, 1), 0, 0, 0):item() / 255 - 0.485) / 0.229
    assert(math.abs(at(b.input, 0, 0, 0, 0):item() - want) < 1e-5)
  end)

  it('fails on a corrupt file naming it, or skips it with a warning when skip_bad', function()
    local bad = 'badfolder'
    mkdir(bad .. '/cat')
    mkdir(bad .. '/dog')
    images.write_png(pattern(3, 6, 6, 1), path(bad .. '/cat/ok1.png'))
    images.write_jpeg(pattern(3, 6, 6, 2), path(bad .. '/dog/ok2.jpg'), 90)
    local jpg = read(path(bad .. '/dog/ok2.jpg'))
    local trunc = write(bad .. '/cat/trunc.jpg', jpg:sub(1, #jpg - 40))
    local garbage = write(bad .. '/dog/garbage.png', '\137PNG\r\n\26\n' .. string.rep('junk', 30))
    for _, size in ipairs { { 6, 6 }, false } do   -- with a size (decode only) and without (probe first)
      local e = err_of(data.image_folder, { root = path(bad), size = size or nil })
      assert(e:find(trunc, 1, true) or e:find(garbage, 1, true), e)
      has(e, 'skip_bad = true')
      local warnings = {}
      local ds = data.image_folder { root = path(bad), size = size or nil, skip_bad = true,
                                    warn = function(msg) warnings[#warnings + 1] = msg end }
      assert.are.equal(2, #ds)
      assert.are.same({ 0, 1 }, ds.labels:totable())
      assert.are.same({ path(bad .. '/cat/ok1.png'), path(bad .. '/dog/ok2.jpg') }, ds.paths)
      assert(same(at(ds.images, 0), pattern(3, 6, 6, 1)))
      assert.are.equal(2, #warnings)
      assert.are.equal(2, #ds.skipped)
      local all = table.concat(warnings, '\n')
      has(all, trunc)
      has(all, garbage)
      has(all, 'skipping')
    end
  end)

  it('rejects a root without classes, an empty class, and bad options', function()
    mkdir('noclass')
    write('noclass/a.png', 'x')
    has(err_of(data.image_folder, { root = path('noclass') }), 'no class folder')
    mkdir('emptyclass/a')
    mkdir('emptyclass/b')
    images.write_png(pattern(1, 4, 4, 1), path('emptyclass/a/1.png'))
    write('emptyclass/b/readme.txt', 'no images here')
    has(err_of(data.image_folder, { root = path('emptyclass') }), 'no .jpg, .jpeg or .png file in the class folder b')
    has(err_of(data.image_folder, { root = path('missing') }), 'cannot open the folder')
    has(err_of(data.image_folder, { root = path(root), channels = 2 }), 'channels must be 1')
    has(err_of(data.image_folder, { root = path(root), size = { 0, 4 } }), 'size must hold two positive integers')
    has(err_of(data.image_folder, { root = path(root), colour = true }), "unknown option 'colour'")
  end)
end)
