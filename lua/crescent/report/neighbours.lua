-- crescent.report.neighbours — what a run's trunk sees, for the run report: its features
-- of the first `train` training and `test` test images (the run's own data set, read as
-- its config.lua says, the weights from checkpoints/latest.safetensors), the nearest
-- training images of a few test queries (cosine), and the confusion matrix of the
-- weighted kNN (crescent.ssl.knn, the run's k and temperature) over those test images.
-- Images become small BMP data URIs (8-bit grey with a palette, or 24-bit colour), so the
-- page stays one file.
--   local nb = neighbours.compute(run, {train = 10000, test = 1000, queries = 8, k = 8})
--   -- nil, why (no checkpoint, a streamed data set, ...) or {queries = {{image =, label =,
--   --   neighbours = {{image =, label =, similarity =}, ...}}, ...}, confusion = {{...}},
--   --   classes = {names}, accuracy = %, train = n, test = m}
local cr = require 'crescent'
local util = require 'crescent.util'

local M = {}

local B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'
local function base64(s)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local chars = {}
    for k = 3, 0, -1 do
      local v = math.floor(n / 64 ^ k) % 64
      chars[#chars + 1] = B64:sub(v + 1, v + 1)
    end
    if not b then chars[3], chars[4] = '=', '=' elseif not c then chars[4] = '=' end
    out[#out + 1] = table.concat(chars)
  end
  return table.concat(out)
end
M.base64 = base64

local function le(v, bytes)
  local t = {}
  for i = 1, bytes do
    t[i] = string.char(v % 256)
    v = math.floor(v / 256)
  end
  return table.concat(t)
end

-- A BMP data URI of a u8 image given as a Lua table of rows ({[y][x] = v} grey, or
-- {[y][x] = {r, g, b}}), h x w.
function M.bmp_uri(pixels, h, w, colour)
  local bpp = colour and 3 or 1
  local row = w * bpp
  local pad = (4 - row % 4) % 4
  local palette = colour and '' or (function()
    local p = {}
    for v = 0, 255 do p[#p + 1] = string.char(v, v, v, 0) end
    return table.concat(p)
  end)()
  local data = {}
  for y = h, 1, -1 do   -- bottom-up
    local r = pixels[y]
    for x = 1, w do
      local v = r[x]
      data[#data + 1] = colour and string.char(v[3], v[2], v[1]) or string.char(v)
    end
    data[#data + 1] = string.rep('\0', pad)
  end
  local body = table.concat(data)
  local offset = 14 + 40 + #palette
  local header = 'BM' .. le(offset + #body, 4) .. le(0, 4) .. le(offset, 4) ..
    le(40, 4) .. le(w, 4) .. le(h, 4) .. le(1, 2) .. le(bpp * 8, 2) .. le(0, 4) .. le(#body, 4) ..
    le(2835, 4) .. le(2835, 4) .. le(colour and 0 or 256, 4) .. le(0, 4)
  return 'data:image/bmp;base64,' .. base64(header .. palette .. body)
end

-- Image i (0-based) of an in-memory data set as a data URI.
local function image_uri(ds, i)
  local img = ds.images:select(0, i)
  if img.dtype ~= 'u8' then img = (img * 255):clamp(0, 255):byte() end
  local t = img:totable()
  if img.ndim == 2 then return M.bmp_uri(t, img.shape[1], img.shape[2], false) end
  local C, H, W = img.shape[1], img.shape[2], img.shape[3]
  if C == 1 then return M.bmp_uri(t[1], H, W, false) end
  local rows = {}
  for y = 1, H do
    rows[y] = {}
    for x = 1, W do rows[y][x] = { t[1][y][x], t[2][y][x], t[3][y][x] } end
  end
  return M.bmp_uri(rows, H, W, true)
end

function M.compute(run, opts)
  opts = opts or {}
  local ckpt = run.dir .. '/checkpoints/latest.safetensors'
  if not util.file_exists(ckpt) then return nil, 'no checkpoints/latest.safetensors' end
  local cfg = run.config
  if type(cfg) ~= 'table' or type(cfg.model) ~= 'table' or type(cfg.data) ~= 'table' then
    return nil, 'no config.lua with model and data sections'
  end
  local recipe = cr.recipe.ssl
  local frozen = cr.config.merge(recipe.frozen_schema().defaults, {
    data = cfg.data,
    model = { arch = cfg.model.arch, width = cfg.model.width, stem = cfg.model.stem, patch = cfg.model.patch, init = ckpt },
  })
  frozen.data.val_split = 0
  local ok, train_set, test_set = pcall(recipe.datasets, frozen)
  if not ok then return nil, 'its data set does not load here: ' .. tostring(train_set) end
  if not test_set or not train_set.images or not test_set.images then
    return nil, 'its data set is streamed from files (the report shows in-memory data sets only)'
  end
  if not train_set.labels or not test_set.labels then return nil, 'its data set has no labels' end
  local tr, te = train_set:head(opts.train or 10000), test_set:head(opts.test or 1000)
  local n, m = #tr, #te
  local okt, forward, trunk = pcall(recipe.frozen_trunk, frozen, train_set, 'cpu')   -- prints its load report
  if not okt then return nil, 'its checkpoint does not load: ' .. tostring(forward) end
  local ftr = cr.ssl.extract_features(trunk, tr, { forward = forward })
  local fte = cr.ssl.extract_features(trunk, te, { forward = forward })
  local knn = cfg.knn or {}
  local classes = train_set.classes or {}
  local C = train_set.num_classes or (math.max(tr.labels:max():item(), te.labels:max():item()) + 1)
  local top1, _, pred = require('crescent.ssl.knn').classify(ftr, tr.labels, fte, te.labels,
    { k = math.min(knn.k or 200, n), temperature = knn.temperature or 0.1, num_classes = C, predictions = true })
  local confusion = {}
  for a = 1, C do
    confusion[a] = {}
    for b = 1, C do confusion[a][b] = 0 end
  end
  local y, p = te.labels:totable(), pred:totable()
  for i = 1, m do confusion[y[i] + 1][p[i] + 1] = confusion[y[i] + 1][p[i] + 1] + 1 end
  -- queries: the first test image of each class (up to `queries`), their k nearest
  local k, want, picked, seen = opts.k or 8, opts.queries or 8, {}, {}
  for i = 1, m do
    if #picked >= want then break end
    if not seen[y[i]] then seen[y[i]] = true picked[#picked + 1] = i - 1 end
  end
  local queries = {}
  cr.no_grad(function()
    local a, b = fte:normalize({ dim = 1 }), ftr:normalize({ dim = 1 })
    local trl = tr.labels:totable()
    for _, qi in ipairs(picked) do
      local sims, idx = a:narrow(0, qi, 1):mm(b:t()):topk(math.min(k, n), 1)
      local q = { image = image_uri(te, qi), label = y[qi + 1], neighbours = {} }
      local s, ix = sims:reshape({ -1 }):totable(), idx:reshape({ -1 }):totable()
      for j = 1, #ix do
        q.neighbours[j] = { image = image_uri(tr, ix[j]), label = trl[ix[j] + 1], similarity = s[j] }
      end
      queries[#queries + 1] = q
    end
  end)
  local names = {}
  for c = 1, C do names[c] = classes[c] or tostring(c - 1) end
  return { queries = queries, confusion = confusion, classes = names, accuracy = top1, train = n, test = m }
end

return M
