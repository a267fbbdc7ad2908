-- optim_from_config_spec — cr.optim.from_config: the optimizer a recipe's optim section
-- names (with each optimizer's own options, and an error for another's), the lr scaled
-- to the global batch, and the recipes taking optim.name / accum_steps / clip_norm.
local H = require 'spec.helper'
local cr = H.cr
local fc = cr.optim.from_config

-- an optim section: the declared defaults with `over` on top, checked
local function section(over)
  return cr.config.check({ optim = over or {} }, cr.config.schema(fc.options)).optim
end

local function params()
  cr.manual_seed(4)
  local m = cr.nn.Sequential(cr.nn.Linear(3, 4), cr.nn.BatchNorm1d(4), cr.nn.Linear(4, 2))
  return m, m:named_parameters()
end

describe('cr.optim.from_config', function()
  it('builds SGD, LARS and AdamW with their own options', function()
    local _, named = params()
    local sgd = fc.build(named, section { lr = 0.2, momentum = 0.8, nesterov = true, weight_decay = 1e-4,
                                              no_decay_bias_norm = true })
    assert.are.equal('SGD', sgd.__name)
    local g = sgd.param_groups[1]
    assert.are.same({ 0.2, 0.8, true, 1e-4 }, { g.lr, g.momentum, g.nesterov, g.weight_decay })
    assert.are.equal(0, sgd.param_groups[#sgd.param_groups].weight_decay) -- biases and norm weights
    local lars = fc.build(named, section { name = 'lars', lr = 4.8, trust_coefficient = 0.02, lars_clip = true })
    assert.are.equal('LARS', lars.__name)
    assert.are.same({ 4.8, 0.02, true }, { lars.param_groups[1].lr, lars.param_groups[1].trust_coefficient,
                                          lars.param_groups[1].clip })
    local adamw = fc.build(named, section { name = 'adamw', lr = 1e-3, betas = { 0.8, 0.99 }, eps = 1e-6 }, 2e-3)
    assert.are.equal('AdamW', adamw.__name)
    assert.are.same({ 2e-3, { 0.8, 0.99 }, 1e-6 }, { adamw.param_groups[1].lr, adamw.param_groups[1].betas,
                                                    adamw.param_groups[1].eps })
  end)

  it('steps exactly as the optimizer built by hand', function()
    local function run(make)
      local m, named = params()
      local opt = make(named)
      for _ = 1, 3 do
        m:zero_grad()
        m(cr.ones({ 5, 3 })):pow(2):sum():backward()
        opt:step()
      end
      return m:named_parameters()
    end
    local a = run(function(named) return fc.build(named, section { name = 'adamw', lr = 1e-2, weight_decay = 0.05 }) end)
    local b = run(function(named) return cr.optim.AdamW(named, { lr = 1e-2, weight_decay = 0.05 }) end)
    for i = 1, #a do assert.are.equal(0, H.max_diff(a[i][2], b[i][2])) end
  end)

  it('takes lr multipliers by parameter name from the config', function()
    local _, named = params()
    local opt = fc.build(named, section { lr = 0.1, lr_mult = { { '^2%.', 10 } } })
    local by = {}
    for _, g in ipairs(opt.param_groups) do
      for _, n in ipairs(g.names) do by[n] = g.lr end
    end
    assert.is_true(math.abs(by['2.weight'] - 1) < 1e-12)
    assert.are.equal(0.1, by['0.weight'])
    H.assert_error(function() fc.build(named, section { lr_mult = { '^2%.' } }) end,
      "optim.lr_mult[1] must be a pair {'<Lua pattern>', multiplier}")
    local cfg = cr.config.load('recipes/simclr.lua', { optim = { lr_mult = { { '^head%.', 2 } } } })
    assert.are.same({ { '^head%.', 2 } }, cfg.optim.lr_mult)
  end)

  it("refuses an option set for another optimizer, and an unknown name", function()
    local _, named = params()
    H.assert_error(function() fc.build(named, section { betas = { 0.5, 0.9 } }) end,
      "optim.betas applies to optim.name=adamw, and this run's optimizer is sgd")
    H.assert_error(function() fc.build(named, section { name = 'adamw', momentum = 0.5 }) end,
      'optim.momentum applies to optim.name=lars or sgd')
    -- the recipe's own default for another optimizer is no error
    fc.build(named, section { name = 'adamw', nesterov = true }, nil, { nesterov = true })
    H.assert_error(function() fc.build(named, cr.config.merge(section(), { name = 'adam' })) end,
      "optim.name must be 'sgd', 'lars' or 'adamw', got 'adam'")
  end)

  it('scales the lr to the global batch: linear, sqrt or off', function()
    local o = section { lr = 0.3, base_batch_size = 256, scaling = 'linear', accum_steps = 2 }
    local lr, factor, line = fc.scaled_lr(o, 64, 4)
    assert.are.same({ 0.6, 2 }, { lr, factor })
    assert.are.equal('optim.scaling=linear: lr 0.6 = 0.3 x (512 / 256) for a global batch of 512 (64 x 4 ranks x 2 ' ..
      'accumulated)', line)
    o.scaling = 'sqrt'
    lr = fc.scaled_lr(o, 64, 1)
    assert.is_true(math.abs(lr - 0.3 * math.sqrt(0.5)) < 1e-15)
    o.scaling = 'off'
    assert.are.same({ 0.3, 1 }, { fc.scaled_lr(o, 64, 4) })
    H.assert_error(function() fc.scaled_lr(section { scaling = 'linear' }, 64, 1) end, 'set optim.base_batch_size')
  end)

  it('makes optim.name, accum_steps, clip_norm and scaling recipe keys', function()
    local cfg = cr.config.load('recipes/simclr.lua', { optim = { name = 'lars', accum_steps = 2, clip_norm = 1,
      base_batch_size = 128, scaling = 'linear' } })
    assert.are.same({ 'lars', 2, 1, 128, 'linear' }, { cfg.optim.name, cfg.optim.accum_steps, cfg.optim.clip_norm,
      cfg.optim.base_batch_size, cfg.optim.scaling })
    local sup = cr.config.load('recipes/supervised.lua', { optim = { name = 'adamw', clip_value = 0.5 } })
    assert.are.same({ 'adamw', 0.5 }, { sup.optim.name, sup.optim.clip_value })
    H.assert_error(function() cr.config.load('recipes/simclr.lua', { optim = { name = 'adam' } }) end,
      'optim.name expects one of sgd|lars|adamw')
  end)

  it("decays a ViT's lr layer by layer (BEiT's rule) and keeps the ratios through the schedule", function()
    local m = cr.nn.models.vit_tiny { img_size = 8, patch = 4, in_channels = 1, num_classes = 3 }
    local o = section { name = 'adamw', lr = 1e-3, layer_decay = 0.5 }
    local opt = cr.optim.from_config.build(m:named_parameters(), o, 1e-3)
    local lr_of = {}
    for _, g in ipairs(opt.param_groups) do
      for _, n in ipairs(g.names) do lr_of[n] = g.lr end
    end
    -- 12 blocks: the embeddings 0.5^13, block i 0.5^(12 - i), the final norm and head 1
    assert.is_true(math.abs(lr_of['pos_embed'] - 1e-3 * 0.5 ^ 13) < 1e-18)
    assert.is_true(math.abs(lr_of['patch_embed.proj.weight'] - 1e-3 * 0.5 ^ 13) < 1e-18)
    assert.is_true(math.abs(lr_of['blocks.0.attn.qkv.weight'] - 1e-3 * 0.5 ^ 12) < 1e-18)
    assert.is_true(math.abs(lr_of['blocks.11.mlp.fc2.bias'] - 1e-3 * 0.5) < 1e-15)
    assert.are.equal(1e-3, lr_of['head.weight'])
    local s = cr.schedule.apply { schedule = cr.schedule.constant { value = 2e-3 }, target = opt, field = 'lr' }
    s:update(0, 1)
    for _, g in ipairs(opt.param_groups) do
      if g.names[1] == 'blocks.0.norm1.weight' then assert.is_true(math.abs(g.lr - 2e-3 * 0.5 ^ 12) < 1e-18) end
    end
    H.assert_error(function()
      cr.optim.from_config.build(cr.nn.Linear(2, 2):named_parameters(), o, 1e-3)
    end, 'optim.layer_decay applies to a Vision Transformer')
  end)
end)
