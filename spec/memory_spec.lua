-- memory_spec — tensor bytes live outside the Lua heap, so the binding must keep them
-- from piling up: over 10,000 iterations of a small forward/backward, resident memory
-- and live tensor counts stay flat.
local cr = H.cr

local function rss_kib()
  local f = assert(io.open('/proc/self/statm'))
  local _, resident = f:read('*n', '*n')
  f:close()
  return resident * 4 -- pages of 4 KiB
end

describe('memory', function()
  it('stays flat over 10,000 forward/backward iterations', function()
    if H.sanitized then pending('ASan keeps freed memory in quarantine: resident memory is measured by make test') end
    local w = cr.full({ 64, 64 }, 0.01, { requires_grad = true })
    local b = cr.zeros(64, { requires_grad = true })
    local x = cr.ones(8, 64)
    local function step()
      local y = (x * 2):sum(0, true) * w + b
      local loss = (y * y):mean()
      loss:backward()
      w.grad = nil
      b.grad = nil
      -- as the step loop does: finalise the step's handles steadily, so the C
      -- heap's high-water mark does not follow the GC's pauses
      collectgarbage('step', 256)
    end
    for _ = 1, 1000 do step() end -- warm up allocator and JIT
    collectgarbage('collect')
    local rss0, live0 = rss_kib(), cr.memory_stats().live_tensors
    for _ = 1, 10000 do step() end
    collectgarbage('collect')
    local rss1, live1 = rss_kib(), cr.memory_stats().live_tensors
    assert.is_true(rss1 - rss0 < 8 * 1024,
      string.format('resident memory grew by %d KiB over 10,000 iterations', rss1 - rss0))
    assert.is_true(live1 <= live0, string.format('live tensors grew from %d to %d', live0, live1))
  end)

  it('frees tensor bytes when handles are collected or freed explicitly', function()
    collectgarbage('collect')
    local before = cr.memory_stats().live_bytes
    do
      local t = cr.zeros(1024, 1024)
      assert.is_true(cr.memory_stats().live_bytes >= before + 4 * 1024 * 1024)
      t:free()
    end
    assert.is_true(cr.memory_stats().live_bytes <= before)
    for _ = 1, 200 do local _ = cr.zeros(256, 1024) end -- 1 MiB each, never freed by hand
    collectgarbage('collect')
    assert.is_true(cr.memory_stats().live_bytes <= before + 1024 * 1024)
  end)

  it('keeps peak memory bounded when big temporaries are dropped without collection', function()
    collectgarbage('collect')
    local C = cr.C
    C.cr_memory_reset_peak()
    local base = cr.memory_stats().live_bytes
    for _ = 1, 300 do local _ = cr.zeros(1024, 1024) end -- 4 MiB each: 1.2 GB if never freed
    local peak = cr.memory_stats().peak_bytes - base
    assert.is_true(peak < 512 * 1024 * 1024, string.format('peak %d MiB', peak / 2 ^ 20))
  end)

  it('frees the handles of small ops at each collection', function()
    local a, b = cr.tensor({ 1.5 }), cr.tensor({ 2.5 })
    collectgarbage('collect')
    local live0 = cr.memory_stats().live_tensors
    for _ = 1, 3 do
      for _ = 1, 50000 do local _ = a + b end
      collectgarbage('collect')
      assert.are.equal(live0, cr.memory_stats().live_tensors)
    end
  end)
end)
