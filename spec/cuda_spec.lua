-- cuda_spec — tensors on CUDA GPUs against the CPU reference. Without a usable GPU the
-- GPU block is one pending line; the errors a user meets then are checked everywhere.
local cr = H.cr
local ffi = require 'ffi'

describe('cuda without a usable GPU', function()
  if H.gpu_available() then
    it('is not the case here', function() pending('a GPU is usable: see the GPU block') end)
    return
  end
  local why = cr.cuda.why_not()

  it('refuses to move a tensor, naming the reason', function()
    local x = cr.randn(3)
    H.assert_error(function() return x:cuda() end, 'no usable CUDA GPU', why)
    H.assert_error(function() return x:to('cuda:1') end, 'no usable CUDA GPU')
    H.assert_error(function() return cr.zeros(2, { device = 'cuda' }) end, 'no usable CUDA GPU')
    H.assert_error(function() return cr.empty(2, { device = 'cuda' }) end, 'no usable CUDA GPU')
    H.assert_error(function() return x:pin_memory() end, 'no usable CUDA GPU')
    H.assert_error(function() return cr.cuda.memory_stats(0) end, 'no usable CUDA GPU')
  end)

  it('names a bad device string and lists the good ones', function()
    H.assert_error(function() return cr.randn(2):to('gpu') end, "unknown dtype 'gpu'", "'cuda:N'")
    H.assert_error(function() return cr.zeros(2, { device = 'cuda:x' }) end, "unknown device 'cuda:x'")
  end)

  it('keeps cpu tensors where they are, as themselves', function()
    local x = cr.randn(3)
    assert.are.equal('cpu', x:cpu().device)
    assert.is_true(x:to('cpu'):same_storage(x))
    assert.is_false(x.is_cuda)
  end)

  it('has no CUDA kernels until the backend opens, so train.device=auto stays on the cpu', function()
    assert.are.equal(cr.C.cr_op_count(), #cr.cuda.missing_kernels())
    assert.are.equal('cpu', (cr.cuda.resolve('auto')))
  end)
end)

H.describe_gpu('cuda tensors', function()
  local function close(gpu, cpu, atol, rtol, msg) H.assert_near('cuda', gpu, cpu, { atol, rtol }, msg) end
  -- a GPU result of dtype dt against an f64 reference
  local function close_ref(gpu, ref, dt, atol, rtol, msg)
    assert.are.equal('cuda:0', gpu.device, msg .. ': device')
    assert.are.equal(dt, gpu.dtype, msg .. ': dtype')
    H.assert_close(gpu:cpu():double(), ref, atol, rtol, msg)
  end
  local tol = { f32 = { 1e-5, 1e-5 }, f64 = { 1e-12, 1e-12 }, f16 = { 2e-3, 2e-3 }, bf16 = { 1e-2, 1e-2 } }

  it('moves every dtype there and back unchanged, strided views as row-major copies', function()
    for _, dt in ipairs(H.DTYPES) do
      local x = (H.park_miller({ 3, 5 }, 7) * 10):to(dt)
      local g = x:cuda()
      assert.are.equal('cuda:0', g.device)
      assert.are.equal(dt, g.dtype)
      assert.are.same(x:totable(), g:cpu():totable(), dt)
      assert.are.same(x:t():totable(), x:t():cuda():totable(), dt)
    end
    local p = H.park_miller({ 1000 }, 3):pin_memory()
    assert.is_true(p:is_pinned())
    local g = p:cuda(0, { non_blocking = true })
    assert.are.same(p:totable(), (g * 1):cpu():totable())
  end)

  it('computes every binary op as the cpu does, with broadcasting, NaN and mixed dtypes', function()
    local a0 = H.park_miller({ 4, 1, 5 }, 1) * 3
    local b0 = H.park_miller({ 3, 5 }, 2) * 3
    a0 = cr.where(a0:gt(2.5), cr.tensor(0 / 0), a0) -- a few NaNs
    local ops = { 'add', 'sub', 'mul', 'div', 'pow', 'maximum', 'minimum', 'eq', 'ne', 'lt', 'le', 'gt',
                  'ge', 'logical_and', 'logical_or', 'add_relu' }
    for _, dt in ipairs({ 'f32', 'f64', 'f16', 'bf16', 'i64', 'i32', 'u8' }) do
      local a, b = a0:to(dt), b0:to(dt)
      for _, op in ipairs(ops) do
        local float_only = op == 'add_relu' or op == 'pow'
        if not (float_only and not a:is_floating_point()) then
          local want = cr.Tensor[op](a, b)
          local t = tol[want.dtype] or { 0, 0 }
          close(cr.Tensor[op](a:cuda(), b:cuda()), want, t[1], t[2], op .. ' ' .. dt)
          close(cr.Tensor[op](a:cuda(), 2), cr.Tensor[op](a, 2), t[1], t[2], op .. ' ' .. dt .. ' with a number')
        end
      end
    end
    close((a0:cuda() + b0:to('f64'):cuda()), a0 + b0:to('f64'), 1e-12, 1e-12, 'f32 + f64')
  end)

  it('computes every unary op as the cpu does', function()
    local x0 = H.park_miller({ 6, 7 }, 4) * 2
    local unary = { 'neg', 'abs', 'sign', 'exp', 'log', 'sqrt', 'rsqrt', 'sigmoid', 'tanh', 'relu', 'gelu',
                    'gelu_tanh', 'logical_not' }
    for _, dt in ipairs({ 'f32', 'f64', 'f16', 'bf16' }) do
      local x, t = x0:to(dt), tol[dt]
      for _, op in ipairs(unary) do
        close(cr.Tensor[op](x:cuda()), cr.Tensor[op](x), t[1], t[2], op .. ' ' .. dt)
      end
      close(x:cuda():pow(2.5), x:pow(2.5), t[1], t[2], 'pow_scalar ' .. dt)
      close(x:cuda():clamp(-0.5, 0.7), x:clamp(-0.5, 0.7), t[1], t[2], 'clamp ' .. dt)
      close(x:cuda():clamp_min(0.1), x:clamp_min(0.1), t[1], t[2], 'clamp_min ' .. dt)
    end
    for _, dt in ipairs({ 'i64', 'i32', 'u8' }) do
      local x = (x0 * 10):to(dt)
      for _, op in ipairs({ 'neg', 'abs', 'sign', 'relu', 'logical_not' }) do
        if not (dt == 'u8' and op == 'neg') then close(cr.Tensor[op](x:cuda()), cr.Tensor[op](x), 0, 0, op .. ' ' .. dt) end
      end
      close(x:cuda():clamp(-3, 4), x:clamp(-3, 4), 0, 0, 'clamp ' .. dt)
    end
  end)

  it('converts between every pair of dtypes as the cpu does', function()
    local x0 = H.park_miller({ 50 }, 5) * 300
    local dts = H.DTYPES
    for _, from in ipairs(dts) do
      local x = x0:to(from)
      for _, to in ipairs(dts) do close(x:cuda():to(to), x:to(to), 0, 0, from .. ' -> ' .. to) end
    end
    -- the edges of the cast rules (core/dtype.c): NaN, infinities, out of range, wrapping
    local edges = cr.tensor({ 0 / 0, 1 / 0, -1 / 0, 1e30, -1e30, -2.7, 2.7, 300, -1, 2 ^ 40 + 5 }, { dtype = 'f64' })
    for _, from in ipairs { 'f64', 'f32', 'i64' } do
      local x = from == 'i64' and cr.tensor({ 300, -1, 2 ^ 40 + 5, 65537 }) or edges:to(from)
      for _, to in ipairs { 'i64', 'i32', 'u8', 'bool' } do
        assert.are.same(x:to(to):totable(), x:cuda():to(to):cpu():totable(), from .. ' -> ' .. to)
      end
    end
  end)

  it('selects, fills, copies in place and joins as the cpu does', function()
    local a, b = H.park_miller({ 3, 4 }, 6, 'f32'), H.park_miller({ 4 }, 7, 'f32')
    local m = a:gt(0)
    close(cr.where(m:cuda(), a:cuda(), b:cuda()), cr.where(m, a, b), 0, 0, 'where')
    close(a:cuda():masked_fill(m:cuda(), -7), a:masked_fill(m, -7), 0, 0, 'masked_fill')
    local g = cr.zeros({ 3, 4 }, { device = 'cuda' })
    g:copy_(b:cuda())
    close(g, b:expand(3, 4), 0, 0, 'copy_ broadcast')
    g:add_(a:cuda(), 0.5)
    close(g, b:expand(3, 4) + a * 0.5, 1e-6, 1e-6, 'add_')
    g:mul_(a:cuda())
    close(g, (b:expand(3, 4) + a * 0.5) * a, 1e-6, 1e-6, 'mul_')
    close(cr.cat({ a:cuda(), b:view(1, 4):cuda() }, 0), cr.cat({ a, b:view(1, 4) }, 0), 0, 0, 'cat')
    close(a:cuda():t():contiguous(), a:t():contiguous(), 0, 0, 'contiguous of a transpose')
    close(cr.ones_like(a:cuda()), cr.ones({ 3, 4 }), 0, 0, 'ones_like keeps the device')
    local h = cr.zeros({ 3, 4 }, { device = 'cuda' })
    h:copy_(a) -- from the cpu: moved first, as loading weights into a GPU model does
    close(h, a, 0, 0, 'copy_ across devices')
    local tmp = H.tmpdir('cuda')
    cr.save(tmp.path('g.safetensors'), { g = h }) -- written from a host copy
    H.assert_close(cr.load(tmp.path('g.safetensors')).g, a, 0, 0)
    tmp.remove()
  end)

  it('sums and averages over any dims as the cpu does', function()
    local x0 = H.park_miller({ 4, 300, 5 }, 8)
    for _, dt in ipairs({ 'f32', 'f64', 'f16', 'bf16', 'i64' }) do
      local x = (dt == 'i64' and x0 * 100 or x0):to(dt)
      local t = tol[dt] or { 0, 0 }
      for _, dims in ipairs({ {}, { 0 }, { 1 }, { 0, 2 }, { 2 } }) do
        local d = #dims > 0 and dims or nil
        close(x:cuda():sum(d), x:sum(d), t[1] * 300, t[2], 'sum ' .. dt)
        close(x:cuda():transpose(0, 2):sum(d, true), x:transpose(0, 2):sum(d, true), t[1] * 300, t[2],
              'sum of a view ' .. dt)
        if dt ~= 'i64' then close(x:cuda():mean(d), x:mean(d), t[1], t[2], 'mean ' .. dt) end
      end
    end
  end)

  it('multiplies matrices through cuBLAS, transposed views included, in every float dtype', function()
    local a0, b0 = H.park_miller({ 33, 17 }, 9), H.park_miller({ 17, 21 }, 10)
    local bias = H.park_miller({ 21 }, 11)
    for _, dt in ipairs({ 'f32', 'f64', 'f16', 'bf16' }) do
      local a, b, t = a0:to(dt), b0:to(dt), tol[dt]
      -- the reference multiplies the inputs as rounded to dt, in f64
      local want = a:double():mm(b:double())
      close_ref(a:cuda():mm(b:cuda()), want, dt, t[1] * 20, t[2] * 20, 'mm ' .. dt)
      close_ref(a:t():contiguous():cuda():t():mm(b:cuda()), want, dt, t[1] * 20, t[2] * 20, 'mm of a transpose ' .. dt)
      close_ref(cr.addmm(bias:to(dt):cuda(), a:cuda(), b:cuda(), { beta = 0.5, alpha = 2 }),
                bias:to(dt):double() * 0.5 + want * 2, dt, t[1] * 40, t[2] * 40, 'addmm ' .. dt)
      local ba, bb = cr.stack({ a0, a0 * 2 }):to(dt), cr.stack({ b0, b0 * -1 }):to(dt)
      close_ref(ba:cuda():bmm(bb:cuda()), ba:double():bmm(bb:double()), dt, t[1] * 40, t[2] * 40, 'bmm ' .. dt)
    end
  end)

  it('differentiates through GPU ops as on the cpu', function()
    local function f(x, w, b)
      local h = cr.linear(x, w, b)
      return (h:gelu() * h:sigmoid() + h:tanh():relu() - (h * h):mean() + h:exp():log()):sum()
    end
    local x0, w0, b0 = H.park_miller({ 8, 6 }, 12), H.park_miller({ 5, 6 }, 13), H.park_miller({ 5 }, 14)
    local function grads(dev)
      local x = x0:clone():to(dev):requires_grad_()
      local w = w0:clone():to(dev):requires_grad_()
      local b = b0:clone():to(dev):requires_grad_()
      local y = f(x, w, b)
      y:backward()
      return y, x.grad, w.grad, b.grad
    end
    local want, got = { grads('cpu') }, { grads('cuda') }
    for i = 1, 4 do close(got[i], want[i], 1e-4, 1e-4, 'value/grad ' .. i) end
    -- the grad of a device move goes back to the cpu
    local x = x0:clone():requires_grad_()
    x:cuda():mul(3):sum():backward()
    assert.are.equal('cpu', x.grad.device)
    H.assert_close(x.grad, cr.full({ 8, 6 }, 3))
  end)

  -- f(dev) -> list of tensors (outputs, then grads); every one compared with the cpu's
  local function same_on_both(f, atol, rtol, what) H.same_on_devices('cuda', what, f, { atol, rtol }) end

  it('convolves through cuDNN as the cpu does: values and every grad, strides, groups, dtypes', function()
    local cases = {
      { x = { 2, 8, 11, 9 }, w = { 12, 8, 3, 3 }, opts = { padding = 1 } },
      { x = { 2, 8, 11, 9 }, w = { 12, 8, 1, 1 }, opts = { stride = 2 } },
      { x = { 3, 6, 10, 10 }, w = { 6, 2, 3, 3 }, opts = { padding = 2, dilation = 2, groups = 3 } },
      { x = { 2, 3, 16, 16 }, w = { 8, 3, 7, 7 }, opts = { stride = 2, padding = 3 } },
    }
    local function conv(dev, cs, k, dt)
      local x = H.park_miller(cs.x, k):to(dt):to(dev):requires_grad_()
      local w = (H.park_miller(cs.w, k + 10) * 0.2):to(dt):to(dev):requires_grad_()
      local b = H.park_miller({ cs.w[1] }, k + 20):to(dt):to(dev):requires_grad_()
      local y = x:conv2d(w, b, cs.opts)
      local loss = (y * y):sum()
      loss:backward()
      return { y, x.grad, w.grad, b.grad }
    end
    for k, cs in ipairs(cases) do
      same_on_both(function(dev) return conv(dev, cs, k, 'f64') end, 1e-10, 1e-10, 'conv2d case ' .. k .. ' f64')
      -- f32 may run on TF32 tensor cores (10-bit mantissas; PyTorch's default for
      -- convolutions), whose error an element-wise bound cannot follow where sums cancel:
      -- each result is compared by its relative norm, as for any reduced-precision path
      local want, got = conv('cpu', cs, k, 'f32'), conv('cuda', cs, k, 'f32')
      for i = 1, 4 do
        local what = 'conv2d case ' .. k .. ' f32 #' .. i
        assert.are.equal('cuda:0', got[i].device, what)
        assert.are.equal('f32', got[i].dtype, what)
        local ref = want[i]:double()
        local d = got[i]:cpu():double() - ref
        local rel = math.sqrt((d * d):sum():item() / (ref * ref):sum():item())
        assert.is_true(rel < 2e-3, string.format('%s: relative error %.3g', what, rel))
      end
    end
    -- halves run natively on the GPU (f32 accumulation), against the f32 cpu result
    local x, w = H.park_miller({ 2, 16, 8, 8 }, 30), H.park_miller({ 16, 16, 3, 3 }, 31) * 0.1
    local want = x:conv2d(w, nil, { padding = 1 })
    for _, dt in ipairs({ 'f16', 'bf16' }) do
      local got = x:to(dt):cuda():conv2d(w:to(dt):cuda(), nil, { padding = 1 })
      close_ref(got, want, dt, 0.05, 0.05, 'conv2d ' .. dt)
    end
  end)

  it('normalises batches as the cpu does: training and eval, fused relu, running statistics', function()
    for _, layout in ipairs({ 'rowmajor', 'channels_last' }) do
      for _, relu in ipairs({ false, true }) do
        same_on_both(function(dev)
          local x = H.park_miller({ 4, 6, 5, 7 }, 40):to(dev)
          if layout == 'channels_last' then
            x = x:conv2d(cr.eye(6):double():view(6, 6, 1, 1):to(dev)) -- an identity conv: channels-last on both
          end
          x = x:detach():requires_grad_()
          local w = H.park_miller({ 6 }, 41):to(dev):requires_grad_()
          local b = H.park_miller({ 6 }, 42):to(dev):requires_grad_()
          local rm, rv = cr.zeros(6):double():to(dev), cr.ones(6):double():to(dev)
          local y = cr.batch_norm(x, rm, rv, { weight = w, bias = b, training = true, momentum = 0.3, relu = relu })
          local loss = (y * y):sum()
          loss:backward()
          local ye = cr.batch_norm(x:detach(), rm, rv, { weight = w:detach(), bias = b:detach() })
          return { y, x.grad, w.grad, b.grad, rm, rv, ye }
        end, 1e-4, 1e-4, 'batch_norm ' .. layout .. (relu and ' relu' or ''))
      end
    end
  end)

  it('normalises half batches in their own dtype, with f32 weights and statistics, as the cpu does in f32', function()
    for _, dt in ipairs({ 'f16', 'bf16' }) do
      for _, layout in ipairs({ 'rowmajor', 'channels_last' }) do
        same_on_both(function(dev)
          -- values a half holds exactly, so that the identity conv (TF32 on the GPU) keeps them
          local x = H.park_miller({ 4, 6, 5, 7 }, 43, 'f32'):to(dt):float():to(dev)
          if layout == 'channels_last' then x = x:conv2d(cr.eye(6):view(6, 6, 1, 1):to(dev)) end
          x = x:detach():to(dt):requires_grad_()
          local w = H.park_miller({ 6 }, 41, 'f32'):to(dev):requires_grad_()
          local b = H.park_miller({ 6 }, 42, 'f32'):to(dev):requires_grad_()
          local rm, rv = cr.zeros(6):to(dev), cr.ones(6):to(dev)
          local y = cr.batch_norm(x, rm, rv, { weight = w, bias = b, training = true, momentum = 0.3, relu = true })
          local yf = y:float()
          local loss = (yf * yf):sum()
          loss:backward()
          return { y, x.grad, w.grad, b.grad, rm, rv }
        end, 2e-2, 2e-2, 'batch_norm ' .. dt .. ' ' .. layout)
      end
    end
  end)

  -- Batch norm in training on dev, then its backward: x of `shape` in dtype dt (made
  -- channels-last by an identity conv when 4-d; values bf16 holds exactly, which that conv
  -- keeps in TF32 on the GPU), f32 weight and bias, running statistics from 0 and 1, seeds
  -- seed .. seed + 3, `opts` added to the call's options. The grad of y is fixed and exact
  -- in a half: with sum(y^2) the input grad is zero but for rounding, and one y rounded
  -- apart on the two devices moved it by 0.02. Returns the tensors to compare (y, the grads
  -- of x, w and b, the running statistics) and x, w, b, rm, rv.
  local function batch_norm_trained(dev, shape, dt, seed, opts)
    local C = shape[2]
    local x = H.park_miller(shape, seed, 'f32'):to('bf16'):float():to(dev)
    if #shape == 4 then x = x:conv2d(cr.eye(C):view(C, C, 1, 1):to(dev)) end
    x = x:detach():to(dt):requires_grad_()
    local w = H.park_miller({ C }, seed + 1, 'f32'):to(dev):requires_grad_()
    local b = H.park_miller({ C }, seed + 2, 'f32'):to(dev):requires_grad_()
    local rm, rv = cr.zeros(C):to(dev), cr.ones(C):to(dev)
    local o = { weight = w, bias = b, training = true, momentum = 0.3 }
    for k, v in pairs(opts) do o[k] = v end
    local y = cr.batch_norm(x, rm, rv, o)
    local gy = H.park_miller(shape, seed + 3, 'f32'):to('bf16'):float():to(dev)
    local loss = (y:float() * gy):sum()
    loss:backward()
    return { y, x.grad, w.grad, b.grad, rm, rv }, x, w, b, rm, rv
  end

  it('normalises rows of channels (channels-last, [N, C]) in 16-byte vectors as the cpu does', function()
    -- channel counts that suit the vector kernels: several vector columns, tiles of rows,
    -- more than one tile of columns ([N, 1032]: 258 f32 vectors), eval mode and relu;
    -- enough rows for several blocks of the sums kernels ([16, 64, 24, 24], [1024, 2048];
    -- without relu: among a million outputs one may be on either side of zero on the two
    -- devices, and its grad then passes on one only)
    for _, dt in ipairs({ 'f32', 'bf16', 'f16' }) do
      for _, shape in ipairs({ { 8, 16, 9, 11 }, { 3, 40, 5, 3 }, { 64, 1032 }, { 16, 64, 24, 24 }, { 1024, 2048 } }) do
        local big = shape[1] * shape[2] * (shape[3] or 1) * (shape[4] or 1) > 100000
        for _, relu in ipairs(big and { false } or { false, true }) do
          same_on_both(function(dev)
            local got, x, w, b, rm, rv = batch_norm_trained(dev, shape, dt, 44, { relu = relu })
            got[#got + 1] = cr.batch_norm(x:detach(), rm, rv, { weight = w:detach(), bias = b:detach(), relu = relu })
            return got
          end, dt == 'f32' and 1e-4 or 2e-2, dt == 'f32' and 1e-4 or 2e-2,
            string.format('batch_norm %s [%s]%s', dt, table.concat(shape, ','), relu and ' relu' or ''))
        end
      end
    end
  end)

  it('normalises split batches (statistics per group of rows) as the cpu does, in f32 and bf16', function()
    for _, dt in ipairs({ 'f32', 'bf16' }) do
      for _, shape in ipairs({ { 8, 6, 5, 7 }, { 12, 40 } }) do
        same_on_both(function(dev) return (batch_norm_trained(dev, shape, dt, 48, { relu = true, splits = 4 })) end,
          dt == 'f32' and 1e-4 or 2e-2, dt == 'f32' and 1e-4 or 2e-2,
          string.format('split batch_norm %s [%s]', dt, table.concat(shape, ',')))
      end
    end
  end)

  it('pools as the cpu does: max (with ties and padding), average, adaptive, and their grads', function()
    for _, dt in ipairs({ 'f32', 'f64' }) do
      same_on_both(function(dev)
        local x = (H.park_miller({ 2, 3, 9, 10 }, 50) * 4):long():to(dt):to(dev):requires_grad_() -- ties
        local a = x:max_pool2d(3, { stride = 2, padding = 1 })
        local b = x:avg_pool2d(3, { stride = 2, padding = 1, count_include_pad = false })
        local c = x:adaptive_avg_pool2d({ 4, 3 })
        local d = x:max_pool2d(2, { dilation = 2, ceil_mode = true })
        local loss = (a * a):sum() + (b * b):sum() + (c * c):sum() + d:sum()
        loss:backward()
        return { a, b, c, d, x.grad }
      end, 1e-6, 1e-6, 'pooling ' .. dt)
    end
  end)

  it('max-pools channels-last and half tensors in their own layout and dtype, as the cpu does', function()
    for _, dt in ipairs({ 'f32', 'bf16', 'f16' }) do
      for _, layout in ipairs({ 'rowmajor', 'channels_last' }) do
        local outs = {}
        same_on_both(function(dev)
          -- small integers (ties; exact in every dtype and through the identity conv)
          local x = (H.park_miller({ 2, 8, 9, 10 }, 51) * 4):long():float():to(dev)
          if layout == 'channels_last' then x = x:conv2d(cr.eye(8):view(8, 8, 1, 1):to(dev)) end
          x = x:detach():to(dt):requires_grad_()
          local a = x:max_pool2d(3, { stride = 2, padding = 1 })
          local d = x:max_pool2d(2, { dilation = 2, ceil_mode = true })
          -- the grad arriving at a: channels-last too where x is (an identity conv again)
          local g = H.park_miller(a.shape, 52, 'f32'):to('bf16'):float():to(dev)
          if layout == 'channels_last' then g = g:conv2d(cr.eye(8):view(8, 8, 1, 1):to(dev)) end
          g = g:to(dt)
          local loss = (a:float() * g:float()):sum() + d:float():sum()
          loss:backward()
          -- the backward op itself, on a grad and indices in a's layout
          local _, ind = x:detach():max_pool2d(3, { stride = 2, padding = 1, return_indices = true })
          local p = ffi.new('cr_pool2d_params', { { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, false, true })
          local gx -- (the cpu's backward op takes f32 and f64 grads only)
          if dev == 'cpu' then gx = cr.Tensor.op_helpers.call(cr.C.cr_op_max_pool2d_backward, g:float(), ind, 9, 10, p):to(dt)
          else gx = cr.Tensor.op_helpers.call(cr.C.cr_op_max_pool2d_backward, g, ind, 9, 10, p) end
          outs[dev] = { a = a, d = d, gx = gx }
          return { a, d, x.grad, gx }
        end, 1e-6, 1e-6, string.format('max_pool2d %s %s', dt, layout))
        local cuda = outs.cuda
        assert.are.equal(dt, cuda.a.dtype, 'pooled in its own dtype')
        assert.are.equal(dt, cuda.gx.dtype, 'its grad in its own dtype')
        if layout == 'channels_last' then
          assert.is_true(cuda.a:is_channels_last(), 'the output keeps the channels-last layout')
          assert.is_true(cuda.d:is_channels_last(), 'the dilated output keeps the channels-last layout')
          assert.is_true(cuda.gx:is_channels_last(), 'the backward keeps the channels-last layout')
        end
      end
    end
  end)

  it('computes softmax and log-softmax along any dim, with their grads, as the cpu does', function()
    for _, dim in ipairs({ 0, 1, 2 }) do
      same_on_both(function(dev)
        local x = (H.park_miller({ 5, 40, 3 }, 60) * 5):to(dev):requires_grad_()
        local s, l = x:softmax(dim), x:log_softmax(dim)
        local loss = (s * s):sum() + (l * H.park_miller({ 5, 40, 3 }, 61):to(dev)):sum()
        loss:backward()
        return { s, l, x.grad }
      end, 1e-5, 1e-5, 'softmax dim ' .. dim)
    end
  end)

  it('steps SGD, LARS and AdamW on the GPU as on the cpu, and clips GPU grads', function()
    local optim = cr.optim
    local makers = {
      sgd = function(ps) return optim.SGD(ps, { lr = 0.1, momentum = 0.9, nesterov = true, weight_decay = 1e-4 }) end,
      lars = function(ps) return optim.LARS(ps, { lr = 0.3, momentum = 0.9, weight_decay = 1e-6 }) end,
      adamw = function(ps) return optim.AdamW(ps, { lr = 0.01, weight_decay = 0.05 }) end,
    }
    for name, make in pairs(makers) do
      for _, dt in ipairs({ 'f32', 'f64' }) do
        same_on_both(function(dev)
          local w = H.park_miller({ 70, 600 }, 70):to(dt):to(dev):requires_grad_()
          local b = H.park_miller({ 70 }, 71):to(dt):to(dev):requires_grad_()
          local opt = make({ { 'fc.weight', w }, { 'fc.bias', b } })
          for s = 1, 3 do
            w.grad = (H.park_miller({ 70, 600 }, 72 + s) * 0.1):to(dt):to(dev)
            b.grad = (H.park_miller({ 70 }, 80 + s) * 0.1):to(dt):to(dev)
            optim.clip_grad_norm({ w, b }, 5)
            opt:step()
          end
          return { w, b }
        end, dt == 'f64' and 1e-12 or 1e-5, dt == 'f64' and 1e-12 or 1e-5, name .. ' ' .. dt)
      end
    end
  end)

  it('balances the allocator after a training loop and reuses its blocks', function()
    collectgarbage('collect')
    cr.cuda.synchronize()
    local before = cr.cuda.memory_stats(0)
    local w = (H.park_miller({ 64, 32 }, 15) * 0.1):cuda():requires_grad_()
    for _ = 1, 20 do
      local x = H.park_miller({ 16, 32 }, 16):cuda()
      local loss = cr.linear(x, w):relu():sum()
      loss:backward()
      w.grad = nil
    end
    w = nil -- luacheck: ignore
    collectgarbage('collect')
    collectgarbage('collect')
    local after = cr.cuda.memory_stats(0)
    assert.are.equal(before.allocated_bytes, after.allocated_bytes)
    assert.is_true(after.cache_hits > before.cache_hits)
    assert.is_true(after.reserved_bytes >= after.allocated_bytes)
    cr.cuda.empty_cache()
    assert.are.equal(cr.cuda.memory_stats(0).allocated_bytes, cr.cuda.memory_stats(0).reserved_bytes)
  end)

  it('names both devices when they are mixed, and the op without a kernel', function()
    local g, c = cr.randn(3):cuda(), cr.randn(3)
    H.assert_error(function() return g + c end, 'add', 'cuda:0', 'cpu')
    close(g + cr.tensor(2), g:cpu() + 2, 1e-6, 1e-6, 'a 0-dim cpu number joins a GPU op')
    local no_kernel = cr.cuda.missing_kernels()
    if #no_kernel > 0 then
      local probe = { conv2d = function() return cr.conv2d(cr.randn(1, 1, 3, 3):cuda(), cr.randn(1, 1, 1, 1):cuda()) end }
      for _, name in ipairs(no_kernel) do
        if probe[name] then H.assert_error(probe[name], name, 'no kernel for this op yet') end
      end
    end
  end)

  it('profiles in GPU time: spans hold the GPU work queued inside them, nested', function()
    local a, b = cr.randn({ 2048, 2048 }, { device = 'cuda' }), cr.randn({ 2048, 2048 }, { device = 'cuda' })
    cr.cuda.synchronize()
    cr.profiler.start({ gpu = 0 })
    local region = cr.profiler.begin('products')
    local c
    for _ = 1, 4 do c = a:matmul(b) end
    cr.profiler.finish(region)
    local host_region = cr.profiler.begin('host only')
    cr.profiler.finish(host_region)
    cr.profiler.stop() -- waits for the device
    local ev = cr.profiler.events()
    local by, mm = {}, 0
    for _, e in ipairs(ev) do
      by[e.name] = by[e.name] or e
      if e.name == 'mm' or e.name == 'matmul' then mm = mm + e.dur_us end
      assert.is_true(e.dur_us >= 0 and e.self_us >= -1, e.name)
    end
    -- four 2048^3 products (69 GFLOP) take GPU time, and the region holds them all
    assert.is_true(mm > 0 and by.products.dur_us >= mm - 1, string.format('%g %g', mm, by.products.dur_us))
    assert.is_true(by['host only'].dur_us < by.products.dur_us)
    assert.is_true(c:sum():item() == c:sum():item())
  end)

  it('collects dead GPU tensors long before the device fills', function()
    collectgarbage('collect')
    cr.cuda.synchronize()
    cr.cuda.reset_peak_memory_stats(0)
    local before = cr.cuda.memory_stats(0)
    for _ = 1, 60 do cr.empty({ 2 ^ 29 }, { device = 'cuda' }) end -- 120 GiB in 2 GiB tensors, none kept
    local after = cr.cuda.memory_stats(0)
    assert.are.equal(before.oom_retries, after.oom_retries)
    assert.is_true(after.peak_allocated_bytes - before.allocated_bytes < 48 * 2 ^ 30,
                   string.format('peak %.1f GiB', after.peak_allocated_bytes / 2 ^ 30))
  end)

  it('reports out of GPU memory with the size and the allocator figures', function()
    H.assert_error(function() return cr.empty({ 2 ^ 38 }, { device = 'cuda' }) end,
                   'out of GPU memory on cuda:0', 'could not allocate 1024.00 GiB', 'reduce the batch size')
    assert.is_true(cr.cuda.memory_stats(0).oom_retries >= 1)
  end)
end)
