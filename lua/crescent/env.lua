-- crescent.env (cr.env) — the environment a run ran in, for <run dir>/env.txt and the
-- checkpoint metadata: versions (crescent and its git commit, LuaJIT, oneDNN, CUDA, cuDNN,
-- NCCL), the build's features, OpenMP threads, CPU, cores, memory, OS, host, GPUs, and
-- the UTC time of the report.
--
--   local report = cr.env.report()   -- a table of plain values (below)
--   print(cr.env.format(report))     -- a few lines of text
--   cr.env.json(report)              -- one JSON object, keys sorted
--
-- Everything is read from files (/proc, /etc/os-release, .git); the one program run is
-- nvidia-smi, and only where it is installed (a failure just leaves the GPU list empty).
-- Nothing that could crash is loaded: library versions come from the C library itself,
-- and a library the build lacks is 'absent'.
local ffi = require 'ffi'
local C = require('crescent.ffi').C
local native_files = require 'crescent.native_files'
local M = {}

local ABSENT = 'absent'

local read_file = require('crescent.util').read_file

local function trim(s) return s and (s:gsub('^%s+', ''):gsub('%s+$', '')) end

-- ---- git: HEAD and the commit it names, read from the files of the checkout -------------------
-- .git is a folder, or (a worktree) a file 'gitdir: <folder>' whose commondir holds the refs.
local function git_dir(root)
  local dot = root .. '/.git'
  local text = read_file(dot .. '/HEAD')
  if text then return dot, dot end
  local link = trim(read_file(dot))
  local dir = link and link:match('^gitdir:%s*(.+)$')
  if not dir then return nil end
  if dir:sub(1, 1) ~= '/' then dir = root .. '/' .. dir end
  local common = trim(read_file(dir .. '/commondir'))
  if common and common:sub(1, 1) ~= '/' then common = dir .. '/' .. common end
  return dir, common or dir
end

local function resolve_ref(dir, common, ref)
  for _, base in ipairs { dir, common } do
    local hash = trim(read_file(base .. '/' .. ref))
    if hash and hash:match('^%x+$') then return hash end
  end
  local packed = read_file(common .. '/packed-refs') or ''
  for hash, name in packed:gmatch('(%x+) ([^\n]+)') do
    if name == ref then return hash end
  end
end

-- {commit = '<40 hex>', branch = 'dev' or nil (detached)} or nil outside a git checkout
-- (an installed crescent has none).
function M.git(root)
  root = root or native_files.root
  if not root then return nil end
  local dir, common = git_dir(root)
  if not dir then return nil end
  local head = trim(read_file(dir .. '/HEAD'))
  if not head then return nil end
  local ref = head:match('^ref:%s*(.+)$')
  if not ref then return head:match('^%x+$') and { commit = head } or nil end
  local commit = resolve_ref(dir, common, ref)
  return { commit = commit, branch = ref:match('^refs/heads/(.+)$') or ref }
end

-- ---- the machine -----------------------------------------------------------------------------------
local function cpu_info()
  local text = read_file('/proc/cpuinfo') or ''
  local model = text:match('model name%s*:%s*([^\n]+)') or text:match('Model%s*:%s*([^\n]+)')
  local cores = 0
  for _ in text:gmatch('\nprocessor%s*:') do cores = cores + 1 end
  if text:match('^processor%s*:') then cores = cores + 1 end
  return trim(model) or 'unknown', cores > 0 and cores or nil
end

local function memory_bytes()
  local kb = (read_file('/proc/meminfo') or ''):match('MemTotal:%s*(%d+)%s*kB')
  return kb and tonumber(kb) * 1024 or nil
end

local function os_name()
  local text = read_file('/etc/os-release') or ''
  local name = text:match('PRETTY_NAME="([^"\n]*)"') or text:match('PRETTY_NAME=([^\n]*)')
  if name then return name end
  local kernel = trim(read_file('/proc/sys/kernel/ostype'))
  return kernel or jit.os
end

local function hostname()
  return trim(read_file('/proc/sys/kernel/hostname')) or trim(read_file('/etc/hostname')) or os.getenv('HOSTNAME')
    or 'unknown'
end

-- nvidia-smi's CSV lines 'name, driver' -> {{name = , driver = }, ...} (blank lines and
-- lines that are not two fields, such as an error message, are left out).
function M.parse_nvidia_smi(text)
  local gpus = {}
  for line in (text or ''):gmatch('[^\n]+') do
    local name, driver = line:match('^%s*([^,]-)%s*,%s*([%d%.]+)%s*$')
    if name and name ~= '' then gpus[#gpus + 1] = { name = name, driver = driver } end
  end
  return gpus
end

local function gpus()
  local cmd = 'command -v nvidia-smi >/dev/null 2>&1 && timeout 10 nvidia-smi '
    .. '--query-gpu=name,driver_version --format=csv,noheader 2>/dev/null'
  local ok, pipe = pcall(io.popen, cmd)
  if not ok or not pipe then return {} end
  local text = pipe:read('*a')
  pipe:close()
  return M.parse_nvidia_smi(text)
end

-- ---- libraries -----------------------------------------------------------------------------------------
local function c_string(fname)
  local ok, f = pcall(function() return C[fname] end)   -- a symbol this build lacks: nil
  if not ok or not f then return nil end
  local s = f()
  s = s ~= nil and ffi.string(s) or ''
  return s ~= '' and s or nil
end

local function feature(features, name) return features:match(name .. '=1') ~= nil end

-- 'major.minor' of the CUDA version the build targets (13000 -> '13.0')
local function cuda_version()
  local v = tonumber(C.cr_cuda_built_version())
  if v <= 0 then return 'unknown' end
  return string.format('%d.%d', math.floor(v / 1000), math.floor(v % 1000 / 10))
end

-- ---- the report -------------------------------------------------------------------------------------------
-- report() -> {crescent, git = {commit, branch} | nil, luajit, onednn, cuda, cudnn, nccl,
--              features, threads, cpu, cores, memory_bytes, os, hostname,
--              gpus = {{name, driver}, ...}, started_utc}
-- Versions are strings ('absent' when the build lacks the library); cores and
-- memory_bytes are numbers (nil when /proc does not say).
function M.report()
  local features = require('crescent').features()
  local cuda = feature(features, 'cuda')
  local cpu, cores = cpu_info()
  return {
    crescent = ffi.string(C.cr_version()),
    git = M.git(),
    luajit = jit.version,
    onednn = feature(features, 'onednn') and (c_string('cr_dnnl_version') or 'unknown') or ABSENT,
    -- the CUDA toolkit the build targets; cuDNN and NCCL have no version getter yet
    cuda = cuda and cuda_version() or ABSENT,
    cudnn = cuda and 'unknown' or ABSENT,
    nccl = cuda and 'unknown' or ABSENT,
    features = features,
    threads = tonumber(C.cr_get_num_threads()),
    cpu = cpu,
    cores = cores,
    memory_bytes = memory_bytes(),
    os = os_name(),
    hostname = hostname(),
    gpus = gpus(),
    started_utc = os.date('!%Y-%m-%dT%H:%M:%SZ'),
  }
end

local function check_report(what, r)
  if type(r) ~= 'table' or type(r.crescent) ~= 'string' then
    error(what .. ': expected the table of cr.env.report(), got ' .. type(r), 3)
  end
end

local function version_line(r)
  local v = 'crescent ' .. r.crescent
  local g = r.git
  if g and g.commit then
    v = v .. ' (' .. (g.branch and g.branch .. ' ' or '') .. g.commit:sub(1, 12) .. ')'
  end
  return string.format('%s · %s · oneDNN %s · CUDA %s · cuDNN %s · NCCL %s', v, r.luajit, r.onednn, r.cuda,
    r.cudnn, r.nccl)
end

-- format(report) -> a few lines of text (no trailing newline).
function M.format(r)
  check_report('env.format', r)
  local mem = r.memory_bytes and string.format('%.1f GiB', r.memory_bytes / 2 ^ 30) or 'unknown memory'
  local gpu_names = {}
  for i, g in ipairs(r.gpus or {}) do
    gpu_names[i] = g.name .. (g.driver and ' (driver ' .. g.driver .. ')' or '')
  end
  return table.concat({
    version_line(r),
    string.format('build: %s · %d OpenMP threads', r.features, r.threads),
    string.format('cpu: %s · %s cores · %s', r.cpu, tostring(r.cores or '?'), mem),
    'gpu: ' .. (#gpu_names > 0 and table.concat(gpu_names, ', ') or 'none'),
    string.format('host: %s · %s · started %s', r.hostname, r.os, r.started_utc),
  }, '\n')
end

-- json(report) -> one JSON object (for the checkpoint's __metadata__).
function M.json(r)
  check_report('env.json', r)
  return require('crescent.util').json(r)
end

return M
