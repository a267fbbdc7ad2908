-- The SSL methods as modules (SwAV, MoCo v2, SimCLR, SimSiam, BYOL, Barlow Twins, NPID,
-- DeepCluster-v2), the kNN monitor hook, feature
-- extraction and the recipe builder: shapes, the method-specific state (prototypes on
-- the sphere, queues, the momentum encoder, shuffle-BN), pre-flight errors, and a few
-- end-to-end steps of each method on synthetic data.
local H = require 'spec.helper'
local cr = require 'crescent'
local nn = cr.nn

local function tiny_trunk()
  return nn.models.resnet18 { stem = 'cifar', width = 4, in_channels = 1, num_classes = 0 }
end

local function crops(B, sizes)
  local out = {}
  for i, s in ipairs(sizes) do out[i] = cr.randn(B, 1, s, s) end
  return out
end

local function max_abs(a, b) return (a - b):abs():max():item() end

describe('ssl.swav.SwAV', function()
  -- SwAV's forward_head runs once over every crop's features; crescent once ran the head
  -- per resolution, so its BatchNorm saw the large and the small crops apart
  it('runs the trunk per resolution and the head once over all crops', function()
    cr.manual_seed(2)
    local m = cr.ssl.swav.SwAV { trunk = tiny_trunk(), feat_dim = 32, hidden_dim = 16, out_dim = 8, num_prototypes = 5 }
    m:train()
    local x = crops(3, { 16, 16, 8 })
    local emb = m:embed(x)
    assert.are.equal(1, m.head:get(1).num_batches_tracked:item())
    local feats = cr.cat({ m.trunk(cr.cat({ x[1], x[2] }, 0)), m.trunk(x[3]) }, 0)
    H.assert_close(emb, m.head(feats):normalize({ dim = 1 }), 1e-5, 1e-5)
  end)

  it('runs a multi-crop forward by resolution and gives the loss of its scores', function()
    cr.manual_seed(1)
    local m = cr.ssl.swav.SwAV { trunk = tiny_trunk(), feat_dim = 32, hidden_dim = 16, out_dim = 8, num_prototypes = 5,
                                 num_crops = 4 }
    local x = crops(6, { 16, 16, 8, 8 })
    local out = m(x)
    assert.are.equal(4, #out.scores)
    assert.are.same({ 24, 8 }, out.embedding.shape)
    assert.are.same({ 6, 5 }, out.scores[3].shape)
    -- the embedding rows lie on the unit sphere; the scores are emb . prototypes
    H.assert_close(out.embedding:pow(2):sum(1), cr.ones(24), 1e-5)
    local direct = out.embedding:narrow(0, 12, 6):mm(m.prototypes.weight:t())
    assert.is_true(max_abs(direct, out.scores[3]) < 1e-5)
    local loss = m:loss(out)
    local ref = cr.ssl.swav_loss(out.scores, { crops_for_assign = { 0, 1 } })
    assert.is_true(math.abs(loss:item() - ref:item()) < 1e-6)
    assert.are.equal(2, #out.codes)
    -- each resolution group runs as one batch: the same as running the groups by hand
    m:eval()
    local out2 = m(x)
    local g = m.head(m.trunk(cr.cat({ x[3], x[4] }, 0))):normalize({ dim = 1 })
    assert.is_true(max_abs(g, out2.embedding:narrow(0, 12, 12)) < 1e-5)
  end)

  it('keeps the prototypes on the unit sphere through its hook and freezes them', function()
    cr.manual_seed(2)
    local m = cr.ssl.swav.SwAV { trunk = tiny_trunk(), feat_dim = 32, hidden_dim = 0, out_dim = 8, num_prototypes = 5,
                                 freeze_prototypes_iterations = 3 }
    H.assert_close(m.prototypes.weight:pow(2):sum(1), cr.ones(5), 1e-5)
    cr.no_grad(function() m.prototypes.weight:mul_(3) end)
    local hooks = m:hooks()
    assert.are.equal(2, #hooks)
    hooks[1]:after_step { phase_name = 'train' }
    H.assert_close(m.prototypes.weight:pow(2):sum(1), cr.ones(5), 1e-5)
    assert.are.equal('freeze', hooks[2].name)
    assert.are.equal(3, hooks[2].iterations)
  end)

  it('uses its queue once full and from the start epoch, filling it with assigned crops', function()
    cr.manual_seed(3)
    local m = cr.ssl.swav.SwAV { trunk = tiny_trunk(), feat_dim = 32, hidden_dim = 0, out_dim = 8, num_prototypes = 5,
                                 queue_length = 8, batch_size = 4, queue_start_epoch = 1 }
    local x = crops(4, { 16, 16, 8 })
    m.epoch = 0
    m:loss(m(x))
    assert.are.equal(0, m.queues[1].filled)         -- before the start epoch: untouched
    m.epoch, m.queue_start_iteration, m.iteration = 1, 10, 9
    m:loss(m(x))
    assert.are.equal(0, m.queues[1].filled)         -- before the start iteration: untouched
    m.iteration = 10
    local out = m(x)
    m:loss(out)
    assert.are.equal(4, m.queues[1].filled)
    H.assert_close(m.queues[2]:newest_first(), out.embedding:narrow(0, 4, 4):detach(), 1e-6)
    m:loss(m(crops(4, { 16, 16, 8 })))               -- now full
    local out3 = m(crops(4, { 16, 16, 8 }))
    local with_queue = m:loss(out3)
    local plain = cr.ssl.swav_loss(out3.scores, {})
    assert.is_true(math.abs(with_queue:item() - plain:item()) > 1e-7)
  end)

  it('rejects bad configurations before any step', function()
    local t = tiny_trunk()
    H.assert_error(function() cr.ssl.swav.SwAV { trunk = t, feat_dim = 32, crops_for_assign = { 0, 6 }, num_crops = 6 } end,
      'crops_for_assign has 6, outside the 6 crops')
    H.assert_error(function() cr.ssl.swav.SwAV { trunk = t, feat_dim = 32, queue_length = 100, batch_size = 64 } end,
      'queue_length 100 is not a multiple of the batch size 64')
    H.assert_error(function() cr.ssl.swav.SwAV { trunk = t, feat_dim = 32, queue_length = 128 } end,
      'give batch_size')
    H.assert_error(function() cr.ssl.swav.SwAV { trunk = t, feat_dim = 32, prototype = 3 } end,
      "unknown option 'prototype'")
    local m = cr.ssl.swav.SwAV { trunk = t, feat_dim = 32, num_crops = 3 }
    H.assert_error(function() m(crops(2, { 8, 8 })) end, 'built for 3 crops but the batch holds 2')
    H.assert_error(function() m(cr.randn(2, 1, 8, 8)) end, 'list of at least 2 crop batches')
  end)
end)

describe('ssl.moco.MoCo', function()
  local function make(opts)
    cr.manual_seed(4)
    local o = { trunk = tiny_trunk(), key_trunk = tiny_trunk(), feat_dim = 32, hidden_dim = 16, out_dim = 8,
                queue_length = 16, batch_size = 4, momentum = 0.9 }
    for k, v in pairs(opts or {}) do o[k] = v end
    return cr.ssl.moco.MoCo(o)
  end

  it('starts the key encoder as a copy that needs no grad, and a queue of unit vectors', function()
    local m = make()
    local q, k = m:query_parameters(), m:key_parameters()
    assert.are.equal(#q, #k)
    for i = 1, #q do
      assert.are.equal(0, max_abs(q[i][2], k[i][2]))
      assert.is_false(k[i][2].requires_grad)
    end
    H.assert_close(m.queue:buffer():pow(2):sum(1), cr.ones(16), 1e-5)
    -- the optimizer sees only the query encoder
    assert.are.equal(#q, #cr.recipe.ssl.trainable(m))
  end)

  it('updates the key encoder by EMA in forward and enqueues the keys in the loss', function()
    local m = make()
    local q1 = m:query_parameters()[1][2]
    local k1 = m:key_parameters()[1][2]
    cr.no_grad(function() q1:add_(1) end)          -- the query encoder moved (a step)
    local before = k1:clone()
    local x = crops(4, { 16, 16 })
    local out = m(x)
    H.assert_close(k1, before * 0.9 + q1 * 0.1, 1e-6)
    assert.are.same({ 4, 8 }, out.q.shape)
    assert.is_true(out.q.requires_grad)
    assert.is_false(out.k.requires_grad)
    local ptr = m.queue.ptr
    local loss = m:loss(out)
    loss:backward()                                  -- the enqueue did not break the graph
    assert.are.equal((ptr + 4) % 16, m.queue.ptr)
    H.assert_close(m.queue:buffer():narrow(0, ptr, 4), out.k, 1e-6)
    assert.are.same({ 4, 17 }, out.logits.shape)
  end)

  it('puts shuffle-BN keys back in order (eval mode: the same keys as without shuffling)', function()
    local m = make { bn_splits = 2 }
    m:eval()
    local x = cr.randn(4, 1, 16, 16)
    local k2 = m:keys(x)
    m.bn_splits = 1
    local k1 = m:keys(x)
    assert.is_true(max_abs(k1, k2) < 1e-5)
  end)

  -- MoCo's BatchNorm is per GPU in both encoders (its CIFAR demo splits both on one GPU);
  -- crescent once split only the key encoder, and learned 3 points worse than PyTorch
  it('takes the BatchNorm statistics of both encoders, trunks and heads, from bn_splits groups', function()
    local m = make { bn_splits = 2, head_bn = true }
    for _, part in ipairs { m.trunk, m.head, m.key_trunk, m.key_head } do
      local n = 0
      for _, mod in ipairs(part:modules()) do
        if mod.__name:match('^BatchNorm') then
          assert.are.equal(2, mod.splits)
          n = n + 1
        end
      end
      assert.is_true(n > 0)
    end
    m:train()
    local x = cr.randn(4, 1, 16, 16)
    local whole = m.head(m.trunk(x))
    nn.split_batchnorm(m.trunk, 1)
    nn.split_batchnorm(m.head, 1)
    local halves = cr.cat({ m.head(m.trunk(x:narrow(0, 0, 2))), m.head(m.trunk(x:narrow(0, 2, 2))) }, 0)
    H.assert_close(whole, halves, 1e-5, 1e-5)
    -- MoCo v2's head has no BatchNorm unless asked
    for _, mod in ipairs(make():modules()) do assert.is_nil(mod.__name:match('^BatchNorm1d')) end
  end)

  it('follows the cosine momentum schedule through its hook', function()
    local m = make { cosine_momentum = true }
    local stored = {}
    local task = { phase_name = 'train', iteration = 50, max_iterations = 100,
                   storage = { put_scalar = function(_, k, v) stored[k] = v end } }
    m:hooks()[1]:before_step(task)
    assert.is_true(math.abs(m.momentum - cr.ssl.cosine_momentum(0.9, 0.5)) < 1e-12)
    assert.are.equal(m.momentum, stored.momentum)
  end)

  it('rejects bad configurations', function()
    local t = tiny_trunk()
    H.assert_error(function() cr.ssl.moco.MoCo { trunk = t, key_trunk = t, feat_dim = 32, batch_size = 4 } end,
      'key_trunk must be a second module')
    H.assert_error(function() make { queue_length = 10 } end, 'not a multiple of the batch 4')
    H.assert_error(function() make { bn_splits = 3 } end, 'does not divide the batch size 4')
    H.assert_error(function() make { head_bn = 1 } end, 'MoCo: head_bn must be true or false, got 1')
    H.assert_error(function() make { temperature = 0 / 0 } end, 'MoCo: temperature expects a number > 0, got nan')
    H.assert_error(function() cr.ssl.moco.MoCo(5) end, 'MoCo{trunk = a, key_trunk = b, feat_dim = 128}')
  end)
end)

describe('ssl.simclr.SimCLR', function()
  it('runs both views in one forward and gives NT-Xent of the projections', function()
    cr.manual_seed(5)
    local m = cr.ssl.simclr.SimCLR { trunk = tiny_trunk(), feat_dim = 32, hidden_dim = 16, out_dim = 8 }
    local out = m(crops(3, { 16, 16 }))
    assert.are.same({ 3, 8 }, out.z1.shape)
    local loss = m:loss(out)
    H.assert_close(loss, cr.ssl.nt_xent(out.z1, out.z2, { temperature = 0.5 }), 1e-6)
    H.assert_error(function() m({ cr.randn(3, 1, 8, 8) }) end, 'list of 2 views')
  end)

  it('rejects bad configurations, a NaN temperature included', function()
    H.assert_error(function() cr.ssl.simclr.SimCLR { trunk = tiny_trunk(), feat_dim = 32, temperature = 0 / 0 } end,
      'SimCLR: temperature expects a number > 0, got nan')
    H.assert_error(function() cr.ssl.simclr.SimCLR { trunk = 3, feat_dim = 32 } end,
      'SimCLR: trunk must be a module returning features [B, feat_dim], got number')
    H.assert_error(function() cr.ssl.simclr.SimCLR { trunk = tiny_trunk(), feat_dim = 0 } end,
      "SimCLR: 'feat_dim' must be an integer >= 1, got 0")
  end)
end)

-- -mean_b cos(p_b, z_b) in f64, from the numbers, for the cosine losses below
local function neg_cos(p, z)
  local P, Z = p:double():totable(), z:double():totable()
  local total = 0
  for b = 1, #P do
    local dot, np, nz = 0, 0, 0
    for d = 1, #P[b] do
      dot, np, nz = dot + P[b][d] * Z[b][d], np + P[b][d] ^ 2, nz + Z[b][d] ^ 2
    end
    total = total + dot / math.sqrt(np * nz)
  end
  return -total / #P
end

describe('ssl.cosine_prediction', function()
  it('is -mean cos(p, z) with z detached, and its gradient in p passes a finite-difference check', function()
    cr.manual_seed(11)
    local p, z = cr.randn(5, 7):double():requires_grad_(), cr.randn(5, 7):double():requires_grad_()
    local loss = cr.ssl.cosine_prediction(p, z)
    assert.is_true(math.abs(loss:item() - neg_cos(p, z)) < 1e-12)
    loss:backward()
    assert.is_nil(z.grad)
    H.gradcheck(function(x) return cr.ssl.cosine_prediction(x, z) end, { cr.randn(5, 7):double() })
    H.assert_error(function() cr.ssl.cosine_prediction(cr.randn(5, 7), cr.randn(4, 7)) end,
      'cosine_prediction: p is [5, 7] but z is [4, 7]; they must match')
  end)
end)

describe('ssl.simsiam.SimSiam', function()
  local function make(extra)
    local o = { trunk = tiny_trunk(), feat_dim = 32, hidden_dim = 16, out_dim = 8, pred_dim = 4, proj_layers = 2 }
    for k, v in pairs(extra or {}) do o[k] = v end
    return cr.ssl.simsiam.SimSiam(o)
  end

  it('encodes each view on its own and gives (D(p1, z2) + D(p2, z1)) / 2 with the projections detached', function()
    cr.manual_seed(12)
    local m = make()
    local views = crops(4, { 16, 16 })
    local out = m(views)
    assert.are.same({ 4, 8 }, out.p1.shape)
    H.assert_close(out.z2, m.projector(m.trunk(views[2])), 1e-5, 1e-5)   -- its own BatchNorm statistics
    local loss = m:loss(out)
    assert.is_true(math.abs(loss:item() - (neg_cos(out.p1, out.z2) + neg_cos(out.p2, out.z1)) / 2) < 1e-5)
    -- the projector: bias-free Linears, the last BatchNorm without weight and bias
    assert.is_nil(m.projector['0'].bias)
    assert.is_nil(m.projector['4'].weight)
    assert.is_not_nil(m.projector['4'].running_mean)
    assert.are.same({ 4, 8 }, m.predictor['0'].weight.shape)
  end)

  it('keeps the predictor at the peak lr while the schedule moves the rest', function()
    local m = make()
    local named = cr.recipe.ssl.trainable(m)
    local groups = m:param_groups(named)
    assert.are.equal(2, #groups)
    for _, np in ipairs(groups[2].params) do assert.truthy(np[1]:find('^predictor%.')) end
    local opt = cr.optim.SGD(groups, { lr = 0.5 })
    local binding = cr.schedule.apply { schedule = cr.schedule.cosine { from = 0.5, to = 0 }, target = opt, field = 'lr' }
    binding:update(9, 10)
    local fixed = 0
    for _, g in ipairs(opt.param_groups) do
      if g.name == 'predictor' then fixed = fixed + 1 end
      assert.are.equal(g.name == 'predictor' and 0.5 or binding.value, g.lr)
    end
    assert.is_true(fixed > 0 and binding.value < 0.05)
    -- a checkpoint keeps the flag
    local opt2 = cr.optim.SGD(m:param_groups(named), { lr = 0.5 })
    opt2:load_state_dict(opt:state_dict())
    assert.is_true(opt2.param_groups[#opt2.param_groups].fix_lr)
    assert.are.equal(1, #make({ fix_pred_lr = false }):param_groups(named))
  end)

  it('rejects bad options', function()
    H.assert_error(function() make { pred_dim = -1 } end, 'SimSiam: pred_dim expects an integer >= 0, got -1')
    H.assert_error(function() make { fix_pred_lr = 1 } end, 'SimSiam: fix_pred_lr expects a boolean, got 1')
    H.assert_error(function() make { hidden_dim = 0 } end, 'SimSiam: a projector of 2 or more layers needs hidden_dim > 0')
    H.assert_error(function() make()({ cr.randn(2, 1, 8, 8) }) end, 'list of 2 views')
  end)
end)

describe('ssl.byol.BYOL', function()
  local function make(extra)
    local o = { trunk = tiny_trunk(), target_trunk = tiny_trunk(), feat_dim = 32, hidden_dim = 16, out_dim = 8,
                momentum = 0.9 }
    for k, v in pairs(extra or {}) do o[k] = v end
    return cr.ssl.byol.BYOL(o)
  end

  it('starts the target as a frozen copy of the online network and moves it by EMA before each forward', function()
    cr.manual_seed(13)
    local m = make()
    local online, target = m:online_parameters(), m:target_parameters()
    for i, np in ipairs(target) do
      assert.is_false(np[2].requires_grad)
      assert.are.equal(0, max_abs(np[2], online[i][2]))
    end
    -- move the online weights, then a forward: target = 0.9 target + 0.1 online
    cr.no_grad(function() for _, np in ipairs(online) do np[2]:add_(cr.randn(np[2].shape)) end end)
    local want = {}
    for i, np in ipairs(target) do want[i] = np[2] * 0.9 + online[i][2] * 0.1 end
    local out = m(crops(4, { 16, 16 }))
    for i, np in ipairs(target) do H.assert_close(np[2], want[i], 1e-6, 1e-6) end
    assert.is_false(out.t1.requires_grad)
    assert.is_true(out.p1.requires_grad)
  end)

  it('gives 2 - 2 cos(p1, t2) + 2 - 2 cos(p2, t1), and raises the momentum to 1 along a cosine', function()
    cr.manual_seed(14)
    local m = make()
    local out = m(crops(4, { 16, 16 }))
    local want = 4 + 2 * (neg_cos(out.p1, out.t2) + neg_cos(out.p2, out.t1))
    assert.is_true(math.abs(m:loss(out):item() - want) < 1e-5)
    local put = {}
    local task = { phase_name = 'train', iteration = 50, max_iterations = 100,
                   storage = { put_scalar = function(_, k, v) put[k] = v end } }
    m:hooks()[1].before_step(nil, task)
    assert.is_true(math.abs(m.momentum - (1 - 0.1 * (math.cos(math.pi * 0.5) + 1) / 2)) < 1e-12)
    assert.are.equal(m.momentum, put.momentum)
  end)

  it('rejects bad options', function()
    H.assert_error(function() make { momentum = 1.5 } end, 'BYOL: momentum expects a number in [0, 1], got 1.5')
    H.assert_error(function() make { target_trunk = 3 } end, 'BYOL: target_trunk must be a second module')
    H.assert_error(function() make { hidden_dim = 0 } end, 'BYOL: the projector and predictor need hidden_dim > 0')
  end)
end)

describe('ssl.barlow_twins_loss and ssl.barlow_twins.BarlowTwins', function()
  -- the loss from the numbers, in f64: c = n1^T n2 / N, sum (1 - c_ii)^2 + lambda sum c_ij^2
  local function by_hand(n1, n2, lambda)
    local A, B = n1:double():totable(), n2:double():totable()
    local N, D, loss = #A, #A[1], 0
    for i = 1, D do
      for j = 1, D do
        local c = 0
        for b = 1, N do c = c + A[b][i] * B[b][j] end
        c = c / N
        loss = loss + (i == j and (1 - c) ^ 2 or lambda * c ^ 2)
      end
    end
    return loss
  end

  it('gives the invariance plus lambda times the redundancy term, with a gradient that passes gradcheck', function()
    cr.manual_seed(21)
    local n1, n2 = cr.randn(6, 4):double(), cr.randn(6, 4):double()
    local loss = cr.ssl.barlow_twins_loss(n1, n2, { lambda = 0.3 })
    assert.is_true(math.abs(loss:item() - by_hand(n1, n2, 0.3)) < 1e-10)
    H.gradcheck(function(a, b) return (cr.ssl.barlow_twins_loss(a, b, { lambda = 0.3 })) end, { n1, n2 })
  end)

  it('on k ranks: the global c, and k times the global-batch gradient on each rank (DDP averages it back)', function()
    cr.manual_seed(22)
    local n1, n2 = cr.randn(8, 3):double():requires_grad_(), cr.randn(8, 3):double():requires_grad_()
    local full = cr.ssl.barlow_twins_loss(n1, n2, { lambda = 0.2 })
    full:backward()
    local c_of = {}
    for r = 0, 1 do
      c_of[r] = n1:detach():narrow(0, 4 * r, 4):t():mm(n2:detach():narrow(0, 4 * r, 4)) / 8
    end
    for r = 0, 1 do
      local a = n1:detach():narrow(0, 4 * r, 4):clone():requires_grad_()
      local b = n2:detach():narrow(0, 4 * r, 4):clone():requires_grad_()
      local reduce = function(c) return c + c_of[1 - r] end   -- the other rank's share
      local loss = cr.ssl.barlow_twins_loss(a, b, { lambda = 0.2, world = 2, reduce = reduce })
      assert.is_true(math.abs(loss:item() / 2 - full:item()) < 1e-10)
      loss:backward()
      H.assert_close(a.grad, n1.grad:narrow(0, 4 * r, 4) * 2, 1e-10, 1e-10)
      H.assert_close(b.grad, n2.grad:narrow(0, 4 * r, 4) * 2, 1e-10, 1e-10)
    end
  end)

  it('normalises each view on its own without affine parameters, and rejects bad options', function()
    cr.manual_seed(23)
    local m = cr.ssl.barlow_twins.BarlowTwins { trunk = tiny_trunk(), feat_dim = 32, hidden_dim = 16, out_dim = 8,
                                                 proj_layers = 2 }
    local out = m(crops(5, { 16, 16 }))
    assert.are.same({ 5, 8 }, out.n1.shape)
    assert.is_nil(m.bn.weight)
    H.assert_close(out.n1:mean(0), cr.zeros(8), 1e-5, 1e-5)
    local loss = m:loss(out)
    assert.is_true(math.abs(loss:item() - by_hand(out.n1, out.n2, 0.0051)) < 1e-3)
    H.assert_error(function()
      cr.ssl.barlow_twins.BarlowTwins { trunk = tiny_trunk(), feat_dim = 32, lambda = -1 }
    end, 'BarlowTwins: lambda expects a number >= 0, got -1')
    H.assert_error(function() cr.ssl.barlow_twins_loss(cr.randn(4, 3), cr.randn(4, 2)) end,
      'barlow_twins: n1 is [4, 3] but n2 is [4, 2]; the two views must match')
  end)
end)

describe('ssl.npid.NPID', function()
  local function make(extra)
    local o = { trunk = tiny_trunk(), feat_dim = 32, out_dim = 4, num_samples = 10, negatives = 6,
                temperature = 0.5, momentum = 0.5 }
    for k, v in pairs(extra or {}) do o[k] = v end
    return cr.ssl.npid.NPID(o)
  end

  it('gives the softmax over the own bank entry and the drawn ones, then moves the batch rows of the bank', function()
    cr.manual_seed(31)
    local m = make()
    local out = m(crops(3, { 16 }))
    local v = out.v:detach():double():totable()
    local bank = m.bank:double():totable()
    local index = cr.tensor({ 7, 2, 9 }, { dtype = 'i64' })
    cr.manual_seed(77)
    local drawn = cr.randint(0, 10, { 3 * 6 }):totable()
    cr.manual_seed(77)
    local loss = m:loss(out, { index = index })
    -- by hand, in f64
    local function dot(a, b) local s = 0; for d = 1, #a do s = s + a[d] * b[d] end; return s end
    local want, rows = 0, { 8, 3, 10 }
    for b = 1, 3 do
      local logits = { dot(v[b], bank[rows[b]]) / 0.5 }
      for k = 1, 6 do logits[#logits + 1] = dot(v[b], bank[drawn[(b - 1) * 6 + k] + 1]) / 0.5 end
      local mx, z = -math.huge, 0
      for _, l in ipairs(logits) do mx = math.max(mx, l) end
      for _, l in ipairs(logits) do z = z + math.exp(l - mx) end
      want = want + (mx + math.log(z) - logits[1]) / 3
    end
    assert.is_true(math.abs(loss:item() - want) < 1e-4, loss:item() .. ' vs ' .. want)
    local after = m.bank:double():totable()
    for b = 1, 3 do
      local mixed, norm = {}, 0
      for d = 1, 4 do mixed[d] = 0.5 * bank[rows[b]][d] + 0.5 * v[b][d]; norm = norm + mixed[d] ^ 2 end
      for d = 1, 4 do assert.is_true(math.abs(after[rows[b]][d] - mixed[d] / math.sqrt(norm)) < 1e-5) end
    end
    for _, r in ipairs { 1, 4, 5, 6, 7, 9 } do assert.are.same(bank[r], after[r]) end
  end)

  it('saves its bank as method state and refuses one made for another data set size', function()
    local m = make()
    local es = m:extra_state()
    assert.are.same({ 10, 4 }, es.bank.memory.shape)
    local other = make()
    other:load_extra_state({ bank = { memory = es.bank.memory:clone() } })
    assert.are.equal(0, max_abs(other.bank, m.bank))
    H.assert_error(function() make({ num_samples = 12 }):load_extra_state({ bank = { memory = m.bank } }) end,
      'NPID:load_extra_state: the saved memory bank is [10, 4] but this run has [12, 4]')
  end)

  it("with bank_init = 'features' fills the bank with the network's embeddings once, before training", function()
    cr.manual_seed(47)
    local m = make({ bank_init = 'features' })
    assert.is_false(m.bank_filled)
    local ds = cr.data.synthetic { n = 10, shape = { 1, 16, 16 }, num_classes = 2 }
    m.memory_loader = cr.data.Loader(ds, { batch_size = 4, drop_last = false, views = cr.data.transforms.multicrop {
      size_crops = { 16 }, num_crops = { 1 }, crop_scales = { { 1, 1 } }, ratio = { 1, 1 } } })
    local hook = m:hooks()[1]
    hook.before_phase(nil, { phase_name = 'val', epoch = 0 })
    assert.is_false(m.bank_filled)
    hook.before_phase(nil, { phase_name = 'train', epoch = 0 })
    assert.is_true(m.bank_filled)
    -- every row is the embedding of its own sample: the same pass again gives the same rows
    local want = {}
    cr.no_grad(function()
      for batch in m.memory_loader:iter(0) do
        local v, index = m(batch.input).v, batch.index:totable()
        for b = 1, v.shape[1] do want[index[b] + 1] = v:select(0, b - 1) end
      end
    end)
    for i = 1, 10 do H.assert_close(m.bank:select(0, i - 1), want[i], 1e-6, 1e-6) end
    local bank = m.bank:clone()
    hook.before_phase(nil, { phase_name = 'train', epoch = 1 })      -- once only
    assert.are.equal(0, max_abs(m.bank, bank))
    local copy = make({ bank_init = 'features' })
    copy:load_extra_state(m:extra_state())
    assert.is_true(copy.bank_filled)
    local fresh = make({ bank_init = 'features' })
    H.assert_error(function() fresh:hooks()[1].before_phase(nil, { phase_name = 'train', epoch = 0 }) end,
      "NPID: bank_init = 'features' needs m.memory_loader")
    H.assert_error(function() make { bank_init = 'zeros' } end, "NPID: bank_init expects one of noise|features, got 'zeros'")
    assert.is_true(make().bank_filled)   -- noise: the paper's start, nothing to fill
  end)

  it('rejects bad options and input', function()
    H.assert_error(function() make { momentum = 1 } end, 'NPID: momentum expects a number in [0, 0.999999], got 1')
    H.assert_error(function() make { num_samples = 0 } end, "NPID: 'num_samples' must be an integer >= 1, got 0")
    local m = make()
    H.assert_error(function() m(crops(2, { 16, 16 })) end, 'NPID: the input must be a list of 1 view')
    local out = m(crops(2, { 16 }))
    H.assert_error(function() m:loss(out, {}) end, 'NPID: the loss needs batch.index')
    H.assert_error(function() m:loss(out, { index = cr.tensor({ 1, 10 }, { dtype = 'i64' }) }) end,
      'NPID: a batch index (10) is past the memory bank (10 samples)')
  end)
end)

describe('ssl.deepcluster_v2.DeepClusterV2', function()
  local function make(extra)
    local o = { trunk = tiny_trunk(), feat_dim = 32, hidden_dim = 16, out_dim = 4, num_prototypes = { 3, 2 },
                temperature = 0.5, crops_for_assign = { 0, 1 }, num_crops = 3, num_samples = 12, kmeans_iterations = 4 }
    for k, v in pairs(extra or {}) do o[k] = v end
    return cr.ssl.deepcluster_v2.DeepClusterV2(o)
  end

  it('k-means matches a plain-Lua k-means from the same start, and the heads take its centroids and clusters', function()
    cr.manual_seed(41)
    local m = make()
    local x = cr.randn(12, 4):normalize({ dim = 1 })
    m.memory[1]:copy_(x)
    m.memory[2]:copy_(cr.randn(12, 4):normalize({ dim = 1 }))
    cr.manual_seed(5)
    local start = cr.randperm(12):narrow(0, 0, 3):totable()
    cr.manual_seed(5)
    m:cluster(0)
    -- by hand: the same start, 4 rounds of assign / mean / normalise, a final assignment
    local X = x:double():totable()
    local C = {}
    for j = 1, 3 do C[j] = { unpack(X[start[j] + 1]) } end
    local assign
    for it = 0, 4 do
      assign = {}
      for i = 1, 12 do
        local best, arg = -math.huge, nil
        for j = 1, 3 do
          local d = 0
          for k = 1, 4 do d = d + X[i][k] * C[j][k] end
          if d > best then best, arg = d, j end
        end
        assign[i] = arg - 1
      end
      if it == 4 then break end
      for j = 1, 3 do
        local sum, n = { 0, 0, 0, 0 }, 0
        for i = 1, 12 do
          if assign[i] == j - 1 then n = n + 1; for k = 1, 4 do sum[k] = sum[k] + X[i][k] end end
        end
        if n > 0 then
          local norm = 0
          for k = 1, 4 do sum[k] = sum[k] / n; norm = norm + sum[k] ^ 2 end
          for k = 1, 4 do C[j][k] = sum[k] / math.sqrt(norm) end
        end
      end
    end
    assert.are.same(assign, m.assignments:select(0, 0):totable())
    H.assert_close(m.prototypes:get(0).weight, cr.tensor(C), 1e-5, 1e-5)
    assert.are.equal(0, m.clustered_epoch)
    assert.are.same({ 2, 12 }, m.assignments.shape)
  end)

  it('classifies every crop into its sample\'s clusters, averaged over heads, and remembers the assigned crops', function()
    cr.manual_seed(42)
    local m = make()
    m.assignments:copy_(cr.randint(0, 2, { 2, 12 }))
    local out = m(crops(2, { 16, 16, 8 }))
    local index = cr.tensor({ 4, 9 }, { dtype = 'i64' })
    local loss = m:loss(out, { index = index })
    local emb = out.embedding:detach()
    local want = 0
    for h = 1, 2 do
      local scores = (m.prototypes:get(h - 1)(emb) / 0.5):double():totable()
      local tgt = m.assignments:select(0, h - 1):totable()
      local part = 0
      for r = 1, 6 do
        local row, mx, z = scores[r], -math.huge, 0
        for _, v in ipairs(row) do mx = math.max(mx, v) end
        for _, v in ipairs(row) do z = z + math.exp(v - mx) end
        local sample = ({ 4, 9 })[(r - 1) % 2 + 1] + 1
        part = part + (mx + math.log(z) - row[tgt[sample] + 1]) / 6
      end
      want = want + part / 2
    end
    assert.is_true(math.abs(loss:item() - want) < 1e-5, loss:item() .. ' vs ' .. want)
    H.assert_close(m.memory[1]:index_select(0, index), emb:narrow(0, 0, 2), 1e-6, 1e-6)
    H.assert_close(m.memory[2]:index_select(0, index), emb:narrow(0, 2, 2), 1e-6, 1e-6)
    assert.are.equal(0, m.memory[1]:select(0, 0):abs():sum():item())   -- untouched rows
  end)

  it('fills the memory once, clusters at each new epoch only, and keeps its state through a save', function()
    cr.manual_seed(43)
    local m = make({ num_crops = 2, crops_for_assign = { 0 } })
    local ds = cr.data.synthetic { n = 12, shape = { 1, 16, 16 }, num_classes = 2 }
    m.memory_loader = cr.data.Loader(ds, { batch_size = 5, drop_last = false, views = cr.data.transforms.multicrop {
      size_crops = { 16 }, num_crops = { 2 }, crop_scales = { { 0.5, 1 } } } })
    local hook = m:hooks()[1]
    hook.before_phase(nil, { phase_name = 'train', epoch = 0 })
    assert.is_true(m.memory_filled)
    assert.is_true(m.memory[1]:abs():sum(1):min():item() > 0)   -- every sample written
    local before = m.assignments:clone()
    hook.before_phase(nil, { phase_name = 'train', epoch = 0 })     -- a resumed epoch: no new clusters
    assert.are.equal(0, (m.assignments - before):abs():max():item())
    local copy = make({ num_crops = 2, crops_for_assign = { 0 } })
    copy:load_extra_state(m:extra_state())
    assert.is_true(copy.memory_filled)
    assert.are.equal(0, copy.clustered_epoch)
    assert.are.equal(0, (copy.memory[1] - m.memory[1]):abs():max():item())
    H.assert_error(function() make({ num_samples = 13 }):load_extra_state(m:extra_state()) end,
      'DeepClusterV2:load_extra_state: the saved assignments are [2, 12] but this run has [2, 13]')
  end)

  it('rejects bad options', function()
    H.assert_error(function() make { num_prototypes = { 3, 20 } } end,
      'DeepClusterV2: head 2 asks for 20 clusters but the data set has 12 samples')
    H.assert_error(function() make { crops_for_assign = { 3 } } end,
      'DeepClusterV2: crops_for_assign names crop 3 but there are 3 crops')
    H.assert_error(function() make()({ cr.randn(2, 1, 16, 16) }) end, 'the input must be a list of 3 crop batches')
    local m = make()
    H.assert_error(function() m.memory_loader = nil; m:hooks()[1].before_phase(nil, { phase_name = 'train', epoch = 0 }) end,
      'DeepClusterV2: the memory is empty')
  end)
end)

describe('ssl.extract_features and hooks.knn', function()
  it('extracts in order, in eval mode, and restores the mode', function()
    cr.manual_seed(6)
    local ds = cr.data.synthetic { n = 37, shape = { 1, 12, 12 }, num_classes = 3 }
    local trunk = tiny_trunk()
    trunk:train()
    local f, y = cr.ssl.extract_features(trunk, ds, { batch_size = 10 })
    assert.are.same({ 37, 32 }, f.shape)
    assert.are.same(ds.labels:totable(), y:totable())
    assert.is_true(trunk.training)
    trunk:eval()
    local batch = cr.data.Loader(ds, { batch_size = 37, shuffle = false, drop_last = false }):iter(0)()
    assert.is_true(max_abs(f, cr.no_grad(function() return trunk(batch.input) end)) < 1e-5)
    H.assert_error(function() cr.ssl.extract_features(trunk, {}) end, 'must be a data set')
  end)

  it('reports kNN figures at the end (and at init when asked)', function()
    cr.manual_seed(7)
    local ds = cr.data.synthetic { n = 60, shape = { 1, 12, 12 }, num_classes = 3 }
    local trunk = tiny_trunk()
    local lines = {}
    local out = { write = function(_, s) lines[#lines + 1] = s end, flush = function() end }
    local h = cr.hooks.knn { train_set = ds, test_set = ds, k = 5, at_start = true, model = trunk, out = out,
                             forward = function(x) return trunk(x) end }
    local task = { iteration = 0, epoch = 0, metrics = {}, storage = { put_scalar = function() end } }
    h:before_train(task)
    assert.is_number(task.metrics.knn_top1_init)
    task.iteration = 5
    h:after_train(task)
    assert.is_true(task.metrics.knn_top1 > 34)        -- its own train set, k = 5: well above chance
    assert.is_truthy(table.concat(lines):find('knn final: top1', 1, true))
    -- a finished run started again (its checkpoint holds the hook's state and the
    -- metrics): the final figures stand, measured and logged once
    local again = cr.hooks.knn { train_set = ds, test_set = ds, k = 5, model = trunk, out = out,
                                 forward = function() error('measured twice') end }
    again:load_state_dict(h:state_dict())
    local logged = 0
    local resumed = { iteration = 5, epoch = 1, metrics = { knn_top1 = task.metrics.knn_top1, knn_top5 = 100 },
                      storage = { put_scalar = function() logged = logged + 1 end } }
    again:before_train(resumed)
    again:after_train(resumed)
    assert.are.equal(0, logged)
    assert.is_truthy(lines[#lines]:find(string.format('knn final: top1 %.2f%%  top5 100.00%%  (measured when the run ' ..
      'ended, at iteration 5)', task.metrics.knn_top1), 1, true), lines[#lines])
    resumed.iteration = 6 -- it trained on: measured again
    H.assert_error(function() again:after_train(resumed) end, 'measured twice')
    H.assert_error(function() cr.hooks.knn { train_set = ds } end, 'test_set must be a data set')
  end)

  it('counts the feature pass on the live line of a terminal, then prints its line apart', function()
    local ds = cr.data.synthetic { n = 1200, shape = { 1, 12, 12 }, num_classes = 2 }
    local test = cr.data.synthetic { n = 300, shape = { 1, 12, 12 }, num_classes = 2, seed = 5 }
    local out = H.sink()
    local h = cr.hooks.knn { train_set = ds, test_set = test, k = 3, model = tiny_trunk(), out = out, tty = true,
                             batch_size = 500 }
    h:measure({ metrics = {} }, 'final')
    assert.is_truthy(out.text:find('\rknn final: features 1500/1500', 1, true), out.text)
    assert.is_truthy(out.text:find('\nknn final: top1', 1, true), out.text)
    local plain = H.sink()
    cr.hooks.knn { train_set = ds, test_set = test, k = 3, model = tiny_trunk(), out = plain, tty = false }
      :measure({ metrics = {} }, 'final')
    assert.is_nil(plain.text:find('features', 1, true))
  end)

  it('measures at the end of every N-th epoch, but not after a phase a signal or stop request ended', function()
    local ds = cr.data.synthetic { n = 20, shape = { 1, 12, 12 }, num_classes = 2 }
    local h = cr.hooks.knn { train_set = ds, test_set = ds, k = 3, every = 1, model = tiny_trunk(),
                             out = { write = function() end, flush = function() end } }
    local measured = 0
    h.measure = function() measured = measured + 1; return 50, 100 end
    local task = { phase_name = 'train', iteration = 4, epoch = 0, epochs = 3, metrics = {},
                   storage = { put_scalar = function() end } }
    h:after_phase(task)
    assert.are.equal(1, measured)
    -- preempted mid-epoch (a run killed here measured the whole train set before its
    -- checkpoint, past a scheduler's grace period)
    task.signal, task.stop_requested = 'SIGTERM', true
    h:after_phase(task)
    task.signal = nil
    h:after_phase(task)
    assert.are.equal(1, measured)
  end)
end)

describe('ssl recipes', function()
  local function config(method, extra)
    local over = {
      data = { name = 'synthetic', size = 16, limit = 64, batch_size = 16 },
      train = { epochs = 1, threads = 1, log_every = 1 }, model = { width = 4, hidden_dim = 16, out_dim = 8 },
      knn = { k = 5 }, checkpoint = { save = false }, crops = { size = { 16, 8 }, num = { 2, 2 } },
      run = { dir = os.tmpname() .. '.d' },
    }
    if method ~= 'swav' and method ~= 'deepcluster_v2' and method ~= 'dino' then
      over.crops = { size = { 16 }, num = { 2 }, min_scale = { 0.2 }, max_scale = { 1 } }
    end
    if method == 'moco' then over.moco = { queue_length = 64 } end
    if method == 'deepcluster_v2' then over.deepcluster_v2 = { num_prototypes = { 5, 5 } } end
    if method == 'dino' then over.dino = { out_dim = 16, hidden_dim = 16, bottleneck_dim = 8, freeze_last_layer = 0 } end
    if method == 'npid' then over.crops.num, over.npid = { 1 }, { bank_init = 'features' } end
    return cr.config.check(cr.config.merge(over, extra or {}), cr.recipe.ssl.schema(method))
  end

  for _, method in ipairs(cr.ssl.METHODS) do
    it(method .. ' trains a few steps and reports kNN', function()
      local task = cr.recipe.ssl.task(method, config(method))
      task:add_hook { name = 'stop', after_step = function(_, t) if t.iteration >= 2 then t:request_stop('spec') end end }
      cr.train(task)
      assert.are.equal(2, task.iteration)
      assert.is_number(task.metrics.knn_top1)
      assert.is_true(task.storage:history('loss'):latest() == task.storage:history('loss'):latest()) -- not NaN
      local f = io.open(task.config.run.dir .. '/' .. method .. '/metrics.jsonl', 'r')
      assert.is_truthy(f and f:read('*a'):find('"loss"', 1, true))
      if f then f:close() end
      os.execute("rm -rf '" .. task.config.run.dir .. "'")
    end)
  end

  -- SyncBatchNorm shares the statistics that MoCo's shuffle-BN keeps apart
  it('keeps MoCo on per-rank BatchNorm (no SyncBN) with split groups, and a head without BatchNorm', function()
    local cfg = cr.config.load('recipes/moco.lua', {})
    assert.is_false(cfg.dist.sync_bn)
    assert.are.equal(8, cfg.moco.bn_splits)
    assert.is_false(cfg.model.head_bn)
    assert.is_true(cr.config.load('recipes/swav.lua', {}).dist.sync_bn)
  end)

  it('runs the kNN on a part held out of the training set with data.val_split', function()
    local task = cr.recipe.ssl.task('simclr', config('simclr', { data = { val_split = 0.25 } }))
    assert.are.equal(48, #task.train_set)
    assert.are.equal(16, #task.test_set)
    assert.are.equal('val', task.eval_name)
    assert.is_truthy(cr.recipe.ssl.banner(task):find('48 train, 16 val', 1, true))
    H.assert_error(function() cr.recipe.ssl.task('simclr', config('simclr', { data = { val_split = 64 } })) end,
      'data.val_split = 64 holds out 64 of the 64 training samples')
    os.execute("rm -rf '" .. task.config.run.dir .. "'")
  end)

  it('rejects crops that do not fit, crops_for_assign outside the crops and a bad queue length', function()
    H.assert_error(function() cr.recipe.ssl.task('swav', config('swav', { crops = { size = { 200, 8 } } })) end,
      'crops.size[1] = 200 does not fit the 16x16 images')
    H.assert_error(function() cr.recipe.ssl.task('swav', config('swav', { swav = { crops_for_assign = { 0, 4 } } })) end,
      'crops_for_assign')
    H.assert_error(function() cr.recipe.ssl.task('swav', config('swav', { crops = { num = { 2 } } })) end,
      'crops.num must list 2 values')
    H.assert_error(function() cr.recipe.ssl.task('swav', config('swav', { swav = { queue_length = 40 } })) end,
      'queue_length 40 is not a multiple of the batch size 16')
    H.assert_error(function() cr.recipe.ssl.task('moco', config('moco', { moco = { queue_length = 40 } })) end,
      'not a multiple of the batch 16')
    H.assert_error(function() cr.recipe.ssl.task('moco', config('moco', { crops = { num = { 3 } } })) end,
      'MoCo takes 2 views')
  end)

  it('takes a fraction for augment.solarize, a probability whose default is 0', function()
    local cfg = cr.config.parse({ 'augment.solarize=0.2' }, cr.recipe.ssl.schema('swav'))
    assert.are.equal(0.2, cfg.augment.solarize)
  end)
end)

describe('frozen trunks from a method checkpoint', function()
  it('loads the trunk out of a saved SwAV with select_prefix, and names a bad prefix', function()
    cr.manual_seed(8)
    local m = cr.ssl.swav.SwAV { trunk = tiny_trunk(), feat_dim = 32, hidden_dim = 0, out_dim = 8, num_prototypes = 5 }
    local path = os.tmpname()
    cr.save(path, m)
    local trunk = tiny_trunk()
    local report = cr.io.load_into(trunk, path, { select_prefix = 'trunk.' })
    assert.are.equal(#trunk:named_parameters() + #trunk:named_buffers(), report.loaded)
    m:eval()
    trunk:eval()
    local x = cr.randn(2, 1, 12, 12)
    assert.is_true(max_abs(m:features(x), trunk(x)) == 0)
    H.assert_error(function() cr.io.load_into(trunk, path, { select_prefix = 'backbone.' }) end,
      "starts with select_prefix 'backbone.'")
    os.remove(path)
  end)

  it("builds the trunk a checkpoint's config describes (linear_eval, extract), refusing a contradiction", function()
    cr.manual_seed(9)
    local train_set = cr.data.synthetic { n = 8, shape = { 1, 16, 16 }, num_classes = 2 }
    local saved = { model = { arch = 'resnet18', width = 4, stem = 'cifar' } }
    local task = { config = saved, model = cr.nn.models.resnet18 { stem = 'cifar', width = 4, in_channels = 1,
                                                                  num_classes = 0 } }
    local m = cr.ssl.simclr.SimCLR { trunk = task.model, feat_dim = 32, hidden_dim = 8, out_dim = 4 }
    task.model = m
    local path = os.tmpname()
    -- a checkpoint as the recipes write it: the method's weights and the run's config
    cr.save(path, m, { format = 'crescent.checkpoint', config = cr.config.dump(saved) })
    assert.are.same(saved, require('crescent.engine.checkpoint').stored_config(path))
    local cfg = cr.config.merge(cr.recipe.ssl.frozen_schema().defaults, { model = { init = path } })
    local _, trunk = cr.recipe.ssl.frozen_trunk(cfg, train_set)
    assert.are.same({ 'resnet18', 4, 'cifar' }, { cfg.model.arch, cfg.model.width, cfg.model.stem })
    assert.is_true(max_abs(trunk.conv1.weight, m.trunk.conv1.weight) == 0)
    local wrong = cr.config.merge(cr.recipe.ssl.frozen_schema().defaults, { model = { init = path, width = 8 } })
    H.assert_error(function() cr.recipe.ssl.frozen_trunk(wrong, train_set) end,
      "model.width=8, but the trunk of model.init '" .. path .. "' has width = 4 (its config)")
    os.remove(path)
  end)
end)
