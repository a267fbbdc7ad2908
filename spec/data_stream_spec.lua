-- data_stream_spec — streamed image data sets (image_folder{stream = true}, file_list,
-- tar_shards): the data set holds paths, and the Loader's worker threads decode each
-- sample's file when it is batched. The batches equal those of the same folder decoded up front, bit for bit
-- (multi-crop views, and plain batches with pad-crop and flip), for any worker count;
-- images of different sizes are cropped at their own size; peak memory does not grow with
-- the folder; a bad file stops the loader with its path; hold_out and range keep paths
-- and labels together; file lists name a bad line; tar shards (webdataset layout) give
-- the batches of the same images as files; recipes train on all three sources.
local cr = H.cr
local ffi = require 'ffi'
local data, images = cr.data, cr.data.images
local T = cr.data.transforms
local same, epoch_of, err_of = H.assert_equal_tensors, H.epoch_batches, H.error_of
local function has(s, sub) assert(tostring(s):find(sub, 1, true), 'expected "' .. sub .. '" in: ' .. tostring(s)) end

local tmpdir = H.tmpdir('data_stream')
teardown(tmpdir.remove)
local path = tmpdir.path
local function mkdir(name) assert(os.execute('mkdir -p ' .. path(name)) == 0) end

-- a u8 [c, h, w] image with a smooth pattern (so JPEG keeps it recognisable)
local function picture(c, h, w, salt)
  local t = cr.empty({ c, h, w }, { dtype = 'u8' })
  local p = ffi.cast('uint8_t *', t:data_ptr())
  for ch = 0, c - 1 do
    for y = 0, h - 1 do
      for x = 0, w - 1 do p[(ch * h + y) * w + x] = (salt * 29 + ch * 50 + 5 * x + 3 * y) % 256 end
    end
  end
  return t
end

-- a folder of n images per class, JPEG and PNG, all h x w, or of varied sizes
local function folder(name, n, h, w, varied)
  for k, class in ipairs({ 'cat', 'dog', 'emu' }) do
    mkdir(name .. '/' .. class)
    for i = 1, n do
      local hh, ww = h, w
      if varied then hh, ww = h + (i * 7 + k) % 13, w + (i * 5 + 2 * k) % 11 end
      local img = picture(3, hh, ww, i + 10 * k)
      local file = path(string.format('%s/%s/%02d', name, class, i))
      if i % 2 == 0 then images.write_png(img, file .. '.png') else images.write_jpeg(img, file .. '.jpg', 90) end
    end
  end
  return path(name)
end

local function multicrop()
  return T.multicrop {
    size_crops = { 16, 8 }, num_crops = { 2, 3 }, crop_scales = { { 0.4, 1 }, { 0.1, 0.4 } },
    flip = 0.5, color_jitter = { p = 0.8, brightness = 0.4, contrast = 0.4, saturation = 0.4, hue = 0.1 },
    grayscale = 0.2, blur = { p = 0.5 },
  }
end

local assert_same_epochs = H.assert_same_batches

-- a small SSL task of the recipes (cr.ssl.<method>.task) on the data of `over`
local function ssl_task(method, over)
  local recipe = cr.recipe.ssl
  over.train = { epochs = 1, log_every = 1000 }
  over.model = { width = 4, hidden_dim = 16, out_dim = 8 }
  over.knn = { k = 3 }
  over.checkpoint = { save = false }
  return cr.recipe.ssl.task(method, cr.config.check(over, recipe.schema(method)))
end

describe('streamed image folders', function()
  local root = folder('same', 5, 20, 24)

  it('lists the files only, with the classes and labels of the decoded folder', function()
    local eager = data.image_folder { root = root }
    local ds = data.image_folder { root = root, stream = true }
    assert.is_true(ds.streamed)
    assert.is_nil(ds.images)
    assert.are.equal(15, #ds)
    assert.are.same(eager.paths, ds.paths)
    assert.are.same(eager.classes, ds.classes)
    same(eager.labels, ds.labels, 'labels')
    assert.are.equal(3, ds.channels)
    has(tostring(ds), '15 image files (streamed')
  end)

  it('gives the multi-crop batches of the decoded folder, for 1 and 3 workers', function()
    local eager = data.image_folder { root = root }
    local ds = data.image_folder { root = root, stream = true }
    local want = epoch_of(data.Loader(eager, { batch_size = 4, views = multicrop(), seed = 7, drop_last = false }), 1)
    assert.are.equal(4, #want)
    for _, workers in ipairs({ 0, 1, 3 }) do
      local L = data.Loader(ds, { batch_size = 4, views = multicrop(), seed = 7, drop_last = false, workers = workers })
      assert_same_epochs(want, epoch_of(L, 1))
    end
  end)

  it('gives the plain batches of the folder decoded at the same size, with pad-crop and flip', function()
    local eager = data.image_folder { root = root, size = { 12, 10 } }
    local ds = data.image_folder { root = root, size = { 12, 10 }, stream = true }
    local opts = { batch_size = 6, augment = true, seed = 3, drop_last = false }
    local want = epoch_of(data.Loader(eager, opts), 2)
    opts.workers = 2
    assert_same_epochs(want, epoch_of(data.Loader(ds, opts), 2))
    assert.are.same({ 6, 3, 12, 10 }, want[1].input.shape)
  end)

  it('crops images of different sizes at their own size, the same for any worker count', function()
    local ds = data.image_folder { root = folder('varied', 4, 18, 22, true), stream = true }
    local function epoch(workers)
      return epoch_of(data.Loader(ds, { batch_size = 5, views = multicrop(), seed = 1, workers = workers }), 0)
    end
    local one = epoch(1)
    assert.are.equal(2, #one)
    assert.are.equal(5, #one[1].input)
    assert.are.same({ 5, 3, 16, 16 }, one[1].input[1].shape)
    assert.are.same({ 5, 3, 8, 8 }, one[1].input[3].shape)
    assert_same_epochs(one, epoch(3))
    -- sample j's crops are those of its image decoded alone and cropped from an in-memory
    -- tensor at the same row (the draws are keyed by the row, the box by the image's size)
    local b = one[1]
    for j = 0, 1 do
      local row = b.index:totable()[j + 1]
      local img = images.read(ds.paths[row + 1])
      local c, h, w = img.shape[1], img.shape[2], img.shape[3]
      local stack = img:view(1, c, h, w):expand(row + 1, c, h, w):contiguous()
      local crops = multicrop():apply(stack, cr.tensor({ row }, { dtype = 'i64' }), 1, 0,
        { mean = ds._mean, std = ds._std })
      for k = 1, 5 do same(crops[k]:select(0, 0), b.input[k]:select(0, j), 'crop ' .. k .. ' of sample ' .. j) end
    end
  end)

  it('stops with the bad file named, and needs a size for plain batches', function()
    local name = 'bad'
    folder(name, 2, 10, 10)
    local f = assert(io.open(path(name .. '/dog/03.jpg'), 'wb'))
    f:write('\255\216\255 not really a jpeg')
    f:close()
    local ds = data.image_folder { root = path(name), stream = true }
    local L = data.Loader(ds, { batch_size = 7, views = multicrop(), shuffle = false, drop_last = false })
    local e = err_of(function() return epoch_of(L, 0) end)
    has(e, 'dog/03.jpg')
    has(err_of(data.Loader, ds, { batch_size = 2 }), 'is streamed and has no size')
  end)

  it('with skip_bad replaces a bad file by the next readable one, its label with it, and warns per epoch', function()
    local name = 'skip'
    folder(name, 2, 10, 10)
    local bad = path(name .. '/cat/02.png')   -- row 1; row 2 (dog/01.jpg) stands in for it
    local f = assert(io.open(bad, 'wb'))
    f:write('\137PNG\r\n\26\n truncated')
    f:close()
    local warnings = {}
    local ds = data.image_folder { root = path(name), stream = true, skip_bad = true, size = 10,
                                   warn = function(m) warnings[#warnings + 1] = m end }
    local opts = { batch_size = 6, shuffle = false }
    local got = epoch_of(data.Loader(ds, opts), 0)[1]
    assert.are.equal(1, #warnings)
    has(warnings[1], '1 unreadable file was replaced')
    has(warnings[1], 'cat/02.png')
    -- the same batch from the folder decoded up front with row 1 holding row 2's image
    local eager = data.image_folder { root = path(name), size = 10, skip_bad = true, warn = function() end }
    assert.are.equal(5, #eager)
    local want_targets = ds.labels:totable()
    want_targets[2] = want_targets[3]
    assert.are.same(want_targets, got.target:totable())
    same(got.input:select(0, 1), got.input:select(0, 2), 'the stand-in pixels')
    -- a file list with only unreadable files stops, naming one
    local lf = assert(io.open(path('allbad.txt'), 'w'))
    lf:write(bad, ' 0\n', bad, ' 1\n')
    lf:close()
    local none = data.file_list { list = path('allbad.txt'), skip_bad = true, size = 10, warn = function() end }
    has(err_of(function() return epoch_of(data.Loader(none, { batch_size = 2 }), 0) end), 'no file of the 2 decodes')
  end)

  it('holds out and takes ranges with paths and labels together', function()
    local ds = data.image_folder { root = root, stream = true }
    local rest, held = ds:hold_out(5, 0)
    assert.are.equal(10, #rest)
    assert.are.equal(5, #held)
    local seen = {}
    for _, part in ipairs({ rest, held }) do
      assert.is_true(part.streamed)
      local labels = part.labels:totable()
      for i, p in ipairs(part.paths) do
        assert.is_nil(seen[p])
        seen[p] = true
        local class = p:match('/(%a+)/%d+%.%a+$')
        assert.are.equal(class, ds.classes[labels[i] + 1])
      end
    end
    local r = ds:range(3, 4)
    assert.are.same({ ds.paths[4], ds.paths[5], ds.paths[6], ds.paths[7] }, r.paths)
    same(ds.labels:narrow(0, 3, 4), r.labels, 'range labels')
    local b = epoch_of(data.Loader(r, { batch_size = 4, views = multicrop(), shuffle = false }), 0)
    assert.are.same({ 0, 1, 2, 3 }, b[1].index:totable())
  end)
end)

describe('file lists', function()
  local root = folder('listed', 2, 14, 18)
  local function write_list(name, text)
    local f = assert(io.open(path(name), 'w'))
    f:write(text)
    f:close()
    return path(name)
  end

  it("reads '<path> <label>' lines relative to root, as the same folder streamed", function()
    local folder_ds = data.image_folder { root = root, stream = true, size = 12 }
    local lines = { '# a comment, then a blank line', '' }
    local labels = folder_ds.labels:totable()
    for i, p in ipairs(folder_ds.paths) do lines[#lines + 1] = p:sub(#root + 2) .. ' ' .. labels[i] end
    local ds = data.file_list { list = write_list('train.txt', table.concat(lines, '\n') .. '\n'), root = root, size = 12 }
    assert.are.same(folder_ds.paths, ds.paths)
    same(folder_ds.labels, ds.labels, 'labels')
    assert.are.equal(3, ds.num_classes)
    local opts = { batch_size = 4, views = multicrop(), seed = 2, drop_last = false }
    assert_same_epochs(epoch_of(data.Loader(folder_ds, opts), 0), epoch_of(data.Loader(ds, opts), 0))
    -- unlabelled lists, absolute paths
    local bare = data.file_list { list = write_list('bare.txt', folder_ds.paths[1] .. '\n' .. folder_ds.paths[2] .. '\n') }
    assert.are.equal(2, #bare)
    assert.is_nil(bare.labels)
  end)

  it('names the file and line of a bad entry', function()
    has(err_of(data.file_list, { list = write_list('mixed.txt', 'a.jpg 1\nb.jpg\n') }), 'mixed.txt:2')
    has(err_of(data.file_list, { list = write_list('neg.txt', 'a.jpg -1\n') }), "the label '-1' is not a class number")
    has(err_of(data.file_list, { list = write_list('empty.txt', '# nothing\n') }), 'names no file')
    has(err_of(data.file_list, { list = path('missing.txt') }), 'cannot open the list')
    has(err_of(data.file_list, { list = 'x', colour = 1 }), "unknown option 'colour'")
  end)
end)

describe('a recipe on a streamed image folder', function()
  it('trains SwAV a few steps from train/ and runs the kNN on val/', function()
    local root = 'recipe_folder'
    folder(root .. '/train', 6, 20, 24, true)
    folder(root .. '/val', 2, 20, 24, true)
    local task = ssl_task('swav', {
      data = { name = 'image_folder', root = path(root), size = 16, batch_size = 6 },
      swav = { num_prototypes = 10 }, crops = { size = { 16, 8 }, num = { 2, 2 } },
      run = { dir = tmpdir.path('runs'), name = 'stream' },
    })
    assert.is_true(task.train_set.streamed)
    assert.are.equal(18, #task.train_set)
    cr.train(task)
    assert.are.equal(3, task.iteration)
    assert.is_not_nil(task.metrics.knn_top1)
  end)
end)

describe('a recipe on a file list', function()
  it("trains SimCLR a few steps from data.list and runs the kNN on data.test_list", function()
    local root = folder('list_recipe', 4, 18, 20, true)
    local all = data.image_folder { root = root, stream = true }
    local labels = all.labels:totable()
    local function list(name, from, to)
      local f = assert(io.open(path(name), 'w'))
      for i = from, to do f:write(all.paths[i]:sub(#root + 2), ' ', labels[i], '\n') end
      f:close()
      return path(name)
    end
    local task = ssl_task('simclr', {
      data = { name = 'file_list', root = root, list = list('tr.txt', 1, 8), test_list = list('te.txt', 9, 12),
               size = 16, batch_size = 4 },
      crops = { size = { 16 }, num = { 2 }, min_scale = { 0.3 }, max_scale = { 1 } },
      run = { dir = tmpdir.path('runs'), name = 'list' },
    })
    assert.are.equal('file_list', task.train_set.name)
    cr.train(task)
    assert.are.equal(2, task.iteration)
    assert.is_not_nil(task.metrics.knn_top1)
  end)
end)

describe('streamed memory', function()
  -- peak RSS (VmHWM) of a fresh process that builds the data set of `root` and takes
  -- three multi-crop batches from it
  local function peak_kib(root, stream)
    local script = tmpdir.write('peak.lua', string.format([[
      package.path = 'lua/?.lua;lua/?/init.lua;' .. package.path
      local cr = require 'crescent'
      local ds = cr.data.image_folder { root = %q, stream = %s }
      local T = cr.data.transforms
      local L = cr.data.Loader(ds, { batch_size = 8, workers = 2, seed = 1,
        views = T.multicrop { size_crops = { 32, 16 }, num_crops = { 2, 2 }, crop_scales = { { 0.3, 1 }, { 0.1, 0.3 } } } })
      local it, n = L:iter(0), 0
      while n < 3 and it() do n = n + 1 end
      L:close()
      for line in io.lines('/proc/self/status') do
        local kb = line:match('^VmHWM:%%s*(%%d+)')
        if kb then print(kb) end
      end
    ]], root, tostring(stream)))
    local p = assert(io.popen('luajit ' .. script))
    local out = p:read('*a')
    p:close()
    return assert(tonumber(out:match('(%d+)')), out)
  end

  it('does not grow with the data set: a folder ten times larger peaks within 4 MiB', function()
    local small, large = folder('rss_small', 14, 96, 128), folder('rss_large', 140, 96, 128)
    local s, l = peak_kib(small, true), peak_kib(large, true)
    assert.is_true(math.abs(l - s) < 4096, string.format('streamed: %d KiB against %d KiB', l, s))
    -- the same folders decoded up front differ by their pixels (378 more images of 36 KiB)
    local es, el = peak_kib(small, false), peak_kib(large, false)
    assert.is_true(el - es > 8192, string.format('decoded up front: %d KiB against %d KiB', el, es))
  end)
end)

describe('tar shards', function()
  -- two shards in webdataset's layout (<key>.jpg/.png + <key>.cls) of the images of a
  -- folder, made with GNU tar, and the file list of the same images in the same order
  local src = data.image_folder { root = folder('tar_src', 3, 16, 20, true), stream = true }
  local labels = src.labels:totable()
  local lines = {}
  for shard = 0, 1 do
    local dir = 'tar_stage' .. shard
    mkdir(dir)
    for i = shard * 5 + 1, math.min(shard * 5 + 5, #src) do
      local ext = src.paths[i]:match('%.(%a+)$')
      local key = string.format('s%02d%s', i, i == 2 and string.rep('x', 120) or '')   -- one name > 100 bytes
      assert(os.execute(string.format("cp '%s' '%s/%s.%s'", src.paths[i], path(dir), key, ext)) == 0)
      tmpdir.write(dir .. '/' .. key .. '.cls', tostring(labels[i]) .. '\n')
      lines[#lines + 1] = src.paths[i] .. ' ' .. labels[i]
    end
    assert(os.execute(string.format("cd '%s' && tar -cf '%s' $(ls | sort)", path(dir),
      path(string.format('shard-%02d.tar', shard)))) == 0)
  end
  local list = tmpdir.write('tar_list.txt', table.concat(lines, '\n') .. '\n')

  it('with shuffle_buffer = 0 reads every sample by its offset: the batches of the same images listed as files', function()
    local ds = data.tar_shards { urls = path('shard-{00..01}.tar'), size = 12, shuffle_buffer = 0 }
    assert.are.equal(9, #ds)
    assert.are.same(labels, ds.labels:totable())
    has(ds.paths[2], 'shard-00.tar:s02xxxx')
    local files = data.file_list { list = list, size = 12 }
    local opts = { batch_size = 4, views = multicrop(), seed = 4, drop_last = false, workers = 2 }
    assert_same_epochs(epoch_of(data.Loader(files, opts), 0), epoch_of(data.Loader(ds, opts), 0))
    local plain = { batch_size = 5, augment = true, seed = 1, drop_last = false }
    assert_same_epochs(epoch_of(data.Loader(files, plain), 1), epoch_of(data.Loader(ds, plain), 1))
    -- a held-out part reads its own members
    local rest, held = ds:hold_out(3, 0)
    local b = epoch_of(data.Loader(held, { batch_size = 3, views = multicrop(), shuffle = false }), 0)[1]
    assert.are.equal(3, #b.index)
    assert.are.equal(6, #rest)
    assert.are.same(held.members.names[1], held.paths[1]:match(':(.*)$'))
  end)

  -- six shards of six samples (the folder's images again under new keys)
  local many = {}
  for shard = 0, 5 do
    local dir = 'tar_many' .. shard
    mkdir(dir)
    for j = 1, 6 do
      local i = (shard * 6 + j - 1) % #src + 1
      local key = string.format('m%d_%d', shard, j)
      assert(os.execute(string.format("cp '%s' '%s/%s.%s'", src.paths[i], path(dir), key, src.paths[i]:match('%.(%a+)$'))) == 0)
      tmpdir.write(dir .. '/' .. key .. '.cls', tostring(labels[i]) .. '\n')
    end
    many[#many + 1] = path(string.format('many-%d.tar', shard))
    assert(os.execute(string.format("cd '%s' && tar -cf '%s' $(ls | sort)", path(dir), many[#many])) == 0)
  end

  -- the rows of an epoch in the order the batches hand them out
  local function rows_of(batches)
    local out = {}
    for _, b in ipairs(batches) do
      for _, r in ipairs(b.index:totable()) do out[#out + 1] = r end
    end
    return out
  end

  it('reads each shard front to back through a shuffle buffer: every sample once, the same bytes', function()
    local ds = data.tar_shards { urls = many, size = 12, shuffle_buffer = 5 }
    assert.are.equal(36, #ds)
    assert.are.equal(5, ds.shuffle_buffer)
    local loader = data.Loader(ds, { batch_size = 4, seed = 3, workers = 2 })
    local epoch0 = epoch_of(loader, 0)
    local stats = loader:stream_stats()
    assert.are.same({ members = 36, backward_seeks = 0 }, { members = stats.members, backward_seeks = stats.backward_seeks })
    assert.is_true(stats.peak_members <= 5 + (4 + 1) * 4, 'peak ' .. stats.peak_members)   -- buffer + batches in flight
    local rows = rows_of(epoch0)
    local seen = {}
    for _, r in ipairs(rows) do seen[r] = (seen[r] or 0) + 1 end
    for r = 0, 35 do assert.are.equal(1, seen[r], 'row ' .. r) end
    -- shards are visited whole: a row leaves at most `buffer` places after it was read
    local order, stream = require('crescent.data.shard_order').epoch(ds, { seed = 3, epoch = 0, shuffle = true, size = 36 })
    assert.are.same(rows, order:totable())
    local at = {}
    for k, r in ipairs(stream:totable()) do at[r] = k end
    for k, r in ipairs(rows) do assert.is_true(at[r] <= k + 5, 'row ' .. r .. ' read at ' .. at[r] .. ', out at ' .. k) end
    local shard_of = {}
    for k, r in ipairs(stream:totable()) do shard_of[k] = math.floor(r / 6) end
    for k = 1, 36, 6 do
      for j = k + 1, k + 5 do assert.are.equal(shard_of[k], shard_of[j]) end
    end
    assert.are_not.same(rows, rows_of(epoch_of(loader, 1)))   -- another epoch, another order
    -- the images are those read one by one (shuffle_buffer = 0), row by row
    local by_row = {}
    for _, b in ipairs(epoch_of(data.Loader(data.tar_shards { urls = many, size = 12, shuffle_buffer = 0 },
        { batch_size = 9, seed = 3, workers = 1 }), 0)) do
      for i, r in ipairs(b.index:totable()) do by_row[r] = b.input:select(0, i - 1) end
    end
    for _, b in ipairs(epoch0) do
      for i, r in ipairs(b.index:totable()) do same(by_row[r], b.input:select(0, i - 1), 'row ' .. r) end
    end
  end)

  it('gives the same multi-crop batches for any worker count, and resumes mid-epoch reading only the rest', function()
    local ds = data.tar_shards { urls = many, shuffle_buffer = 7 }
    local function with(workers) return data.Loader(ds, { batch_size = 5, views = multicrop(), seed = 2, workers = workers }) end
    local full = epoch_of(with(1), 1)
    assert_same_epochs(full, epoch_of(with(3), 1))
    local resumed = with(2)
    local tail = epoch_of(resumed, 1, 3)
    assert_same_epochs({ unpack(full, 4) }, tail)
    assert.are.equal(7 * 5 - 3 * 5, resumed:stream_stats().members)   -- drop_last: 7 batches of 5
    assert.are.equal(0, resumed:stream_stats().backward_seeks)
  end)

  it('deals whole shards to the ranks: each reads only its own, all the same number of samples', function()
    local ds = data.tar_shards { urls = many, size = 12, shuffle_buffer = 4 }
    for epoch = 0, 1 do
      local got = {}
      for rank = 0, 3 do
        local loader = data.Loader(ds, { batch_size = 3, seed = 5, workers = 1, shard = { rank = rank, world_size = 4 } })
        assert.are.equal(9, loader:size())
        local rows = rows_of(epoch_of(loader, epoch))
        assert.are.equal(9, #rows)
        local shards = {}
        for _, r in ipairs(rows) do shards[math.floor(r / 6)] = true end
        for sh in pairs(shards) do
          assert.is_nil(got[sh], 'shard ' .. sh .. ' read by two ranks')
          got[sh] = rank
        end
      end
    end
    local err = err_of(function()
      epoch_of(data.Loader(ds, { batch_size = 1, workers = 1, shard = { rank = 6, world_size = 7 } }), 0)
    end)
    has(err, '6 tar shards for 7 ranks: rank 6 reads none')
    has(err_of(require('crescent.data.dataset').StreamedDataset, { paths = { 'a.jpg' }, shuffle_buffer = 4 }), 'leave it 0')
    has(err_of(data.tar_shards, { urls = many, shuffle_buffer = -1 }), 'shuffle_buffer must be an integer')
  end)

  it('feed a recipe: MoCo from data.root shards, the kNN on data.test_root', function()
    local task = ssl_task('moco', {
      data = { name = 'tar_shards', root = path('shard-00.tar'), test_root = path('shard-01.tar'), size = 16,
               batch_size = 4 },
      moco = { queue_length = 8, bn_splits = 2 }, crops = { size = { 16 }, num = { 2 }, min_scale = { 0.3 }, max_scale = { 1 } },
      run = { dir = tmpdir.path('runs'), name = 'tar' },
    })
    assert.are.equal('tar_shards', task.train_set.name)
    cr.train(task)
    assert.are.equal(1, task.iteration)
    assert.is_not_nil(task.metrics.knn_top1)
  end)

  it('names the shard and sample of a bad layout', function()
    has(err_of(data.tar_shards, { urls = path('shard-{00..02}.tar') }), 'no shard')
    local notar = tmpdir.write('notar.tar', string.rep('not a tar archive ', 40))
    has(err_of(data.tar_shards, { urls = { notar } }), 'not a tar archive')
    mkdir('tar_nolabel')
    assert(os.execute(string.format("cp '%s' '%s/a.%s'", src.paths[1], path('tar_nolabel'),
      src.paths[1]:match('%.(%a+)$'))) == 0)
    tmpdir.write('tar_nolabel/b.cls', '1\n')
    assert(os.execute(string.format("cd '%s' && tar -cf '%s' a.* b.cls", path('tar_nolabel'), path('nolabel.tar'))) == 0)
    has(err_of(data.tar_shards, { urls = { path('nolabel.tar') } }), "the sample 'b' has no .jpg")
    has(err_of(data.tar_shards, { urls = 'x.tar', colour = 1 }), "unknown option 'colour'")
  end)
end)

describe('tools/make_image_folder.lua', function()
  it('writes one demo data set in the three layouts, the same images in each', function()
    local dir = tmpdir.path('demo')
    local p = assert(io.popen('luajit tools/make_image_folder.lua ' .. dir .. ' 3 2>&1'))
    local out = p:read('*a')
    p:close()
    has(out, '12 training and 8 validation images')
    local folder_ds = data.image_folder { root = dir .. '/train', stream = true, size = 48 }
    local list = data.file_list { list = 'train.txt', root = dir, size = 48 }
    local shards = data.tar_shards { urls = dir .. '/shards/train-{000..001}.tar', size = 48 }
    assert.are.equal(12, #folder_ds)
    assert.are.equal(12, #list)
    assert.are.equal(12, #shards)
    assert.are.equal(8, #data.tar_shards { urls = dir .. '/shards/val-000.tar' })
    local opts = { batch_size = 12, shuffle = false }
    local a, b = epoch_of(data.Loader(list, opts), 0)[1], epoch_of(data.Loader(folder_ds, opts), 0)[1]
    -- the folder lists class by class, the list file by sample: the same images, sorted alike
    local function by_sum(batch)
      local sums = {}
      for i = 0, 11 do sums[#sums + 1] = batch.input:select(0, i):sum():item() end
      table.sort(sums)
      return sums
    end
    assert.are.same(by_sum(a), by_sum(b))
    assert.are.same(by_sum(a), by_sum(epoch_of(data.Loader(shards, opts), 0)[1]))
  end)
end)
