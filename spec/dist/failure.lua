-- spec/dist/failure.lua — under `mpirun -np 2` (spec/dist_mpi_spec.lua): a rank that dies
-- or hangs must end every rank within dist.timeout, never hang.
--   luajit spec/dist/failure.lua hang <timeout>   rank 1 stops taking part (sleeps); rank 0 waits
--   luajit spec/dist/failure.lua kill <timeout>   rank 1 kills itself (SIGKILL) mid-run
--   luajit spec/dist/failure.lua unused <timeout> DDP over a model with a parameter no loss uses
local root = debug.getinfo(1, 'S').source:match('^@(.*)/spec/dist/[^/]*$') or '.'
package.path = root .. '/lua/?.lua;' .. root .. '/lua/?/init.lua;' .. package.path
local ffi = require 'ffi'
local cr = require 'crescent'
local dist = cr.dist
local mode, timeout = arg[1], tonumber(arg[2] or '3')
dist.init { timeout = timeout }
pcall(ffi.cdef, 'int getpid(void); int kill(int pid, int sig); unsigned int sleep(unsigned int s);')
if mode == 'unused' then
  local nn = cr.nn
  local model = nn.Module()
  model.used, model.spare = nn.Linear(3, 2), nn.Linear(3, 2)
  dist.DDP(model)
  model.used(cr.ones({ 4, 3 })):sum():backward()
  print('not reached: a parameter without a gradient went unnoticed')
end
local t = cr.ones({ 1000 })
for step = 1, 1000 do
  if step == 5 and dist.rank() == 1 then
    io.stderr:write('rank 1: ', mode == 'kill' and 'killing itself' or 'hanging', ' at step 5\n')
    io.stderr:flush()
    if mode == 'kill' then ffi.C.kill(ffi.C.getpid(), 9) end
    ffi.C.sleep(3600)
  end
  dist.all_reduce(t, 'avg')
end
print('not reached: the collectives went on without rank 1')
