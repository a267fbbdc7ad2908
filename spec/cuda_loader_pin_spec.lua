-- cuda_loader_pin_spec — cr.data.Loader's pin_memory: batches in page-locked host memory for
-- asynchronous copies to a GPU. Without a GPU: asking for it is a clear error from the
-- Lua check and from the C pipeline's own, and pin_memory = false or an unpinned
-- iteration is untouched. With one: plain, augmented and multi-crop batches come pinned
-- (built there by the workers, copied there without them) and equal the unpinned ones,
-- the index stays plain, and a Task on cuda moves them with asynchronous copies.
local cr = H.cr
local T = cr.data.transforms

local ds = cr.data.synthetic { n = 40, shape = { 3, 10, 10 }, num_classes = 5 }

local function views()
  return T.multicrop { size_crops = { 10, 6 }, num_crops = { 2, 2 }, crop_scales = { { 0.4, 1 }, { 0.1, 0.4 } },
                       flip = 0.5, color_jitter = { p = 0.8, brightness = 0.4, contrast = 0.4 } }
end

-- The loaders the specs compare: {name, options} (batch_size 8, unshuffled tail kept).
local function variants()
  return {
    { 'plain', {} }, { 'augment', { augment = true } }, { 'views', { views = views() } },
  }
end

local function loader(opts, workers, pin)
  local o = { batch_size = 8, seed = 3, workers = workers, pin_memory = pin }
  for k, v in pairs(opts) do o[k] = v end
  return cr.data.Loader(ds, o)
end

local function tensors_of(batch)
  local out = {}
  if type(batch.input) == 'table' then
    for i, t in ipairs(batch.input) do out['input' .. i] = t end
  else
    out.input = batch.input
  end
  out.target = batch.target
  return out
end

describe('Loader pin_memory without a usable GPU', function()
  if H.gpu_available() then
    it('is not the case here', function() pending('a GPU is usable: see the GPU block') end)
    return
  end

  it('refuses pin_memory = true, and a GPU-bound iteration, naming the reason and the fix', function()
    for _, workers in ipairs({ 0, 2 }) do
      H.assert_error(function() return loader({}, workers, true):iter(0) end,
        'pin_memory', 'no usable one', 'pin_memory = false')
      H.assert_error(function() return loader({}, workers, nil):iter(0, 0, true) end, 'pin_memory', 'no usable one')
    end
  end)

  it('has the C pipeline refuse it too, for callers that skip the Lua check', function()
    local l = loader({}, 1, nil)
    local order = l:order(0)
    H.assert_error(function() return l:_start(order, nil, 0, 0, l:num_batches(), true) end,
      'pipeline: pin_memory', 'pass pin_memory = false')
  end)

  it('leaves the batches alone with pin_memory = false, even for a GPU, and checks the type', function()
    for _, workers in ipairs({ 0, 2 }) do
      for batch in loader({}, workers, false):iter(0, 0, true) do
        assert.is_false(batch.input:is_pinned())
      end
    end
    H.assert_error(function() return loader({}, 0, 'yes') end, 'pin_memory must be a boolean')
  end)
end)

H.describe_gpu('Loader pin_memory', function()
  it('gives pinned batches equal to the unpinned ones, with and without workers, the index plain', function()
    for _, v in ipairs(variants()) do
      for _, workers in ipairs({ 0, 2 }) do
        local want = {}
        for batch in loader(v[2], workers, false):iter(1) do want[#want + 1] = tensors_of(batch) end
        local k = 0
        for batch in loader(v[2], workers, nil):iter(1, 0, true) do
          k = k + 1
          assert.is_false(batch.index:is_pinned(), v[1] .. ': index')
          for name, t in pairs(tensors_of(batch)) do
            local msg = string.format('%s, %d workers, batch %d, %s', v[1], workers, k, name)
            assert.is_true(t:is_pinned(), msg)
            H.assert_equal_tensors(want[k][name], t, msg)
          end
        end
        assert.are.equal(#want, k, v[1])
      end
    end
  end)

  it('has a Task on cuda copy pinned batches asynchronously, to the same values', function()
    local model = cr.nn.Sequential(cr.nn.Flatten(), cr.nn.Linear(300, 5)):to('cuda')
    local seen = {}
    local task = cr.engine.Task {
      model = model, epochs = 1, handle_signals = false,
      optimizer = cr.optim.SGD(model:named_parameters(), { lr = 0.1 }),
      loss = function(out, batch)
        seen[#seen + 1] = { batch.input:cpu(), batch.index:clone() }
        return cr.cross_entropy(out, batch.target)
      end,
      train_loader = loader({}, 2, nil),
    }
    cr.train(task)
    assert.are.equal(5, #seen)
    local want = loader({}, 0, false)
    for k, s in ipairs(seen) do
      local batch = want:make_batch(s[2], 0)
      H.assert_equal_tensors(batch.input, s[1], 'batch ' .. k)
    end
  end)
end)
