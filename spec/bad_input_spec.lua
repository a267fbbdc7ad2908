-- bad_input_spec — feeds every cr function and every Tensor method a battery of bad
-- arguments (nil, wrong types, wrong dtypes, negative and absurd sizes, non-contiguous
-- views, empty tensors) and requires each call either to succeed or to raise a Lua
-- error with a message. A crash or a hang fails the whole run; per-op specs check the
-- exact messages.
local cr = H.cr

-- Calls that change global state or take callbacks are exercised in their own specs.
local skip = {
  set_fast_paths = true, set_grad_enabled = true, set_num_threads = true, manual_seed = true,
  no_grad = true, enable_grad = true, Function = true, grad = true, features = true,
  memory_stats = true, free = true, register_hook = true, register_post_accumulate_grad_hook = true,
  C = true, Tensor = true, version = true, is_tensor = true, get_num_threads = true,
  is_grad_enabled = true,
}

local function fixtures()
  local base = cr.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = 'f32' })
  return {
    { 'nil', nil },
    { 'a string', 'abc' },
    { 'an empty table', {} },
    { 'a negative number', -1 },
    { 'an absurd number', 1e18 },
    { 'a fractional number', 0.5 },
    { 'a non-contiguous view', base:t() },
    { 'an i64 tensor', cr.tensor({ 1, 2, 3 }) },
    { 'a bool tensor', cr.tensor({ true, false }) },
    { 'a 0-dim tensor', cr.tensor(2.5) },
    { 'an empty tensor', cr.zeros(0, 3) },
    { 'a 4-d tensor', cr.ones(2, 1, 3, 3) },
  }
end

local function attempt(what, f, ...)
  local ok, err = pcall(f, ...)
  if not ok then
    assert(type(err) == 'string' and #err > 0, what .. ': raised a non-string error ' .. tostring(err))
    assert(not err:find('internal error', 1, true), what .. ': ' .. err)
  end
end

local function names(t)
  local out = {}
  for k, v in pairs(t) do
    if type(v) == 'function' and not skip[k] and not k:match('^_') then out[#out + 1] = k end
  end
  table.sort(out)
  return out
end

describe('every op under bad input', function()
  it('cr.* functions raise messages, never crash', function()
    for _, name in ipairs(names(cr)) do
      for _, fx in ipairs(fixtures()) do
        attempt('cr.' .. name .. '(' .. fx[1] .. ')', cr[name], fx[2])
        local good = cr.ones(2, 3)
        attempt('cr.' .. name .. '(tensor, ' .. fx[1] .. ')', cr[name], good, fx[2])
        attempt('cr.' .. name .. '(' .. fx[1] .. ', tensor)', cr[name], fx[2], good)
        attempt('cr.' .. name .. '(tensor, tensor, ' .. fx[1] .. ')', cr[name], good, good, fx[2])
      end
    end
  end)

  it('Tensor methods raise messages, never crash', function()
    for _, name in ipairs(names(cr.Tensor)) do
      for _, fx in ipairs(fixtures()) do
        local view = cr.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = 'f32' }):t()
        attempt('t:' .. name .. '(' .. fx[1] .. ')', cr.Tensor[name], view, fx[2])
        attempt('t:' .. name .. '(' .. fx[1] .. ', 1)', cr.Tensor[name], view, fx[2], 1)
        attempt('t:' .. name .. '(0, ' .. fx[1] .. ')', cr.Tensor[name], view, 0, fx[2])
        if type(fx[2]) == 'userdata' or cr.is_tensor(fx[2]) then
          attempt('(' .. fx[1] .. '):' .. name .. '()', cr.Tensor[name], fx[2])
        end
      end
    end
  end)
end)

describe('every SSL, init and clipping function under bad input', function()
  it('raises messages, never crashes', function()
    local groups = { ssl = cr.ssl, init = cr.nn.init, optim = cr.optim }
    for gname, g in pairs(groups) do
      for _, name in ipairs(names(g)) do
        for _, fx in ipairs(fixtures()) do
          local good = cr.ones(2, 3)
          attempt(gname .. '.' .. name .. '(' .. fx[1] .. ')', g[name], fx[2])
          attempt(gname .. '.' .. name .. '(tensor, ' .. fx[1] .. ')', g[name], good, fx[2])
          attempt(gname .. '.' .. name .. '(' .. fx[1] .. ', tensor)', g[name], fx[2], good)
        end
      end
    end
  end)
end)
