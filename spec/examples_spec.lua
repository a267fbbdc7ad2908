-- examples_spec — examples/train_loop.lua, the one-file reference loop (raw ops, SGD by
-- hand), trains on a slice of Fashion-MNIST: its epochs lower the loss and it ends far
-- above chance; bad arguments get one line naming the keys.
local root = require('crescent.native_files').root

local function run(args)
  local p = io.popen(string.format('cd %s && luajit examples/train_loop.lua %s 2>&1; echo "exit=$?"', root, args))
  local out = p:read('*a')
  p:close()
  return out, tonumber(out:match('exit=(%d+)%s*$'))
end

describe('examples/train_loop.lua', function()
  it('learns a 2048-image slice in two epochs with raw ops and a hand-written SGD', function()
    local out, code = run('epochs=2 limit=2048')
    assert.are.equal(0, code, out)
    local losses, accs = {}, {}
    for loss, acc in out:gmatch('loss (%d+%.%d+)  test top%-1 (%d+%.%d+)%%') do
      losses[#losses + 1], accs[#accs + 1] = tonumber(loss), tonumber(acc)
    end
    assert.are.equal(2, #losses, out)
    assert.is_true(losses[2] < losses[1], out)
    assert.is_true(accs[2] > 50, out)   -- 10 classes: chance is 10%
  end)

  it('refuses an unknown or non-numeric argument with one line naming the keys', function()
    local out, code = run('epoch=2')
    assert.are_not.equal(0, code)
    assert.truthy(out:find('train_loop: arguments are key=number with key one of epochs', 1, true), out)
    assert.is_nil(out:find('traceback'), out)
  end)
end)

describe('examples/tour.lua', function()
  it('runs from any folder, not only the checkout', function()
    local abs = root:sub(1, 1) == '/' and root or (os.getenv('PWD') .. '/' .. root)
    local p = io.popen('cd /tmp && luajit ' .. abs .. '/examples/tour.lua 2>&1; echo "exit=$?"')
    local out = p:read('*a')
    p:close()
    assert.truthy(out:find('exit=0', 1, true), out)
    assert.truthy(out:find('loss after one SGD step', 1, true), out)
  end)
end)
