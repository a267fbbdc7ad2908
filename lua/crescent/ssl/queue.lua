-- crescent.ssl.queue — a FIFO of embeddings [L, D] (MoCo's negatives, SwAV's queue):
--   local Queue = require 'crescent.ssl.queue'
--   local q = Queue(L, D, {dtype = 'f32', batch_size = B})   -- batch_size: checked now
--   q:enqueue(x)          x [B, D] overwrites the B oldest rows (a circular pointer, as
--                         MoCo; L must be a multiple of B, as MoCo asserts)
--   q.filled, q:full()    rows written so far (at most L); whether every row holds data
--   q:buffer()            the storage [L, D] itself (row order = slot order, MoCo's view)
--   q:newest_first()      [filled, D], the latest batch first (SwAV's shifted queue)
--   q:state_dict(), q:load_state_dict(sd)   {buffer = tensor, ptr = n, filled = n, batch = n}
--   q:to(device | dtype)  moves or converts the storage (what a method's extra_to calls)
-- Enqueued rows are detached copies: the queue never holds a graph.
local cr = require 'crescent'
local util = require 'crescent.util'

local function fail(msg) error(msg, util.user_level()) end

local Queue = {}
Queue.__index = Queue

local function int(what, v, lo)
  if type(v) ~= 'number' or v ~= math.floor(v) or v < lo then
    fail(string.format('Queue: %s must be an integer >= %d, got %s', what, lo, tostring(v)))
  end
  return v
end

local function check_batch(L, B)
  if B > L or L % B ~= 0 then
    fail(string.format('Queue: the length %d is not a multiple of the batch %d; choose a queue length that is '
                       .. '(e.g. %d), as MoCo requires', L, B, math.max(B, math.floor(L / B) * B)))
  end
end

function Queue.new(length, dim, opts)
  int('length', length, 1)
  int('dim', dim, 1)
  if opts ~= nil and type(opts) ~= 'table' then fail('Queue: options must be a table, got ' .. type(opts)) end
  opts = opts or {}
  if opts.batch_size ~= nil then check_batch(length, int('batch_size', opts.batch_size, 1)) end
  local self = setmetatable({}, Queue)
  self.length, self.dim = length, dim
  self.dtype = opts.dtype or 'f32'
  self.data = cr.zeros({ length, dim }, { dtype = self.dtype })
  self.ptr, self.filled = 0, 0
  return self
end
setmetatable(Queue, { __call = function(_, ...) return Queue.new(...) end })

function Queue:full() return self.filled >= self.length end
function Queue:to(what)
  self.data = self.data:to(what)
  self.dtype = self.data.dtype
  return self
end
function Queue:buffer() return self.data end

function Queue:enqueue(x)
  if not cr.is_tensor(x) or x.ndim ~= 2 or x.shape[2] ~= self.dim then
    fail(string.format('Queue:enqueue: expected a tensor [B, %d], got %s', self.dim,
                       cr.is_tensor(x) and ('[' .. table.concat(x.shape, ', ') .. ']') or type(x)))
  end
  local B = x.shape[1]
  check_batch(self.length, B)
  cr.no_grad(function()
    self.data:narrow(0, self.ptr, B):copy_(x:detach())
  end)
  self.ptr = (self.ptr + B) % self.length
  self.batch = B
  self.filled = math.min(self.filled + B, self.length)
  return self
end

-- The rows written so far, newest batch first, each batch's rows in their own order:
-- SwAV's queue after its shifts (queue[bs:] = queue[:-bs]; queue[:bs] = new). Batches
-- are taken to be of the size of the last enqueue (constant in a run).
function Queue:newest_first()
  local L, f = self.length, self.filled
  if f == 0 then return self.data:narrow(0, 0, 0) end
  local B, start, parts = self.batch or f, self.ptr, {}
  for _ = 1, f / B do
    start = (start - B) % L
    parts[#parts + 1] = self.data:narrow(0, start, B)
  end
  return #parts == 1 and parts[1]:clone() or cr.cat(parts, 0)
end

function Queue:state_dict()
  return { buffer = self.data, ptr = self.ptr, filled = self.filled, batch = self.batch }
end

function Queue:load_state_dict(sd)
  if type(sd) ~= 'table' or not cr.is_tensor(sd.buffer) then
    fail('Queue:load_state_dict: expected {buffer = tensor, ptr = n, filled = n}')
  end
  local s = sd.buffer.shape
  if #s ~= 2 or s[1] ~= self.length or s[2] ~= self.dim then
    fail(string.format('Queue:load_state_dict: the buffer is [%s] but this queue is [%d, %d]',
                       table.concat(s, ', '), self.length, self.dim))
  end
  int('ptr', sd.ptr, 0)
  int('filled', sd.filled, 0)
  if sd.ptr >= self.length or sd.filled > self.length then
    fail(string.format('Queue:load_state_dict: ptr %d / filled %d do not fit a queue of length %d',
                       sd.ptr, sd.filled, self.length))
  end
  cr.no_grad(function() self.data:copy_(sd.buffer) end)
  self.ptr, self.filled, self.batch = sd.ptr, sd.filled, sd.batch
  return self
end

-- Restores named queues ({key = queue}) from saved states ({key = {buffer =, ptr =, ...}},
-- as extra_state() gave them); the two must name the same queues.
function Queue.load_named(queues, states, what)
  for key in pairs(states) do
    if not queues[key] then
      fail(string.format("%s: the saved state has a queue '%s' this method does not have (was it saved with " ..
        'another queue configuration?)', what, key))
    end
  end
  for key, q in pairs(queues) do
    if not states[key] then
      fail(string.format("%s: the saved state has no queue '%s'; was it saved without a queue?", what, key))
    end
    q:load_state_dict(states[key])
  end
end

return Queue
