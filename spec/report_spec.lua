-- report_spec — `bin/crescent report` (crescent.report): the page of two small runs holds
-- both runs' curves as well-formed SVG (a polyline per run and curve, a log scale where
-- values span more than 50x, single points inside the frame), their final figures, the config keys on which they differ, the CSS
-- that hides a run whose checkbox is cleared, and no script; bad paths are clear errors.
-- A run with a checkpoint gets its trunk's nearest neighbours and kNN confusion matrix
-- (images as BMP data URIs, checked byte for byte). Headless Chromium renders the page.
local report = require 'crescent.report'
local svg_chart = require 'crescent.report.svg_chart'
local neighbours = require 'crescent.report.neighbours'
local cr = H.cr

local tmp = H.tmpdir('report')
teardown(tmp.remove)

-- A run folder as the recipes leave it: metrics.jsonl, results.json, config.lua.
local function fake_run(name, lr, losses, top1)
  local dir = tmp.path('runs/' .. name)
  os.execute('mkdir -p ' .. dir)
  local lines = {}
  for i, l in ipairs(losses) do
    lines[#lines + 1] = string.format('{"iteration":%d,"epoch":0,"phase":"train","loss":%g,"lr":%g,"img_per_s":%d}',
      i * 10, l, lr, 100 + i)
  end
  lines[#lines + 1] = string.format('{"iteration":%d,"epoch":0,"phase":"train","knn/top1":%g}', #losses * 10, top1)
  local run = 'runs/' .. name .. '/'
  tmp.write(run .. 'metrics.jsonl', table.concat(lines, '\n') .. '\n')
  tmp.write(run .. 'results.json', string.format('{"epochs":1,"knn_top1":%g,"recipe":"swav","train_seconds":12.5}', top1))
  tmp.write(run .. 'config.lua', string.format("return { optim = { lr = %g, momentum = 0.9 }, run = { name = '%s' }, " ..
    "crops = { num = {2, 6} } }", lr, name))
  return dir
end

describe('crescent report', function()
  fake_run('alpha', 0.1, { 5.0, 4.0, 3.5 }, 71.25)
  fake_run('beta', 0.2, { 900, 4.5, 3.0 }, 68.5)

  it('draws both runs, their figures and their config differences on one page without scripts', function()
    local runs = report.find({ tmp.path('runs') })
    assert.are.same({ 'alpha', 'beta' }, { runs[1].name, runs[2].name })
    local html = report.html(runs)
    assert.truthy(html:find('<!DOCTYPE html>', 1, true))
    assert.is_nil(html:lower():find('<script', 1, true))
    local _, polylines = html:gsub('<polyline', '')
    assert.are.equal(6, polylines)     -- loss, lr, img/s for each run; kNN is one point each
    assert.truthy(html:find('class="run-2"', 1, true))
    assert.truthy(html:find('#run-2:not(:checked) ~ .page .run-2 { display: none; }', 1, true))
    assert.truthy(html:find('train loss <tspan font-weight="400" fill="#777">(log scale)</tspan>', 1, true),
      'the loss spans 3 to 900')
    assert.is_nil(html:find('iteration  (log', 1, true))   -- the x axis's caption is the x axis's
    -- a series of one point at the last iteration (a kNN at the end) is drawn inside the frame
    local chart = svg_chart.line { title = 'kNN', series = { { name = 'a', points = { { 0, 47 } } },
                                                            { name = 'b', points = { { 2, 48 } } } } }
    local frame_x, frame_w = chart:match('<rect x="(%d+)" y="%d+" width="(%d+)"')
    frame_x, frame_w = tonumber(frame_x), tonumber(frame_w)
    for cx, cy in chart:gmatch('<circle cx="([%d.]+)" cy="([%d.]+)" r="3"') do
      assert.is_true(tonumber(cx) - 3 >= frame_x and tonumber(cx) + 3 <= frame_x + frame_w, chart)
      assert.is_true(tonumber(cy) - 3 >= 26, chart)
    end
    assert.truthy(html:find('<td>71.25</td>', 1, true) and html:find('<td>68.5</td>', 1, true))
    assert.truthy(html:find('<td>optim.lr</td><td class="run-1">0.1</td><td class="run-2">0.2</td>', 1, true), html)
    assert.is_nil(html:find('<td>optim.momentum</td>', 1, true))   -- the same in both: not listed
    assert.is_nil(html:find('<td>run.name</td>', 1, true))
    -- the neighbours' frames do not take a run's colour (the caption says which frame is which)
    for _, class in ipairs { 'same', 'other' } do
      local colour = html:match('%.grid img%.' .. class .. ' { outline: [^;]-(#%x+);')
      assert.truthy(colour, class)
      for _, c in ipairs(svg_chart.COLOURS) do assert.are_not.equal(c:lower(), colour:lower()) end
    end
  end)

  it('writes well-formed SVG', function()
    local path = tmp.path('page.html')
    assert.are.equal(2, report.write(path, { tmp.path('runs') }))
    local out, code = H.shell(string.format([[python3 -c "
import re, sys, xml.etree.ElementTree as ET
h = open('%s').read()
svgs = re.findall(r'<svg.*?</svg>', h, re.S)
for s in svgs: ET.fromstring(s)
print('svgs', len(svgs))"]], path))
    assert.are.equal(0, code, out)
    assert.truthy(out:find('svgs 4', 1, true), out)
  end)

  it('runs from bin/crescent, and names a path that holds no runs', function()
    local out, code = H.shell(string.format('bin/crescent report %s -o %s', tmp.path('runs/alpha'), tmp.path('one.html')))
    assert.are.equal(0, code, out)
    assert.truthy(out:find('report: 1 run -> ', 1, true), out)
    out, code = H.shell('bin/crescent report ' .. tmp.path('nowhere'))
    assert.are.equal(1, code, out)
    assert.truthy(out:find('is not a folder', 1, true), out)
    os.execute('mkdir -p ' .. tmp.path('empty'))
    out = H.shell('bin/crescent report ' .. tmp.path('empty'))
    assert.truthy(out:find('holds no run folders', 1, true), out)
  end)

  it("shows what a checkpoint's trunk sees: nearest training images and the kNN confusion matrix", function()
    local ok = pcall(cr.data.fashion_mnist, { split = 'test', limit = 1 })
    if not ok then pending('Fashion-MNIST is absent') return end
    local dir = fake_run('gamma', 0.3, { 2.0, 1.5 }, 60)
    tmp.write('runs/gamma/config.lua', "return { data = { name = 'fashion_mnist', limit = 120 }, " ..
      "model = { arch = 'resnet18', width = 4, stem = 'cifar' }, knn = { k = 10, temperature = 0.1 } }")
    os.execute('mkdir -p ' .. dir .. '/checkpoints')
    cr.manual_seed(0)
    local trunk = cr.nn.models.resnet18 { stem = 'cifar', width = 4, in_channels = 1, num_classes = 0 }
    local tensors = {}
    for _, nt in ipairs(trunk:named_state()) do tensors['trunk.' .. nt[1]] = nt[2] end
    cr.save(dir .. '/checkpoints/latest.safetensors', tensors)
    local nb = assert(neighbours.compute(report.load_run(dir), { queries = 3, k = 4 }))
    assert.are.equal(120, nb.train)
    assert.are.equal(3, #nb.queries)
    assert.are.equal(4, #nb.queries[1].neighbours)
    local total = 0
    for _, row in ipairs(nb.confusion) do for _, v in ipairs(row) do total = total + v end end
    assert.are.equal(nb.test, total)
    assert.are.equal(10, #nb.classes)
    local html = report.html(report.find({ tmp.path('runs') }), { queries = 3, k = 4 })
    assert.truthy(html:find('What the trunks see', 1, true))
    assert.truthy(html:find('No neighbours: no checkpoints/latest.safetensors', 1, true))   -- alpha, beta
    assert.truthy(html:find('<img src="data:image/bmp;base64,', 1, true))
    assert.truthy(html:find('class="confusion"', 1, true))
  end)

  it('encodes images as BMP data URIs', function()
    assert.are.equal('TWFu', neighbours.base64('Man'))
    assert.are.equal('TWE=', neighbours.base64('Ma'))
    assert.are.equal('TQ==', neighbours.base64('M'))
    local uri = neighbours.bmp_uri({ { 7, 9 } }, 1, 2, false)
    local b64 = uri:match('^data:image/bmp;base64,(.+)$')
    local map = {}
    for i = 1, 64 do map[('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'):sub(i, i)] = i - 1 end
    local bytes = {}
    for i = 1, #b64, 4 do
      local n = 0
      for k = 0, 3 do n = n * 64 + (map[b64:sub(i + k, i + k)] or 0) end
      bytes[#bytes + 1] = string.char(math.floor(n / 65536) % 256, math.floor(n / 256) % 256, n % 256)
    end
    local bmp = table.concat(bytes)
    assert.are.equal('BM', bmp:sub(1, 2))
    local offset = bmp:byte(11) + bmp:byte(12) * 256
    assert.are.equal(14 + 40 + 1024, offset)                  -- headers and a 256-grey palette
    assert.are.same({ 7, 9, 0, 0 }, { bmp:byte(offset + 1, offset + 4) })   -- one row, padded to 4 bytes
  end)

  it('renders in headless Chromium: a screenshot that is not blank, and no console errors', function()
    if os.execute('command -v chromium >/dev/null 2>&1') ~= 0 then
      pending('chromium is absent (make deps installs it)')
      return
    end
    local page, shot = tmp.path('shot.html'), tmp.path('shot.png')
    report.write(page, { tmp.path('runs/alpha'), tmp.path('runs/beta') }, { neighbours = false })
    local out, code = H.shell(string.format('timeout 60 chromium --headless --no-sandbox --disable-gpu ' ..
      '--hide-scrollbars --enable-logging=stderr --v=0 --window-size=1000,1200 --screenshot=%s file://%s 2>&1', shot,
      page))
    assert.are.equal(0, code, out)
    assert.is_nil(out:find('CONSOLE', 1, true), out)   -- what the page logs to the console (it has no script)
    local f = assert(io.open(shot, 'rb'))
    local png = f:read('*a')
    f:close()
    assert.are.equal('\137PNG', png:sub(1, 4))
    -- a blank 1000 x 1200 page compresses to a few KB; charts, tables and text do not
    assert.is_true(#png > 30000, 'screenshot of ' .. #png .. ' bytes')
  end)

  it('picks round ticks', function()
    assert.are.same({ 0, 0.5, 1 }, svg_chart.ticks(0, 1, 2))
    assert.are.same({ 20, 40, 60, 80 }, svg_chart.ticks(12, 87, 4))
    assert.are.same({ 1169, 1170, 1171 }, svg_chart.ticks(1169, 1171, 5, true))   -- iterations: whole numbers
  end)
end)
