-- spec/dist/collectives.lua — under `mpirun -np 2` (spec/dist_mpi_spec.lua): the values of
-- every collective on cpu tensors, and SyncBatchNorm under bf16 autocast. Rank 0 prints
-- one line per check, 'ok <name>' or 'FAIL <name>: <why>'; every rank checks its own
-- results.
local root = debug.getinfo(1, 'S').source:match('^@(.*)/spec/dist/[^/]*$') or '.'
package.path = root .. '/lua/?.lua;' .. root .. '/lua/?/init.lua;' .. package.path
local cr = require 'crescent'
local dist = cr.dist
dist.init { timeout = 30 }
local r, W = dist.rank(), dist.world_size()
local failures = 0

local function check(name, got, want, tol)
  local ok, why = true, nil
  if type(want) == 'table' then want = cr.tensor(want, { dtype = got.dtype }) end
  if table.concat(got.shape, ',') ~= table.concat(want.shape, ',') then
    ok, why = false, 'shape [' .. table.concat(got.shape, ', ') .. '] wanted [' .. table.concat(want.shape, ', ') .. ']'
  else
    local d = got:numel() == 0 and 0 or (got:double() - want:double()):abs():max():item()
    if d > (tol or 0) then ok, why = false, 'off by ' .. d .. ': got ' .. tostring(got) end
  end
  if not ok then failures = failures + 1 end
  -- every rank reports its failures; rank 0 also reports success
  if not ok or r == 0 then
    print(string.format('%s %s%s (rank %d)', ok and 'ok' or 'FAIL', name, why and (': ' .. why) or '', r))
  end
end

-- all_reduce: sum, avg, max, min in f32, f64, i64, i32
for _, dt in ipairs { 'f32', 'f64', 'i64', 'i32' } do
  local t = cr.tensor({ 1, -2, 3 }, { dtype = dt }) * (r + 1)
  check('all_reduce sum ' .. dt, dist.all_reduce(t:clone(), 'sum'), { 3, -6, 9 })
  check('all_reduce max ' .. dt, dist.all_reduce(t:clone(), 'max'), { 2, -2, 6 })
  check('all_reduce min ' .. dt, dist.all_reduce(t:clone(), 'min'), { 1, -4, 3 })
end
check('all_reduce avg f32', dist.all_reduce(cr.tensor({ 1, 2 }):float() * (r + 1), 'avg'), { 1.5, 3 })
check('all_reduce avg f64', dist.all_reduce(cr.tensor({ 1, 2 }):double() * (r + 1), 'avg'), { 1.5, 3 })
-- a big tensor: the sum of 0..n-1 on each rank, 4 MB
local big = dist.all_reduce(cr.arange(0, 1000000):float(), 'sum')
check('all_reduce 4 MB', big:narrow(0, 999990, 10), cr.arange(999990, 1000000):float() * W)
-- async: two in flight at once, waited in reverse order
local a, b = cr.ones({ 5 }), cr.full({ 7 }, r + 1)
local wa, wb = dist.all_reduce(a, 'sum', { async = true }), dist.all_reduce(b, 'max', { async = true })
check('async all_reduce (2 in flight)', wb:wait(), cr.full({ 7 }, W))
check('async all_reduce (first)', wa:wait(), cr.full({ 5 }, W))

-- poke: advances a started collective without waiting, and reports when it has completed
local pc = cr.full({ 1000 }, r + 1)
local wp, t0 = dist.all_reduce(pc, 'sum', { async = true }), os.clock()
while not wp:poke() do
  assert(os.clock() - t0 < 30, 'poke never reported completion')
end
assert(wp:poke() == true, 'poke after completion must stay true')
check('poked all_reduce', wp:wait(), cr.full({ 1000 }, W * (W + 1) / 2))
-- broadcast from each root, i64 and f16 bits
for root_rank = 0, W - 1 do
  check('broadcast from ' .. root_rank, dist.broadcast(cr.tensor({ r * 10, r * 10 + 1 }), root_rank),
    { root_rank * 10, root_rank * 10 + 1 })
end
check('broadcast f16', dist.broadcast(cr.tensor({ 0.5 * (r + 1) }):half(), 1):float(), { 0.5 * W })
-- all_gather: rows of every rank in rank order, 0-dim and 3-D
local rows = {}
for q = 0, W - 1 do rows[#rows + 1] = cr.full({ 2, 3 }, q) end
check('all_gather 2-D', dist.all_gather(cr.full({ 2, 3 }, r)), cr.cat(rows, 0))
check('all_gather 0-dim', dist.all_gather(cr.tensor(r + 5)), cr.arange(5, 5 + W))
local tr = cr.arange(0, 6):view({ 2, 3 }):t()   -- a transposed view
check('all_gather non-contiguous', dist.all_gather(tr + r), cr.cat({ tr, tr + 1 }, 0))
-- reduce_scatter: block r of the sum
local rs = dist.reduce_scatter(cr.arange(0, 2 * W):float() + r, 'sum')
check('reduce_scatter sum', rs, (cr.arange(2 * r, 2 * r + 2):float() * W) + (W * (W - 1) / 2))
check('reduce_scatter avg', dist.reduce_scatter(cr.arange(0, 2 * W):float() + r, 'avg'),
  cr.arange(2 * r, 2 * r + 2):float() + (W - 1) / 2)
-- all_gather_with_grad: forward gathers; backward sums the ranks' grads of this rank's rows
local z = (cr.ones({ 2, 2 }) * (r + 1)):requires_grad_()
local g = dist.all_gather_with_grad(z)
check('all_gather_with_grad forward', g, cr.cat({ cr.ones({ 2, 2 }), cr.ones({ 2, 2 }) * 2 }, 0))
local weights = cr.arange(1, 4 * W + 1):float():view({ 2 * W, 2 }) * (r + 1)   -- a different loss per rank
;(g * weights):sum():backward()
-- d/dz_r of sum over ranks q of (q + 1) * <rows of r, weights rows of r>
local want = cr.arange(1, 4 * W + 1):float():view({ 2 * W, 2 }):narrow(0, 2 * r, 2) * (W * (W + 1) / 2)
check('all_gather_with_grad backward', z.grad, want)
-- Sinkhorn's double reducer
local sum_d = dist.double_reducer('sum')
local buf = require('ffi').new('double[3]', { r, 1, 2.5 })
sum_d(buf, 3)
check('double_reducer sum', cr.tensor({ buf[0], buf[1], buf[2] }), { W * (W - 1) / 2, W, 2.5 * W })
-- errors name the problem
local ok, err = pcall(dist.all_reduce, cr.ones({ 2 }), 'median')
check('bad op is an error', cr.tensor({ (not ok and tostring(err):find("'sum', 'avg', 'max' or 'min'")) and 1 or 0 }), { 1 })
ok, err = pcall(dist.all_reduce, cr.tensor({ 1, 2 }), 'avg')
check('avg of integers is an error', cr.tensor({ (not ok and tostring(err):find('floating%-point')) and 1 or 0 }), { 1 })
-- f16 and bf16 reduce over MPI through an f32 copy (MPI has no half arithmetic)
for _, dt in ipairs { 'bf16', 'f16' } do
  local h = cr.tensor({ 1.5, -2, 3 }, { dtype = dt }) * (r + 1)
  check('all_reduce sum ' .. dt, dist.all_reduce(h, 'sum'), { 4.5, -6, 9 })
  check('all_reduce ' .. dt .. ' keeps its dtype', cr.tensor({ h.dtype == dt and 1 or 0 }), { 1 })
  local half_rs = dist.reduce_scatter(cr.arange(0, 2 * W):to(dt), 'sum')
  check('reduce_scatter sum ' .. dt, half_rs:float(), cr.tensor({ 2 * r, 2 * r + 1 }):float() * W)
end
-- SyncBatchNorm under bf16 autocast (a recipe's default on a bf16 CPU): the output and
-- x's grad in bf16, weight's and bias's grads in f32, the values those of BatchNorm over
-- the global batch (both ranks' halves) within bf16's rounding; conv -> BN -> conv, so the
-- next autocast product meets the BN's output
do
  cr.manual_seed(7)
  local xs = cr.randn({ 2 * W, 3, 5, 5 }) * 2 + 1
  local mine = xs:narrow(0, 2 * r, 2)
  local function run(bn, x)
    cr.manual_seed(8) -- the same convolutions on both sides
    local conv, head = cr.nn.Conv2d(3, 4, 3, { padding = 1 }), cr.nn.Conv2d(4, 2, 1)
    local xin = x:clone():requires_grad_()
    local y = cr.autocast('bf16', function() return head(bn(conv(xin), true)) end)
    local yf = y:float()
    local loss = (yf * yf):sum()
    loss:backward()
    return y, xin.grad, bn.weight.grad, bn.bias.grad
  end
  local sync = cr.nn.BatchNorm2d(4)
  cr.dist.convert_sync_batchnorm(sync)
  local y, gx, gw, gb = run(sync, mine)
  local plain = cr.nn.BatchNorm2d(4)
  local y1, gx1 = run(plain, xs)
  check('sync_bn bf16 output dtype', cr.tensor({ y.dtype == 'bf16' and 1 or 0 }), { 1 })
  check('sync_bn bf16 grad dtypes', cr.tensor({ (gx.dtype == 'f32' and gw.dtype == 'f32' and gb.dtype == 'f32')
    and 1 or 0 }), { 1 })
  check('sync_bn bf16 output = global-batch BatchNorm', y:float(), y1:narrow(0, 2 * r, 2):float(), 0.05)
  check('sync_bn bf16 input grad = global-batch BatchNorm', gx, gx1:narrow(0, 2 * r, 2), 0.05)
  -- weight's grad: the global grad is the sum over ranks (DDP then averages)
  check('sync_bn bf16 weight grad = global-batch BatchNorm', dist.all_reduce(gw:clone(), 'sum'), plain.weight.grad,
    0.1)
  check('sync_bn bf16 running mean', sync.running_mean, plain.running_mean, 1e-2)
end
-- the distributed sampler: every epoch, the ranks' shards cover the data set exactly once
local ds = cr.data.synthetic { n = 30, shape = { 1, 2, 2 }, seed = 1 }
local loader = cr.data.Loader(ds, { batch_size = 5, shuffle = true, drop_last = false, seed = 3,
                                    shard = { rank = r, world_size = W } })
for epoch = 0, 1 do
  local mine = {}
  for batch in loader:iter(epoch) do mine[#mine + 1] = batch.index end
  local seen = dist.all_gather(cr.cat(mine, 0)):sort()
  check('sampler covers the data set once, epoch ' .. epoch, seen, cr.arange(0, 30))
end
dist.barrier()
if r == 0 then print(string.format('collectives: rank 0 of %d done', W)) end
dist.shutdown()
os.exit(failures == 0 and 0 or 1)
