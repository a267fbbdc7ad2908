-- spec/dino_spec.lua — DINO (crescent.ssl.dino): the loss and the center against a plain
-- Lua computation of the official formulas, the teacher temperature schedule, the
-- weight-normalised last layer (values, gradcheck, the frozen norm), the teacher's EMA,
-- the hooks (per-parameter clipping, the last layer's freeze), the optimizer groups, the
-- recipe on a ViT, and bad input.
local H = require 'spec.helper'
local cr = H.cr
local nn = cr.nn
local dino = cr.ssl.dino

-- A small trunk: [B, 1, h, w] -> [B, 6] (any crop size).
local function trunk()
  return nn.Sequential(nn.Conv2d(1, 6, 3, { padding = 1 }), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
end

local function method(extra)
  local o = { trunk = trunk(), teacher_trunk = trunk(), feat_dim = 6, out_dim = 5, hidden_dim = 7, bottleneck_dim = 4,
              student_temp = 0.1, teacher_temp = 0.07, center_momentum = 0.9 }
  for k, v in pairs(extra or {}) do o[k] = v end
  return dino.DINO(o)
end

-- softmax of a Lua list
local function softmax(xs)
  local m, out, s = -math.huge, {}, 0
  for _, x in ipairs(xs) do m = math.max(m, x) end
  for i, x in ipairs(xs) do out[i] = math.exp(x - m); s = s + out[i] end
  for i = 1, #out do out[i] = out[i] / s end
  return out
end

describe('ssl.dino', function()
  it('computes the loss and the center as the official formulas, in plain Lua', function()
    cr.manual_seed(1)
    local m = method():double()
    local B, K, G, V = 3, 5, 2, 4
    local student = cr.randn({ V * B, K }, { dtype = 'f64' })
    local teacher = cr.randn({ G * B, K }, { dtype = 'f64' })
    local center0 = cr.randn({ 1, K }, { dtype = 'f64' }) * 0.1
    m.center:copy_(center0)
    local loss = m:loss({ student = student, teacher = teacher, batch = B }):item()
    local S, T, c = student:totable(), teacher:totable(), center0:totable()[1]
    local total, terms = 0, 0
    for t = 0, G - 1 do
      for s = 0, V - 1 do
        if s ~= t then
          local term = 0
          for b = 1, B do
            local tq, sl = {}, {}
            for k = 1, K do
              tq[k] = (T[t * B + b][k] - c[k]) / 0.07
              sl[k] = S[s * B + b][k] / 0.1
            end
            local q, p = softmax(tq), softmax(sl)
            for k = 1, K do term = term - q[k] * math.log(p[k]) end
          end
          total, terms = total + term / B, terms + 1
        end
      end
    end
    assert.is_true(math.abs(loss - total / terms) < 1e-12)
    for k = 1, K do
      local mean = 0
      for r = 1, G * B do mean = mean + T[r][k] / (G * B) end
      assert.is_true(math.abs(m.center:totable()[1][k] - (0.9 * c[k] + 0.1 * mean)) < 1e-12)
    end
  end)

  it('warms the teacher temperature up linearly over its epochs, then holds it', function()
    local m = method { warmup_teacher_temp = 0.04, teacher_temp = 0.07, warmup_teacher_temp_epochs = 4 }
    local want = { 0.04, 0.05, 0.06, 0.07, 0.07, 0.07 }
    for e = 0, 5 do assert.is_true(math.abs(m:teacher_temp_at(e) - want[e + 1]) < 1e-12) end
    assert.are.equal(0.07, method():teacher_temp_at(0))
  end)

  it("has the official head: names, a last layer of unit rows while norm_last_layer, and its gradients", function()
    cr.manual_seed(2)
    local head = dino.DINOHead(6, 5, { hidden_dim = 7, bottleneck_dim = 4 })
    local names = {}
    for _, np in ipairs(head:named_parameters()) do names[#names + 1] = np[1] end
    assert.are.same({ 'mlp.0.weight', 'mlp.0.bias', 'mlp.2.weight', 'mlp.2.bias', 'mlp.4.weight', 'mlp.4.bias',
                      'last_layer.weight_g', 'last_layer.weight_v' }, names)
    assert.is_false(head.last_layer.weight_g.requires_grad)
    local w = head.last_layer:weight()
    local norms = (w * w):sum(1):sqrt()
    assert.is_true((norms - 1):abs():max():item() < 1e-6)
    assert.is_true(dino.DINOHead(6, 5, { norm_last_layer = false }).last_layer.weight_g.requires_grad)
    local lin = dino.WeightNormLinear(4, 3):double()
    cr.no_grad(function() lin.weight_g:copy_(cr.tensor({ { 2 }, { 0.5 }, { 1.5 } }, { dtype = 'f64' })) end)
    H.gradcheck(function(x, g, v)
      lin.weight_g, lin.weight_v = g, v
      return lin(x)
    end, { cr.randn({ 2, 4 }, { dtype = 'f64' }), lin.weight_g, lin.weight_v })
  end)

  it('moves the teacher by the EMA at each forward and gives the student every crop', function()
    cr.manual_seed(3)
    local m = method { momentum = 0.9 }
    for _, np in ipairs(m:student_parameters()) do
      cr.no_grad(function() np[2]:add_(cr.randn(np[2].shape) * 0.1) end)
    end
    local before = {}
    for i, np in ipairs(m:teacher_parameters()) do before[i] = np[2]:clone() end
    local crops = { cr.randn({ 3, 1, 8, 8 }), cr.randn({ 3, 1, 8, 8 }), cr.randn({ 3, 1, 4, 4 }) }
    local out = m(crops)
    local student = m:student_parameters()
    for i, np in ipairs(m:teacher_parameters()) do
      local want = before[i] * 0.9 + student[i][2]:detach() * 0.1
      assert.is_true((np[2] - want):abs():max():item() < 1e-6, np[1])
    end
    assert.are.same({ 9, 5 }, out.student.shape)
    -- the features are the teacher's (the official evaluation's)
    local x = cr.randn({ 2, 1, 8, 8 })
    m:eval()
    assert.are.equal(0, (m:features(x) - m.teacher_trunk(x)):abs():max():item())
    assert.are.equal(m.teacher_trunk, m:feature_trunk())
    m:train()
    assert.are.same({ 6, 5 }, out.teacher.shape)
    assert.is_false(out.teacher.requires_grad)
    H.assert_error(function() m({ crops[1] }) end, 'at least 2 crops')
    -- the global crops alone, as the official local_crops_number = 0: the two cross terms
    local two = m({ crops[1], crops[2] })
    assert.are.same({ 6, 5 }, two.student.shape)
    local q = ((two.teacher - m.center) / m.current_teacher_temp):softmax(1)
    local log_p = (two.student / m.student_temp):log_softmax(1)
    local want = -((q:narrow(0, 0, 3) * log_p:narrow(0, 3, 3)):sum(1):mean() + (q:narrow(0, 3, 3) *
      log_p:narrow(0, 0, 3)):sum(1):mean()):item() / 2
    assert.is_true(math.abs(m:loss(two):item() - want) < 1e-5)
  end)

  it('clips each gradient on its own and drops the last layer while frozen', function()
    cr.manual_seed(4)
    local m = method { clip_grad = 0.5, freeze_last_layer = 1, norm_last_layer = false }
    local grads_hook = m:hooks()[3]
    local function backward()
      for _, np in ipairs(m:named_parameters()) do np[2].grad = nil end
      local out = m({ cr.randn({ 4, 1, 8, 8 }), cr.randn({ 4, 1, 8, 8 }), cr.randn({ 4, 1, 4, 4 }) })
      local l = m:loss(out) * 100
      l:backward()
    end
    backward()
    grads_hook.after_backward(nil, { phase_name = 'train', epoch = 0 })
    for _, np in ipairs(m:student_parameters()) do
      if np[1]:find('last_layer', 1, true) then
        assert.is_nil(np[2].grad, np[1])
      elseif np[2].grad then
        assert.is_true(np[2].grad:norm():item() <= 0.5 + 1e-5, np[1])
      end
    end
    backward()
    grads_hook.after_backward(nil, { phase_name = 'train', epoch = 1 })
    assert.is_not_nil(m.head.last_layer.weight_v.grad)
  end)

  it('gives no weight decay to biases, norms, the position embedding and the class token', function()
    local named = { { 'trunk.pos_embed', cr.zeros({ 1, 5, 4 }) }, { 'trunk.cls_token', cr.zeros({ 1, 1, 4 }) },
                    { 'trunk.blocks.0.norm1.weight', cr.zeros({ 4 }) }, { 'head.mlp.0.bias', cr.zeros({ 4 }) },
                    { 'head.mlp.0.weight', cr.zeros({ 4, 4 }) } }
    local groups = dino.DINO.param_groups(nil, named)
    assert.are.equal(1, #groups[1].params)
    assert.are.equal('head.mlp.0.weight', groups[1].params[1][1])
    assert.are.equal(4, #groups[2].params)
    assert.are.equal(0, groups[2].weight_decay)
  end)

  it('trains a ViT-tiny a few steps from its recipe, with a cosine weight decay, and reports kNN', function()
    local cfg = cr.config.check({
      data = { name = 'synthetic', size = 16, limit = 32, batch_size = 8 },
      train = { epochs = 1, threads = 1, log_every = 1 }, knn = { k = 5 }, checkpoint = { save = false },
      crops = { size = { 16, 8 }, num = { 2, 2 }, min_scale = { 0.4, 0.1 }, max_scale = { 1, 0.4 } },
      model = { arch = 'vit_tiny', patch = 4 },
      dino = { out_dim = 32, hidden_dim = 16, bottleneck_dim = 8, freeze_last_layer = 0 },
      optim = { name = 'adamw', lr = 1e-4, weight_decay = 0.04, weight_decay_end = 0.4 },
      run = { dir = os.tmpname() .. '.d' },
    }, cr.recipe.ssl.schema('dino'))
    local task = cr.recipe.ssl.task('dino', cfg)
    assert.is_truthy(cr.recipe.ssl.banner(task):find('dino: vit_tiny, patch 4 (', 1, true), cr.recipe.ssl.banner(task))
    local drop = { student = 0, teacher = 0 }
    task.method.trunk:apply(function(mod) if mod.__name == 'DropPath' then drop.student = drop.student + mod.p end end)
    task.method.teacher_trunk:apply(function(mod) if mod.__name == 'DropPath' then drop.teacher = drop.teacher + mod.p end end)
    assert.is_true(drop.student > 0, 'the student keeps its stochastic depth')
    assert.are.equal(0, drop.teacher, 'the teacher has none')
    local seen = {}
    task:add_hook { name = 'stop', after_step = function(_, t)
      seen[#seen + 1] = t.optimizer.param_groups[1].weight_decay
      if t.iteration >= 2 then t:request_stop('spec') end
    end }
    cr.train(task)
    assert.are.equal(2, task.iteration)
    assert.is_number(task.metrics.knn_top1)
    assert.is_true(seen[2] > seen[1] and math.abs(seen[1] - 0.04) < 1e-12, "the weight decay rises: " .. table.concat(seen, ", "))
    assert.are.equal(0, task.optimizer.param_groups[2].weight_decay)
    H.assert_error(function()
      local one_crop = { crops = { size = { 16 }, num = { 1 }, min_scale = { 0.4 }, max_scale = { 1 } } }
      cr.recipe.ssl.task('dino', cr.config.merge(cfg, one_crop))
    end, 'DINO needs global crops (crops.num[1] = 1) and two crops at least')
    -- the global crops alone build (the official local_crops_number = 0)
    local global_only = cr.recipe.ssl.task('dino', cr.config.merge(cfg, { run = { name = 'dino_global_only' },
      crops = { size = { 16 }, num = { 2 }, min_scale = { 0.4 }, max_scale = { 1 } } }))
    assert.are.equal(2, global_only.model.global_crops)
    H.assert_error(function() cr.recipe.ssl.task('dino', cr.config.merge(cfg, { model = { patch = 3 } })) end,
      'model.patch = 3 does not divide the 16 px crops')
    os.execute("rm -rf '" .. cfg.run.dir .. "'")
  end)
end)
