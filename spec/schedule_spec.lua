-- spec/schedule_spec.lua — schedule values at chosen points of progress (hand-computed),
-- VISSL's composite semantics ('rescaled' and 'fixed' intervals), and bindings that write
-- a schedule into optimizer groups (respecting lr multipliers and no-decay groups), table
-- fields and functions, per step and per epoch.
local cr = H.cr
local optim = require 'crescent.optim'
local schedule = optim.schedule

local function near(a, b, tol)
  assert(math.abs(a - b) <= (tol or 1e-12), string.format('%.15g vs %.15g', a, b))
end

describe('schedules', function()
  it('constant, linear, cosine', function()
    near(schedule.constant { value = 3 }:value(0.7), 3)
    local lin = schedule.linear { from = 0.1, to = 0.5 }
    near(lin:value(0), 0.1)
    near(lin:value(0.25), 0.2)
    near(lin:value(1), 0.5)
    local cos = schedule.cosine { from = 1, to = 0 }
    near(cos:value(0), 1)
    near(cos:value(0.25), 0.5 * (1 + math.sqrt(0.5))) -- 0.853553...
    near(cos:value(0.5), 0.5)
    near(cos:value(1), 0)
    near(cos(0.5), 0.5)              -- a schedule is callable
    near(cos:at(25, 100), cos:value(0.25))
  end)

  it('warmup_cosine at the start, mid-warmup, warmup end, middle and end', function()
    local s = schedule.warmup_cosine { warmup = 0.1, from = 0, peak = 1, to = 0 }
    near(s:value(0), 0)
    near(s:value(0.05), 0.5)
    near(s:value(0.1), 1)                               -- the cosine starts at the peak
    near(s:value(0.325), 0.5 * (1 + math.sqrt(0.5)))    -- a quarter into the cosine
    near(s:value(0.55), 0.5)                            -- the cosine's middle
    near(s:value(1), 0)
    -- SwAV's lr: 0.3 -> 4.8 over 10% of training, cosine to 0.0048
    local swav = schedule.warmup_cosine { warmup = 0.1, from = 0.3, peak = 4.8, to = 0.0048 }
    near(swav:value(0.05), 2.55)
    near(swav:value(0.1), 4.8)
    near(swav:value(0.55), 0.0048 + 0.5 * (4.8 - 0.0048))
    near(swav:value(1), 0.0048)
    -- progress computed as steps: step 10 of 100 is the warmup end
    near(swav:at(10, 100), 4.8)
  end)

  it('step decays at progress milestones, or at epochs with a total', function()
    local s = schedule.step { base = 0.1, gamma = 0.1, milestones = { 0.5, 0.75 } }
    near(s:value(0), 0.1)
    near(s:value(0.49), 0.1)
    near(s:value(0.5), 0.01, 1e-15)
    near(s:value(0.75), 0.001, 1e-15)
    near(s:value(1), 0.001, 1e-15)
    local e = schedule.step { base = 0.1, gamma = 0.1, milestones = { 30, 60 }, total = 90 }
    near(e:value(29 / 90), 0.1)
    near(e:value(30 / 90), 0.01, 1e-15)
    near(e:value(59 / 90), 0.01, 1e-15)
    near(e:value(60 / 90), 0.001, 1e-15)
    local v = schedule.step { values = { 1, 0.1, 0.01 } } -- VISSL's StepParamScheduler
    near(v:value(0), 1)
    near(v:value(0.34), 0.1)
    near(v:value(1), 0.01)
  end)

  it('multistep takes one value per interval', function()
    local s = schedule.multistep { values = { 1, 0.5, 0.25 }, milestones = { 10, 20 }, total = 30 }
    near(s:value(9 / 30), 1)
    near(s:value(10 / 30), 0.5)
    near(s:value(25 / 30), 0.25)
  end)

  it('compose: rescaled intervals see their own progress, fixed ones the global', function()
    local r = schedule.compose { { until_ = 0.5, schedule.linear { from = 0, to = 1 } },
                                 { until_ = 1, schedule.linear { from = 10, to = 20 } } }
    near(r:value(0.25), 0.5)
    near(r:value(0.5), 10)   -- the boundary belongs to the next interval
    near(r:value(0.75), 15)
    local f = schedule.compose { { until_ = 0.5, schedule.linear { from = 0, to = 1 }, scaling = 'fixed' },
                                 { until_ = 1, 7 } }        -- a number is a constant
    near(f:value(0.25), 0.25)
    near(f:value(0.75), 7)
    local fn = schedule.compose { { until_ = 1, function(p) return 2 * p end } }
    near(fn:value(0.3), 0.6)
  end)

  it('build makes a schedule from a config table', function()
    local s = schedule.build { name = 'warmup_cosine', warmup = 0.1, from = 0, peak = 1, to = 0 }
    near(s:value(0.55), 0.5)
    near(schedule.build(0.3):value(0.9), 0.3)
    H.assert_error(function() schedule.build { name = 'cosin' } end, "unknown schedule 'cosin'")
  end)

  it('bad arguments are clear errors', function()
    H.assert_error(function() schedule.cosine { from = 1, too = 0 } end, "unknown option 'too'")
    H.assert_error(function() schedule.step { base = 0.1, milestones = { 30 } } end, 'give total = <epochs>')
    H.assert_error(function() schedule.compose { { until_ = 0.5, 1 } } end, 'must end at until_ = 1')
    H.assert_error(function() schedule.warmup_cosine { warmup = 1, peak = 1 } end, 'in [0, 1)')
  end)
end)

describe('schedule bindings', function()
  local function param(v) return cr.tensor(v, { dtype = 'f64' }):requires_grad_(true) end
  local function make_opt()
    return optim.SGD({ { 'conv.weight', param({ { 1 } }) }, { 'conv.bias', param({ 1 }) }, { 'fc.weight', param({ { 1 } }) } },
      { lr = 0.1, weight_decay = 1e-4, momentum = 0.9, no_decay_bias_norm = true, lr_mult = { ['^fc%.'] = 10 } })
  end

  it('writes lr into every group times its lr_mult, per step', function()
    local opt = make_opt()
    local b = schedule.apply { schedule = schedule.cosine { from = 0.1, to = 0 }, target = opt, field = 'lr', per = 'step' }
    near(b:update(50, 100, 0, 1), 0.05)
    local lrs = {}
    for i, g in ipairs(opt.param_groups) do lrs[i] = g.lr end
    near(lrs[1], 0.05)   -- conv.weight
    near(lrs[2], 0.05)   -- conv.bias (no decay, lr x1)
    near(lrs[3], 0.5)    -- fc.weight, lr x10
    near(b.value, 0.05)
    near(b:update(50, 100, 0, 1), 0.05) -- stateless: the same counters give the same value
  end)

  it('weight decay schedules leave no-decay groups at 0; per epoch', function()
    local opt = make_opt()
    local b = schedule.apply { schedule = schedule.linear { from = 1e-4, to = 1e-3 }, target = opt,
                               field = 'weight_decay', per = 'epoch' }
    b:update(123, 1000, 5, 10) -- epoch 5 of 10: progress 0.5
    near(opt.param_groups[1].weight_decay, 5.5e-4)
    near(opt.param_groups[2].weight_decay, 0)
    near(opt.param_groups[3].weight_decay, 5.5e-4)
  end)

  it('group = i sets that group only, as is', function()
    local opt = make_opt()
    schedule.apply { schedule = 0.99, target = opt, field = 'momentum', group = 3 }:update(0, 10)
    near(opt.param_groups[3].momentum, 0.99)
    near(opt.param_groups[1].momentum, 0.9)
  end)

  it('the scheduled lr drives the update', function()
    local opt = make_opt()
    schedule.apply { schedule = schedule.linear { from = 0, to = 1 }, target = opt }:update(1, 4)
    local w = opt.param_groups[1].params[1]
    w.grad = cr.tensor({ { 1 } }, { dtype = 'f64' })
    opt:step()
    -- lr 0.25: 1 - 0.25 * (1 + 1e-4)
    near(w:item(), 1 - 0.25 * (1 + 1e-4))
  end)

  it('targets hook parameters: table fields, dotted paths, functions', function()
    local hook = { momentum = 0.996, loss = { temperature = 0.1 } }
    local m = schedule.apply { schedule = schedule.cosine { from = 0.996, to = 1 }, target = hook, field = 'momentum' }
    m:update(100, 100)
    near(hook.momentum, 1)
    local t = schedule.apply { schedule = schedule.linear { from = 0.04, to = 0.07 }, target = hook,
                               field = 'loss.temperature', per = 'epoch' }
    t:update(0, 1, 1, 3)
    near(hook.loss.temperature, 0.05)
    local seen
    schedule.apply { schedule = 2, target = function(v) seen = v end }:update(0, 1)
    assert.are.equal(2, seen)
  end)

  it('bad bindings are clear errors', function()
    local opt = make_opt()
    H.assert_error(function() schedule.apply { schedule = 1, target = opt, field = 'lrr' } end,
      "no number field 'lrr'", 'lr')
    H.assert_error(function() schedule.apply { schedule = 1, target = {}, field = 'tau' } end, "no number field 'tau'")
    H.assert_error(function() schedule.apply { schedule = 1, target = opt, per = 'iter' } end, "per must be 'step' or 'epoch'")
    H.assert_error(function() schedule.apply { schedule = 1, target = opt, group = 9 } end, 'group 9 does not exist')
    local b = schedule.apply { schedule = 1, target = opt, per = 'epoch' }
    H.assert_error(function() b:update(1, 10) end, 'positive total')
  end)
end)
