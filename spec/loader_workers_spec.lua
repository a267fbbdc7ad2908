-- loader_workers_spec — cr.data.Loader's `workers` (csrc/data/pipeline.c): batches from
-- 1, 2 and 3 worker threads equal the synchronous ones bit for bit (plain, augment = true
-- and multi-crop views), in the same order with the same targets; a resume at
-- start_batch; an early `break` then GC, a new iter() and loader:close() stop and join
-- the threads (C counts the threads not yet joined) and free the ring's batches (live tensor
-- count); a worker's error reaches the caller; transform runs on the consumer; bad
-- options are clear errors; and f32 images in [0, 1] give the u8 batches and crops to
-- within float rounding.
local cr = H.cr
local T = cr.data.transforms

local err_of = H.error_of

-- Worker threads started and not yet joined (a C counter: the kernel's thread count in
-- /proc lags a join by a moment).
local C = require('crescent.ffi').C
local function threads() return tonumber(C.cr_data_pipeline_threads()) end

local function max_abs(a, b)
  assert.are.same(a.shape, b.shape)
  return (a:double() - b:double()):abs():max():item()
end

local same, epoch_of = H.assert_equal_tensors, H.epoch_batches

local assert_same_batches = H.assert_same_batches

local ds = cr.data.synthetic { n = 70, shape = { 3, 12, 12 }, num_classes = 7 }
local gray = cr.data.synthetic { n = 40, shape = { 10, 10 }, num_classes = 4, seed = 2 }

local function multicrop()
  return T.multicrop {
    size_crops = { 12, 6 }, num_crops = { 2, 3 }, crop_scales = { { 0.4, 1 }, { 0.1, 0.4 } },
    flip = 0.5, color_jitter = { p = 0.8, brightness = 0.4, contrast = 0.4, saturation = 0.4, hue = 0.1 },
    grayscale = 0.2, blur = { p = 0.5 }, solarize = 0.2,
  }
end

describe('Loader workers', function()
  it('gives the batches of workers = 0 for 1, 2 and 3 workers (plain, augment, views)', function()
    local cases = {
      { batch_size = 16, drop_last = false },
      { batch_size = 8, augment = true, seed = 5 },
      { batch_size = 9, views = multicrop(), seed = 3, drop_last = false },
    }
    for _, opts in ipairs(cases) do
      local function with(w)
        local o = { workers = w }
        for k, v in pairs(opts) do o[k] = v end
        return cr.data.Loader(ds, o)
      end
      local want = epoch_of(with(0), 2)
      assert.is_true(#want >= 4)
      for _, w in ipairs { 1, 2, 3 } do assert_same_batches(want, epoch_of(with(w), 2), opts.views) end
    end
    -- one channel, prefetch 1, more workers than batches
    local want = epoch_of(cr.data.Loader(gray, { batch_size = 16, augment = true, drop_last = false }), 0)
    local l = cr.data.Loader(gray, { batch_size = 16, augment = true, drop_last = false, workers = 3, prefetch = 1 })
    assert_same_batches(want, epoch_of(l, 0))
  end)

  it('resumes at start_batch and keeps the sampler position', function()
    local sync = cr.data.Loader(ds, { batch_size = 8, augment = true, seed = 1 })
    local pool = cr.data.Loader(ds, { batch_size = 8, augment = true, seed = 1, workers = 2 })
    local want = epoch_of(sync, 1)
    local got = epoch_of(pool, 1, 3)
    assert.are.equal(#want - 3, #got)
    for i = 1, #got do
      same(want[i + 3].input, got[i].input, 'input')
      same(want[i + 3].index, got[i].index, 'index')
    end
    assert.are.same({ epoch = 2, batch = 0, seed = 1 }, pool:state_dict())
    -- stop after two batches, save, resume in a new loader
    local it = pool:iter(4)
    it()
    it()
    local saved = pool:state_dict()
    assert.are.same({ epoch = 4, batch = 2, seed = 1 }, saved)
    local again = cr.data.Loader(ds, { batch_size = 8, augment = true, seed = 1, workers = 3 })
    again:load_state_dict(saved)
    local rest = epoch_of(again)
    local full = epoch_of(sync, 4)
    assert.are.equal(#full - 2, #rest)
    same(full[3].input, rest[1].input, 'first resumed batch')
    -- starting at the end gives nothing
    assert.are.equal(0, #epoch_of(pool, 0, pool:num_batches()))
  end)

  it('stops and joins its threads on break + GC, a new iter() and close()', function()
    local loader = cr.data.Loader(ds, { batch_size = 4, views = multicrop(), workers = 2, prefetch = 2 })
    local first = epoch_of(cr.data.Loader(ds, { batch_size = 4, views = multicrop() }), 0)[1]
    -- collect until nothing more dies: garbage left by earlier spec files can take several
    -- cycles (a weak-keyed data set proxy, then its table, then the tensor handles)
    local live
    repeat
      local before = cr.memory_stats().live_tensors
      collectgarbage('collect')
      live = cr.memory_stats().live_tensors
    until live == before
    for round = 1, 4 do
      local base = threads()
      for batch in loader:iter(0) do
        assert.are.equal(base + 2, threads())
        if batch.batch == 0 then same(first.input[3], batch.input[3], 'first batch after a restart') end
        if batch.batch + 1 >= round then break end -- early: at most 4 of 17 batches
      end
      collectgarbage('collect')
      collectgarbage('collect')
      assert.are.equal(base, threads())
      assert.are.equal(live, cr.memory_stats().live_tensors) -- the ring's batches were freed too
    end
    -- a new iter() stops the previous one; calling the old one is an error
    local base = threads()
    local old = loader:iter(0)
    old()
    assert.are.equal(base + 2, threads()) -- 17 batches, 2 slots: both workers still wait for space
    local new = loader:iter(1)
    assert.are.equal(base + 2, threads())
    assert.truthy(err_of(old):find('stopped by loader:close() or a newer loader:iter()', 1, true))
    assert.is_not_nil(new())
    loader:close()
    assert.are.equal(base, threads())
    assert.truthy(err_of(new):find('start a new one with loader:iter()', 1, true))
    -- a full epoch releases the threads as the last batch is handed out
    local n = 0
    for _ in loader:iter(0) do n = n + 1 end
    assert.are.equal(loader:num_batches(), n)
    assert.are.equal(base, threads())
  end)

  it('raises a worker error for its batch, after the batches before it', function()
    local loader = cr.data.Loader(ds, { batch_size = 10, workers = 2 })
    local rows = loader:order(0):totable()
    rows[36] = 1000 -- row 35 is in batch 3
    local bad = cr.tensor(rows, { dtype = 'i64' })
    loader.order = function() return bad end
    local seen = 0
    local ok, e = pcall(function()
      for _ in loader:iter(0) do seen = seen + 1 end
    end)
    assert.is_false(ok)
    assert.are.equal(3, seen)
    assert.truthy(tostring(e):find('index[5] = 1000 is out of range for 70 images', 1, true))
    assert.truthy(tostring(e):find('loader_workers_spec.lua:%d+: Loader: make_batch: index'))
    assert.are.equal(0, threads())
    -- later calls repeat the error
    local it = loader:iter(0)
    for _ = 1, 3 do it() end
    local e1, e2 = err_of(it), err_of(it)
    assert.truthy(e1:find('out of range', 1, true))
    assert.truthy(e2:find('out of range', 1, true))
    loader.order = nil -- the method again
    assert.are.equal(7, #epoch_of(loader, 0))
  end)

  it('runs transform on the consumer side', function()
    local calls = 0
    local loader = cr.data.Loader(ds, { batch_size = 10, workers = 2, transform = function(b)
      calls = calls + 1
      return { input = b.input * 0, batch = b.batch }
    end })
    local out = epoch_of(loader, 0)
    assert.are.equal(7, calls)
    assert.are.equal(0, out[2].input:abs():sum():item())
    assert.are.equal(1, out[2].batch)
  end)

  it('rejects bad options with clear errors', function()
    local function msg(o)
      o.batch_size = 8
      return err_of(cr.data.Loader, ds, o)
    end
    assert.truthy(msg { workers = -1 }:find('workers must be an integer in [0, 64]', 1, true))
    assert.truthy(msg { workers = 1.5 }:find('workers must be an integer in [0, 64]', 1, true))
    assert.truthy(msg { workers = 1000 }:find('got 1000', 1, true))
    assert.truthy(msg { workers = 'two' }:find('option workers must be a number', 1, true))
    assert.truthy(msg { workers = 2, prefetch = 0 }:find('prefetch must be an integer in [1, 1024]', 1, true))
    assert.truthy(msg { workers = 2, prefetch = 2.5 }:find('prefetch must be an integer', 1, true))
    local custom = { apply = function() return {} end }
    assert.truthy(msg { workers = 1, views = custom }:find('views must come from cr.data.transforms.multicrop', 1, true))
    -- errors point at the caller's line
    local ok, e = pcall(function() local l = cr.data.Loader(ds, { batch_size = 8, workers = -1 }); return l end)
    assert.is_false(ok)
    assert.truthy(tostring(e):find('loader_workers_spec.lua:%d+: Loader: workers'))
  end)
end)

describe('float images', function()
  -- a data set like ds with f32 images u8 / 255 (TensorDataset takes u8 only)
  local f32 = cr.data.TensorDataset { images = ds.images, labels = ds.labels, mean = ds._mean, std = ds._std }
  f32.images = ds.images:float() / 255

  it('give the u8 batches within float rounding, with and without workers', function()
    for _, o in ipairs { { augment = true }, { views = multicrop() } } do
      for _, w in ipairs { 0, 2 } do
        local a = epoch_of(cr.data.Loader(ds, { batch_size = 16, augment = o.augment, views = o.views }), 1)
        local b = epoch_of(cr.data.Loader(f32, { batch_size = 16, augment = o.augment, views = o.views, workers = w }), 1)
        assert.are.equal(#a, #b)
        for i = 1, #a do
          same(a[i].target, b[i].target, 'target')
          local xa = o.views and a[i].input or { a[i].input }
          local xb = o.views and b[i].input or { b[i].input }
          for k = 1, #xa do
            local d = max_abs(xa[k], xb[k])
            assert(d < 1e-4, string.format('batch %d input %d differs by %g', i, k, d))
          end
        end
      end
    end
  end)

  it('work in the C calls directly, and other dtypes are refused', function()
    local index = cr.tensor({ 3, 0, 5 }, { dtype = 'i64' })
    local mc = multicrop()
    local a, b = mc:apply(gray.images, index, 1, 2), mc:apply(gray.images:float() / 255, index, 1, 2)
    for k = 1, #a do assert(max_abs(a[k], b[k]) < 1e-4, 'crop ' .. k) end
    local f64 = cr.data.TensorDataset { images = ds.images, labels = ds.labels }
    f64.images = ds.images:double()
    local e = err_of(cr.data.Loader, f64, { batch_size = 8 })
    assert.truthy(e:find("images are f64; pass u8 images (0..255) or f32 images (0..1)", 1, true))
    assert.truthy(err_of(mc.apply, mc, ds.images:int(), index, 0, 0):find('u8 (0..255) or f32 (0..1), got i32', 1, true))
  end)
end)
