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
    local recipe = cr.recipe.ssl
    local cfg = cr.config.check({ train = { device = 'cuda' } }, recipe.schema('swav'))
    local ok, err = pcall(recipe.setup, cfg)
    assert.is_false(ok)
    assert.truthy(err:find('^train%.device=cuda: '), err)
  end)
end)

-- The CUDA column of the op list, read from the backend library without opening it (no
-- GPU needed): every row names a kernel, and the ops without GPU arithmetic (views, cat,
-- to_device) name their CPU function.
describe('the CUDA column of the op list', function()
  local path = require('crescent.native_files').find('libcrescent_cuda.so')
  if not path then
    it('needs the GPU backend built', function() pending('build/libcrescent_cuda.so was not built (nvcc, cuDNN)') end)
    return
  end
  local ffi = require 'ffi'
  pcall(ffi.cdef, 'void *dlopen(const char *, int); void *dlsym(void *, const char *);')

  it('names a kernel for every op, the CPU function where the op needs no GPU arithmetic', function()
    local lib = ffi.C.dlopen(path, 2)   -- RTLD_NOW: the backend's kernels resolve; nothing runs
    assert.is_true(lib ~= nil, 'dlopen ' .. path)
    local column = ffi.cast('void **', ffi.C.dlsym(lib, 'cr_gpu_kernels'))
    local table_ = ffi.cast('void **', ffi.C.dlsym(lib, 'cr_kernel_table'))
    local none = ffi.C.dlsym(lib, 'cr_gpu_none')
    assert.is_true(column ~= nil and table_ ~= nil and none ~= nil)
    local shared = { view = true, permute = true, expand = true, slice = true, cat = true, to_device = true }
    local seen = {}
    for op = 0, tonumber(cr.C.cr_op_count()) - 1 do
      local name = ffi.string(cr.C.cr_op_name(op))
      local gpu, cpu = column[op], table_[op * 2]   -- cr_kernel_table[op][CR_DEV_CPU]
      assert.is_true(gpu ~= nil and gpu ~= none, name .. ' has no CUDA kernel in its row')
      assert.are.equal(shared[name] == true, gpu == cpu, name .. ': the CPU function in the CUDA column')
      seen[#seen + 1] = name
    end
    assert.is_true(#seen > 90)
  end)
end)
