-- dist_sampler_spec — the distributed sampler (crescent.data.sampler) and cr.data.Loader's
-- `shard` option: sampler.shard against an element-by-element reference (padding that
-- wraps when n < world_size, cutting with pad = false, strided positions, a million
-- samples); then over (n, world_size, batch_size, pad, shuffle, drop_last) combos
-- including n < world_size and n divisible or not: the ranks' shards cover the data set
-- exactly once when n % world_size == 0, with padding every sample appears and the
-- duplicates are exactly the padded count, all ranks have the same number of batches,
-- orders differ between epochs and repeat within one; batch k of the ranks interleaved
-- equals batch k of a one-rank loader with batch_size world_size * batch_size (the
-- `index` tensors); workers = 2 equals workers = 0 on a shard (plain, augment, views);
-- resume mid-epoch with state_dict / load_state_dict; the world-size mismatch and the
-- option errors.
local cr = H.cr
local sampler = require 'crescent.data.sampler'
local T = cr.data.transforms
local err_of = H.error_of

local function list(t) return t:totable() end

-- The reference: position p of the extended (or cut) order is order[p % n]; rank r takes
-- p = r, r + w, ... below L w.
local function reference(order, rank, w, pad)
  local n = #order
  local len = pad == false and math.floor(n / w) or math.ceil(n / w)
  local out = {}
  for k = 0, len - 1 do out[k + 1] = order[(rank + k * w) % n + 1] end
  return out
end

local same_tensor, epoch_of = H.assert_equal_tensors, H.epoch_batches

local function shuffled(n, seed)
  return cr.data.Loader(cr.data.synthetic { n = n, shape = { 2, 2 } }, { batch_size = 1, seed = seed }):order(0)
end

describe('data.sampler.shard', function()
  it('takes strided positions of the order, padding with its start or cutting the rest', function()
    local o = cr.arange(10)
    local want_pad = { { 0, 4, 8 }, { 1, 5, 9 }, { 2, 6, 0 }, { 3, 7, 1 } }
    local want_cut = { { 0, 4 }, { 1, 5 }, { 2, 6 }, { 3, 7 } }
    for r = 0, 3 do
      assert.are.same(want_pad[r + 1], list(sampler.shard(o, r, 4)))
      assert.are.same(want_pad[r + 1], list(sampler.shard(o, r, 4, true)))
      assert.are.same(want_cut[r + 1], list(sampler.shard(o, r, 4, false)))
    end
    -- n < world_size: the order wraps as often as needed
    o = cr.tensor({ 7, 5, 6 }, { dtype = 'i64' })
    local got = {}
    for r = 0, 7 do got[r + 1] = list(sampler.shard(o, r, 8))[1] end
    assert.are.same({ 7, 5, 6, 7, 5, 6, 7, 5 }, got)
    -- one rank: the order itself; an empty order: empty shards
    assert.are.same(list(o), list(sampler.shard(o, 0, 1, false)))
    assert.are.equal(0, sampler.shard(cr.arange(0), 2, 3).shape[1])
    assert.are.equal(0, sampler.shard(cr.arange(0), 2, 3, false).shape[1])
    assert.are.equal(3, sampler.shard_size(10, 4))
    assert.are.equal(2, sampler.shard_size(10, 4, false))
    assert.are.equal(1, sampler.shard_size(3, 8))
  end)

  it('matches the element-by-element reference on shuffled orders', function()
    for _, n in ipairs { 1, 2, 5, 12, 13, 31 } do
      local o = shuffled(n, n)
      local ot = list(o)
      for _, w in ipairs { 1, 2, 3, 4, 7, 12, 40 } do
        for _, pad in ipairs { true, false } do
          if pad or n >= w then
            for r = 0, w - 1 do
              local s = sampler.shard(o, r, w, pad)
              assert.are.equal('i64', s.dtype)
              assert.are.same(reference(ot, r, w, pad), list(s), string.format('n %d w %d r %d pad %s', n, w, r,
                tostring(pad)))
            end
          end
        end
      end
    end
  end)

  it('shards a million samples with tensor ops', function()
    local n, w = 1000003, 8
    local o = cr.arange(n - 1, -1, -1)   -- n - 1 .. 0
    local t0 = os.clock()
    local s = sampler.shard(o, 5, w)
    assert.are.equal(math.ceil(n / w), s.shape[1])
    assert.are.equal(n - 1 - 5, s:select(0, 0):item())
    assert.are.equal(n - 1 - 13, s:select(0, 1):item())
    -- the last position 5 + 125000 * 8 = 1000005 wraps to 2: the order's value n - 3
    assert.are.equal(n - 3, s:select(0, s.shape[1] - 1):item())
    assert.is_true(os.clock() - t0 < 2, 'sharding took ' .. (os.clock() - t0) .. ' s')
  end)

  it('refuses bad arguments with the fix', function()
    local o = cr.arange(10)
    assert.truthy(err_of(sampler.shard, o:float(), 0, 2):find('order must be an i64 tensor [n]', 1, true))
    assert.truthy(err_of(sampler.shard, { 1, 2 }, 0, 2):find('order must be an i64 tensor', 1, true))
    assert.truthy(err_of(sampler.shard, o:view(2, 5), 0, 2):find('with 2 dims', 1, true))
    assert.truthy(err_of(sampler.shard, o, 2, 2):find('rank must be an integer in [0, 1] (world_size 2), got 2', 1, true))
    assert.truthy(err_of(sampler.shard, o, -1, 2):find('rank must be an integer', 1, true))
    assert.truthy(err_of(sampler.shard, o, 0.5, 2):find('rank must be an integer', 1, true))
    assert.truthy(err_of(sampler.shard, o, 0, 0):find('world_size must be an integer >= 1', 1, true))
    assert.truthy(err_of(sampler.shard, o, 0, 1.5):find('world_size must be an integer >= 1', 1, true))
    assert.truthy(err_of(sampler.shard, o, 0, 2, 'yes'):find('pad must be a boolean', 1, true))
    local e = err_of(function() local s = sampler.shard(o, 0, 11, false); return s end)   -- no tail call: a caller to name
    assert.truthy(e:find('shard: 10 samples are fewer than world_size 11 and pad = false', 1, true), e)
    assert.truthy(e:find('pass pad = true', 1, true), e)
    assert.truthy(e:find('dist_sampler_spec.lua:%d+:'), 'the message names the caller: ' .. e)
    assert.truthy(err_of(sampler.shard_size, -1, 2):find('n must be a non-negative integer', 1, true))
  end)
end)

-- ---- the Loader's shard option ---------------------------------------------------------
local sets = {}
local function dataset(n)
  sets[n] = sets[n] or cr.data.synthetic { n = n, shape = { 3, 4, 4 }, num_classes = 5 }
  return sets[n]
end

local function loader(n, opts)
  local o = { seed = 11 }
  for k, v in pairs(opts) do o[k] = v end
  return cr.data.Loader(dataset(n), o)
end

-- Every rank's loader of a combo.
local function ranks(c)
  local out = {}
  for r = 0, c.w - 1 do
    out[r + 1] = loader(c.n, { batch_size = c.b, shuffle = c.shuffle, drop_last = c.drop_last,
                               shard = { rank = r, world_size = c.w, pad = c.pad } })
  end
  return out
end

local combos = {
  { n = 24, w = 4, b = 3, pad = true, shuffle = true, drop_last = false },     -- divisible
  { n = 24, w = 4, b = 5, pad = false, shuffle = true, drop_last = true },
  { n = 23, w = 4, b = 3, pad = true, shuffle = true, drop_last = false },     -- not divisible
  { n = 23, w = 4, b = 3, pad = false, shuffle = true, drop_last = false },
  { n = 23, w = 4, b = 2, pad = true, shuffle = false, drop_last = true },
  { n = 26, w = 3, b = 4, pad = false, shuffle = true, drop_last = true },
  { n = 26, w = 3, b = 4, pad = true, shuffle = false, drop_last = false },
  { n = 3, w = 5, b = 1, pad = true, shuffle = true, drop_last = false },      -- n < w
  { n = 7, w = 16, b = 1, pad = true, shuffle = true, drop_last = true },      -- n < w, wraps twice
  { n = 9, w = 1, b = 4, pad = true, shuffle = true, drop_last = false },      -- one rank
}
local function name(c)
  return string.format('n %d w %d b %d pad %s shuffle %s drop_last %s', c.n, c.w, c.b, tostring(c.pad),
    tostring(c.shuffle), tostring(c.drop_last))
end

describe('Loader shard', function()
  it('covers the data set once per epoch (with padding: every sample, duplicates = the padding)', function()
    for _, c in ipairs(combos) do
      local what = name(c)
      local len = c.pad and math.ceil(c.n / c.w) or math.floor(c.n / c.w)
      local nb = c.drop_last and math.floor(len / c.b) or math.ceil(len / c.b)
      local count, total = {}, 0
      local full = loader(c.n, { batch_size = 1, shuffle = c.shuffle }):order(2)   -- the unsharded order
      for r, l in ipairs(ranks(c)) do
        assert.are.equal(len, l:size(), what)
        assert.are.equal(nb, l:num_batches(), what .. ': every rank has the same number of batches')
        assert.are.equal(len, l:order(2).shape[1], what)
        assert.are.same(reference(list(full), r - 1, c.w, c.pad), list(l:order(2)), what)
        local got = 0
        for batch in l:iter(2) do
          got = got + 1
          for _, i in ipairs(list(batch.index)) do
            count[i] = (count[i] or 0) + 1
            total = total + 1
          end
        end
        assert.are.equal(nb, got, what)
      end
      if not c.drop_last or len % c.b == 0 then   -- every shard sample handed out
        assert.are.equal(len * c.w, total, what)
        local padded = c.pad and len * c.w - c.n or 0
        local dups, seen = 0, 0
        for i = 0, c.n - 1 do
          if count[i] then
            seen = seen + 1
            dups = dups + count[i] - 1
          end
        end
        assert.are.equal(padded, dups, what .. ': the duplicates are the padding')
        if c.pad then
          assert.are.equal(c.n, seen, what .. ': every sample appears')
        else
          assert.are.equal(len * c.w, seen, what)
        end
        if c.n % c.w == 0 then
          for i = 0, c.n - 1 do assert.are.equal(1, count[i], what .. ': sample ' .. i .. ' once') end
        end
      end
    end
  end)

  it('gives different orders for different epochs and the same for the same epoch', function()
    for _, c in ipairs(combos) do
      if c.shuffle and c.n > c.w then
        local l = ranks(c)[c.w]
        local again = ranks(c)[c.w]
        assert.are.same(list(l:order(3)), list(again:order(3)), name(c))
        assert.are.not_same(list(l:order(3)), list(l:order(4)), name(c))
        local e1, e2 = epoch_of(l, 5), epoch_of(again, 5)
        for k = 1, #e1 do same_tensor(e1[k].index, e2[k].index, 'batch ' .. k) end
      end
    end
  end)

  it('batch k of the ranks interleaved is batch k of one rank with batch size w * b', function()
    for _, c in ipairs(combos) do
      local what = name(c)
      local epoch = 1
      local per_rank = {}
      for r, l in ipairs(ranks(c)) do per_rank[r] = epoch_of(l, epoch) end
      -- one rank, w times the batch, the same seed and shuffle; drop_last off so that it
      -- has every batch (with drop_last and padding the ranks may have one it drops)
      local big = epoch_of(loader(c.n, { batch_size = c.w * c.b, shuffle = c.shuffle, drop_last = false }), epoch)
      local full = list(loader(c.n, { batch_size = 1, shuffle = c.shuffle }):order(epoch))
      local nb = #per_rank[1]
      assert.is_true(nb <= #big, what)
      if c.pad and not c.drop_last then assert.are.equal(#big, nb, what) end
      if not c.pad and c.drop_last then
        local big_drop = loader(c.n, { batch_size = c.w * c.b, shuffle = c.shuffle, drop_last = true })
        assert.are.equal(big_drop:num_batches(), nb, what)
      end
      for k = 1, nb do
        local parts = {}
        for r = 1, c.w do
          parts[r] = per_rank[r][k].index
          assert.are.equal(per_rank[1][k].index.shape[1], parts[r].shape[1], what .. ': equal batch sizes')
        end
        local inter = cr.stack(parts, 1):view(-1)   -- element j of rank r at j w + r
        local want = big[k].index
        local m = math.min(inter.shape[1], want.shape[1])
        same_tensor(want:narrow(0, 0, m), inter:narrow(0, 0, m), what .. ': batch ' .. k)
        local first = (k - 1) * c.w * c.b   -- the batch's first position in the epoch order
        if inter.shape[1] > m then   -- the padded tail: the order's start again
          assert.is_true(c.pad and k == nb, what)
          local tail = list(inter:narrow(0, m, inter.shape[1] - m))
          for i = 1, #tail do assert.are.equal(full[(first + m + i - 1) % c.n + 1], tail[i], what) end
        elseif want.shape[1] > m then   -- pad = false cut the order at floor(n / w) w
          assert.is_true(not c.pad and k == nb, what)
          assert.are.equal(math.floor(c.n / c.w) * c.w, first + m, what)
        end
      end
    end
  end)

  it('gives the batches of workers = 0 with workers = 2 (plain, augment, views)', function()
    local function multicrop()
      return T.multicrop { size_crops = { 4, 2 }, num_crops = { 2, 1 }, crop_scales = { { 0.4, 1 }, { 0.1, 0.4 } },
                           flip = 0.5, grayscale = 0.2 }
    end
    local cases = {
      { batch_size = 3, drop_last = false, shard = { rank = 2, world_size = 3 } },
      { batch_size = 2, augment = true, shard = { rank = 0, world_size = 4, pad = false } },
      { batch_size = 3, views = true, drop_last = false, shard = { rank = 1, world_size = 5 } },
      { batch_size = 1, drop_last = false, shard = { rank = 6, world_size = 8 } },   -- n < w
    }
    for _, case in ipairs(cases) do
      local function with(workers)
        local o = { workers = workers }
        for k, v in pairs(case) do o[k] = v end
        if o.views then o.views = multicrop() end
        return loader(case.shard.world_size == 8 and 5 or 23, o)
      end
      local want, got = epoch_of(with(0), 3), epoch_of(with(2), 3)
      assert.are.equal(with(0):num_batches(), #want)
      assert.are.equal(#want, #got)
      for k = 1, #want do
        same_tensor(want[k].index, got[k].index, 'index of batch ' .. k)
        same_tensor(want[k].target, got[k].target, 'target of batch ' .. k)
        assert.are.equal(want[k].size, got[k].size)
        if case.views then
          assert.are.equal(want[k].index.shape[1], want[k].size)
          for v = 1, #want[k].input do same_tensor(want[k].input[v], got[k].input[v], 'crop ' .. v) end
        else
          same_tensor(want[k].input, got[k].input, 'input of batch ' .. k)
        end
      end
      -- a resume at start_batch on the shard
      local rest = epoch_of(with(2), 3, 1)
      assert.are.equal(#want - 1, #rest)
      if #rest > 0 then same_tensor(want[2].index, rest[1].index, 'first resumed batch') end
    end
  end)

  it('checks start_batch against the shard', function()
    local l = loader(23, { batch_size = 2, drop_last = false, shard = { rank = 1, world_size = 4 } })
    assert.are.equal(3, l:num_batches())   -- ceil(ceil(23 / 4) / 2)
    assert.are.equal(0, #epoch_of(l, 0, 3))
    assert.truthy(err_of(l.iter, l, 0, 4):find('start_batch must be an integer in [0, 3], got 4', 1, true))
  end)

  it('resumes mid-epoch from state_dict and replays the rest', function()
    for _, workers in ipairs { 0, 2 } do
      local opts = { batch_size = 2, augment = true, workers = workers, shard = { rank = 1, world_size = 3 } }
      local l = loader(23, opts)
      local full = epoch_of(loader(23, opts), 4)
      local it = l:iter(4)
      it()
      it()
      local saved = l:state_dict()
      assert.are.same({ epoch = 4, batch = 2, seed = 11, rank = 1, world_size = 3 }, saved)
      local again = loader(23, opts)
      again:load_state_dict(saved)
      local rest = epoch_of(again)
      assert.are.equal(#full - 2, #rest)
      for k = 1, #rest do
        same_tensor(full[k + 2].index, rest[k].index, 'index')
        same_tensor(full[k + 2].input, rest[k].input, 'input')
        assert.are.equal(k + 1, rest[k].batch)
      end
      assert.are.same({ epoch = 5, batch = 0, seed = 11, rank = 1, world_size = 3 }, again:state_dict())
      -- rank 0 saves, every rank resumes at that position of its own shard
      local other = loader(23, { batch_size = 2, augment = true, shard = { rank = 2, world_size = 3 } })
      other:load_state_dict(saved)
      local want = epoch_of(loader(23, { batch_size = 2, augment = true, shard = { rank = 2, world_size = 3 } }), 4)
      same_tensor(want[3].index, epoch_of(other)[1].index, 'rank 2 resumed')
    end
    -- an unsharded loader's state holds no shard info and loads as before
    local plain = loader(23, { batch_size = 4 })
    assert.are.same({ epoch = 0, batch = 0, seed = 11 }, plain:state_dict())
    plain:load_state_dict { epoch = 2, batch = 3, seed = 11 }
    assert.are.same({ epoch = 2, batch = 3, seed = 11 }, plain:state_dict())
  end)

  it('refuses a mid-epoch state saved with another world size, accepts it at batch 0', function()
    local function sharded(w) return loader(23, { batch_size = 2, shard = { rank = 0, world_size = w } }) end
    local saved = { epoch = 4, batch = 2, seed = 11, rank = 1, world_size = 3 }
    local two = sharded(2)
    local e = err_of(function() two:load_state_dict(saved) end)
    for _, frag in ipairs { 'saved at batch 2 of epoch 4 with world_size 3', 'this loader has world_size 2',
                            'means other samples with another world size', 'epoch boundary',
                            '{epoch = 4, batch = 0}', 'with world_size 3' } do
      assert.truthy(e:find(frag, 1, true), 'message should say "' .. frag .. '": ' .. e)
    end
    assert.truthy(e:find('dist_sampler_spec.lua:%d+:'), e)
    -- a sharded state into an unsharded loader, and an unsharded state into a sharded one
    local plain = loader(23, { batch_size = 2 })
    assert.truthy(err_of(plain.load_state_dict, plain, saved):find('this loader has world_size 1', 1, true))
    local l = sharded(4)
    assert.truthy(err_of(l.load_state_dict, l, { epoch = 1, batch = 1, seed = 11 })
      :find('saved at batch 1 of epoch 1 with world_size 1', 1, true))
    -- the refused load leaves the position alone
    assert.are.same({ epoch = 0, batch = 0, seed = 11, rank = 0, world_size = 4 }, l:state_dict())
    -- at an epoch boundary any world size resumes
    for _, w in ipairs { 1, 2, 5 } do
      local s = sharded(w)
      s:load_state_dict { epoch = 4, batch = 0, seed = 11, rank = 1, world_size = 3 }
      assert.are.same({ epoch = 4, batch = 0, seed = 11, rank = 0, world_size = w }, s:state_dict())
    end
    plain:load_state_dict { epoch = 6, batch = 0, seed = 11, rank = 2, world_size = 3 }
    assert.are.same({ epoch = 6, batch = 0, seed = 11 }, plain:state_dict())
    -- the same world size (any rank) at any batch; world size 1 equals unsharded
    sharded(3):load_state_dict(saved)
    sharded(1):load_state_dict { epoch = 1, batch = 5, seed = 11 }
    plain:load_state_dict { epoch = 1, batch = 5, seed = 11, rank = 0, world_size = 1 }
    assert.truthy(err_of(plain.load_state_dict, plain, { epoch = 1, batch = 0, world_size = 0 })
      :find('world_size must be a positive integer', 1, true))
  end)

  it('refuses bad shard options, naming the valid ones and the fix', function()
    local function err(shard, extra)
      local o = { batch_size = 2, shard = shard }
      for k, v in pairs(extra or {}) do o[k] = v end
      return err_of(function() local l = cr.data.Loader(dataset(10), o); return l end)
    end
    local e = err { rank = 0, world_size = 2, ranks = 1 }
    assert.truthy(e:find("unknown shard option 'ranks'; options are pad, rank, world_size", 1, true), e)
    assert.truthy(err { world_size = 2 }:find('shard needs rank and world_size', 1, true))
    assert.truthy(err { rank = 0 }:find('shard needs rank and world_size', 1, true))
    assert.truthy(err { rank = 2, world_size = 2 }:find('rank must be an integer in [0, 1] (world_size 2), got 2', 1, true))
    assert.truthy(err { rank = -1, world_size = 2 }:find('rank must be an integer', 1, true))
    assert.truthy(err { rank = 0.5, world_size = 2 }:find('rank must be an integer', 1, true))
    assert.truthy(err { rank = 0, world_size = 0 }:find('world_size must be an integer >= 1', 1, true))
    assert.truthy(err { rank = 0, world_size = 2.5 }:find('world_size must be an integer >= 1', 1, true))
    assert.truthy(err { rank = 0, world_size = 2, pad = 1 }:find('pad must be a boolean', 1, true))
    assert.truthy(err_of(loader, 10, { shard = 3 }):find('option shard must be a table, got number', 1, true))
    e = err { rank = 0, world_size = 11, pad = false }
    assert.truthy(e:find('10 samples are fewer than world_size 11 and pad = false', 1, true), e)
    -- drop_last looks at the shard: 10 samples over 4 ranks are 3 a rank, fewer than 4
    assert.are.equal(2, loader(10, { batch_size = 4 }):num_batches())
    e = err({ rank = 1, world_size = 4 }, { batch_size = 4 })
    assert.truthy(e:find('the shard of rank 1 (10 samples of synthetic over world_size 4, pad = true) has 3 samples, ' ..
      'fewer than batch_size 4, and drop_last is on', 1, true), e)
    assert.truthy(e:find('dist_sampler_spec.lua:%d+:'), 'the message names the caller: ' .. e)
    assert.are.equal(1, loader(10, { batch_size = 4, drop_last = false, shard = { rank = 1, world_size = 4 } })
      :num_batches())
  end)
end)
