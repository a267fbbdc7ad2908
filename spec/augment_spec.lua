-- augment_spec — cr.data.transforms (csrc/data/augment*.c): shapes and value ranges,
-- determinism under a fixed seed for 1 and 2 threads, different crops per epoch / index /
-- crop index, identity settings against a plain resize (and against make_batch), random
-- crops against a plain-Lua antialiased bilinear resize of the drawn box, each colour op
-- against hand-computed values on tiny images, blur against a plain-Lua 2-D gaussian with
-- reflect padding, the Loader's views option, and the config errors.
local cr = H.cr
local T = cr.data.transforms

local err_of = H.error_of

-- u8 images [N, C, H, W] (or [N, H, W] when c is nil) with a fixed pattern.
local function images(n, c, h, w)
  local vals = {}
  local planes = c or 1
  for i = 1, n * planes * h * w do vals[i] = (i * 37 + math.floor(i / 7) * 11) % 256 end
  local shape = c and { n, c, h, w } or { n, h, w }
  return cr.tensor(vals, { dtype = 'u8' }):view(shape)
end

local function idx(list) return cr.tensor(list, { dtype = 'i64' }) end

-- A spec with every op off: output = resize(crop) / 255 (mean 0, std 1).
local function plain(o)
  local t = { size_crops = { o.size or 8 }, num_crops = { o.n or 1 }, crop_scales = { o.scale or { 1, 1 } },
              ratio = o.ratio or { 1, 1 }, mean = 0, std = 1 }
  for k, v in pairs(o) do
    if k ~= 'size' and k ~= 'n' and k ~= 'scale' then t[k] = v end
  end
  return T.multicrop(t)
end

-- Plain-Lua reference of torchvision's antialiased bilinear resize (PIL's triangle filter,
-- support scaled when shrinking), in double, as a direct 2-D weighted sum.
local function weights(insize, outsize)
  local scale = insize / outsize
  local support = math.max(scale, 1)
  local inv = scale >= 1 and 1 / scale or 1
  local ws = {}
  for i = 0, outsize - 1 do
    local center = scale * (i + 0.5)
    local lo = math.max(0, math.floor(center - support + 0.5))
    local hi = math.min(insize, math.floor(center + support + 0.5))
    local row, total = {}, 0
    for j = lo, hi - 1 do
      local v = math.max(0, 1 - math.abs((j - center + 0.5) * inv))
      row[j] = v
      total = total + v
    end
    for j = lo, hi - 1 do row[j] = row[j] / total end
    ws[i] = row
  end
  return ws
end

-- plane: 0-based 2-D Lua array (plane[y][x]); box {top, left, height, width}; flip.
local function ref_resize(plane, box, oh, ow, flip)
  local wy, wx = weights(box.height, oh), weights(box.width, ow)
  local out = {}
  for y = 0, oh - 1 do
    out[y] = {}
    for x = 0, ow - 1 do
      local xs = flip and (ow - 1 - x) or x
      local acc = 0
      for i, a in pairs(wy[y]) do
        for j, b in pairs(wx[xs]) do acc = acc + a * b * plane[box.top + i][box.left + j] end
      end
      out[y][x] = acc
    end
  end
  return out
end

-- The 0-based plane (c, of image n) of a u8 tensor [N, C, H, W] as a Lua array.
local function plane_of(t, n, c)
  local tab = t:totable()[n + 1][c + 1]
  local p = {}
  for y = 1, #tab do
    p[y - 1] = {}
    for x = 1, #tab[y] do p[y - 1][x - 1] = tab[y][x] end
  end
  return p
end

local function to_nested(p, scale)
  local t = {}
  for y = 0, #p do
    t[y + 1] = {}
    for x = 0, #p[y] do t[y + 1][x + 1] = p[y][x] * scale end
  end
  return t
end

describe('multicrop', function()
  local swav = {
    size_crops = { 28, 14 }, num_crops = { 2, 4 }, crop_scales = { { 0.4, 1 }, { 0.1, 0.4 } }, flip = 0.5,
    color_jitter = { p = 0.8, brightness = 0.4, contrast = 0.4, saturation = 0.4, hue = 0.1 },
    grayscale = 0.2, blur = { p = 0.5, sigma = { 0.1, 2 } }, solarize = 0.2,
    mean = { 0.5, 0.4, 0.3 }, std = { 0.25, 0.2, 0.3 },
  }

  it('gives total_num_crops f32 crops of the given sizes, global crops first, in range', function()
    local mc = T.multicrop(swav)
    assert.are.equal(6, mc.num_crops)
    local imgs = images(12, 3, 32, 32)
    local crops = mc:apply(imgs, idx { 3, 0, 11, 5, 5 }, 7, 2)
    assert.are.equal(6, #crops)
    for k = 1, 6 do
      local s = k <= 2 and 28 or 14
      assert.are.same({ 5, 3, s, s }, crops[k].shape)
      assert.are.equal('f32', crops[k].dtype)
      -- (x / 255 - mean) / std with x in [0, 255]
      for c = 0, 2 do
        local ch = crops[k]:select(1, c)
        local lo, hi = -swav.mean[c + 1] / swav.std[c + 1], (1 - swav.mean[c + 1]) / swav.std[c + 1]
        assert.is_true(ch:min():item() >= lo - 1e-5 and ch:max():item() <= hi + 1e-5)
      end
    end
    -- the same sample twice in a batch gets the same crops
    H.assert_close(crops[4]:select(0, 3), crops[4]:select(0, 4), 0, 0)
    -- apply_groups: the crops of a size concatenated, crop-major
    local groups = mc:apply_groups(imgs, idx { 3, 0, 11, 5, 5 }, 7, 2)
    assert.are.same({ 10, 3, 28, 28 }, groups[1].shape)
    assert.are.same({ 20, 3, 14, 14 }, groups[2].shape)
    H.assert_close(groups[2]:narrow(0, 5, 5), crops[4], 0, 0)
  end)

  it('is deterministic for a seed and the same on 1 and 2 threads', function()
    local mc = T.multicrop(swav)
    local imgs = images(64, 3, 32, 32)
    local order = {}
    for i = 1, 64 do order[i] = (i * 17) % 64 end
    local before = cr.get_num_threads and cr.get_num_threads() or nil
    cr.set_num_threads(1)
    local one = mc:apply(imgs, idx(order), 5, 1)
    cr.set_num_threads(2)
    local two = mc:apply(imgs, idx(order), 5, 1)
    local again = mc:apply(imgs, idx(order), 5, 1)
    if before then cr.set_num_threads(before) end
    for k = 1, 6 do
      H.assert_close(one[k], two[k], 0, 0)
      H.assert_close(one[k], again[k], 0, 0)
    end
    -- a sample's crops do not depend on the batch it lands in
    local single = mc:apply(imgs, idx { order[10] }, 5, 1)
    for k = 1, 6 do H.assert_close(single[k]:select(0, 0), one[k]:select(0, 9), 0, 0) end
  end)

  it('draws differently per epoch, per sample index, per crop index and per seed', function()
    local mc = T.multicrop(swav)
    local imgs = images(2, 3, 32, 32)
    -- two identical images: indices 0 and 1 differ only through the draws
    local same = cr.cat({ imgs:narrow(0, 0, 1), imgs:narrow(0, 0, 1) }, 0):contiguous()
    local a = mc:apply(same, idx { 0, 1 }, 3, 0)
    local b = mc:apply(same, idx { 0, 1 }, 3, 1)
    local c = mc:apply(same, idx { 0, 1 }, 4, 0)
    for k = 1, 6 do
      assert.is_true(H.max_diff(a[k]:select(0, 0), a[k]:select(0, 1)) > 1e-3, 'index')
      assert.is_true(H.max_diff(a[k], b[k]) > 1e-3, 'epoch')
      assert.is_true(H.max_diff(a[k], c[k]) > 1e-3, 'seed')
    end
    assert.is_true(H.max_diff(a[1], a[2]) > 1e-3, 'crop index')
    local d0, d1 = mc:draw(32, 32, 3, 0, 0, 0), mc:draw(32, 32, 3, 0, 0, 1)
    assert.are_not.same(d0, d1)
  end)

  it('with scale {1, 1}, ratio {1, 1} and no ops is a plain resize (and make_batch at the same size)', function()
    local imgs = images(3, 3, 12, 12)
    for _, size in ipairs { 12, 5, 7, 20 } do
      local out = plain { size = size }:apply(imgs, idx { 2, 0 }, 1, 0)[1]
      for b, row in ipairs { 2, 0 } do
        for c = 0, 2 do
          local want = ref_resize(plane_of(imgs, row, c), { top = 0, left = 0, height = 12, width = 12 }, size, size, false)
          H.assert_close(out:select(0, b - 1):select(0, c), to_nested(want, 1 / 255), 2e-6, 1e-5,
            'size ' .. size)
        end
      end
    end
    -- identical to the batch assembly of the Loader when nothing changes the pixels
    local ds = cr.data.TensorDataset { images = imgs, mean = { 0.1, 0.2, 0.3 }, std = { 0.5, 0.6, 0.7 } }
    local loader = cr.data.Loader(ds, { batch_size = 3, shuffle = false })
    local batch = loader:make_batch(idx { 0, 1, 2 }, 0)
    local mc = T.multicrop { size_crops = { 12 }, num_crops = { 1 }, crop_scales = { { 1, 1 } }, ratio = { 1, 1 },
                             mean = { 0.1, 0.2, 0.3 }, std = { 0.5, 0.6, 0.7 } }
    H.assert_close(mc:apply(imgs, idx { 0, 1, 2 }, 0, 0)[1], batch.input, 1e-6, 1e-6)
  end)

  it('cuts the drawn box and resizes it like torchvision (antialiased bilinear), flipped when drawn', function()
    local imgs = images(4, nil, 28, 28)
    local mc = plain { size = 14, n = 3, scale = { 0.1, 0.6 }, ratio = { 3 / 4, 4 / 3 }, flip = 0.5 }
    local crops = mc:apply(imgs, idx { 1, 3 }, 11, 4)
    local flips = 0
    for k = 0, 2 do
      for b, row in ipairs { 1, 3 } do
        local d = mc:draw(28, 28, 11, 4, row, k)
        assert.is_true(d.top >= 0 and d.left >= 0 and d.top + d.height <= 28 and d.left + d.width <= 28)
        local area = d.height * d.width / (28 * 28)
        assert.is_true(area > 0.08 and area < 0.62, 'area ' .. area)
        if d.flip then flips = flips + 1 end
        local p = {}
        local tab = imgs:totable()[row + 1]
        for y = 1, 28 do
          p[y - 1] = {}
          for x = 1, 28 do p[y - 1][x - 1] = tab[y][x] end
        end
        local want = ref_resize(p, d, 14, 14, d.flip)
        H.assert_close(crops[k + 1]:select(0, b - 1):select(0, 0), to_nested(want, 1 / 255), 2e-6, 1e-5)
      end
    end
    assert.is_true(flips > 0 and flips < 6, 'flips ' .. flips)
  end)

  it('falls back to the central crop when no attempt fits (torchvision)', function()
    -- a 4 x 40 image, ratio {1, 1}: a square of >= 90% of the area never fits
    local mc = plain { size = 4, scale = { 0.9, 1 }, ratio = { 1, 1 } }
    local d = mc:draw(4, 40, 0, 0, 0, 0)
    -- in_ratio 10 > 1: h = 4, w = round(4 * 1) = 4, centred
    assert.are.same({ 0, 18, 4, 4 }, { d.top, d.left, d.height, d.width })
  end)
end)

describe('colour ops on tiny images', function()
  -- a 1 x 2 RGB image (an N = 1 batch) and scale/ratio {1, 1} crops of its own size
  local function rgb(pixels)   -- {{r, g, b}, ...} -> u8 [1, 3, 1, #pixels]
    local vals = {}
    for c = 1, 3 do
      for _, p in ipairs(pixels) do vals[#vals + 1] = p[c] end
    end
    return cr.tensor(vals, { dtype = 'u8' }):view(1, 3, 1, #pixels)
  end
  local function run(img, o)
    o.size_crops = { { img:size(-2), img:size(-1) } }
    local r = img:size(-1) / img:size(-2)
    o.num_crops, o.crop_scales, o.ratio, o.mean, o.std = { 1 }, { { 1, 1 } }, { r, r }, 0, 1
    local mc = T.multicrop(o)
    return mc:apply(img, idx { 0 }, 9, 0)[1]:select(0, 0), mc:draw(img:size(-2), img:size(-1), 9, 0, 0, 0)
  end
  local function clamp(v) return math.max(0, math.min(255, v)) end
  local px = { { 200, 100, 50 }, { 10, 250, 128 } }

  it('brightness multiplies and clamps', function()
    local out, d = run(rgb(px), { color_jitter = { p = 1, brightness = 0.5 } })
    assert.is_true(d.jitter and d.brightness >= 0.5 and d.brightness <= 1.5 and d.brightness ~= 1)
    local want = {}
    for c = 1, 3 do want[c] = { { clamp(d.brightness * px[1][c]) / 255, clamp(d.brightness * px[2][c]) / 255 } } end
    H.assert_close(out, want, 1e-6, 1e-6)
  end)

  it('contrast blends with the mean grey level (0.299, 0.587, 0.114)', function()
    local out, d = run(rgb(px), { color_jitter = { p = 1, contrast = 0.8 } })
    local mean = 0
    for _, p in ipairs(px) do mean = mean + (0.299 * p[1] + 0.587 * p[2] + 0.114 * p[3]) / 2 end
    local f = d.contrast
    local want = {}
    for c = 1, 3 do
      want[c] = { { clamp(f * px[1][c] + (1 - f) * mean) / 255, clamp(f * px[2][c] + (1 - f) * mean) / 255 } }
    end
    H.assert_close(out, want, 2e-6, 1e-5)
  end)

  it('saturation blends each pixel with its grey; hue rotates the hue (colorsys-style reference)', function()
    local out, d = run(rgb(px), { color_jitter = { p = 1, saturation = 0.9 } })
    local f, want = d.saturation, { {}, {}, {} }
    for c = 1, 3 do want[c][1] = {} end
    for i, p in ipairs(px) do
      local g = 0.299 * p[1] + 0.587 * p[2] + 0.114 * p[3]
      for c = 1, 3 do want[c][1][i] = clamp(f * p[c] + (1 - f) * g) / 255 end
    end
    H.assert_close(out, want, 2e-6, 1e-5)

    -- Python's colorsys.rgb_to_hsv / hsv_to_rgb, transcribed
    local function rgb_to_hsv(r, g, b)
      local maxc, minc = math.max(r, g, b), math.min(r, g, b)
      if maxc == minc then return 0, 0, maxc end
      local s = (maxc - minc) / maxc
      local rc, gc, bc = (maxc - r) / (maxc - minc), (maxc - g) / (maxc - minc), (maxc - b) / (maxc - minc)
      local h
      if r == maxc then h = bc - gc elseif g == maxc then h = 2 + rc - bc else h = 4 + gc - rc end
      return (h / 6) % 1, s, maxc
    end
    local function hsv_to_rgb(h, s, v)
      local i = math.floor(h * 6)
      local f2 = h * 6 - i
      local p, q, t = v * (1 - s), v * (1 - s * f2), v * (1 - s * (1 - f2))
      i = i % 6
      if i == 0 then return v, t, p elseif i == 1 then return q, v, p elseif i == 2 then return p, v, t
      elseif i == 3 then return p, q, v elseif i == 4 then return t, p, v end
      return v, p, q
    end
    local hout, hd = run(rgb(px), { color_jitter = { p = 1, hue = 0.4 } })
    assert.is_true(math.abs(hd.hue) <= 0.4 and hd.hue ~= 0)
    local hwant = { { {} }, { {} }, { {} } }
    for i, p in ipairs(px) do
      local h, s, v = rgb_to_hsv(p[1] / 255, p[2] / 255, p[3] / 255)
      local r, g, b = hsv_to_rgb((h + hd.hue) % 1, s, v)
      hwant[1][1][i], hwant[2][1][i], hwant[3][1][i] = r, g, b
    end
    H.assert_close(hout, hwant, 1e-5, 1e-5)
  end)

  it('runs the jitter ops in the drawn order (brightness then contrast differs from the reverse)', function()
    local img = rgb(px)
    local seen = {}
    for seed = 0, 40 do
      local mc = T.multicrop { size_crops = { { 1, 2 } }, num_crops = { 1 }, crop_scales = { { 1, 1 } }, ratio = { 2, 2 },
                               color_jitter = { p = 1, brightness = 0.9, contrast = 0.9 }, mean = 0, std = 1 }
      local d = mc:draw(1, 2, seed, 0, 0, 0)
      local pos = {}
      for k, op in ipairs(d.order) do pos[op] = k end
      local bfirst = pos[0] < pos[1]
      seen[bfirst] = true
      local mean, want = 0, {}
      local x = {}
      for i, p in ipairs(px) do x[i] = { p[1], p[2], p[3] } end
      local function bright()
        for _, p in ipairs(x) do for c = 1, 3 do p[c] = clamp(d.brightness * p[c]) end end
      end
      local function contrast()
        mean = 0
        for _, p in ipairs(x) do mean = mean + (0.299 * p[1] + 0.587 * p[2] + 0.114 * p[3]) / 2 end
        for _, p in ipairs(x) do for c = 1, 3 do p[c] = clamp(d.contrast * p[c] + (1 - d.contrast) * mean) end end
      end
      if bfirst then bright(); contrast() else contrast(); bright() end
      for c = 1, 3 do want[c] = { { x[1][c] / 255, x[2][c] / 255 } } end
      H.assert_close(mc:apply(img, idx { 0 }, seed, 0)[1]:select(0, 0), want, 1e-5, 1e-5)
    end
    assert.is_true(seen[true] and seen[false], 'both orders drawn')
  end)

  it('grayscale uses 0.299, 0.587, 0.114 on all three channels; saturation/hue/grayscale leave grey images alone', function()
    local out = run(rgb(px), { grayscale = 1 })
    local want = {}
    for c = 1, 3 do
      want[c] = { {} }
      for i, p in ipairs(px) do want[c][1][i] = (0.299 * p[1] + 0.587 * p[2] + 0.114 * p[3]) / 255 end
    end
    H.assert_close(out, want, 1e-6, 1e-6)
    local grey = cr.tensor({ { { 10, 200, 77 } } }, { dtype = 'u8' })   -- [1, 1, 3]
    local g = run(grey, { grayscale = 1, color_jitter = { p = 1, saturation = 0.9, hue = 0.5 } })
    assert.are.same({ 1, 1, 3 }, g.shape)
    H.assert_close(g, { { { 10 / 255, 200 / 255, 77 / 255 } } }, 1e-7, 0)
  end)

  it('solarize inverts values >= the threshold (128 by default)', function()
    local img = cr.tensor({ { { 0, 127, 128, 255, 200 } } }, { dtype = 'u8' })
    local out = run(img, { solarize = 1 })
    H.assert_close(out, { { { 0, 127 / 255, 127 / 255, 0, 55 / 255 } } }, 1e-7, 0)
    local out2 = run(img, { solarize = { p = 1, threshold = 200 } })
    H.assert_close(out2, { { { 0, 127 / 255, 128 / 255, 0, 55 / 255 } } }, 1e-7, 0)
  end)

  it('blur keeps a constant image constant and matches a 2-D gaussian with reflect padding', function()
    local const = cr.full({ 1, 3, 9, 9 }, 173):to('u8')
    local out = run(const, { blur = { p = 1, sigma = { 0.5, 3 } } })
    H.assert_close(out, cr.full({ 3, 9, 9 }, 173 / 255), 2e-6, 0)
    -- an off-centre impulse in a 7 x 7 grey image, sigma 1: kernel 7 taps (2 ceil(3) + 1)
    local vals = {}
    for i = 1, 49 do vals[i] = 0 end
    vals[1 * 7 + 2 + 1] = 255   -- (y, x) = (1, 2)
    local img = cr.tensor(vals, { dtype = 'u8' }):view(1, 7, 7)
    local blurred, d = run(img, { blur = { p = 1, sigma = { 1, 1 } } })
    assert.are.equal(7, d.ksize)
    local k, sum = {}, 0
    for i = -3, 3 do k[i] = math.exp(-0.5 * i * i); sum = sum + k[i] end
    for i = -3, 3 do k[i] = k[i] / sum end
    local function reflect(i) if i < 0 then return -i elseif i > 6 then return 12 - i end return i end
    local want = { {} }
    for y = 0, 6 do
      want[1][y + 1] = {}
      for x = 0, 6 do
        local acc = 0
        for a = -3, 3 do
          for b = -3, 3 do
            if reflect(y + a) == 1 and reflect(x + b) == 2 then acc = acc + k[a] * k[b] * 255 end
          end
        end
        want[1][y + 1][x + 1] = acc / 255
      end
    end
    H.assert_close(blurred, want, 1e-6, 1e-5)
    -- the kernel is clipped to 2 min(h, w) - 1 taps on small crops
    local _, small = run(cr.zeros({ 1, 3, 3 }):to('u8'), { blur = { p = 1, sigma = { 2, 2 } } })
    assert.are.equal(5, small.ksize)
  end)
end)

describe('two_views and the Loader', function()
  it('two_views gives two global crops; the Loader hands them out as batch.input', function()
    local imgs = images(10, nil, 28, 28)
    local labels = cr.tensor({ 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 }, { dtype = 'i64' })
    local ds = cr.data.TensorDataset { images = imgs, labels = labels, mean = 0.5, std = 0.25 }
    local mv = T.two_views { size = 20, scale = { 0.2, 1 }, flip = 0.5,
                             color_jitter = { p = 0.8, brightness = 0.4, contrast = 0.4 }, blur = { p = 0.5 } }
    assert.are.equal(2, mv.num_crops)
    local loader = cr.data.Loader(ds, { batch_size = 4, seed = 3, views = mv })
    local n = 0
    for batch in loader:iter(1) do
      n = n + 1
      assert.are.equal(2, #batch.input)
      assert.are.same({ 4, 1, 20, 20 }, batch.input[1].shape)
      assert.are.equal(4, batch.size)
      assert.are.same(batch.index:totable(), batch.target:totable())
      -- the data set's mean/std normalise: values in [-2, 2]
      assert.is_true(batch.input[2]:min():item() >= -2 - 1e-5 and batch.input[2]:max():item() <= 2 + 1e-5)
      -- what apply gives for the same (seed, epoch, index)
      local direct = mv:apply(imgs, batch.index, 3, 1, { mean = 0.5, std = 0.25 })
      H.assert_close(batch.input[1], direct[1], 0, 0)
    end
    assert.are.equal(2, n)
    assert.truthy(err_of(cr.data.Loader, ds, { batch_size = 4, views = {} }):find('views must be a transform', 1, true))
  end)
end)

describe('config errors', function()
  local base = { size_crops = { 28, 14 }, num_crops = { 2, 4 }, crop_scales = { { 0.4, 1 }, { 0.1, 0.4 } } }
  local function with(o)
    local t = {}
    for k, v in pairs(base) do t[k] = v end
    for k, v in pairs(o) do t[k] = v end
    return t
  end
  local function msg(o) return err_of(T.multicrop, with(o)) end

  it('names the problem', function()
    assert.truthy(msg { crop_scales = { { 0.4, 1 }, { 0, 0.4 } } }
      :find('crop_scales[2] = {0, 0.4} must satisfy 0 < lo <= hi <= 1', 1, true))
    assert.truthy(msg { crop_scales = { { 0.4, 1.5 }, { 0.1, 0.4 } } }:find('crop_scales[1]', 1, true))
    assert.truthy(msg { crop_scales = { { 0.5, 0.4 }, { 0.1, 0.4 } } }:find('crop_scales[1]', 1, true))
    assert.truthy(msg { size_crops = {} }:find('size_crops must be a non-empty list, got an empty list', 1, true))
    assert.truthy(msg { num_crops = { 2 } }:find('must have the same length, got 2, 1 and 2', 1, true))
    assert.truthy(msg { num_crops = { 2, 0 } }:find('num_crops[2] must be a positive integer', 1, true))
    assert.truthy(msg { size_crops = { 28, 0 } }:find('size_crops[2] must be a positive integer', 1, true))
    assert.truthy(msg { total_num_crops = 5 }:find('total_num_crops = 5 but num_crops sums to 6', 1, true))
    assert.truthy(msg { crops_for_assign = { 0, 6 } }:find('crops_for_assign[2] = 6 is not a crop index in [0, 6)', 1, true))
    assert.truthy(msg { crops_for_assign = {} }:find('crops_for_assign must be a non-empty list', 1, true))
    assert.truthy(msg { flip = 1.5 }:find('flip must be a probability in [0, 1], got 1.5', 1, true))
    assert.truthy(msg { color_jitter = { p = 0.8, hue = 0.7 } }:find('color_jitter.hue must be a number in [0, 0.5]', 1, true))
    assert.truthy(msg { color_jitter = { p = 0.8, brightnes = 0.4 } }:find("unknown color_jitter option 'brightnes'", 1, true))
    assert.truthy(msg { blur = { p = 0.5, sigma = { 2, 1 } } }:find('blur.sigma {2, 1} is out of range', 1, true))
    assert.truthy(msg { ratio = { 0, 1 } }:find('ratio {0, 1} is out of range', 1, true))
    assert.truthy(msg { sizes = 1 }:find("unknown option 'sizes'", 1, true))
    assert.truthy(msg { mean = { 1, 2 } }:find('mean must be a number or a list of 1 or 3 numbers', 1, true))
    assert.truthy(err_of(T.two_views, { scale = { 0.2, 1 } }):find('size is required', 1, true))
    -- errors point at the caller's line
    local ok, e = pcall(function() local m = T.multicrop(with { flip = 2 }); return m end)
    assert.is_false(ok)
    assert.truthy(tostring(e):find('augment_spec.lua:%d+: transforms.multicrop: flip'))
  end)

  it('rejects bad inputs at apply time', function()
    local mc = T.multicrop(with { mean = { 0.5, 0.5, 0.5 }, std = { 0.2, 0.2, 0.2 } })
    local imgs = images(4, 1, 16, 16)
    assert.truthy(err_of(mc.apply, mc, imgs, idx { 0 }, 0, 0):find('mean has 3 values but the images have 1 channel', 1, true))
    local ok = T.multicrop(base)
    assert.truthy(err_of(ok.apply, ok, imgs, idx { 4 }, 0, 0):find('index[0] = 4 is out of range for 4 images', 1, true))
    assert.truthy(err_of(ok.apply, ok, imgs:double(), idx { 0 }, 0, 0):find('u8 (0..255) or f32 (0..1), got f64', 1, true))
    assert.truthy(err_of(ok.apply, ok, images(2, 2, 8, 8), idx { 0 }, 0, 0):find('C = 1 or 3', 1, true))
    assert.truthy(err_of(ok.apply, ok, imgs, idx { 0 }, -1, 0):find('seed must be a non-negative integer', 1, true))
    assert.truthy(err_of(ok.apply, ok, imgs, { 0 }, 0, 0):find('index must be an i64 tensor', 1, true))
    -- a crop size larger than the image is fine: RandomResizedCrop resizes
    assert.are.same({ 1, 1, 28, 28 }, ok:apply(images(1, 1, 8, 8), idx { 0 }, 0, 0)[1].shape)
  end)
end)
