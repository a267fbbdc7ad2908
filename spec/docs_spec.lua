-- spec/docs_spec.lua — runs the examples of the user guide (docs/guide/*.md) and of the
-- top README.md so that they stay true. The convention, also stated for readers at the top
-- of docs/guide/README.md:
--   * every ```lua block runs; the blocks of one file run in order as one Lua chunk, so a
--     block sees the locals of the blocks before it;
--   * a ```lua norun block is shown but not run (GPU-only code, launchers, long runs);
--   * a line `--> text` (alone, or after code on the same line) says what the code before
--     it printed: a run of such lines must equal, line for line, everything printed
--     (print, io.stdout:write) since the previous run or the start of the block; `...`
--     in a text matches any characters (timings, file names);
--   * fences start at the beginning of a line; other languages (```sh, ```text) are shown
--     only, but `luajit recipes/X.lua key=value` lines in them (the guide's, the top
--     README's and docs/results/'s) must name a recipe that exists and keys that it has
--     (checked against `--help`); lines of shell blocks (```sh, ```bash or a bare ```) must
--     run in bash as written: lists that bash would brace-expand are quoted ('a={1,2}'),
--     and no <placeholder> stands where bash would read a redirection.
-- A failure names the file, the first line of the failing block, the line of the error
-- and the error. Run folders go under os.tmpname() names, removed after each file: an
-- example may name one itself, and while a file runs the default run.dir (`runs`, as
-- cr.recipe.run.BASE declares it) is a temporary folder too, so that no example writes into the
-- user's runs/ (where a run of another config would stop `make run` from resuming). The
-- console hook writes plain lines here, as into a log file, even on a terminal. One chunk
-- per file means Lua's limit of 200 locals per function holds for a whole file: reuse
-- names, or wrap a long example in do ... end.
-- CRESCENT_DOCS_SHOW=1 prints what each block printed (on stderr), for writing new `-->` lines.
local cr = H.cr

local GUIDE = 'docs/guide'
local README_MAX_LINES = 300   -- the README is a front page; the measurements live in docs/results/

local read = H.read_file

local function lines_of(text)
  local out = {}
  for line in (text .. (text:sub(-1) == '\n' and '' or '\n')):gmatch('(.-)\n') do out[#out + 1] = line end
  return out
end

local function rstrip(s) return (s:gsub('%s+$', '')) end

-- The Markdown files of the guide, README.md first.
local function guide_files()
  local out = {}
  local p = io.popen('ls ' .. GUIDE .. '/*.md 2>/dev/null')
  for name in p:lines() do
    if name ~= GUIDE .. '/README.md' then out[#out + 1] = name end
  end
  p:close()
  table.sort(out)
  table.insert(out, 1, GUIDE .. '/README.md')
  return out
end

-- ---- parsing: a Markdown file -> the Lua chunk of its runnable blocks --------------------
-- Returns {source = chunk text, blocks = {{first =, last =}}, shell = {{line =, text =}}}.
-- The chunk has one line per line of the file (what is not code is blank), so the line
-- numbers of Lua's errors are the file's.
local function parse(name, text)
  local src, blocks, shell = {}, {}, {}
  local kind, block, run = nil, nil, nil   -- kind: 'lua', 'norun', 'other' inside a fence
  local info_of                            -- the fence's language, for 'other'
  local lines = lines_of(text)
  local function flush_run()
    if not run then return end
    local quoted = {}
    for i, t in ipairs(run.texts) do quoted[i] = string.format('%q', t) end
    local last = run.last
    src[last] = src[last] .. ' __expect(' .. run.first .. ', {' .. table.concat(quoted, ', ') .. '})'
    run = nil
  end
  for i, line in ipairs(lines) do
    src[i] = ''
    local fence, info = line:match('^(```+)%s*(.-)%s*$')
    if kind == nil and fence then
      if info == 'lua' then
        kind, block = 'lua', { first = i }
        blocks[#blocks + 1] = block
        src[i] = '__block(' .. i .. ')'
      elseif info == 'lua norun' then
        kind = 'norun'
      elseif info:match('^lua') then
        error(string.format("%s:%d: unknown fence '%s'; use ```lua or ```lua norun", name, i, line), 0)
      else
        kind, info_of = 'other', info
      end
    elseif kind ~= nil and fence and info == '' then
      flush_run()
      if block then block.last = i end
      kind, block = nil, nil
    elseif kind == 'lua' then
      local code, want = line:match('^(.-)%s*%-%->%s?(.*)$')
      if code and (code == '' or line:match('^.-%s%-%->')) then
        if code:find('--', 1, true) then
          error(string.format('%s:%d: a --> line cannot follow a comment (its check would be commented out)', name, i), 0)
        end
        if not run then run = { first = i, texts = {} } end
        run.texts[#run.texts + 1] = rstrip(want)
        run.last = i
        src[i] = code
      else
        flush_run()
        src[i] = line
      end
    elseif kind == 'other' then
      shell[#shell + 1] = { line = i, text = line, info = info_of }
    end
  end
  if kind ~= nil then error(string.format('%s: a code fence is not closed', name), 0) end
  return { source = table.concat(src, '\n'), blocks = blocks, shell = shell }
end

-- ---- running ---------------------------------------------------------------------------
-- want's '...' match any text (so a literal '...' matches itself too)
local function matches(want, got)
  local pieces, pos = {}, 1
  while true do
    local a = want:find('...', pos, true)
    if not a then pieces[#pieces + 1] = want:sub(pos); break end
    pieces[#pieces + 1] = want:sub(pos, a - 1)
    pos = a + 3
  end
  if #pieces == 1 then return want == got end
  local first, last = pieces[1], pieces[#pieces]
  if got:sub(1, #first) ~= first or #got < #first + #last or got:sub(#got - #last + 1) ~= last then return false end
  local at, stop = #first + 1, #got - #last + 1
  for i = 2, #pieces - 1 do
    local a, b = got:find(pieces[i], at, true)
    if not a or b >= stop then return false end
    at = b + 1
  end
  return true
end

local function show_lines(t)
  if #t == 0 then return '    (nothing)' end
  local out = {}
  for i, l in ipairs(t) do out[i] = '    ' .. l end
  return table.concat(out, '\n')
end

-- Runs the examples of one file (its name, its text); raises a message naming the file,
-- the block and the error.
local function run_text(name, text)
  local doc = parse(name, text)
  local state = { block = nil, buf = {}, all = {} }
  local show = os.getenv('CRESCENT_DOCS_SHOW')
  local function emit(s)
    state.buf[#state.buf + 1] = s
    state.all[#state.all + 1] = s
  end
  local function printed()
    local s = table.concat(state.buf)
    state.buf = {}
    local out = lines_of(s)
    if s == '' then out = {} end
    for i, l in ipairs(out) do out[i] = rstrip(l) end
    return out
  end
  local function show_block()
    if show and state.block then
      local got = printed()
      if #got > 0 then
        io.stderr:write(string.format('-- %s, block at line %d printed:\n%s\n', name, state.block, show_lines(got)))
      end
    end
  end
  local tmps = {}
  local env_os = setmetatable({ tmpname = function()
    local n = os.tmpname()
    tmps[#tmps + 1] = n
    return n
  end }, { __index = os })
  local env = setmetatable({ os = env_os }, { __index = _G })
  env.__block = function(line)
    show_block()
    state.block, state.buf = line, {}
  end
  env.__expect = function(line, want)
    local got = printed()
    local ok = #got == #want
    for i = 1, #want do ok = ok and got[i] ~= nil and matches(want[i], got[i]) end
    if not ok then
      error({ line = line, msg = string.format('what the code printed differs from the --> lines at line %d\n' ..
        '  expected:\n%s\n  printed:\n%s', line, show_lines(want), show_lines(got)) })
    end
  end

  local f, err = loadstring(doc.source, '@' .. name)
  if not f then
    local line = tonumber(tostring(err):match(':(%d+):'))
    local first
    for _, b in ipairs(doc.blocks) do if line and line >= b.first and line <= b.last then first = b.first end end
    error(string.format('%s: the block at line %s does not compile: %s', name, tostring(first), err), 0)
  end
  setfenv(f, env)

  -- print and io.stdout are captured while the file runs
  local real_print, real_stdout = _G.print, io.stdout
  local fake = {}
  function fake.write(self, ...)
    for i = 1, select('#', ...) do emit(tostring((select(i, ...)))) end
    return self
  end
  function fake.flush(self) return self end
  function fake.setvbuf() return true end
  function fake.close() return true end
  -- the console hook writes plain lines, as into a log file, also when the spec runs on a
  -- terminal (a tty gets one line rewritten with \r)
  local real_console = cr.hooks.console
  cr.hooks.console = function(opts)
    opts = opts or {}
    if opts.tty == nil then
      local o = {}
      for k, v in pairs(opts) do o[k] = v end
      o.tty = false
      opts = o
    end
    return real_console(opts)
  end
  -- the default run folder goes under a temporary name while the file runs
  local run_dir = os.tmpname()
  tmps[#tmps + 1] = run_dir
  os.remove(run_dir)
  local run_dir_option
  for _, o in ipairs(cr.recipe.run.BASE) do if o.key == 'run.dir' then run_dir_option = o end end
  local real_run_dir = run_dir_option.default
  run_dir_option.default = run_dir
  local threads, grad, fast = cr.get_num_threads(), cr.is_grad_enabled(), cr.set_fast_paths(true)
  cr.set_fast_paths(fast)
  _G.print = function(...)
    local parts = {}
    for i = 1, select('#', ...) do parts[i] = tostring((select(i, ...))) end
    emit(table.concat(parts, '\t') .. '\n')
  end
  rawset(io, 'stdout', fake)
  local failure
  local ok = xpcall(f, function(e)
    local where = type(e) == 'table' and e.line or nil
    local msg = type(e) == 'table' and e.msg or tostring(e)
    local tb = debug.traceback('', 2)
    if not where then
      where = tonumber(msg:match(name:gsub('%p', '%%%0') .. ':(%d+):'))
              or tonumber(tb:match(name:gsub('%p', '%%%0') .. ':(%d+):'))
    end
    -- the traceback down to the file's chunk, when the error came from deeper
    tb = tb:match('^(.-\n%s*' .. name:gsub('%p', '%%%0') .. ':%d+: in main chunk)') or ''
    failure = { line = where, msg = msg, traceback = type(e) == 'table' and '' or tb, expect = type(e) == 'table' }
  end)
  show_block()
  _G.print, cr.hooks.console, run_dir_option.default = real_print, real_console, real_run_dir
  rawset(io, 'stdout', real_stdout)
  cr.set_num_threads(threads)
  cr.set_grad_enabled(grad)
  cr.set_fast_paths(fast)
  for _, t in ipairs(tmps) do os.execute("rm -rf '" .. t .. "' '" .. t .. ".d'") end
  if not ok then
    local tail = lines_of(table.concat(state.all))
    local shown = {}
    for i = math.max(1, #tail - 10), failure.expect and 0 or #tail do shown[#shown + 1] = tail[i] end
    error(string.format('%s: the block at line %s failed at line %s: %s%s%s', name, tostring(state.block),
      tostring(failure.line), failure.msg,
      #shown > 0 and ('\n  the last lines it printed:\n' .. show_lines(shown)) or '',
      failure.traceback ~= '' and ('\n' .. failure.traceback) or ''), 0)
  end
  return doc
end

-- ---- recipes named in shell blocks ------------------------------------------------------
local recipe_keys = {}
local function keys_of(recipe)
  if recipe_keys[recipe] == nil then
    local keys = false
    local f = io.open('recipes/' .. recipe .. '.lua', 'r')
    if f then
      f:close()
      keys = {}
      local p = io.popen('luajit recipes/' .. recipe .. '.lua --help 2>&1')
      for line in p:lines() do
        local k = line:match('^  (%S+)%s')
        if k then keys[k] = true end
      end
      p:close()
    end
    recipe_keys[recipe] = keys
  end
  return recipe_keys[recipe]
end

-- What bash reads unquoted: the line with the insides of its quotes blanked (same length)
-- and cut where a comment starts.
local function unquoted(text)
  local out, i, n = {}, 1, #text
  while i <= n do
    local c = text:sub(i, i)
    if c == "'" or c == '"' then
      local j = text:find(c, i + 1, true) or n
      out[#out + 1] = c .. string.rep(' ', j - i - 1) .. (j > i and c or '')
      i = j + 1
    elseif c == '#' and (i == 1 or text:sub(i - 1, i - 1):match('%s')) then
      break
    else
      out[#out + 1] = c
      i = i + 1
    end
  end
  return table.concat(out)
end

local BASH = { [''] = true, sh = true, bash = true, shell = true }

-- Errors for each shell line: a `luajit recipes/X.lua ...` line naming a missing recipe or
-- key, and in bash blocks a list bash would brace-expand or a <placeholder> bash would read
-- as a redirection.
local function check_shell(name, doc)
  local bad = {}
  for _, l in ipairs(doc.shell) do
    local plain = unquoted(l.text)
    if BASH[l.info or ''] then
      for tok in plain:gmatch('%S+') do
        if tok:find('{[^}]*,') or tok:find('{[^}]*%.%.') then   -- {a,b} and {1..3} become several words
          local key = tok:match('^([%w_%.]+)=')
          bad[#bad + 1] = key and string.format("%s:%d: bash brace-expands %s; write %s=a,b or quote it", name,
                                                l.line, tok, key)
                              or string.format('%s:%d: bash brace-expands %s; quote it', name, l.line, tok)
        end
      end
      local ph = plain:match('<[%a_][%w_%.%-]*>')
      if ph then
        bad[#bad + 1] = string.format('%s:%d: bash reads %s as a redirection; write a value or a $VARIABLE',
                                      name, l.line, ph)
      end
    end
    local recipe, rest = l.text:sub(1, #plain):match('luajit%s+recipes/([%w_]+)%.lua(.*)$')
    if recipe then
      local keys = keys_of(recipe)
      if not keys then
        bad[#bad + 1] = string.format('%s:%d: no recipe recipes/%s.lua', name, l.line, recipe)
      else
        local skip = false
        for tok in rest:gmatch('%S+') do
          if skip then skip = false
          elseif tok == '--config' or tok == '-c' then skip = true
          else
            local key = tok:match([[^['"]?([%w_%.]+)=]])
            if key and not keys[key] then
              bad[#bad + 1] = string.format("%s:%d: recipes/%s.lua has no key '%s'", name, l.line, recipe, key)
            end
          end
        end
      end
    end
  end
  return bad
end

-- ---- the specs ---------------------------------------------------------------------------
describe('the docs: the user guide (docs/guide), README.md, docs/results', function()
  local files = guide_files()
  local docs = {}

  for _, name in ipairs(files) do
    it(name .. ': its examples run and print what they show', function()
      docs[name] = run_text(name, read(name))
    end)
  end

  it('README.md: its examples run and print what they show, as a guide file\'s do', function()
    docs['README.md'] = run_text('README.md', read('README.md'))
    assert.is_true(#docs['README.md'].blocks >= 4, 'the README\'s tour has fewer runnable blocks than expected')
  end)

  it('README.md stays a front page (at most ' .. README_MAX_LINES .. ' lines; measurements go to docs/results/)',
     function()
    local n = #lines_of(read('README.md'))
    assert(n <= README_MAX_LINES, string.format('README.md has %d lines, more than %d: move the detail to ' ..
      'docs/guide/ or docs/results/', n, README_MAX_LINES))
  end)

  it('the index lists every chapter', function()
    local index = read(GUIDE .. '/README.md')
    for _, name in ipairs(files) do
      local base = name:match('[^/]+$')
      if base ~= 'README.md' then
        assert(index:find('(' .. base .. ')', 1, true), GUIDE .. '/README.md does not link ' .. base)
      end
    end
  end)

  it('relative links lead to files (the guide, README.md, docs/, docs/internals/ and docs/results/)', function()
    local pages = { 'README.md' }
    for _, name in ipairs(files) do pages[#pages + 1] = name end
    local p = io.popen('ls docs/*.md docs/internals/*.md docs/results/*.md 2>/dev/null')
    for name in p:lines() do pages[#pages + 1] = name end
    p:close()
    assert.is_true(#pages > #files + 4, 'the docs/ pages were not found')
    for _, name in ipairs(pages) do
      for target in read(name):gmatch('%]%(([^)#%s]+)[^)]*%)') do
        if not target:match('^%a+://') and not target:match('^mailto:') then
          local dir = name:match('^(.*)/[^/]*$') or '.'
          local f = io.open(dir .. '/' .. target, 'r')
          assert(f, string.format("%s links '%s', which does not exist", name, target))
          f:close()
        end
      end
    end
  end)

  it('shell lines (the guide\'s, the README\'s, docs/results/\') name recipes and keys that exist and run in bash',
     function()
    local bad = {}
    local names = { 'README.md' }
    for _, name in ipairs(files) do names[#names + 1] = name end
    local p = io.popen('ls docs/results/*.md 2>/dev/null')
    for name in p:lines() do names[#names + 1] = name end
    p:close()
    for _, name in ipairs(names) do
      local doc = docs[name] or parse(name, read(name))
      for _, b in ipairs(check_shell(name, doc)) do bad[#bad + 1] = b end
    end
    -- the checks themselves
    local function problems(text) return table.concat(check_shell('demo.md', parse('demo.md', text)), '\n') end
    assert.matches('bash brace-expands crops.num={2,6}', problems('```sh\nluajit recipes/swav.lua crops.num={2,6}\n```\n'),
                   1, true)
    assert.matches("recipes/swav.lua has no key 'crops.sizes'",
                   problems("```sh\nluajit recipes/swav.lua 'crops.sizes={28,14}'\n```\n"), 1, true)
    assert.matches('bash brace-expands x={a,b}', problems('```\necho x={a,b}\n```\n'), 1, true)
    assert.matches('bash reads <pid> as a redirection', problems('```sh\nkill -USR2 <pid>\n```\n'), 1, true)
    assert.equal('', problems("```sh\nluajit recipes/swav.lua 'crops.size={28,14}' data.root='a/{0..1}.tar' # x <y>\n" ..
                              '```\n```text\n> x:<TAB>\n```\n'))
    assert(#bad == 0, table.concat(bad, '\n'))
  end)

  it('no example writes into the default runs/ folder: run.dir is a temporary folder while a file runs', function()
    local function default_dir() return cr.config.schema(cr.recipe.run.BASE).defaults.run.dir end
    run_text('demo.md', "```lua\nlocal cr = require('crescent')\n" ..
      "local d = cr.config.schema(cr.recipe.run.BASE).defaults.run.dir\n" ..
      "print(d ~= 'runs', d:match('^/') ~= nil)   --> true\ttrue\n```\n")
    assert.equal('runs', default_dir())
  end)

  it('the runner reports a failing example and a wrong output, naming the block', function()
    local ok, err = pcall(run_text, 'demo.md', 'text\n\n```lua\nlocal x = 1\n```\n\n```lua\nlocal y = x + nil\n```\n')
    assert.is_false(ok)
    assert.matches('demo.md: the block at line 7 failed at line 8: ', err, 1, true)
    ok, err = pcall(run_text, 'demo.md', '```lua\nprint(1 + 1) --> 3\n```\n')
    assert.is_false(ok)
    assert.matches('differs from the --> lines at line 2', err, 1, true)
    ok, err = pcall(run_text, 'demo.md', '```lua\nprint(1)\nprint(2)\n--> 1\n```\n')
    assert.is_false(ok)
    assert.matches('differs from the --> lines at line 4', err, 1, true)
    ok, err = pcall(run_text, 'demo.md', '```lua\nlocal x = 1 -- one --> 1\n```\n')
    assert.is_false(ok)
    assert.matches('cannot follow a comment', err, 1, true)
    -- passes: output over several lines, a prefix match, a norun block, blocks sharing locals
    run_text('demo.md', '```lua\nlocal t = {1}\nprint("a\\nb") --> a\n--> b\n```\n```lua norun\nerror("no")\n' ..
      '```\n```lua\nprint(#t, "x") --> 1...x\n```\n')
  end)
end)
