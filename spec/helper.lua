-- spec/helper.lua — shared by every spec: loads crescent from this checkout, and offers
-- gradcheck (finite differences in f64), closeness assertions, and the GPU skip tag.
package.path = 'lua/?.lua;lua/?/init.lua;' .. package.path
local cr = require 'crescent'

local H = {}
_G.H = H
H.cr = cr
-- make sanitize runs the specs against an ASan + UBSan build (build/sanitize)
H.sanitized = os.getenv('CRESCENT_SANITIZE') == '1'

-- Largest absolute difference between two tensors (or a tensor and a nested table).
function H.max_diff(a, b)
  if not cr.is_tensor(b) then b = cr.tensor(b, { dtype = 'f64' }) end
  local d = (a:double() - b:double())
  local m = 0
  for _, v in ipairs(H.flat(d)) do
    if v ~= v then return math.huge end
    m = math.max(m, math.abs(v))
  end
  return m
end

function H.flat(t)
  local out, tab = {}, t:totable()
  local function walk(x)
    if type(x) == 'table' then for _, y in ipairs(x) do walk(y) end
    elseif type(x) == 'boolean' then out[#out + 1] = x and 1 or 0
    else out[#out + 1] = x end
  end
  walk(tab)
  return out
end

-- Deterministic inputs: Park-Miller draws mapped to [-2, 2), the generator the specs'
-- PyTorch numbers were produced with once (/usr/bin/python3, torch 1.13):
--   def rnd(shape, seed): s = seed; for each element: s = s*16807 % 2147483647;
--                         v = s/2147483647*4 - 2   (float64, row-major)
function H.park_miller(shape, seed, dtype)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local s, vals = seed, {}
  for i = 1, n do
    s = (s * 16807) % 2147483647
    vals[i] = s / 2147483647 * 4 - 2
  end
  return cr.tensor(vals, { dtype = dtype or 'f64' }):view(shape)
end

-- f(...) with the fast paths on, then with the reference paths: fast, ref.
function H.both_paths(f, ...)
  local prev = cr.set_fast_paths(true)
  local ok, fast = pcall(f, ...)
  cr.set_fast_paths(false)
  local ok2, ref = pcall(f, ...)
  cr.set_fast_paths(prev)
  if not ok then error(fast, 2) end
  if not ok2 then error(ref, 2) end
  return fast, ref
end

-- assert that a and b have the same shape and agree within atol + rtol*|b|
function H.assert_close(a, b, atol, rtol, msg)
  atol, rtol = atol or 1e-5, rtol or 1e-5
  if not cr.is_tensor(b) then b = cr.tensor(b, { dtype = 'f64' }) end
  local sa, sb = table.concat(a.shape, 'x'), table.concat(b.shape, 'x')
  assert(sa == sb, (msg or '') .. ' shape mismatch: ' .. sa .. ' vs ' .. sb)
  local fa, fb = H.flat(a), H.flat(b)
  for i = 1, #fa do
    local x, y = fa[i], fb[i]
    local ok = (x == y) or (x ~= x and y ~= y) or math.abs(x - y) <= atol + rtol * math.abs(y)
    if not ok then
      error(string.format('%s element %d: %.10g vs %.10g (atol %g, rtol %g)', msg or 'not close:', i, x, y, atol, rtol), 2)
    end
  end
end

-- Finite-difference gradcheck in f64. f takes the input tensors and returns a tensor;
-- inputs are f64 leaves that require grad (non-tensors pass through). Compares the
-- analytic grad of sum(f(...) * w), for a fixed random w, with central differences.
function H.gradcheck(f, inputs, opts)
  opts = opts or {}
  local eps, atol, rtol = opts.eps or 1e-6, opts.atol or 1e-5, opts.rtol or 1e-4
  local xs = {}
  for i, x in ipairs(inputs) do
    if cr.is_tensor(x) and x:is_floating_point() then
      xs[i] = x:double():detach():requires_grad_(true)
    else
      xs[i] = x
    end
  end
  local out = f(unpack(xs, 1, #inputs))
  -- deterministic weights, so that every output element matters differently
  local vals = {}
  for k = 1, out:numel() do vals[k] = 0.5 + ((k * 7919) % 97) / 97 end
  local w = cr.tensor(vals, { dtype = 'f64' }):view(out.shape)
  local function scalar(...) return (f(...):double() * w):sum() end
  local loss = scalar(unpack(xs, 1, #inputs))
  loss:backward()
  for i, x in ipairs(xs) do
    if cr.is_tensor(x) and x.requires_grad and not (opts.skip and opts.skip[i]) then
      local analytic = x.grad or cr.zeros_like(x)
      local flat = H.flat(analytic)
      local n = x:numel()
      local base = x:detach():contiguous():view(-1)
      for k = 0, n - 1 do
        local orig = base:select(0, k):item()
        local xk = x:detach():clone()
        local v = xk:view(-1)
        v:select(0, k):fill_(orig + eps)
        local args = { unpack(xs, 1, #inputs) }
        args[i] = xk
        local fp = cr.no_grad(scalar, unpack(args, 1, #inputs)):item()
        v:select(0, k):fill_(orig - eps)
        local fm = cr.no_grad(scalar, unpack(args, 1, #inputs)):item()
        local numeric = (fp - fm) / (2 * eps)
        local a = flat[k + 1]
        if math.abs(a - numeric) > atol + rtol * math.abs(numeric) then
          error(string.format('gradcheck: input %d element %d: analytic %.8g vs numeric %.8g', i, k, a, numeric), 2)
        end
      end
    end
  end
  return true
end

-- Asserts that f() raises an error whose message contains every given fragment.
function H.assert_error(f, ...)
  local ok, err = pcall(f)
  assert(not ok, 'expected an error, but the call succeeded')
  err = tostring(err)
  for _, frag in ipairs { ... } do
    assert(err:find(frag, 1, true), 'error message "' .. err .. '" does not mention "' .. frag .. '"')
  end
  return err
end

-- The message of the error that f(...) raises (fails the spec when it raises none).
function H.error_of(f, ...)
  local ok, e = pcall(f, ...)
  assert(not ok, 'expected an error')
  return tostring(e)
end

-- A fresh temporary folder for a spec file (busted's teardown is the spec file's own, so
-- the file registers the removal):
--   local tmp = H.tmpdir('io')   -- tmp.dir, tmp.path(name), tmp.write(name, bytes) -> path
--   teardown(tmp.remove)
function H.tmpdir(tag)
  local dir = io.popen('mktemp -d /tmp/crescent_' .. tag .. '_spec.XXXXXX'):read('*l')
  local t = { dir = dir }
  function t.remove() os.execute("rm -rf '" .. dir .. "'") end
  function t.path(name) return dir .. '/' .. name end
  function t.write(name, bytes)
    local f = assert(io.open(t.path(name), 'wb'))
    f:write(bytes)
    f:close()
    return t.path(name)
  end
  return t
end

-- No spec writes into the user's run folders (run.dir's default, runs/ of the checkout):
-- a run folder there is an error naming the fix. Recipes run in a subprocess are caught by
-- tools/run_specs.sh, which fails when a suite that started without runs/ leaves one.
do
  local recipe_run = cr.recipe.run
  local run_dir = recipe_run.dir
  local root = require('crescent.native_files').root
  local function users_runs(dir)
    dir = dir:gsub('/+$', ''):gsub('^%./', '')
    return dir == 'runs' or dir == root .. '/runs' or dir == './runs'
  end
  recipe_run.dir = function(cfg, default_name)
    if type(cfg) == 'table' and type(cfg.run) == 'table' and type(cfg.run.dir) == 'string' and users_runs(cfg.run.dir)
    then
      error("spec: this run would write into the user's runs/ folder; give it run = {dir = H.tmpdir('...').dir}", 2)
    end
    return run_dir(cfg, default_name)
  end
end

-- Runs a shell command from the repository root: its output (stdout and stderr) and its
-- exit code.
function H.shell(cmd)
  local root = require('crescent.native_files').root
  local p = io.popen(string.format('cd %s && (%s) 2>&1; echo "exit=$?"', root, cmd))
  local out = p:read('*a')
  p:close()
  return out, tonumber(out:match('exit=(%d+)%s*$'))
end

-- ---- a real terminal: tmux panes -------------------------------------------------------
H.has_tmux = os.execute('command -v tmux >/dev/null 2>&1') == 0

local function sh(cmd)
  local p = assert(io.popen(cmd .. ' 2>&1'))
  local out = p:read('*a')
  p:close()
  return out
end
local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- H.tmux_pane(cmd, width, height): a tmux pane (default 160 x 200) running cmd in the
-- checkout, on a tmux server of its own; cmd is followed by a 30 s sleep, so the pane
-- stays to be read. p:text(), p:keys(...), p:line(s), p:wait(text, times, seconds),
-- p:resize(width, height), p:close().
local Pane = {}
Pane.__index = Pane
local panes = 0
function H.tmux_pane(cmd, width, height)
  panes = panes + 1
  local self = setmetatable({ sock = string.format('crescent_spec_%d_%d', os.time(), panes) }, Pane)
  self.tmux = 'tmux -L ' .. self.sock .. ' '
  sh(string.format('%snew-session -d -x %d -y %d %s', self.tmux, width or 160, height or 200,
    quote('cd ' .. os.getenv('PWD') .. ' && ' .. cmd .. '; sleep 30')))
  return self
end
function Pane:text() return sh(self.tmux .. 'capture-pane -p -S -200') end
function Pane:keys(...)
  local parts = {}
  -- tmux reads an argument's trailing ';' as its command separator: '\;' is the character
  for i = 1, select('#', ...) do parts[i] = quote((select(i, ...):gsub(';$', '\\;'))) end
  sh(self.tmux .. 'send-keys ' .. table.concat(parts, ' '))
end
function Pane:line(s) self:keys('-l', s); self:keys('Enter') end
-- Waits until the pane shows `pattern` (plain text) `times` times; returns the pane's text.
function Pane:wait(pattern, times, seconds)
  local now = require('crescent.engine.loop').now
  local deadline = now() + (seconds or 20)
  local text
  repeat
    text = self:text()
    local n = select(2, text:gsub(pattern:gsub('%p', '%%%0'), ''))
    if n >= (times or 1) then return text end
    sh('sleep 0.1')
  until now() > deadline
  error('the pane never showed ' .. pattern .. ':\n' .. text, 2)
end
function Pane:resize(width, height) sh(string.format('%sresize-window -x %d -y %d', self.tmux, width, height)) end
function Pane:close() sh(self.tmux .. 'kill-server') end

-- A file's whole content.
-- A writer that collects what is written to it in .text (io.stdout's write and flush).
function H.sink()
  local s = { text = '' }
  function s.write(self, ...) for _, x in ipairs { ... } do self.text = self.text .. tostring(x) end return self end
  function s.flush() end
  return s
end

-- A memoised run of a Python fixture that writes files for a spec: `python script args`
-- once, if `python -c "import <modules>"` works. Returns a function giving true, or false
-- and `why_absent` (for pending); a script that fails is a spec failure with its output.
function H.python_fixture(python, modules, script, args, why_absent)
  local result
  return function()
    if result == nil then
      if os.execute(python .. ' -c "import ' .. modules .. '" >/dev/null 2>&1') ~= 0 then
        result = { false, why_absent }
      else
        local pipe = io.popen(python .. ' ' .. script .. ' ' .. args .. ' 2>&1; echo "status=$?"')
        local out = pipe:read('*a')
        pipe:close()
        assert(out:find('status=0', 1, true), script .. ' failed:\n' .. out)
        result = { true }
      end
    end
    return result[1], result[2]
  end
end

function H.read_file(path)
  local f = assert(io.open(path, 'rb'))
  local s = f:read('*a')
  f:close()
  return s
end

-- Every batch of one epoch of a loader (from batch `start` on), as a list.
function H.epoch_batches(loader, epoch, start)
  local out = {}
  for batch in loader:iter(epoch, start) do out[#out + 1] = batch end
  return out
end

-- Two epochs of batches (H.epoch_batches) that are the same: positions, index, targets,
-- size and every input tensor (a list of crops for views, else one tensor).
function H.assert_same_batches(want, got)
  local luassert = require('luassert')
  luassert.are.equal(#want, #got)
  for i = 1, #want do
    local w, g = want[i], got[i]
    luassert.are.equal(w.batch, g.batch)
    luassert.are.equal(w.epoch, g.epoch)
    H.assert_equal_tensors(w.index, g.index, 'index of batch ' .. i)
    H.assert_equal_tensors(w.target, g.target, 'target of batch ' .. i)
    luassert.are.equal(w.size, g.size)
    if type(w.input) == 'table' then
      luassert.are.equal(#w.input, #g.input)
      for k = 1, #w.input do H.assert_equal_tensors(w.input[k], g.input[k], 'crop ' .. k .. ' of batch ' .. i) end
    else
      H.assert_equal_tensors(w.input, g.input, 'input of batch ' .. i)
    end
  end
end

-- Two tensors of the same shape and the same values.
function H.assert_equal_tensors(a, b, what)
  require('luassert').are.same(a.shape, b.shape, what)
  if H.max_diff(a, b) ~= 0 then error(what .. ' differs', 2) end
end

-- A loader (iter / num_batches, what cr.train asks of one) over a fixed list of batches.
function H.list_loader(list)
  return {
    iter = function()
      local i = 0
      return function() i = i + 1; return list[i] end
    end,
    num_batches = function() return #list end,
  }
end

-- GPU specs run where a CUDA GPU is usable and CRESCENT_NO_GPU is unset. H.gpu_missing()
-- is nil there, and elsewhere the reason, which a GPU block turns into one pending line.
function H.gpu_available()
  return os.getenv('CRESCENT_NO_GPU') == nil and cr.cuda.is_available()
end

-- ---- GPU results against the cpu's (the cuda_*_spec files) ----
-- dev is the device compared with the cpu ('cuda'; 'cpu' checks a spec's own logic on a
-- machine without a GPU). Bits: equal as numbers, NaN equal to NaN, -0 apart from +0.
local function expected_device(dev) return dev == 'cpu' and 'cpu' or 'cuda:0' end
local luassert = require 'luassert'
function H.assert_same_bits(dev, got, want, what)
  luassert.are.equal(expected_device(dev), got.device, what .. ': device')
  luassert.are.equal(want.dtype, got.dtype, what .. ': dtype')
  luassert.are.same(want.shape, got.shape, what .. ': shape')
  local g, w = H.flat(got:cpu()), H.flat(want)
  for k = 1, #w do
    local a, b = g[k], w[k]
    local same = (a ~= a and b ~= b) or (a == b and (a ~= 0 or 1 / a == 1 / b))
    if not same then error(string.format('%s: element %d is %.17g on %s, %.17g on the cpu', what, k, a, dev, b), 2) end
  end
end
function H.assert_near(dev, got, want, tol, what)
  luassert.are.equal(expected_device(dev), got.device, what .. ': device')
  luassert.are.equal(want.dtype, got.dtype, what .. ': dtype')
  H.assert_close(got:cpu():double(), want:double(), tol[1], tol[2], what)
end
-- f(device) -> a list of tensors; each of dev's equals the cpu's: bit for bit, or within
-- tol = {atol, rtol}.
function H.same_on_devices(dev, what, f, tol)
  local want, got = f('cpu'), f(dev)
  luassert.are.equal(#want, #got, what)
  for k = 1, #want do
    if tol then H.assert_near(dev, got[k], want[k], tol, what .. ' #' .. k)
    else H.assert_same_bits(dev, got[k], want[k], what .. ' #' .. k) end
  end
end

function H.gpu_missing()
  if H.gpu_available() then return nil end
  local why = os.getenv('CRESCENT_NO_GPU') and 'CRESCENT_NO_GPU is set' or cr.cuda.why_not()
  return 'skipped, no usable GPU: ' .. tostring(why)
end

-- Every dtype crescent has, for the specs that sweep them.
H.DTYPES = { 'f32', 'f64', 'f16', 'bf16', 'i64', 'i32', 'u8', 'bool' }

-- describe(name, body) for a GPU block: body runs where a CUDA GPU is usable; elsewhere
-- the block is one pending line that says why. (busted's describe/it/pending live in the
-- calling spec file's environment, not in this file's.)
function H.describe_gpu(name, body)
  local busted = getfenv(2)
  busted.describe(name, function()
    local missing = H.gpu_missing()
    if missing then
      busted.it('runs on a CUDA GPU', function() busted.pending(missing) end)
      return
    end
    body()
  end)
end

return H
