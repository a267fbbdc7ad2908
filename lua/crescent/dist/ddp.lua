-- crescent.dist.ddp — data-parallel training: every rank holds the whole model, and the
-- gradients are averaged over the ranks while backward still runs, so after backward every
-- rank holds the gradient of the mean loss over the global batch, and the optimizer steps
-- stay identical on every rank.
--
--   local ddp = cr.dist.DDP(model, {bucket_mb = 25, find_unused = false, broadcast_buffers = true})
--   ... loss:backward() ...        -- grads are averaged over the ranks when it returns
--   ddp:no_sync(function() loss:backward() end)   -- accumulate locally (gradient accumulation)
--   ddp:remove()                   -- the hooks off again
--
-- How: at wrapping, rank 0's parameters and buffers are broadcast, so every rank starts
-- from the same weights. The trainable parameters are packed, in the reverse of their
-- registration order (roughly the order backward produces their grads), into buckets of
-- about bucket_mb MB of one dtype and device. A post-accumulate hook on each parameter
-- counts its bucket down; a full bucket is copied into its flat buffer and all-reduced
-- (avg) asynchronously. Buckets start in index order on every rank (the collectives of
-- all ranks must match), so a bucket that fills early waits for the ones before it. When
-- backward ends (autograd.queue_callback) every all-reduce is waited and the averages are
-- copied back into the grads.
--
-- A trainable parameter that got no gradient in a backward would leave its bucket waiting
-- forever on this rank: that is an error naming the parameters, unless find_unused = true,
-- where their gradient counts as zero (and they receive the average of the other ranks').
-- With broadcast_buffers (default) rank 0's buffers (BatchNorm's running statistics) are
-- broadcast after each synchronised backward, as PyTorch does before each forward.
local C = require('crescent.ffi').C
local cr = require 'crescent'
local autograd = require 'crescent.autograd'
local comm = require 'crescent.dist.comm'

local DDP = {}
DDP.__index = DDP

-- DDP's options, which are a recipe's dist.* keys too (declared once, here).
DDP.options = cr.config.options('dist', {
  { 'bucket_mb', 'number', 25, "the size of DDP's gradient buckets", above = 0 },
  { 'find_unused', 'boolean', false, 'a parameter without a gradient counts as zero instead of an error' },
  { 'broadcast_buffers', 'boolean', true, "rank 0's buffers (BatchNorm statistics) go to every rank after each backward" },
})

local function fail(msg, level) error('DDP: ' .. msg, level or 0) end

-- Buckets of {names, params, numels, offsets, numel, dtype, device}.
local function make_buckets(named, cap_bytes)
  local buckets, open = {}, {}
  for i = #named, 1, -1 do
    local name, p = named[i][1], named[i][2]
    local key = p.dtype .. '@' .. p.device
    local b = open[key]
    local bytes = p:numel() * tonumber(C.cr_dtype_size(C.cr_tensor_dtype(p)))
    if not b or (b.bytes > 0 and b.bytes + bytes > cap_bytes) then
      b = { names = {}, params = {}, numels = {}, offsets = {}, numel = 0, bytes = 0, dtype = p.dtype,
            device = p.device }
      buckets[#buckets + 1] = b
      open[key] = b
    end
    local k = #b.params + 1
    b.names[k], b.params[k], b.numels[k], b.offsets[k] = name, p, p:numel(), b.numel
    b.numel, b.bytes = b.numel + p:numel(), b.bytes + bytes
  end
  for i, b in ipairs(buckets) do
    b.index = i
    b.flat = cr.zeros({ b.numel }, { dtype = b.dtype, device = b.device })
  end
  return buckets
end

-- Broadcasts rank 0's tensors into `tensors`, one collective per dtype and device (their
-- flattened concatenation) instead of one per tensor. Groups go in sorted order: every
-- rank must issue the same collectives in the same order.
local function broadcast_flat(tensors)
  if comm.world_size() == 1 then return end
  local groups, keys = {}, {}
  for _, t in ipairs(tensors) do
    local key = t.dtype .. '@' .. t.device
    if not groups[key] then groups[key] = {}; keys[#keys + 1] = key end
    table.insert(groups[key], t)
  end
  table.sort(keys)
  cr.no_grad(function()
    for _, key in ipairs(keys) do
      local list, flat = groups[key], {}
      for i, t in ipairs(list) do flat[i] = t:reshape({ t:numel() }) end
      local all = comm.broadcast(cr.cat(flat, 0), 0)
      local off = 0
      for _, t in ipairs(list) do
        local n = t:numel()
        t:copy_(all:narrow(0, off, n):view(t.shape))
        off = off + n
      end
    end
  end)
end

-- Lets the started buckets' all-reduces advance while backward goes on: over MPI they
-- move only inside MPI calls, so without this they would mostly run at the final wait.
local function poke_started(st)
  for i = st.poked or 1, st.next - 1 do
    if not st.works[i]:poke() then return end
    st.poked = i + 1
  end
end

local function new(_, model, given)
  if type(model) ~= 'table' or type(model.named_parameters) ~= 'function' then
    fail('expected a module (cr.nn), got ' .. type(model), 2)
  end
  local opts = cr.config.take(DDP.options, 'DDP', given)
  local mb = opts.bucket_mb
  local self = setmetatable({ model = model, find_unused = opts.find_unused,
                              broadcast_buffers = opts.broadcast_buffers, sync = true,
                              handles = {}, pending = nil }, DDP)
  -- the same start everywhere: rank 0's parameters and buffers
  local start = model:parameters()
  for _, b in ipairs(model:buffers()) do start[#start + 1] = b end
  broadcast_flat(start)
  local named = {}
  for _, np in ipairs(model:named_parameters()) do
    if np[2].requires_grad then named[#named + 1] = np end
  end
  if #named == 0 then fail('the model has no trainable parameters', 2) end
  self.buckets = make_buckets(named, mb * 1e6)
  if comm.world_size() > 1 then
    for _, b in ipairs(self.buckets) do
      for k, p in ipairs(b.params) do
        self.handles[#self.handles + 1] = p:register_post_accumulate_grad_hook(function()
          self:_ready(b, k)
        end)
      end
    end
  end
  return self
end
setmetatable(DDP, { __call = new })

-- The state of one synchronised backward: which parameters have their grad, per bucket.
function DDP:_begin()
  local st = { ready = {}, left = {}, next = 1, works = {} }
  for i, b in ipairs(self.buckets) do st.ready[i], st.left[i] = {}, #b.params end
  self.pending = st
  autograd.queue_callback(function() self:_finish() end)
  return st
end

-- Post-accumulate hook: parameter k of bucket b has its grad.
function DDP:_ready(b, k)
  if not self.sync then return end
  local st = self.pending or self:_begin()
  if st.ready[b.index][k] then return end -- a second accumulation in the same backward
  st.ready[b.index][k] = true
  st.left[b.index] = st.left[b.index] - 1
  self:_launch(st)
  poke_started(st)
end

-- Starts the full buckets that are next in index order.
function DDP:_launch(st)
  local buckets = self.buckets
  while st.next <= #buckets and st.left[st.next] == 0 do
    local b = buckets[st.next]
    for k, p in ipairs(b.params) do
      local g = p.grad
      local dst = b.flat:narrow(0, b.offsets[k], b.numels[k])
      if g then dst:copy_(g:reshape({ b.numels[k] })) else dst:zero_() end
    end
    st.works[st.next] = comm.all_reduce(b.flat, 'avg', { async = true })
    st.next = st.next + 1
  end
end

-- After backward: every bucket all-reduced, the averages in the grads.
function DDP:_finish()
  local st = self.pending
  self.pending = nil
  if not st then return end
  if st.next <= #self.buckets then
    local missing = {}
    for i = st.next, #self.buckets do
      for k, name in ipairs(self.buckets[i].names) do
        if not st.ready[i][k] then missing[#missing + 1] = name end
      end
    end
    if not self.find_unused then
      for i = 1, st.next - 1 do st.works[i]:wait() end
      local shown = #missing > 8 and table.concat(missing, ', ', 1, 8) .. (', ... (%d in all)'):format(#missing)
                    or table.concat(missing, ', ')
      fail('no gradient reached ' .. shown .. ' in this backward. Every rank must use every trainable ' ..
        'parameter in each step: freeze the unused ones (requires_grad = false, before DDP wraps the model), ' ..
        'or pass find_unused = true (dist.find_unused=true) to treat their grads as zero')
    end
    for i = st.next, #self.buckets do st.left[i] = 0 end
    self:_launch(st)
  end
  for i, b in ipairs(self.buckets) do
    st.works[i]:wait()
    for k, p in ipairs(b.params) do
      local avg = b.flat:narrow(0, b.offsets[k], b.numels[k]):view(p.shape)
      if p.grad then p.grad:copy_(avg) else p.grad = avg:clone() end
    end
  end
  if self.broadcast_buffers then broadcast_flat(self.model:buffers()) end
end

-- Runs f(...) with the gradient all-reduce off: grads accumulate on each rank, and the
-- next synchronised backward averages the sum (gradient accumulation over k steps).
function DDP:no_sync(f, ...)
  local prev = self.sync
  self.sync = false
  local res = { pcall(f, ...) }
  self.sync = prev
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2)
end

-- The hooks off: the model trains on this rank alone again.
function DDP:remove()
  for _, h in ipairs(self.handles) do h:remove() end
  self.handles = {}
end

-- Number of buckets and their sizes in MB (for the banner and the benchmark).
function DDP:describe()
  local sizes = {}
  for i, b in ipairs(self.buckets) do sizes[i] = string.format('%.2f', b.bytes / 1e6) end
  return string.format('%d buckets (%s MB)', #self.buckets, table.concat(sizes, ', '))
end

return DDP
