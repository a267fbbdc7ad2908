-- crescent.hooks.csv — metrics.csv: the rows metrics.jsonl has (the logged train steps,
-- then a row after each phase and at the end with the new unsmoothed scalars), as one
-- wide table for spreadsheets and pandas (`pandas.read_csv`), the layout of Lightning's
-- CSVLogger that solo-learn and lightly users know:
--
--   iteration,epoch,phase,loss,lr,img_per_s,...,knn/top1
--   50,0,train,5.71,0.3,612,...,
--
-- A row leaves the columns it has no value for empty; NaN and infinities are written as
-- nan, inf and -inf (what pandas reads back). A scalar seen for the first time adds a
-- column: the file is then written anew (to a temporary file renamed over it, so a crash
-- leaves the old one whole); otherwise rows are appended and flushed one by one. A
-- resumed run reads the file back and goes on in it.
--
--   task:add_hook(cr.hooks.csv{path = 'runs/exp1/metrics.csv', every = 20})
local util = require 'crescent.util'
local tensorboard = require 'crescent.hooks.tensorboard'

local Csv = {}
Csv.__index = Csv

local FIXED = { 'iteration', 'epoch', 'phase' }

local function fail(msg) error(msg, 0) end

local function cell(v)
  if v == nil then return '' end
  if type(v) ~= 'number' then return tostring(v) end
  if v ~= v then return 'nan' end
  if v == math.huge then return 'inf' end
  if v == -math.huge then return '-inf' end
  if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return string.format('%d', v) end
  return string.format('%.9g', v)
end

local function split(line)
  local out = {}
  for field in (line .. ','):gmatch('([^,]*),') do out[#out + 1] = field end
  return out
end

-- An earlier run's file: its columns and rows (as text cells), so a resumed run goes on.
function Csv:read_back()
  local f = io.open(self.path, 'r')
  if not f then return end
  local header = f:read('*l')
  local cols = header and split(header) or {}
  if #cols < #FIXED or cols[1] ~= FIXED[1] or cols[2] ~= FIXED[2] or cols[3] ~= FIXED[3] then
    f:close()
    fail(string.format("csv: '%s' is not a metrics.csv this hook wrote (its header is '%s'); move it aside or " ..
      'give the hook another path', self.path, tostring(header)))
  end
  for i = #FIXED + 1, #cols do
    self.columns[#self.columns + 1] = cols[i]
    self.index[cols[i]] = i
  end
  for line in f:lines() do
    if line ~= '' then self.rows[#self.rows + 1] = split(line) end
  end
  f:close()
end

local function line_of(row, n)
  local parts = {}
  for i = 1, n do parts[i] = row[i] or '' end
  return table.concat(parts, ',') .. '\n'
end

-- The whole file anew: the header with every column, then every row.
function Csv:rewrite()
  if self.file then self.file:close() self.file = nil end
  local n = #FIXED + #self.columns
  local header = {}
  for i, c in ipairs(FIXED) do header[i] = c end
  for _, c in ipairs(self.columns) do header[#header + 1] = c end
  local tmp = self.path .. '.tmp'
  local f, err = io.open(tmp, 'w')
  if not f then fail("csv: cannot write '" .. tmp .. "' (" .. tostring(err) .. '); check the folder and its permissions') end
  f:write(table.concat(header, ','), '\n')
  for _, row in ipairs(self.rows) do f:write(line_of(row, n)) end
  f:close()
  local ok, rerr = os.rename(tmp, self.path)
  if not ok then fail("csv: cannot rename '" .. tmp .. "' to '" .. self.path .. "' (" .. tostring(rerr) .. ')') end
end

function Csv:open_for_append()
  local f, err = io.open(self.path, 'a')
  if not f then
    fail("csv: cannot open '" .. self.path .. "' for appending (" .. tostring(err) .. '); check the folder and its ' ..
      'permissions')
  end
  self.file = f
end

function Csv:before_train(_)
  if not self.started then
    self.started = true
    local folder = self.path:match('^(.*)/[^/]*$')
    if folder and folder ~= '' then util.mkdir_p(folder) end
    self:read_back()
    self:rewrite()
    self:open_for_append()
  end
  self.seen = {}
end

-- One row with the new scalars; nothing when there are none.
function Csv:write(task, unsmoothed_only)
  if not self.started then return end
  local values, grew = {}, false
  tensorboard.new_scalars(task, self.seen, unsmoothed_only, self.window, function(name, v)
    if name:find('[,\n\r"]') then return end   -- not a column name a CSV reader splits the same way
    if not self.index[name] then
      self.columns[#self.columns + 1] = name
      self.index[name] = #FIXED + #self.columns
      grew = true
    end
    values[self.index[name]] = cell(v)
  end)
  if next(values) == nil then return end
  values[1], values[2], values[3] = cell(task.iteration), cell(task.epoch), task.phase_name or 'train'
  self.rows[#self.rows + 1] = values
  if grew or not self.file then
    self:rewrite()
    self:open_for_append()
    return
  end
  local ok, err = self.file:write(line_of(values, #FIXED + #self.columns))
  if ok then ok, err = self.file:flush() end
  if not ok then fail("csv: writing '" .. self.path .. "' failed: " .. tostring(err)) end
end

function Csv:after_step(task)
  if tensorboard.is_log_step(task, self.every) then self:write(task, false) end
end

function Csv:after_phase(task) self:write(task, true) end

function Csv:close()
  if self.file then self.file:close() end
  self.file = nil
end

function Csv:after_train(task)
  self:write(task, true)   -- the final kNN figures
  self:close()
end

function Csv:on_exception(_) self:close() end

local KNOWN = { path = true, every = true, window = true, priority = true }

-- cr.hooks.csv{path = 'runs/x/metrics.csv', every = 20, window = (the storage's), priority = 95}
return function(opts)
  if type(opts) ~= 'table' then error("csv: give {path = 'runs/name/metrics.csv', every = 20}", util.user_level()) end
  for k in pairs(opts) do
    if not KNOWN[k] then error("csv: unknown option '" .. tostring(k) .. "'", util.user_level()) end
  end
  if type(opts.path) ~= 'string' or opts.path == '' or opts.path:sub(-1) == '/' then
    error("csv: path must be a file name such as 'runs/exp1/metrics.csv', got " .. tostring(opts.path),
      util.user_level())
  end
  local every = opts.every or 20
  if type(every) ~= 'number' or every < 1 or every ~= math.floor(every) then
    error('csv: every must be a positive integer number of iterations, got ' .. tostring(every), util.user_level())
  end
  return setmetatable({ name = 'csv', priority = opts.priority or 95, path = opts.path, every = every,
                        window = opts.window, columns = {}, index = {}, rows = {} }, Csv)
end
