-- cuda_probe_spec — cr.cuda says whether a GPU is usable and why not, and train.device
-- resolves to a device or to an error that names the reason. On a machine without the
-- NVIDIA driver (CI) the reason is the missing libcuda.so.1; with a GPU, the count.
local cr = H.cr

describe('cr.cuda', function()
  it('reports a count and, when there is no usable GPU, one reason', function()
    local n, why = cr.cuda.device_count(), cr.cuda.why_not()
    assert.are.equal(n > 0, cr.cuda.is_available())
    if n > 0 then
      assert.is_nil(why)
    else
      assert.is_string(why)
      assert.truthy(why:find('no NVIDIA driver', 1, true) or why:find('version mismatch', 1, true)
                    or why:find('no CUDA device', 1, true) or why:find('driver', 1, true), why)
    end
    local built = cr.C.cr_cuda_built_version()
    if cr.features():find('cuda=1', 1, true) then assert.is_true(built >= 11000) end
    assert.is_true(built == 0 or built >= 10000, tostring(built))
  end)

  it('resolves train.device: cpu as asked, auto with a line, cuda to the GPU or an error that says why', function()
    assert.are.same({ 'cpu' }, { cr.cuda.resolve('cpu') })
    local device, line = cr.cuda.resolve('auto')
    if cr.cuda.is_available() then -- every op has a CUDA kernel
      assert.are.same({}, cr.cuda.missing_kernels())
      assert.are.equal('cuda:0', device)
      assert.truthy(line:find('^train%.device=auto: cuda:0 %('), line)
      assert.are.equal('cuda:0', (cr.cuda.resolve('cuda')))
    else
      assert.are.equal('cpu', device)
      assert.truthy(line:find('^train%.device=auto: cpu %('))
      local ok, err = pcall(cr.cuda.resolve, 'cuda')
      assert.is_false(ok)
      assert.are.equal('train.device=cuda: ' .. cr.cuda.why_not() .. '; use train.device=cpu or auto', err)
    end
    local ok, err = pcall(cr.cuda.resolve, 'gpu')
    assert.is_false(ok)
    assert.truthy(err:find("train.device='gpu': expected auto, cpu, cuda or cuda:N", 1, true), err)
  end)

  it('stops an SSL recipe at setup, before any data is read, when train.device=cuda is unusable', function()
    if cr.cuda.is_available() then return pending('a GPU is usable here: the error path needs a machine without one') end
    local recipe = cr.ssl.recipe
    local cfg = cr.config.check({ train = { device = 'cuda' } }, recipe.defaults(), { types = recipe.types() })
    local ok, err = pcall(recipe.setup, cfg)
    assert.is_false(ok)
    assert.truthy(err:find('^train%.device=cuda: '), err)
  end)
end)
