-- dry_run_spec — `--dry-run` (run.dry_run): a recipe builds everything, reports the
-- resolved config, the model, the data, the steps, the optimizer and how it would start,
-- and exits 0 without training, writing or moving anything; errors still name the key.
local H = require 'spec.helper'
local cr = H.cr

-- Runs a recipe with arguments; returns its output (stdout and stderr) and exit code.
local function recipe(name, args) return H.shell(string.format('luajit recipes/%s.lua %s', name, args)) end

describe('--dry-run', function()
  local ok, err = pcall(cr.data.fashion_mnist, { split = 'test', limit = 1 })
  if not ok then
    pending('Fashion-MNIST is absent: ' .. tostring(err))
    return
  end
  local tmp = H.tmpdir('dry_run')
  teardown(tmp.remove)
  local base = 'data.limit=512 model.width=4 train.threads=1 run.dir=' .. tmp.dir

  it('reports the run a recipe would make and exits 0 without training or writing', function()
    local out, code = recipe('simclr', '--dry-run train.epochs=3 optim.accum_steps=2 ' .. base)
    assert.are.equal(0, code, out)
    for _, want in ipairs {
      'dry run: the resolved config', 'epochs = 3,', 'model: SimCLR, ', '  trunk                ResNet',
      'data: 512 train samples, 2 batches of 256 per epoch, 512 test samples for the kNN',
      'steps: 6 (3 epochs x 2 batches, an optimizer step every 2)', 'optimizer: SGD, lr 0.5 (peak)',
      'start: from scratch (train.seed 0)', 'dry run: nothing was trained or written',
    } do
      assert.truthy(out:find(want, 1, true), want .. ' in\n' .. out)
    end
    assert.is_nil(out:find('epoch 1/3  iter', 1, true), out)
    assert.is_nil(io.open(tmp.path('simclr')), 'the run folder was made')
  end)

  it('names how an existing run would go on, moves nothing, and still refuses another config', function()
    local out, code = recipe('supervised', 'train.epochs=1 ' .. base)
    assert.are.equal(0, code, out)
    out, code = recipe('supervised', '--dry-run train.epochs=1 ' .. base)
    assert.are.equal(0, code, out)
    assert.truthy(out:find("start: would resume from '" .. tmp.path('supervised/checkpoints/'), 1, true), out)
    out, code = recipe('supervised', '--dry-run train.epochs=1 run.resume=false ' .. base)
    assert.are.equal(0, code, out)
    local p = io.popen('ls ' .. tmp.dir)
    local listing = p:read('*a')
    p:close()
    assert.is_nil(listing:find('.old-', 1, true), listing)
    out, code = recipe('supervised', '--dry-run train.epochs=2 ' .. base)
    assert.are_not.equal(0, code)
    assert.truthy(out:find('train.epochs: 1 in the run, 2 now', 1, true), out)
  end)

  it("every SSL recipe takes fractional crop scales (the README's multi-crop line, where the method has crops)",
    function()
      for _, name in ipairs(cr.ssl.METHODS) do
        local crops = cr.config.load('recipes/' .. name .. '.lua').crops
        local args = #crops.size > 1 and "'crops.size={28,14}' 'crops.num={2,2}' 'crops.min_scale={0.35,0.1}' " ..
          "'crops.max_scale={1,0.35}'" or "'crops.min_scale={0.3}' 'crops.max_scale={0.9}'"
        local out, code = recipe(name, '--dry-run ' .. args .. " 'augment.blur_sigma={0.1,2}' " .. base)
        assert.are.equal(0, code, name .. ': ' .. out)
      end
    end)

  it('checks model.init: a missing file or another trunk fails the dry run in one line', function()
    local out, code = recipe('supervised', '--dry-run run.name=init_check model.init=' ..
      tmp.path('nothere.safetensors') .. ' ' .. base)
    assert.are.equal(1, code, out)
    assert.truthy(out:find("error: model.init: no file '" .. tmp.path('nothere.safetensors') .. "'", 1, true), out)
    out, code = recipe('swav', '--dry-run run.name=init_check model.init=README.md ' .. base)
    assert.are.equal(1, code, out)
    assert.truthy(out:find("error: model.init: 'README.md' is not a safetensors file crescent can read", 1, true), out)
  end)

  it('linear_eval and extract: the data, the trunk and model.init checked, the plan printed, nothing written', function()
    local out, code = recipe('linear_eval', '--dry-run run.name=probe ' .. base)
    assert.are.equal(0, code, out)
    for _, want in ipairs { 'dry run: the resolved config', 'model: resnet18 trunk, ', '(random: the baseline)',
                            'data: 512 train samples, 512 test samples', 'then train the linear probe for 30 epochs',
                            'dry run: nothing was trained or written' } do
      assert.truthy(out:find(want, 1, true), want .. ' in\n' .. out)
    end
    out, code = recipe('extract', '--dry-run run.name=feats model.arch=pixels data.split=both ' .. base)
    assert.are.equal(0, code, out)
    assert.truthy(out:find('would write the features of train and test to ' .. tmp.path('feats/features_<split>'), 1,
      true), out)
    assert.is_nil(io.open(tmp.path('probe')), 'linear_eval made its run folder')
    assert.is_nil(io.open(tmp.path('feats')), 'extract made its folder')
    out, code = recipe('linear_eval', '--dry-run model.init=README.md ' .. base)
    assert.are.equal(1, code, out)
    assert.truthy(out:find("model.init: 'README.md' is not a safetensors file", 1, true), out)
  end)

  it('is refused, naming the key, by a recipe of your own without run.dry_run', function()
    local schema = cr.config.schema(cr.config.options('train', { { 'epochs', 'integer', 1, 'epochs', min = 0 } }))
    H.assert_error(function() cr.config.parse({ '--dry-run' }, schema) end,
      '--dry-run: this recipe has no run.dry_run key')
  end)
end)
