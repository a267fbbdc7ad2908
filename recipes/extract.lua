-- recipes/extract.lua — the feature extraction engine as a recipe: a frozen trunk (random,
-- loaded from model.init, or raw pixels) run over a split of the data set, un-augmented,
-- in eval mode; the features and labels are written to a safetensors file
-- (`features` f32 [N, D], `labels` i64 [N]) that PyTorch, NumPy or cr.load can read.
--
--   luajit recipes/extract.lua model.init=runs/swav/checkpoints/latest.safetensors data.split=test
--   luajit recipes/extract.lua model.init=... data.split=both extract.out=feats/swav
--
-- On k ranks (mpirun -np k luajit recipes/extract.lua ...) each rank extracts a share and
-- rank 0 writes the whole. Files: <extract.out>_<split>.safetensors (extract.format=npy: <extract.out>_<split>_features.npy
-- and _labels.npy for numpy.load; both: all three); extract.out defaults to
-- <run.dir>/<run.name or 'extract'>/features. The last line on stdout is one JSON object.
local root = (debug.getinfo(1, 'S').source:match('^@(.*)/recipes/[^/]*$') or '.')
package.path = root .. '/lua/?.lua;' .. root .. '/lua/?/init.lua;' .. package.path
local cr = require 'crescent'
local recipe = cr.recipe.ssl
local util = require 'crescent.util'

local cfg = cr.config.parse(arg, cr.config.schema(recipe.frozen_schema { 'train.epochs' },
  cr.config.options('data', {
    { 'split', { 'train', 'test', 'both' }, 'test', 'whose features to write' },
  }),
  cr.config.options('extract', {
    { 'out', 'string', '', "the output file prefix ('': <run.dir>/<run.name>/features)" },
    { 'format', { 'safetensors', 'npy', 'both' }, 'safetensors', 'safetensors (features and labels in one file), ' ..
      'NumPy .npy files, or both' },
  })))

cr.recipe.run.main(function()
  local device = recipe.setup(cfg)
  local train_set, test_set, eval_name = recipe.datasets(cfg)
  local forward, trunk = recipe.frozen_trunk(cfg, train_set, device)
  local out = cfg.extract.out
  local dir = out == '' and cr.recipe.run.dir(cfg, 'extract') or out:match('^(.*)/[^/]*$')
  if out == '' then out = dir .. '/features' end
  recipe.frozen_dry_run(cfg, trunk, train_set, test_set, eval_name, {
    string.format('would write the features of %s to %s_<split> (%s)', cfg.data.split == 'both' and 'train and test'
      or cfg.data.split, out, cfg.extract.format) })
  if dir then util.mkdir_p(dir) end

  -- The features and labels of ds; on k ranks (mpirun -np k) each extracts a contiguous
  -- share and every rank gets the whole, in order (rank 0 writes the files).
  local W = cr.dist.world_size()
  local function extract(ds)
    local opts = { batch_size = cfg.data.batch_size, forward = forward, device = device }
    if W == 1 then return cr.ssl.extract_features(trunk, ds, opts) end
    local n = #ds
    if n < W then error(string.format('extract: %d samples cannot be shared by %d ranks', n, W), 0) end
    local per = math.ceil(n / W)
    local first = cr.dist.rank() * per
    local count = math.max(0, math.min(per, n - first))
    local part = count > 0 and ds:range(first, count) or ds:range(0, 1) -- an idle rank's stand-in, dropped below
    local f, y = cr.ssl.extract_features(trunk, part, opts)
    local function gathered(t)
      local padded = cr.zeros({ per, unpack(t.shape, 2) }, { dtype = t.dtype })
      if count > 0 then padded:narrow(0, 0, count):copy_(t) end
      return cr.dist.all_gather(padded):narrow(0, 0, n):contiguous()
    end
    return gathered(f), y and gathered(y) or nil
  end

  local splits = cfg.data.split == 'both' and { 'train', 'test' } or { cfg.data.split }
  local result = { recipe = 'extract', model = cfg.model.arch, init = cfg.model.init, files = {} }
  for _, split in ipairs(splits) do
    local ds = split == 'train' and train_set or test_set
    if not ds then error("extract: the data set has no '" .. split .. "' split (image_folder: add a val/ folder)", 0) end
    local t0 = cr.engine.loop.now()
    local feats, labels = extract(ds)
    local tensors = { features = feats }
    if labels then tensors.labels = labels end
    local paths = {}
    local writes = cr.dist.is_main()
    if writes and cfg.extract.format ~= 'npy' then
      paths[#paths + 1] = out .. '_' .. split .. '.safetensors'
      cr.save(paths[#paths], tensors, { split = split, model = cfg.model.arch, init = cfg.model.init,
                                        config = cr.config.dump(cfg) })
    end
    if writes and cfg.extract.format ~= 'safetensors' then
      for _, what in ipairs { 'features', 'labels' } do
        if tensors[what] then
          paths[#paths + 1] = string.format('%s_%s_%s.npy', out, split, what)
          cr.io.save_npy(paths[#paths], tensors[what])
        end
      end
    end
    local secs = cr.engine.loop.now() - t0
    print(string.format('extract: %s [%d, %d] -> %s (%.1fs, %.0f img/s)', split, feats.shape[1], feats.shape[2],
      table.concat(paths, ', '), secs, feats.shape[1] / secs))
    for _, path in ipairs(paths) do result.files[#result.files + 1] = path end
    result[split .. '_shape'] = feats.shape
  end
  print(util.json(result))
end)
