-- run_folder_spec — what a recipe leaves in its run folder besides checkpoints: log.txt
-- (a copy of everything the run printed, through csrc/io/tee.c) and results.json (the
-- final JSON line).
local H = require 'spec.helper'
local cr = H.cr

local run = H.shell

describe('log.txt', function()
  local tmp = H.tmpdir('run_folder')
  teardown(tmp.remove)

  it('gets stdout, stderr and children, progress lines in their last state, and passes them on', function()
    local log = tmp.path('log.txt')
    local script = table.concat({
      "package.path = 'lua/?.lua;lua/?/init.lua;' .. package.path",
      "local C = require('crescent.ffi').C",
      "print('before'); io.stdout:flush()",
      string.format("assert(C.cr_tee_start('%s') == 0)", log),
      "print('one'); io.stdout:flush()",
      "io.stderr:write('two on stderr\\n')",
      "io.write('\\rstep 1', '\\rstep 2', '\\rstep 3\\n'); io.stdout:flush()",
      "os.execute('echo three from a child')",
      "io.write('last, no newline')",
    }, '; ')
    local out, code = run(string.format('luajit -e "%s" 2>&1', script))
    assert.are.equal(0, code, out)
    for _, want in ipairs { 'before\n', 'one\n', 'two on stderr\n', '\rstep 1\rstep 2\rstep 3\n', 'three from a child\n',
                            'last, no newline' } do
      assert.truthy(out:find(want, 1, true), want .. ' in ' .. out)
    end
    local lines = {}
    for line in (H.read_file(log) .. '\n'):gmatch('([^\n]*)\n') do lines[#lines + 1] = line end
    table.sort(lines)
    assert.are.same({ 'last, no newline', 'one', 'step 3', 'three from a child', 'two on stderr' }, lines)
    -- an error that ends the process is kept too
    local failing = string.format("package.path = 'lua/?.lua;lua/?/init.lua;' .. package.path; " ..
      "assert(require('crescent.ffi').C.cr_tee_start('%s') == 0); print('going'); error('boom')", tmp.path('err.txt'))
    out, code = run(string.format('luajit -e "%s" 2>&1', failing))
    assert.are.equal(1, code, out)
    local kept = H.read_file(tmp.path('err.txt'))
    assert.truthy(kept:find('going\n', 1, true) and kept:find('boom', 1, true), kept)
    H.assert_error(function() cr.recipe.run.keep_log({ run = {} }, tmp.path('missing/folder')) end,
      "tee: cannot open '" .. tmp.path('missing/folder/log.txt') .. "'")
  end)

  it('a recipe keeps its log and its results in the run folder', function()
    local ok, err = pcall(cr.data.fashion_mnist, { split = 'test', limit = 1 })
    if not ok then
      pending('Fashion-MNIST is absent: ' .. tostring(err))
      return
    end
    local args = 'train.epochs=1 data.limit=256 model.width=4 train.threads=1 run.dir=' .. tmp.path('runs')
    local out, code = run('luajit recipes/supervised.lua ' .. args .. ' 2>&1')
    assert.are.equal(0, code, out)
    local dir = tmp.path('runs/supervised')
    local log = H.read_file(dir .. '/log.txt')
    assert.truthy(log:find('epoch 1/1 test  top1', 1, true), log)
    local last = out:match('({[^\n]+})\n')
    assert.are.equal(last .. '\n', H.read_file(dir .. '/results.json'))
    assert.truthy(log:find(last, 1, true), log)
  end)

  it('linear_eval keeps its folder too: config, log and results', function()
    local ok, err = pcall(cr.data.fashion_mnist, { split = 'test', limit = 1 })
    if not ok then
      pending('Fashion-MNIST is absent: ' .. tostring(err))
      return
    end
    local out, code = run('luajit recipes/linear_eval.lua train.epochs=1 data.limit=256 model.width=4 train.threads=1 ' ..
      'run.name=probe run.dir=' .. tmp.path('runs') .. ' 2>&1')
    assert.are.equal(0, code, out)
    local dir = tmp.path('runs/probe')
    assert.truthy(H.read_file(dir .. '/results.json'):find('"recipe":"linear_eval"', 1, true))
    assert.truthy(H.read_file(dir .. '/log.txt'):find('linear_eval: resnet18 features', 1, true))
    assert.are.equal(1, dofile(dir .. '/config.lua').train.epochs)
  end)
end)

describe('cr.io.save_npy', function()
  it('writes NumPy format 1.0: magic, a 64-byte aligned header with dtype and shape, the data in C order', function()
    local path = os.tmpname()
    local t = cr.arange(6):float():view(2, 3):t() -- not contiguous: written in logical order
    cr.io.save_npy(path, t)
    local bytes = H.read_file(path)
    os.remove(path)
    assert.are.equal('\147NUMPY\1\0', bytes:sub(1, 8))
    local hlen = bytes:byte(9) + 256 * bytes:byte(10)
    assert.are.equal(0, (10 + hlen) % 64)
    local header = bytes:sub(11, 10 + hlen)
    assert.truthy(header:find("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", 1, true), header)
    assert.are.equal('\n', header:sub(-1))
    local ffi = require 'ffi'
    local data = bytes:sub(11 + hlen)
    assert.are.equal(24, #data)
    local f = ffi.cast('const float *', data)
    assert.are.same({ 0, 3, 1, 4, 2, 5 }, { f[0], f[1], f[2], f[3], f[4], f[5] })
    local one = os.tmpname()
    cr.io.save_npy(one, cr.arange(5))
    assert.truthy(H.read_file(one):find("'descr': '<i8', 'fortran_order': False, 'shape': (5,), }", 1, true))
    os.remove(one)
    H.assert_error(function() cr.io.save_npy(os.tmpname(), cr.ones(2):bfloat16()) end, 'NumPy has no dtype for bf16')
  end)
end)
