-- dist_rendezvous_spec — the TCP rendezvous (cr_dist_rendezvous) between real processes on
-- 127.0.0.1: rank 0's bytes reach rank 1, and every failure (no rank 0, a port in use, a
-- rank of another world size, bad arguments) says which address and rank and what to do.
-- Also the NCCL entry points on a machine without a usable GPU: a clear error, no crash.
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local now = require('crescent.engine.loop').now

pcall(ffi.cdef, 'int getpid(void);')

local N = 128

-- The child: one rank of the rendezvous, its bytes in hex on stdout or the error on stderr.
local CHILD = [[
package.path = 'lua/?.lua;lua/?/init.lua;' .. package.path
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local rank, world, port, timeout = tonumber(arg[1]), tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4])
local n = tonumber(arg[5])
local buf = ffi.new('uint8_t[?]', n)
if rank == 0 then for i = 0, n - 1 do buf[i] = (i * 37 + 11) % 256 end end
if C.cr_dist_rendezvous('127.0.0.1', port, rank, world, buf, n, timeout) ~= 0 then
  io.stderr:write(ffi.string(C.cr_last_error()), '\n')
  os.exit(1)
end
local hex = {}
for i = 0, n - 1 do hex[#hex + 1] = string.format('%02x', buf[i]) end
print(table.concat(hex))
]]

local function expected_hex(n)
  local hex = {}
  for i = 0, n - 1 do hex[#hex + 1] = string.format('%02x', (i * 37 + 11) % 256) end
  return table.concat(hex)
end

local function slurp(path)
  local f = io.open(path, 'r')
  if not f then return '' end
  local s = f:read('*a')
  f:close()
  return s
end

-- A folder of our own for the child script and the ranks' outputs.
local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p '" .. dir .. "'"))
local child = dir .. '/child.lua'
do
  local f = assert(io.open(child, 'w'))
  f:write(CHILD)
  f:close()
end

-- Ports in 20000..59999 from the clock and the pid, so parallel runs rarely meet; each
-- call gives the next one.
local port_seed = (os.time() * 7919 + ffi.C.getpid() * 104729) % 40000
local function next_port()
  port_seed = (port_seed + 7907) % 40000
  return 20000 + port_seed
end

-- Runs ranks as processes at once (each {rank, world, timeout, delay_s, n}) and returns,
-- per rank in the order given, {rc, out, err}.
local function run_ranks(port, ranks)
  local parts = {}
  for i, r in ipairs(ranks) do
    local p = string.format('%s/r%d', dir, i)
    os.remove(p .. '.rc')
    parts[#parts + 1] = string.format("( sleep %g; luajit '%s' %d %d %d %g %d > '%s.out' 2> '%s.err'; echo $? > '%s.rc' ) &",
      r[4] or 0, child, r[1], r[2], port, r[3], r[5] or N, p, p, p)
  end
  os.execute(table.concat(parts, ' ') .. ' wait')
  local res = {}
  for i = 1, #ranks do
    local p = string.format('%s/r%d', dir, i)
    res[i] = { rc = tonumber(slurp(p .. '.rc')), out = slurp(p .. '.out'):gsub('%s+$', ''),
               err = slurp(p .. '.err'):gsub('%s+$', '') }
  end
  return res
end

-- run_ranks on fresh ports until rank 0 (the first entry) did not find its port taken.
local function run_fresh(ranks)
  for _ = 1, 5 do
    local port = next_port()
    local res = run_ranks(port, ranks)
    if not res[1].err:find('address already in use', 1, true) then return res, port end
  end
  error('five ports in a row were in use')
end

-- Waits (up to `limit` seconds) until a child has written `path`.
local function wait_file(path, limit)
  local t0 = now()
  while slurp(path) == '' and now() - t0 < limit do os.execute('sleep 0.1') end
end

local function rendezvous(addr, port, rank, world, n, timeout)
  local buf = ffi.new('uint8_t[?]', math.max(n, 1))
  local st = C.cr_dist_rendezvous(addr, port, rank, world, buf, n, timeout)
  return st, st ~= 0 and ffi.string(C.cr_last_error()) or nil, buf
end

describe('dist rendezvous', function()
  teardown(function() os.execute("rm -rf '" .. dir .. "'") end)

  it("hands rank 0's bytes to rank 1, whichever starts first", function()
    -- rank 1 first: it finds nothing listening and retries until rank 0 is up
    local res = run_fresh({ { 0, 2, 20, 0.4 }, { 1, 2, 20, 0 } })
    assert.are.equal(0, res[1].rc, res[1].err)
    assert.are.equal(0, res[2].rc, res[2].err)
    assert.are.equal(expected_hex(N), res[2].out)
    assert.are.equal(expected_hex(N), res[1].out) -- rank 0's own bytes stay as they were
    -- rank 0 first, three ranks
    res = run_fresh({ { 0, 3, 20, 0 }, { 2, 3, 20, 0.2 }, { 1, 3, 20, 0.3 } })
    for i = 1, 3 do assert.are.equal(0, res[i].rc, res[i].err) end
    assert.are.equal(expected_hex(N), res[2].out)
    assert.are.equal(expected_hex(N), res[3].out)
  end)

  it('carries zero bytes and the largest payload, 1 MiB', function()
    local res = run_fresh({ { 0, 2, 20, 0, 0 }, { 1, 2, 20, 0, 0 } })
    assert.are.equal(0, res[1].rc, res[1].err)
    assert.are.equal(0, res[2].rc, res[2].err)
    res = run_fresh({ { 0, 2, 20, 0, 1048576 }, { 1, 2, 20, 0, 1048576 } })
    assert.are.equal(0, res[1].rc, res[1].err)
    assert.are.equal(0, res[2].rc, res[2].err)
    assert.are.equal(expected_hex(1048576), res[2].out)
  end)

  it('fails within its timeout when rank 0 never comes, naming the address', function()
    local port = next_port()
    local t0 = now()
    local st, err = rendezvous('127.0.0.1', port, 1, 2, N, 1.0)
    local took = now() - t0
    assert.are_not.equal(0, st)
    assert.is_true(took >= 0.9 and took < 2.5, 'took ' .. took .. ' s')
    assert.truthy(err:find('rank 1: could not reach MASTER_ADDR:MASTER_PORT = 127.0.0.1:' .. port .. ' within 1 s',
      1, true), err)
    assert.truthy(err:find('connection refused', 1, true), err)
    assert.truthy(err:find('is rank 0 running', 1, true), err)
  end)

  it('fails within its timeout when a rank never comes to rank 0, naming the missing ranks', function()
    local st, err, port
    for _ = 1, 5 do
      port = next_port()
      local t0 = now()
      st, err = rendezvous('127.0.0.1', port, 0, 3, N, 0.5)
      if not err:find('address already in use', 1, true) then
        assert.is_true(now() - t0 < 2, 'rank 0 outlasted its timeout')
        break
      end
    end
    assert.are_not.equal(0, st)
    assert.truthy(err:find('rank 0: only 0 of the other 2 ranks reached 127.0.0.1:' .. port .. ' within 0.5 s',
      1, true), err)
    assert.truthy(err:find('missing: ranks 1, 2', 1, true), err)
  end)

  it('names a port in use and a rank of another world size', function()
    -- rank 0 of a world of 2 holds the port for 2 s; a second rank 0 finds it taken, and
    -- a rank 1 that thinks the world has 3 ranks is turned away with the reason
    local res, port
    for _ = 1, 5 do
      port = next_port()
      local p = string.format('%s/held', dir)
      os.remove(p .. '.rc')
      os.execute(string.format("( luajit '%s' 0 2 %d 2 %d > '%s.out' 2> '%s.err'; echo $? > '%s.rc' ) & sleep 0.5",
        child, port, N, p, p, p))
      local st, err = rendezvous('127.0.0.1', port, 0, 2, N, 1)
      if st ~= 0 and err:find('address already in use', 1, true) then
        assert.truthy(err:find('rank 0: cannot listen on MASTER_PORT ' .. port, 1, true), err)
        assert.truthy(err:find('pick another MASTER_PORT', 1, true), err)
        res = run_ranks(port, { { 1, 3, 2, 0 } })
        wait_file(p .. '.rc', 6)
        res.held = { rc = tonumber(slurp(p .. '.rc')), err = slurp(p .. '.err') }
        break
      end
      wait_file(p .. '.rc', 6) -- the port was someone else's: let the child time out
    end
    assert.truthy(res, 'no free port found')
    assert.are.equal(1, res[1].rc)
    assert.truthy(res[1].err:find('rank 1: rank 0 at 127.0.0.1:' .. port .. ' runs a job of world size 2, but this '
      .. 'rank was given 3: start every rank with the same WORLD_SIZE', 1, true), res[1].err)
    assert.are.equal(1, res.held.rc)
    assert.truthy(res.held.err:find('missing: rank 1', 1, true), res.held.err)
    assert.truthy(res.held.err:find('joined as rank 1 of 3', 1, true), res.held.err)
    assert.truthy(res.held.err:find('its WORLD_SIZE differs', 1, true), res.held.err)
  end)

  it('returns at once for a world of one', function()
    local st, err, buf = rendezvous('127.0.0.1', 1, 0, 1, 4, 1)
    assert.are.equal(0, st, err)
    assert.are.equal(0, buf[0])
  end)

  it('rejects bad arguments with what to change', function()
    local cases = {
      { { '127.0.0.1', 29500, 0, 0, N, 1 }, 'world size 0; WORLD_SIZE must be at least 1' },
      { { '127.0.0.1', 29500, 2, 2, N, 1 }, 'rank 2 does not lie in [0, 2)' },
      { { '127.0.0.1', 29500, -1, 2, N, 1 }, 'rank -1 does not lie in [0, 2)' },
      { { '127.0.0.1', 0, 1, 2, N, 1 }, 'MASTER_PORT 0 is not a port: pick one in 1 to 65535' },
      { { '127.0.0.1', 70000, 1, 2, N, 1 }, 'MASTER_PORT 70000 is not a port' },
      { { '', 29500, 1, 2, N, 1 }, 'MASTER_ADDR is empty' },
      { { '127.0.0.1', 29500, 1, 2, 1048577, 1 }, '1048577 bytes to hand out; it carries at most 1 MiB' },
      { { '127.0.0.1', 29500, 1, 2, N, 0 }, 'timeout 0 s; it must be a positive number of seconds' },
      { { '127.0.0.1', 29500, 1, 2, N, 0 / 0 }, 'must be a positive number of seconds' },
    }
    for _, c in ipairs(cases) do
      local st, err = rendezvous(unpack(c[1]))
      assert.are.equal(1, st, c[2]) -- CR_ERR_ARG
      assert.truthy(err:find(c[2], 1, true), err)
    end
    assert.are.equal(1, C.cr_dist_rendezvous(nil, 29500, 1, 2, nil, 0, 1))
    assert.are.equal(1, C.cr_dist_rendezvous('127.0.0.1', 29500, 1, 2, nil, 8, 1))
    assert.truthy(ffi.string(C.cr_last_error()):find('buf is NULL for 8 bytes', 1, true))
    local st, err = rendezvous('no-such-host.invalid', 29500, 1, 2, N, 1)
    assert.are.equal(1, st)
    assert.truthy(err:find("rank 1: MASTER_ADDR 'no-such-host.invalid' does not resolve", 1, true), err)
  end)
end)

describe('dist NCCL without a usable GPU', function()
  local has_gpu = C.cr_cuda_device_count() > 0

  it('says NCCL is unavailable and fails with the reason instead of crashing', function()
    if has_gpu then
      pending('this machine has a GPU: the NCCL specs run there')
      return
    end
    assert.is_false(C.cr_nccl_available())
    local id = ffi.new('uint8_t[?]', C.CR_NCCL_ID_BYTES)
    assert.are_not.equal(0, C.cr_nccl_unique_id(id))
    local err = ffi.string(C.cr_last_error())
    assert.truthy(err:find('nccl_unique_id: NCCL needs a usable CUDA GPU', 1, true), err)
    assert.are_not.equal(0, C.cr_nccl_init(0, 1, id, 0, 10))
    assert.truthy(ffi.string(C.cr_last_error()):find('nccl_init: NCCL needs a usable CUDA GPU', 1, true))
    assert.are_not.equal(0, C.cr_nccl_all_reduce(nil, C.CR_REDUCE_SUM, nil))
    assert.are_not.equal(0, C.cr_nccl_synchronize())
    C.cr_nccl_finalize() -- nothing to finalize: a no-op
  end)

  it('checks its own arguments first', function()
    assert.are.equal(1, C.cr_nccl_unique_id(nil))
    assert.truthy(ffi.string(C.cr_last_error()):find('id is NULL; pass a buffer of 128 bytes', 1, true))
    local id = ffi.new('uint8_t[128]')
    assert.are.equal(1, C.cr_nccl_init(2, 2, id, 0, 10))
    assert.truthy(ffi.string(C.cr_last_error()):find('rank 2 does not lie in [0, 2)', 1, true))
    assert.are.equal(1, C.cr_nccl_init(0, 0, id, 0, 10))
    assert.are.equal(1, C.cr_nccl_init(0, 1, nil, 0, 10))
    assert.truthy(ffi.string(C.cr_last_error()):find("pass rank 0's cr_nccl_unique_id", 1, true))
    assert.are.equal(1, C.cr_nccl_init(0, 1, id, 0, 0))
    assert.truthy(ffi.string(C.cr_last_error()):find('timeout 0 s', 1, true))
    assert.are.equal(1, C.cr_nccl_wait(nil))
  end)
end)
