-- crescent.report.svg_chart — a line chart as inline SVG text, drawn here (no library,
-- no JavaScript): axes with round ticks, one polyline per series in its own colour and
-- CSS class (run-<i>, so the report's run checkboxes can hide a run), and a title. The y
-- axis turns logarithmic when every value is positive and they span more than 50x (a loss
-- of 900 next to one of 2; the title then says 'log scale'). Both ranges are padded, so a
-- point at an end (a kNN measured once, at the last iteration) is drawn whole inside the
-- frame. Styles are attributes, so the SVG also stands alone.
--   svg_chart.line{title = 'loss', x_label = 'iteration', integer_x = true, series = {{name =,
--                  class =, colour =, points = {{x, y}, ...}}, ...}, width = 560, height = 220} -> svg text
local M = {}

-- Colours that stay apart for the first runs (Okabe-Ito, colour-blind safe).
M.COLOURS = { '#0072B2', '#D55E00', '#009E73', '#CC79A7', '#E69F00', '#56B4E9', '#000000', '#F0E442' }

local function esc(s)
  return (tostring(s):gsub('[&<>"]', { ['&'] = '&amp;', ['<'] = '&lt;', ['>'] = '&gt;', ['"'] = '&quot;' }))
end
M.escape = esc

-- About n round tick values covering [lo, hi] (steps of 1, 2 or 5 times a power of ten;
-- whole numbers only when `integers`, as iterations are).
function M.ticks(lo, hi, n, integers)
  if hi <= lo then return { lo } end
  local raw = (hi - lo) / math.max(1, n)
  local mag = 10 ^ math.floor(math.log10(raw))
  local step = mag
  for _, m in ipairs { 1, 2, 5, 10 } do
    if raw <= m * mag then step = m * mag break end
  end
  if integers then step = math.max(1, step) end
  local out, v = {}, math.ceil(lo / step - 1e-9) * step
  while v <= hi + step * 1e-9 do
    out[#out + 1] = math.abs(v) < step * 1e-9 and 0 or v
    v = v + step
  end
  return out
end

local function label(v)
  if v == 0 then return '0' end
  local a = math.abs(v)
  if a >= 1e4 or a < 1e-3 then return string.format('%.1e', v) end
  return (string.format('%.4g', v))
end

function M.line(o)
  local W, H = o.width or 560, o.height or 220
  local left, right, top, bottom = 56, 12, 26, 34
  local xlo, xhi, ylo, yhi = math.huge, -math.huge, math.huge, -math.huge
  for _, s in ipairs(o.series) do
    for _, p in ipairs(s.points) do
      if p[2] == p[2] and math.abs(p[2]) ~= math.huge then
        xlo, xhi = math.min(xlo, p[1]), math.max(xhi, p[1])
        ylo, yhi = math.min(ylo, p[2]), math.max(yhi, p[2])
      end
    end
  end
  local parts = { string.format('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" ' ..
    'class="chart" role="img" aria-label="%s">', W, H, W, H, esc(o.title)) }
  if xlo > xhi then
    parts[#parts + 1] = string.format('<text x="%d" y="16" font-family="sans-serif" font-size="12" font-weight="600">' ..
      '%s</text>', left, esc(o.title))
    parts[#parts + 1] = string.format('<text x="%d" y="%d" font-family="sans-serif" font-size="11" fill="#999">no values' ..
      '</text>', left, H / 2)
    parts[#parts + 1] = '</svg>'
    return table.concat(parts, '\n')
  end
  if xhi == xlo then xlo, xhi = xlo - 1, xhi + 1 end
  local log = ylo > 0 and yhi / ylo > 50
  parts[#parts + 1] = string.format('<text x="%d" y="16" font-family="sans-serif" font-size="12" font-weight="600">%s' ..
    '%s</text>', left, esc(o.title), log and ' <tspan font-weight="400" fill="#777">(log scale)</tspan>' or '')
  local f = log and math.log10 or function(v) return v end
  if log then ylo, yhi = math.log10(ylo), math.log10(yhi) end
  if yhi == ylo then ylo, yhi = ylo - math.max(1, math.abs(ylo)) * 0.05, yhi + math.max(1, math.abs(yhi)) * 0.05 end
  local pad = (yhi - ylo) * 0.08
  ylo, yhi = ylo - pad, yhi + pad
  local pw, ph = W - left - right, H - top - bottom
  -- the x range as given for the ticks, drawn inside a margin of 4 px each side
  local xpad = (xhi - xlo) * 4 / math.max(1, pw - 8)
  local tick_lo, tick_hi = xlo, xhi
  xlo, xhi = xlo - xpad, xhi + xpad
  local function px(x) return left + (x - xlo) / (xhi - xlo) * pw end
  local function py(y) return top + (1 - (f(y) - ylo) / (yhi - ylo)) * ph end
  local TEXT = 'font-family="sans-serif" font-size="10" fill="#555"'
  parts[#parts + 1] = string.format('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#bbb"/>', left, top,
    pw, ph)
  local yticks = M.ticks(ylo, yhi, 4)
  if log then   -- ticks at whole powers of ten (at least the two ends)
    yticks = {}
    for e = math.ceil(ylo), math.floor(yhi) do yticks[#yticks + 1] = e end
    if #yticks < 2 then yticks = { ylo, yhi } end
  end
  for _, t in ipairs(yticks) do
    local v = log and 10 ^ t or t
    local y = py(v)
    parts[#parts + 1] = string.format('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>' ..
      '<text x="%d" y="%.1f" %s text-anchor="end">%s</text>', left, left + pw, y, y, left - 4, y + 4, TEXT, label(v))
  end
  for _, t in ipairs(M.ticks(tick_lo, tick_hi, 5, o.integer_x)) do
    parts[#parts + 1] = string.format('<text x="%.1f" y="%d" %s text-anchor="middle">%s</text>', px(t), top + ph + 14,
      TEXT, label(t))
  end
  parts[#parts + 1] = string.format('<text x="%d" y="%d" %s text-anchor="end">%s</text>', left + pw, H - 4, TEXT,
    esc(o.x_label or ''))
  for i, s in ipairs(o.series) do
    local pts = {}
    for _, p in ipairs(s.points) do
      if p[2] == p[2] and math.abs(p[2]) ~= math.huge then pts[#pts + 1] = string.format('%.1f,%.1f', px(p[1]), py(p[2])) end
    end
    local colour = s.colour or M.COLOURS[(i - 1) % #M.COLOURS + 1]
    if #pts == 1 then
      local x, y = pts[1]:match('([^,]+),(.+)')
      parts[#parts + 1] = string.format('<circle cx="%s" cy="%s" r="3" fill="%s" class="%s"><title>%s</title></circle>',
        x, y, colour, esc(s.class or ''), esc(s.name))
    elseif #pts > 1 then
      parts[#parts + 1] = string.format('<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5" class="%s">' ..
        '<title>%s</title></polyline>', table.concat(pts, ' '), colour, esc(s.class or ''), esc(s.name))
    end
  end
  parts[#parts + 1] = '</svg>'
  return table.concat(parts, '\n')
end

return M
