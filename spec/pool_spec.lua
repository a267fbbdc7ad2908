-- pool_spec — max_pool2d (values, i64 indices, ties, NaN, dilation, ceil_mode),
-- avg_pool2d (count_include_pad, ceil_mode), adaptive_avg_pool2d: values and grads
-- against PyTorch, gradchecks in f64, strided views, half inputs and bad input.
local cr = H.cr
local C = cr.C

local function pat(shape, a, m, off, div, dtype)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local v = {}
  for i = 0, n - 1 do v[i + 1] = ((i * a) % m - off) / div end
  return cr.tensor(v, { dtype = dtype or 'f64' }):view(shape)
end

-- Distinct values (no ties), so max pooling is differentiable for gradcheck.
local function distinct(shape, dtype)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local v = {}
  for i = 1, n do v[i] = math.sin(i * 1.37) + i * 1e-3 end
  return cr.tensor(v, { dtype = dtype or 'f64' }):view(shape)
end

local function flat(t) return t:contiguous():view(-1) end

-- Expected numbers produced once with /usr/bin/python3 (torch 1.13, f64), F =
-- torch.nn.functional: x = pat({1, 2, 5, 7}, 7, 13, 6, 4); y = F.<op>(x, **kw);
-- m = pat(y.shape, 3, 5, 2, 2); (y * m).sum().backward(); gx = x.grad.
local torch_ref = {
  -- x: [1, 2, 5, 7], x[i] = ((i*7) % 13 - 6) / 4 (ties included); grads of sum(y * m)
  -- max_pool2d {'kernel_size': 2}
  max_k2 = {
    y = {1, 1.25, 1.5, 1.25, 1.5, 0.75, 1.25, 1.5, 1, 1.5, 1, 1.25},
    ind = {7, 9, 11, 22, 24, 18, 0, 2, 11, 15, 24, 26},
    gx = {
      0, 0, 0, 0, 0, 0, 0, -1, 0, 0.5, 0, -0.5, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0,
      0, 0, 0, 0, 0.5, 0, -0.5, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1, 0, 0.5,
      0, 0, 0, 0, 0, 0, 0, 0
    },
  },
  -- max_pool2d {'kernel_size': 3, 'stride': 2, 'padding': 1}
  max_k3s2p1 = {
    y = {1, 1.25, 1.5, 0.75, 1.25, 1.5, 1.5, 1, 1.25, 1.5, 1.5, 1, 1.25, 1.5, 1, 1.25, 1.5, 1.5, 1.25, 1.25, 1.5, 1, 1.25, 1.25},
    ind = {7, 9, 11, 5, 22, 24, 11, 20, 22, 24, 24, 33, 0, 2, 11, 13, 15, 15, 26, 13, 28, 24, 26, 26},
    gx = {
      0, 0, 0, 0, 0, 1, 0, -1, 0, 0.5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -0.5, 0, 1, 0, -2, 0, 0, 0, 0, 0, 0,
      0, 0, 0.5, 0, -0.5, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.5, 0,
      1.5, 0, -1, 0, 0, 0, 0, 0, 0
    },
  },
  -- max_pool2d {'kernel_size': (2, 3), 'stride': 2, 'ceil_mode': True}
  max_ceil = {
    y = {1.25, 1.5, 1.5, 1.25, 1.5, 1, 0.5, 0.75, 1, 1.5, 1.5, 1.25, 1.5, 1, 1.25, 1.5, 0.25, 0.5},
    ind = {9, 11, 11, 22, 24, 20, 29, 31, 33, 2, 2, 13, 15, 24, 26, 28, 31, 33},
    gx = {
      0, 0, 0, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1, 0, 1, 0, 0, 0, 0, 0, 0, 0.5, 0,
      -0.5, 0, 1, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.5, 0, -0.5, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0,
      0, 0, -1, 0, 0, 0.5, 0, -0.5, 0
    },
  },
  -- max_pool2d {'kernel_size': 2, 'stride': 1, 'padding': 1, 'dilation': 2}
  max_dil = {
    y = {
      -0.5, 1.25, -0.25, 1.5, 0, 1.5, 0, 0.25, 0.5, 0.5, 0.75, 0.75, 1, 0.75, 1.25, 1.25, 1.5, 1.5, 1.5,
      1.5, 0, 0.5, 0.5, 0.75, 0.75, 1, 1, 1, 1.25, -0.25, 1.5, 0, 1.5, 0.25, -1.5, -1, 0.75, -0.75, 1,
      -0.5, 1.25, -0.5, 1.5, 1.5, 1.5, 1.5, 0.25, 0.5, 0.25, 0.75, 0.75, 1, 1, 1.25, 1.25, 1.25, 1.5, 1.5,
      1.5, 0.25, 0.5, 0.5, 0.5, 0.75, -0.75, 1, -0.5, 1.25, -0.25, 1.25
    },
    ind = {
      8, 9, 10, 11, 12, 11, 12, 1, 16, 3, 18, 5, 20, 5, 22, 9, 24, 11, 24, 11, 12, 29, 16, 31, 18, 33, 20,
      33, 22, 23, 24, 25, 24, 27, 26, 8, 9, 10, 11, 12, 13, 12, 15, 2, 15, 2, 5, 20, 5, 22, 9, 24, 11, 26,
      13, 26, 15, 28, 15, 18, 33, 20, 33, 22, 23, 24, 25, 26, 27, 26
    },
    gx = {
      0, -0.5, 0, 0, 0, 1.5, 0, 0, -1, -0.5, -0.5, -0.5, -0.5, 0, 0, 0, 0.5, 0, -1, 0, 0, 0, 1, 0, 0, 0.5,
      0, 1, 0, 0.5, 0, 1, 0, -1.5, 0, 0, 0, 0, 0, 0, 1.5, 0, 0, -1, -0.5, -0.5, 0.5, 0.5, -1, 0, 1, 0, 0,
      0, 0, 0, 0, 1, 0, -0.5, 0.5, -0.5, 1, -0.5, 0, 0, 0, 0, -1.5, 0
    },
  },
  -- avg_pool2d {'kernel_size': 3, 'stride': 2, 'padding': 1}
  avg_k3s2p1 = {
    y = {
      -0.08333333333, 0, 0.1666666667, -0.1666666667, 0.02777777778, 0.1388888889, 0.02777777778,
      -0.2777777778, 0, 0.3055555556, 0.1111111111, -0.08333333333, 0.05555555556, 0.02777777778,
      -0.1666666667, -0.02777777778, 0.05555555556, 0, -0.1111111111, 0.1111111111, 0.1388888889,
      -0.02777777778, 0.1388888889, 0.05555555556
    },
    gx = {
      -0.1111111111, -0.05555555556, 0.05555555556, 0, -0.05555555556, 0.05555555556, 0.1111111111,
      -0.1111111111, -0.1666666667, -0.05555555556, -0.05555555556, 0, 0.05555555556, 0.05555555556, 0,
      -0.1111111111, -0.1111111111, -0.05555555556, 0.05555555556, 0, -0.05555555556, 0.1111111111, 0,
      -0.1111111111, -0.1666666667, -0.05555555556, -0.05555555556, 0, 0.1111111111, 0.1111111111, 0,
      -0.1111111111, -0.1111111111, -0.05555555556, 0.05555555556, -0.05555555556, 0.05555555556,
      0.1111111111, 0.1111111111, 0, -0.1111111111, -0.1111111111, 0, 0.05555555556, 0.05555555556,
      0.1666666667, 0.1111111111, 0, -0.1111111111, 0.05555555556, 0, -0.05555555556, 0.05555555556,
      0.1111111111, 0.1111111111, 0, -0.05555555556, -0.05555555556, 0, 0.05555555556, 0.05555555556,
      0.1666666667, 0.1111111111, -0.1111111111, -0.05555555556, 0.05555555556, 0, -0.05555555556,
      0.05555555556, 0.1111111111
    },
  },
  -- avg_pool2d {'kernel_size': 3, 'stride': 2, 'padding': 1, 'count_include_pad': False}
  avg_nopad = {
    y = {
      -0.1875, 0, 0.25, -0.375, 0.04166666667, 0.1388888889, 0.02777777778, -0.4166666667, 0,
      0.4583333333, 0.1666666667, -0.1875, 0.125, 0.04166666667, -0.25, -0.0625, 0.08333333333, 0,
      -0.1111111111, 0.1666666667, 0.3125, -0.04166666667, 0.2083333333, 0.125
    },
    gx = {
      -0.25, -0.1666666667, 0.08333333333, 0, -0.08333333333, 0.1666666667, 0.25, -0.25, -0.2777777778,
      -0.02777777778, -0.05555555556, -0.02777777778, 0.1388888889, 0.1666666667, 0, -0.1111111111,
      -0.1111111111, -0.05555555556, 0.05555555556, -0.02777777778, -0.08333333333, 0.25, 0.1388888889,
      -0.1111111111, -0.2222222222, -0.1111111111, -0.06944444444, 0.04166666667, 0.25, 0.25, 0,
      -0.1666666667, -0.1666666667, -0.04166666667, 0.125, -0.125, 0.04166666667, 0.1666666667,
      0.1666666667, 0, -0.25, -0.25, -0.04166666667, 0.06944444444, 0.1111111111, 0.2222222222,
      0.1111111111, -0.1388888889, -0.25, 0.08333333333, 0.02777777778, -0.05555555556, 0.05555555556,
      0.1111111111, 0.1111111111, 0, -0.1666666667, -0.1388888889, 0.02777777778, 0.05555555556,
      0.02777777778, 0.2777777778, 0.25, -0.25, -0.1666666667, 0.08333333333, 0, -0.08333333333,
      0.1666666667, 0.25
    },
  },
  -- avg_pool2d {'kernel_size': (2, 3), 'stride': 2, 'padding': 1, 'ceil_mode': True}
  avg_ceil = {
    y = {
      -0.2083333333, -0.08333333333, 0.04166666667, 0, -0.08333333333, -0.2083333333, 0.04166666667,
      -0.2083333333, 0, 0.4583333333, 0.1666666667, -0.125, 0.1666666667, 0.2083333333, -0.2083333333,
      -0.1666666667, 0.125, -0.1666666667, -0.4583333333, 0, 0.2083333333, -0.04166666667, 0.2083333333,
      0.08333333333
    },
    gx = {
      -0.1666666667, -0.08333333333, 0.08333333333, 0, -0.08333333333, 0.08333333333, 0.1666666667, 0,
      -0.1666666667, -0.1666666667, -0.08333333333, 0.08333333333, 0, -0.08333333333, 0, -0.1666666667,
      -0.1666666667, -0.08333333333, 0.08333333333, 0, -0.08333333333, 0.1666666667, 0.1666666667, 0,
      -0.1666666667, -0.1666666667, -0.08333333333, 0.08333333333, 0.1666666667, 0.1666666667, 0,
      -0.1666666667, -0.1666666667, -0.08333333333, 0.08333333333, -0.08333333333, 0.08333333333,
      0.1666666667, 0.1666666667, 0, -0.1666666667, -0.1666666667, 0.08333333333, 0, -0.08333333333,
      0.08333333333, 0.1666666667, 0.1666666667, 0, 0.08333333333, 0, -0.08333333333, 0.08333333333,
      0.1666666667, 0.1666666667, 0, -0.1666666667, -0.08333333333, 0.08333333333, 0, -0.08333333333,
      0.08333333333, 0.1666666667, -0.1666666667, -0.08333333333, 0.08333333333, 0, -0.08333333333,
      0.08333333333, 0.1666666667
    },
  },
  -- avg_pool2d {'kernel_size': (2, 3), 'stride': 2, 'padding': 1, 'ceil_mode': True, 'count_include_pad': False}
  avg_ceil_nopad = {
    y = {
      -0.625, -0.1666666667, 0.08333333333, 0, -0.125, -0.2083333333, 0.04166666667, -0.3125, 0,
      0.4583333333, 0.1666666667, -0.1875, 0.5, 0.4166666667, -0.4166666667, -0.5, 0.1875, -0.1666666667,
      -0.4583333333, 0, 0.3125, -0.04166666667, 0.2083333333, 0.125
    },
    gx = {
      -0.5, -0.3333333333, 0.1666666667, 0, -0.1666666667, 0.3333333333, 0.5, 0, -0.1666666667,
      -0.1666666667, -0.08333333333, 0.08333333333, -0.04166666667, -0.125, 0, -0.1666666667,
      -0.1666666667, -0.08333333333, 0.08333333333, -0.04166666667, -0.125, 0.25, 0.25, 0, -0.1666666667,
      -0.1666666667, -0.04166666667, 0.125, 0.25, 0.25, 0, -0.1666666667, -0.1666666667, -0.04166666667,
      0.125, -0.25, 0.08333333333, 0.3333333333, 0.3333333333, 0, -0.5, -0.5, 0.125, 0.04166666667,
      -0.08333333333, 0.08333333333, 0.1666666667, 0.1666666667, 0, 0.125, 0.04166666667, -0.08333333333,
      0.08333333333, 0.1666666667, 0.1666666667, 0, -0.25, -0.1666666667, 0.08333333333, 0,
      -0.08333333333, 0.1666666667, 0.25, -0.25, -0.1666666667, 0.08333333333, 0, -0.08333333333,
      0.1666666667, 0.25
    },
  },
  -- adaptive_avg_pool2d (3, 4)
  adaptive_3x4 = {
    y = {
      -0.1875, 0, 0.25, -0.375, 0.04166666667, 0.1388888889, 0.02777777778, -0.4166666667, 0,
      0.4583333333, 0.1666666667, -0.1875, 0.125, 0.04166666667, -0.25, -0.0625, 0.08333333333, 0,
      -0.1111111111, 0.1666666667, 0.3125, -0.04166666667, 0.2083333333, 0.125
    },
    gx = {
      -0.25, -0.1666666667, 0.08333333333, 0, -0.08333333333, 0.1666666667, 0.25, -0.25, -0.2777777778,
      -0.02777777778, -0.05555555556, -0.02777777778, 0.1388888889, 0.1666666667, 0, -0.1111111111,
      -0.1111111111, -0.05555555556, 0.05555555556, -0.02777777778, -0.08333333333, 0.25, 0.1388888889,
      -0.1111111111, -0.2222222222, -0.1111111111, -0.06944444444, 0.04166666667, 0.25, 0.25, 0,
      -0.1666666667, -0.1666666667, -0.04166666667, 0.125, -0.125, 0.04166666667, 0.1666666667,
      0.1666666667, 0, -0.25, -0.25, -0.04166666667, 0.06944444444, 0.1111111111, 0.2222222222,
      0.1111111111, -0.1388888889, -0.25, 0.08333333333, 0.02777777778, -0.05555555556, 0.05555555556,
      0.1111111111, 0.1111111111, 0, -0.1666666667, -0.1388888889, 0.02777777778, 0.05555555556,
      0.02777777778, 0.2777777778, 0.25, -0.25, -0.1666666667, 0.08333333333, 0, -0.08333333333,
      0.1666666667, 0.25
    },
  },
  -- adaptive_avg_pool2d (2, 5)
  adaptive_2x5 = {
    y = {
      -0.2916666667, -0.1666666667, 0.1111111111, 0.2083333333, -0.2083333333, -0.1666666667,
      -0.04166666667, 0.05555555556, -0.2083333333, -0.08333333333, 0.2916666667, 0.4166666667,
      -0.02777777778, -0.2916666667, -0.1666666667, 0.4166666667, 0, -0.4444444444, -0.1666666667,
      -0.04166666667
    },
    gx = {
      -0.1666666667, -0.08333333333, 0.02777777778, -0.05555555556, 0.1111111111, 0.1666666667, 0,
      -0.1666666667, -0.08333333333, 0.02777777778, -0.05555555556, 0.1111111111, 0.1666666667, 0,
      -0.3333333333, -0.1666666667, 0.05555555556, -0.1111111111, 0.2222222222, 0.3333333333, 0,
      -0.1666666667, -0.08333333333, 0.02777777778, -0.05555555556, 0.1111111111, 0.1666666667, 0,
      -0.1666666667, -0.08333333333, 0.02777777778, -0.05555555556, 0.1111111111, 0.1666666667, 0,
      -0.1666666667, -0.08333333333, 0.02777777778, -0.05555555556, 0.1111111111, 0.1666666667, 0,
      -0.1666666667, -0.08333333333, 0.02777777778, -0.05555555556, 0.1111111111, 0.1666666667, 0,
      -0.3333333333, -0.1666666667, 0.05555555556, -0.1111111111, 0.2222222222, 0.3333333333, 0,
      -0.1666666667, -0.08333333333, 0.02777777778, -0.05555555556, 0.1111111111, 0.1666666667, 0,
      -0.1666666667, -0.08333333333, 0.02777777778, -0.05555555556, 0.1111111111, 0.1666666667, 0
    },
  },
  -- adaptive_avg_pool2d 1
  adaptive_1 = {
    y = {-0.07142857143, -0.01428571429},
    gx = {
      -0.02857142857, -0.02857142857, -0.02857142857, -0.02857142857, -0.02857142857, -0.02857142857,
      -0.02857142857, -0.02857142857, -0.02857142857, -0.02857142857, -0.02857142857, -0.02857142857,
      -0.02857142857, -0.02857142857, -0.02857142857, -0.02857142857, -0.02857142857, -0.02857142857,
      -0.02857142857, -0.02857142857, -0.02857142857, -0.02857142857, -0.02857142857, -0.02857142857,
      -0.02857142857, -0.02857142857, -0.02857142857, -0.02857142857, -0.02857142857, -0.02857142857,
      -0.02857142857, -0.02857142857, -0.02857142857, -0.02857142857, -0.02857142857, 0.01428571429,
      0.01428571429, 0.01428571429, 0.01428571429, 0.01428571429, 0.01428571429, 0.01428571429,
      0.01428571429, 0.01428571429, 0.01428571429, 0.01428571429, 0.01428571429, 0.01428571429,
      0.01428571429, 0.01428571429, 0.01428571429, 0.01428571429, 0.01428571429, 0.01428571429,
      0.01428571429, 0.01428571429, 0.01428571429, 0.01428571429, 0.01428571429, 0.01428571429,
      0.01428571429, 0.01428571429, 0.01428571429, 0.01428571429, 0.01428571429, 0.01428571429,
      0.01428571429, 0.01428571429, 0.01428571429, 0.01428571429
    },
  },
}

local function check_case(name, f, dtype)
  local ref = torch_ref[name]
  local x = pat({ 1, 2, 5, 7 }, 7, 13, 6, 4, dtype):requires_grad_(true)
  local y, ind = f(x)
  local m = pat(y.shape, 3, 5, 2, 2, dtype)
  ;(y * m):sum():backward()
  local tol = dtype == 'f32' and 1e-6 or 1e-9 -- the pasted numbers have 10 digits
  H.assert_close(flat(y), ref.y, tol, tol, name .. ' y')
  if ref.ind then
    assert.are.equal('i64', ind.dtype)
    assert.same(ref.ind, H.flat(ind))
  end
  H.assert_close(flat(x.grad), ref.gx, tol, tol, name .. ' gx')
end

local cases = {
  max_k2 = function(x) return cr.max_pool2d(x, 2, { return_indices = true }) end,
  max_k3s2p1 = function(x) return x:max_pool2d(3, { stride = 2, padding = 1, return_indices = true }) end,
  max_ceil = function(x) return cr.max_pool2d(x, { 2, 3 }, { stride = 2, ceil_mode = true, return_indices = true }) end,
  max_dil = function(x) return cr.max_pool2d(x, 2, { stride = 1, padding = 1, dilation = 2, return_indices = true }) end,
  avg_k3s2p1 = function(x) return cr.avg_pool2d(x, 3, { stride = 2, padding = 1 }) end,
  avg_nopad = function(x) return x:avg_pool2d(3, { stride = 2, padding = 1, count_include_pad = false }) end,
  avg_ceil = function(x) return cr.avg_pool2d(x, { 2, 3 }, { stride = 2, padding = 1, ceil_mode = true }) end,
  avg_ceil_nopad = function(x)
    return cr.avg_pool2d(x, { 2, 3 }, { stride = 2, padding = 1, ceil_mode = true, count_include_pad = false })
  end,
  adaptive_3x4 = function(x) return cr.adaptive_avg_pool2d(x, { 3, 4 }) end,
  adaptive_2x5 = function(x) return x:adaptive_avg_pool2d({ 2, 5 }) end,
  adaptive_1 = function(x) return cr.adaptive_avg_pool2d(x, 1) end,
}
local names = {}
for k in pairs(cases) do names[#names + 1] = k end
table.sort(names)

describe('pooling matches PyTorch', function()
  for _, name in ipairs(names) do
    for _, dt in ipairs { 'f64', 'f32' } do
      it(name .. ' ' .. dt, function() check_case(name, cases[name], dt) end)
    end
  end

  it('max_pool2d returns only values unless asked for indices', function()
    local y, ind = cr.max_pool2d(pat({ 1, 1, 4, 4 }, 7, 13, 6, 4), 2)
    assert.same({ 1, 1, 2, 2 }, y.shape)
    assert.is_nil(ind)
  end)

  it('max_pool2d gives -inf and index -1 for a window that holds no input (dilation)', function()
    -- PyTorch gives -inf and an out-of-plane index here; -1 keeps the backward in bounds
    local x = cr.tensor({ 0.5, 1, 2, 3 }):view({ 1, 1, 2, 2 }):requires_grad_(true)
    local y, ind = cr.max_pool2d(x, 2, { stride = 1, padding = 1, dilation = 3, return_indices = true })
    assert.are.equal(-math.huge, y:item())
    assert.are.equal(-1, ind:item())
    y:sum():backward()
    assert.same({ 0, 0, 0, 0 }, H.flat(x.grad))
  end)

  it('max_pool2d lets NaN win, as PyTorch does', function()
    local x = cr.tensor({ 1, 0 / 0, 3, 2 }, { dtype = 'f64' }):view({ 1, 1, 2, 2 })
    local y, ind = cr.max_pool2d(x, 2, { return_indices = true })
    assert.is_true(y:item() ~= y:item())
    assert.are.equal(1, ind:item())
  end)
end)

describe('global average pooling of channels-last tensors', function()
  -- its own kernel reads the [N, H, W, C] memory as it lies and writes the grad
  -- channels-last; values and grads equal the row-major path's, bit for bit
  local function channels_last(t) return t:permute(0, 2, 3, 1):contiguous():permute(0, 3, 1, 2) end
  for _, dt in ipairs { 'f32', 'bf16' } do
    for _, shape in ipairs { { 3, 5, 4, 6 }, { 2, 300, 3, 3 }, { 64, 16, 7, 7 } } do
      it(string.format('%s %s: values, grads and the grad\'s layout', dt, table.concat(shape, 'x')), function()
        local x0 = pat(shape, 7, 13, 6, 4):to(dt)
        local gy = pat({ shape[1], shape[2], 1, 1 }, 5, 11, 3, 2):to(dt)
        local function run(x)
          -- the grad as the op gives it (a leaf's accumulated grad is made row-major)
          x = x:detach():requires_grad_(true) * 1
          local g
          x:register_hook(function(grad) g = grad end)
          local y = cr.adaptive_avg_pool2d(x, 1)
          y:backward(gy)
          return y, g
        end
        local y, g = run(channels_last(x0))
        local y_ref, g_ref = run(x0)
        assert.is_true(g:is_channels_last())
        assert.are.equal(dt, y.dtype)
        assert.are.same(H.flat(y_ref:double()), H.flat(y:double()))
        assert.are.same(H.flat(g_ref:double()), H.flat(g:contiguous():double()))
      end)
    end
  end
end)

describe('pooling gradcheck (f64)', function()
  local checks = {
    { 'max 2x2', function(x) return cr.max_pool2d(x, 2) end, { 2, 2, 4, 6 } },
    { 'max 3x3 stride 2 pad 1', function(x) return cr.max_pool2d(x, 3, { stride = 2, padding = 1 }) end, { 1, 2, 7, 6 } },
    { 'max dilation 2 ceil', function(x)
      return cr.max_pool2d(x, { 2, 3 }, { stride = { 2, 1 }, padding = 1, dilation = 2, ceil_mode = true })
    end, { 1, 2, 6, 7 } },
    { 'avg 3x3 stride 2 pad 1', function(x) return cr.avg_pool2d(x, 3, { stride = 2, padding = 1 }) end, { 2, 1, 6, 5 } },
    { 'avg no pad count, ceil', function(x)
      return cr.avg_pool2d(x, { 3, 2 }, { stride = 2, padding = 1, ceil_mode = true, count_include_pad = false })
    end, { 1, 2, 6, 7 } },
    { 'adaptive 3x4', function(x) return cr.adaptive_avg_pool2d(x, { 3, 4 }) end, { 1, 2, 5, 7 } },
    { 'adaptive upsampling 7x3', function(x) return cr.adaptive_avg_pool2d(x, { 7, 3 }) end, { 1, 1, 4, 2 } },
    { '3-D input', function(x) return cr.max_pool2d(x, 2, { stride = 1 }) end, { 2, 3, 4 } },
  }
  for _, c in ipairs(checks) do
    it(c[1], function() H.gradcheck(c[2], { distinct(c[3]) }) end)
  end
end)

describe('pooling inputs', function()
  it('agrees between f32 and f64 on larger inputs', function()
    local x64 = distinct({ 4, 8, 33, 31 })
    local x32 = x64:float()
    local o = { stride = 2, padding = 1 }
    H.assert_close(cr.max_pool2d(x32, 3, o), cr.max_pool2d(x64, 3, o), 1e-6, 1e-6)
    H.assert_close(cr.avg_pool2d(x32, 2), cr.avg_pool2d(x64, 2), 1e-6, 1e-6)
    H.assert_close(cr.adaptive_avg_pool2d(x32, 7), cr.adaptive_avg_pool2d(x64, 7), 1e-6, 1e-6)
  end)

  it('accepts non-contiguous views and 3-D inputs', function()
    local base = distinct({ 2, 3, 7, 6 })
    local xt = base:transpose(2, 3)
    assert.is_false(xt:is_contiguous())
    H.assert_close(cr.max_pool2d(xt, 2), cr.max_pool2d(xt:contiguous(), 2), 0, 0)
    local o = { stride = 1, padding = 1 }
    H.assert_close(cr.avg_pool2d(xt, 3, o), cr.avg_pool2d(xt:contiguous(), 3, o), 0, 0)
    H.assert_close(cr.adaptive_avg_pool2d(xt, 4), cr.adaptive_avg_pool2d(xt:contiguous(), 4), 0, 0)
    H.gradcheck(function(x) return cr.avg_pool2d(x:transpose(1, 2), 2) end, { distinct({ 2, 5, 4 }) })
    local y3 = cr.max_pool2d(distinct({ 3, 4, 4 }), 2)
    assert.same({ 3, 2, 2 }, y3.shape)
  end)

  it('computes half inputs in f32', function()
    local x = distinct({ 1, 2, 4, 4 }, 'f32')
    local y, ind = cr.max_pool2d(x:half(), 2, { return_indices = true })
    assert.are.equal('f16', y.dtype)
    H.assert_close(y:float(), cr.max_pool2d(x:half():float(), 2), 0, 0)
    assert.same(H.flat(select(2, cr.max_pool2d(x, 2, { return_indices = true }))), H.flat(ind))
    assert.are.equal('bf16', cr.avg_pool2d(x:bfloat16(), 2).dtype)
    assert.are.equal('f16', cr.adaptive_avg_pool2d(x:half(), 1).dtype)
  end)

  it('rejects bad input with a message naming the op and the fix', function()
    local x = distinct({ 1, 2, 5, 5 }, 'f32')
    H.assert_error(function() cr.max_pool2d(nil, 2) end, 'max_pool2d', 'input')
    H.assert_error(function() cr.max_pool2d(x) end, 'max_pool2d', 'kernel size')
    H.assert_error(function() cr.max_pool2d(x, 0) end, 'max_pool2d', 'kernel size must be in [1')
    H.assert_error(function() cr.max_pool2d(x, -2) end, 'max_pool2d', 'kernel size')
    H.assert_error(function() cr.max_pool2d(x, 1e12) end, 'max_pool2d', "'kernel_size' must be an integer in",
      'got 1000000000000')
    H.assert_error(function() cr.max_pool2d(x, 2, { padding = 2 }) end, 'max_pool2d', 'at most half the kernel')
    H.assert_error(function() cr.max_pool2d(x, 2, { padding = -1 }) end, 'max_pool2d', 'padding')
    H.assert_error(function() cr.max_pool2d(x, 2, { stride = 0 }) end, 'max_pool2d', 'stride must be >= 1')
    H.assert_error(function() cr.max_pool2d(x, 2, { dilation = 0 }) end, 'max_pool2d', 'dilation')
    H.assert_error(function() cr.max_pool2d(x, 6) end, 'max_pool2d', 'larger than the padded input')
    H.assert_error(function() cr.max_pool2d(x, 2.5) end, 'max_pool2d', 'integer')
    H.assert_error(function() cr.max_pool2d(x, { 2, 2, 2 }) end, 'max_pool2d', '{h, w} pair')
    H.assert_error(function() cr.max_pool2d(x, 2, { strid = 1 }) end, 'max_pool2d', "unknown option 'strid'")
    H.assert_error(function() cr.max_pool2d(distinct({ 5, 5 }), 2) end, 'max_pool2d', '4-D', '[5, 5]')
    H.assert_error(function() cr.max_pool2d(x:long(), 2) end, 'max_pool2d', 'float', 'i64')
    H.assert_error(function() cr.max_pool2d(cr.zeros({ 1, 1, 0, 4 }), 2) end, 'max_pool2d', 'empty plane')
    H.assert_error(function() cr.avg_pool2d(x, 2, { dilation = 2 }) end, 'avg_pool2d', "unknown option 'dilation'")
    H.assert_error(function() cr.avg_pool2d(x, 3, { padding = 2 }) end, 'avg_pool2d', 'at most half')
    H.assert_error(function() cr.avg_pool2d(x, 7) end, 'avg_pool2d', 'larger than the padded input')
    H.assert_error(function() cr.avg_pool2d(x:int(), 2) end, 'avg_pool2d', 'float')
    H.assert_error(function() cr.avg_pool2d(cr.ones({ 2, 2, 2, 2, 2 }), 2) end, 'avg_pool2d', '4-D')
    H.assert_error(function() cr.adaptive_avg_pool2d(x) end, 'adaptive_avg_pool2d', 'output size')
    H.assert_error(function() cr.adaptive_avg_pool2d(x, 0) end, 'adaptive_avg_pool2d', 'output size must be >= 1')
    H.assert_error(function() cr.adaptive_avg_pool2d(x, { 2, -1 }) end, 'adaptive_avg_pool2d', '>= 1')
    H.assert_error(function() cr.adaptive_avg_pool2d(x, 1e12) end, 'adaptive_avg_pool2d', "'output_size' must be an integer")
    H.assert_error(function() cr.adaptive_avg_pool2d(x:bool(), 2) end, 'adaptive_avg_pool2d', 'float')
  end)

  it('checks the backward ops arguments, indices included', function()
    local W = cr.Tensor.op_helpers
    local g = distinct({ 1, 1, 2, 2 })
    local good = cr.tensor({ 0, 3, 8, 15 }, { dtype = 'i64' }):view({ 1, 1, 2, 2 })
    local ffi = require 'ffi'
    local p = ffi.new('cr_pool2d_params', { { 2, 2 }, { 0, 0 }, { 0, 0 }, { 1, 1 }, false, true })
    local gx = W.call(C.cr_op_max_pool2d_backward, g, good, 4, 4, p)
    assert.same({ 1, 1, 4, 4 }, gx.shape)
    H.assert_close(gx:sum(), g:sum(), 1e-12, 0)
    local bad = cr.tensor({ 0, 3, 8, 16 }, { dtype = 'i64' }):view({ 1, 1, 2, 2 })
    H.assert_error(function() W.call(C.cr_op_max_pool2d_backward, g, bad, 4, 4, p) end,
      'max_pool2d_backward', 'index 16', 'outside the 4 x 4')
    H.assert_error(function() W.call(C.cr_op_max_pool2d_backward, g, good:double(), 4, 4, p) end,
      'max_pool2d_backward', 'indices must be i64')
    H.assert_error(function() W.call(C.cr_op_max_pool2d_backward, g, good, 0, 4, p) end,
      'max_pool2d_backward', 'input size')
    H.assert_error(function() W.call(C.cr_op_max_pool2d_backward, g, good, 6, 6, p) end,
      'max_pool2d_backward', 'does not match the pooled shape')
    H.assert_error(function() W.call(C.cr_op_adaptive_avg_pool2d_backward, g:long(), 4, 4) end,
      'adaptive_avg_pool2d_backward', 'f32 or f64')
    H.assert_error(function() W.call(C.cr_op_avg_pool2d_backward, g, 6, 6, p) end,
      'avg_pool2d_backward', 'does not match the pooled shape')
    assert.same({ 1, 1, 4, 5 }, W.call(C.cr_op_avg_pool2d_backward, g, 4, 5, p).shape)
  end)
end)
