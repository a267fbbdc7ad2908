-- crescent.report — one static HTML page about training runs (`bin/crescent report`): the
-- curves of every run overlaid (loss, lr, img/s, data time, kNN and test top-1, by
-- iteration) as inline SVG, a checkbox per run that hides it (CSS only: the page needs
-- no JavaScript, no server and no network), a table of each run's final figures
-- (results.json), one of the config keys on which the runs differ (config.lua), and for
-- each run with a checkpoint, what its trunk sees (crescent.report.neighbours): the
-- nearest training images of a few test images and the kNN confusion matrix. A run
-- folder is one with a metrics.jsonl (what the recipes write under runs/<run.name>/).
--   local report = require 'crescent.report'
--   local runs = report.find({'runs'})            -- the run folders under those paths, loaded
--   local html = report.html(runs, {neighbours = true})   -- the page
--   report.write('report.html', {'runs'}, opts)  -- both, written; returns the number of runs
local cjson = require 'cjson'
local util = require 'crescent.util'
local cr_config = require 'crescent.config'
local svg_chart = require 'crescent.report.svg_chart'
local neighbours = require 'crescent.report.neighbours'

local M = {}
local esc = svg_chart.escape

-- The curves the page draws: storage key, chart title.
M.CURVES = {
  { 'loss', 'train loss' }, { 'lr', 'learning rate' }, { 'img_per_s', 'images / s' },
  { 'data_time', 'data wait per step (s)' }, { 'knn/top1', 'kNN top-1 (%)' }, { 'test/top1', 'test top-1 (%)' },
  { 'test/loss', 'test loss' },
}
-- results.json fields shown first, in this order; the others follow by name.
local FIRST = { 'recipe', 'epochs', 'knn_top1', 'knn_top5', 'test_top1', 'train_loss', 'train_seconds', 'img_per_s',
                'evaluated_on' }

local function is_dir(path) return (pcall(util.list_dir, path)) end

-- One run folder, loaded: {name, dir, metrics = {records}, results = table | nil, config = table | nil}.
function M.load_run(dir)
  local run = { dir = dir, name = dir:gsub('/+$', ''):match('[^/]+$') or dir, metrics = {} }
  for line in (util.read_file(dir .. '/metrics.jsonl') or ''):gmatch('[^\n]+') do
    local ok, rec = pcall(cjson.decode, line)
    if ok and type(rec) == 'table' then run.metrics[#run.metrics + 1] = rec end
  end
  local results = util.read_file(dir .. '/results.json')
  if results then
    local ok, r = pcall(cjson.decode, results)
    if ok and type(r) == 'table' then run.results = r end
  end
  local f = loadfile(dir .. '/config.lua')
  if f then
    local ok, cfg = pcall(setfenv(f, {}))
    if ok and type(cfg) == 'table' then run.config = cfg end
  end
  return run
end

-- The run folders at or under each path (a run folder: it has metrics.jsonl), sorted by
-- name, loaded. A path that is neither is an error naming it.
function M.find(paths)
  local dirs = {}
  for _, p in ipairs(paths) do
    p = p:gsub('/+$', '')
    if util.file_exists(p .. '/metrics.jsonl') then
      dirs[#dirs + 1] = p
    elseif is_dir(p) then
      local found = false
      for _, e in ipairs(util.list_dir(p)) do
        if e.dir and util.file_exists(p .. '/' .. e.name .. '/metrics.jsonl') then
          dirs[#dirs + 1] = p .. '/' .. e.name
          found = true
        end
      end
      if not found then error(string.format("report: '%s' holds no run folders (none has a metrics.jsonl)", p), 0) end
    else
      error(string.format("report: '%s' is not a folder; give run folders or a folder of them (runs/)", p), 0)
    end
  end
  table.sort(dirs)
  local runs = {}
  for i, d in ipairs(dirs) do runs[i] = M.load_run(d) end
  return runs
end

-- The keys whose values are not the same in every run: sorted list of {key, {value per run}}.
function M.config_differences(runs)
  local flat, keys = {}, {}
  for i, r in ipairs(runs) do
    flat[i] = {}
    for k, v in pairs(cr_config.flatten(r.config)) do
      flat[i][k] = tostring(v)
      keys[k] = true
    end
  end
  local out = {}
  for _, k in ipairs(util.sorted_keys(keys)) do
    if k ~= 'run.name' and k ~= 'run.dir' then
      local values, differ = {}, false
      for i = 1, #runs do
        values[i] = flat[i][k] or '—'
        if values[i] ~= values[1] then differ = true end
      end
      if differ then out[#out + 1] = { k, values } end
    end
  end
  return out
end

local function fmt(v)
  if type(v) == 'number' then
    if v == math.floor(v) and math.abs(v) < 1e12 then return tostring(v) end
    return string.format('%.4g', v)
  end
  return tostring(v)
end

local function results_table(runs)
  local keys, seen = {}, {}
  for _, k in ipairs(FIRST) do
    for _, r in ipairs(runs) do
      if r.results and r.results[k] ~= nil and not seen[k] then keys[#keys + 1], seen[k] = k, true end
    end
  end
  local rest = {}
  for _, r in ipairs(runs) do
    for k in pairs(r.results or {}) do if not seen[k] and k ~= 'checkpoint' then rest[k] = true end end
  end
  for _, k in ipairs(util.sorted_keys(rest)) do keys[#keys + 1] = k end
  local rows = { '<table><tr><th>run</th>' }
  for _, k in ipairs(keys) do rows[#rows + 1] = '<th>' .. esc(k) .. '</th>' end
  rows[#rows + 1] = '</tr>'
  for i, r in ipairs(runs) do
    rows[#rows + 1] = string.format('<tr class="run-%d"><td><span class="swatch" style="background:%s"></span>%s</td>',
      i, svg_chart.COLOURS[(i - 1) % #svg_chart.COLOURS + 1], esc(r.name))
    for _, k in ipairs(keys) do
      local v = r.results and r.results[k]
      rows[#rows + 1] = '<td>' .. (v == nil and '—' or esc(fmt(v))) .. '</td>'
    end
    rows[#rows + 1] = '</tr>'
  end
  rows[#rows + 1] = '</table>'
  if #keys == 0 then return '<p>No run has a results.json yet (it is written when a run ends).</p>' end
  return table.concat(rows)
end

local function config_table(runs)
  local diffs = M.config_differences(runs)
  if #runs < 2 then return '<p>One run: nothing to compare.</p>' end
  if #diffs == 0 then return '<p>The runs share every config value (run.name aside).</p>' end
  local rows = { '<table><tr><th>key</th>' }
  for i, r in ipairs(runs) do rows[#rows + 1] = string.format('<th class="run-%d">%s</th>', i, esc(r.name)) end
  rows[#rows + 1] = '</tr>'
  for _, d in ipairs(diffs) do
    rows[#rows + 1] = '<tr><td>' .. esc(d[1]) .. '</td>'
    for i, v in ipairs(d[2]) do rows[#rows + 1] = string.format('<td class="run-%d">%s</td>', i, esc(v)) end
    rows[#rows + 1] = '</tr>'
  end
  rows[#rows + 1] = '</table>'
  return table.concat(rows)
end

-- One run's neighbours and confusion matrix (or why there are none).
local function neighbours_section(run, i, opts)
  local nb, why = neighbours.compute(run, opts)
  local head = string.format('<div class="run-%d"><h3>%s</h3>', i, esc(run.name))
  if not nb then return head .. '<p>No neighbours: ' .. esc(why) .. '.</p></div>' end
  local parts = { head, string.format('<p>kNN top-1 %.2f%% on the first %d test images against the first %d training ' ..
    'images (the run\'s k and temperature). Each row: a test image, then its nearest training images (cosine); a ' ..
    'dashed red frame marks a neighbour of another class, a thin grey one a neighbour of the same class.' ..
    '</p><table class="grid">', nb.accuracy, nb.test, nb.train) }
  for _, q in ipairs(nb.queries) do
    parts[#parts + 1] = string.format('<tr><td><img src="%s" alt="query" title="%s"></td>', q.image,
      esc(nb.classes[q.label + 1]))
    for _, nbr in ipairs(q.neighbours) do
      parts[#parts + 1] = string.format('<td><img src="%s" class="%s" alt="neighbour" title="%s, %.3f"></td>',
        nbr.image, nbr.label == q.label and 'same' or 'other', esc(nb.classes[nbr.label + 1]), nbr.similarity)
    end
    parts[#parts + 1] = '</tr>'
  end
  parts[#parts + 1] = '</table><p>kNN confusion matrix (rows: the true class, columns: the predicted one):</p>' ..
    '<table class="confusion"><tr><th></th>'
  for _, c in ipairs(nb.classes) do parts[#parts + 1] = '<th>' .. esc(c) .. '</th>' end
  parts[#parts + 1] = '</tr>'
  for a, row in ipairs(nb.confusion) do
    local total = 0
    for _, v in ipairs(row) do total = total + v end
    parts[#parts + 1] = '<tr><th>' .. esc(nb.classes[a]) .. '</th>'
    for b, v in ipairs(row) do
      local share = total > 0 and v / total or 0
      local colour = a == b and '0,114,178' or '213,94,0'
      parts[#parts + 1] = string.format('<td style="background:rgba(%s,%.2f)">%d</td>', colour, share * 0.9, v)
    end
    parts[#parts + 1] = '</tr>'
  end
  parts[#parts + 1] = '</table></div>'
  return table.concat(parts)
end

local CSS = [[
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
.runs label { margin-right: 14px; white-space: nowrap; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 5px; border-radius: 2px; }
.charts { display: flex; flex-wrap: wrap; gap: 8px; }
table { border-collapse: collapse; margin-top: 6px; } td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; }
th { background: #f5f5f5; font-weight: 600; }
.grid td { padding: 2px; border: none; } .grid img { width: 42px; height: 42px; image-rendering: pixelated; }
/* not the runs' colours (svg_chart.COLOURS): a frame says same or other class, not which run */
.grid img.same { outline: 1px solid #999; } .grid img.other { outline: 2px dashed #C00000; }
.confusion td { text-align: right; min-width: 28px; }
]]

-- The page for loaded runs. opts.neighbours (default true): the neighbours section, with
-- opts.train, opts.test, opts.queries, opts.k passed on (crescent.report.neighbours).
function M.html(runs, opts)
  opts = opts or {}
  local title = opts.title or 'crescent runs'
  local parts = { '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>' .. esc(title) .. '</title>',
                  '<style>' .. CSS }
  for i = 1, #runs do
    parts[#parts + 1] = string.format('#run-%d:not(:checked) ~ .page .run-%d { display: none; }', i, i)
  end
  parts[#parts + 1] = '</style></head><body>'
  for i = 1, #runs do parts[#parts + 1] = string.format('<input type="checkbox" id="run-%d" checked hidden>', i) end
  parts[#parts + 1] = '<div class="page"><h1>' .. esc(title) .. '</h1><p class="runs">'
  for i, r in ipairs(runs) do
    parts[#parts + 1] = string.format('<label for="run-%d" title="%s"><span class="swatch" style="background:%s">' ..
      '</span>%s</label>', i, esc(r.dir), svg_chart.COLOURS[(i - 1) % #svg_chart.COLOURS + 1], esc(r.name))
  end
  parts[#parts + 1] = '<br><small>Click a run to hide or show it.</small></p><h2>Curves</h2><div class="charts">'
  for _, c in ipairs(M.CURVES) do
    local series, any = {}, false
    for i, r in ipairs(runs) do
      local pts = {}
      for _, rec in ipairs(r.metrics) do
        local v = rec[c[1]]
        if type(v) == 'number' and type(rec.iteration) == 'number' then pts[#pts + 1] = { rec.iteration, v } end
      end
      any = any or #pts > 0
      series[#series + 1] = { name = r.name, class = 'run-' .. i, points = pts }
    end
    if any then
      parts[#parts + 1] = svg_chart.line { title = c[2], x_label = 'iteration', integer_x = true, series = series }
    end
  end
  parts[#parts + 1] = '</div><h2>Final figures</h2>' .. results_table(runs)
  parts[#parts + 1] = '<h2>Config differences</h2>' .. config_table(runs)
  if opts.neighbours ~= false then
    parts[#parts + 1] = '<h2>What the trunks see</h2>'
    for i, r in ipairs(runs) do parts[#parts + 1] = neighbours_section(r, i, opts) end
  end
  parts[#parts + 1] = '</div></body></html>\n'
  return table.concat(parts, '\n')
end

-- Finds the runs under paths, writes their page to out_path; returns the number of runs.
function M.write(out_path, paths, opts)
  local runs = M.find(paths)
  local html = M.html(runs, opts)
  local f, err = io.open(out_path, 'w')
  if not f then error('report: cannot write ' .. tostring(err), 0) end
  f:write(html)
  f:close()
  return #runs
end

return M
