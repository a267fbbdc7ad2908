-- crescent.ssl.dino — DINO (Caron et al. 2021, self-distillation with no labels) as a
-- module: a student (trunk and DINO head) is trained to match, on every crop, the sharpened
-- and centred output of a teacher (trunk and head, an EMA of the student) on the global
-- crops. The facts follow the paper and the official code:
--   head     mlp (Linear, GELU, ..., Linear to a bottleneck; names mlp.0, mlp.2, mlp.4),
--            L2 normalisation, then last_layer: a weight-normalised Linear without bias
--            (weight_g [K, 1], weight_v [K, bottleneck]), its norm fixed at 1 when
--            norm_last_layer (weight_g takes no gradient)
--   loss     for teacher crop t (global) and student crop s (any) with s ~= t:
--            mean over the batch of -sum softmax((T_t - center) / tau_t) * log_softmax(S_s / tau_s),
--            averaged over the pairs; tau_t warms up linearly from warmup_teacher_temp to
--            teacher_temp over warmup_teacher_temp_epochs epochs
--   center   after each loss: center = m center + (1 - m) mean of the teacher's outputs
--            over the global batch (all ranks), m = center_momentum
--   teacher  EMA of the student's parameters at the start of each forward, momentum on
--            a cosine from `momentum` to 1 over training (as BYOL's); built without
--            stochastic depth (its DropPath layers off), as the official code builds it
--   features the teacher's trunk, as the official k-NN and linear evaluations read it
--            (`model.init_prefix=teacher_trunk.` loads it in linear_eval and extract)
--   step     each parameter's gradient clipped to norm clip_grad on its own, and the
--            last layer's gradients dropped during the first freeze_last_layer epochs
--
--   local m = cr.ssl.dino.DINO{trunk = vit, teacher_trunk = vit_copy, feat_dim = 192, out_dim = 4096}
--   local loss = m:loss(m(crops))      -- crops: the global crops first, then the local ones
--   for _, h in ipairs(m:hooks()) do task:add_hook(h) end
-- Parameter names: trunk.*, head.*, teacher_trunk.*, teacher_head.*; buffer: center.
local checks = require 'crescent.checks'
local cr = require 'crescent'
local util = require 'crescent.util'
local nn = cr.nn
local method_parts = require 'crescent.ssl.method_parts'
local momentum = require 'crescent.ssl.momentum'

local M = {}

local function fail(msg) error(msg, util.user_level()) end
local function int(name, v, lo) return checks.int('DINO', name, v, lo) end

-- ---- the head -------------------------------------------------------------------------
-- nn.Linear without bias whose weight is g * v / ||v|| per output row (weight_norm, dim 0).
local WeightNormLinear = nn.Module:extend('WeightNormLinear')
function WeightNormLinear:init(in_features, out_features)
  self.in_features, self.out_features = in_features, out_features
  local v = nn.Linear(in_features, out_features, { bias = false }).weight
  self:register_parameter('weight_g', cr.ones({ out_features, 1 }))
  self:register_parameter('weight_v', v)
end
function WeightNormLinear:weight()
  local v = self.weight_v
  return v * (self.weight_g / (v * v):sum(1, true):sqrt())
end
function WeightNormLinear:forward(x) return cr.linear(x, self:weight()) end
function WeightNormLinear:extra_repr()
  return string.format('in_features=%d, out_features=%d', self.in_features, self.out_features)
end
M.WeightNormLinear = WeightNormLinear

-- M.DINOHead(in_dim, out_dim, {hidden_dim = 2048, bottleneck_dim = 256, nlayers = 3,
-- use_bn = false, norm_last_layer = true})
-- The head's options (the first of the dino section's, with the official defaults).
local HEAD = cr.config.options('dino', {
  { 'hidden_dim', 'integer', 2048, "the head MLP's hidden width", min = 1 },
  { 'bottleneck_dim', 'integer', 256, "the head's bottleneck before the last layer", min = 1 },
  { 'nlayers', 'integer', 3, "the head MLP's Linear layers", min = 1 },
  { 'use_bn', 'boolean', false, "BatchNorm1d in the head MLP (the paper's ResNet setting)" },
  { 'norm_last_layer', 'boolean', true, "fix the last layer's weight norm at 1" },
})

local DINOHead = nn.Module:extend('DINOHead')
M.DINOHead = DINOHead
function DINOHead:init(in_dim, out_dim, given)
  local o = cr.config.take(HEAD, 'DINOHead', given)
  local hidden, bottleneck, nlayers = o.hidden_dim, o.bottleneck_dim, o.nlayers
  local layers = {}
  if nlayers == 1 then
    layers[1] = nn.Linear(in_dim, bottleneck)
  else
    local from = in_dim
    for _ = 1, nlayers - 1 do
      layers[#layers + 1] = nn.Linear(from, hidden)
      if o.use_bn then layers[#layers + 1] = nn.BatchNorm1d(hidden) end
      layers[#layers + 1] = nn.GELU()
      from = hidden
    end
    layers[#layers + 1] = nn.Linear(hidden, bottleneck)
  end
  self.mlp = nn.Sequential(layers)
  self.mlp:apply(function(m) if m.__name == 'Linear' then nn.init.vit_linear_(m) end end)
  self.last_layer = WeightNormLinear(bottleneck, out_dim)
  self.norm_last_layer = o.norm_last_layer
  if self.norm_last_layer then self.last_layer.weight_g.requires_grad = false end
end
function DINOHead:forward(x)
  return self.last_layer(self.mlp(x):normalize({ dim = 1 }))
end

-- ---- the method -----------------------------------------------------------------------
-- The dino section of recipes/dino.lua, the options of DINO{} by the same names, with the
-- official defaults (the recipe sets its own): the head's, then the method's.
M.options = {}
for _, list in ipairs { HEAD, cr.config.options('dino', {
  { 'out_dim', 'integer', 65536, "the head's output size K", min = 2 },
  { 'momentum', 'number', 0.996, "the teacher's EMA momentum (at the start)", min = 0, max = 1 },
  { 'cosine_momentum', 'boolean', true, 'raise the momentum to 1 along a cosine over training' },
  { 'student_temp', 'number', 0.1, "the student's softmax temperature", above = 0 },
  { 'teacher_temp', 'number', 0.04, "the teacher's temperature after the warm-up", above = 0 },
  { 'warmup_teacher_temp', 'number', 0.04, "the teacher's temperature at the start", above = 0 },
  { 'warmup_teacher_temp_epochs', 'integer', 0, 'epochs of teacher temperature warm-up', min = 0 },
  { 'center_momentum', 'number', 0.9, "the center's EMA momentum", min = 0, max = 1 },
  { 'freeze_last_layer', 'integer', 1, 'epochs during which the last layer does not learn', min = 0 },
  { 'clip_grad', 'number', 3, "clip each parameter's gradient norm to this (0: off)", min = 0 },
}) } do
  for _, o in ipairs(list) do M.options[#M.options + 1] = o end
end

-- What DINO{} takes beside its options: the two trunks, their feature size, the number of
-- global crops (the teacher's).
local WIRING = { trunk = true, teacher_trunk = true, feat_dim = true, global_crops = true }

local DINO = nn.Module:extend('DINO')
M.DINO = DINO

function DINO:init(given)
  if type(given) ~= 'table' then
    fail('DINO: give an options table, e.g. DINO{trunk = a, teacher_trunk = b, feat_dim = 192}')
  end
  local o = cr.config.take(M.options, 'DINO', given, WIRING)
  if not nn.is_module(o.trunk) then fail('DINO: trunk must be a module returning features [B, feat_dim]') end
  if not nn.is_module(o.teacher_trunk) or o.teacher_trunk == o.trunk then
    fail('DINO: teacher_trunk must be a second module of the same architecture as trunk (build the model twice)')
  end
  local feat, K = int('feat_dim', o.feat_dim, 1), o.out_dim
  self.base_momentum, self.momentum, self.cosine_momentum = o.momentum, o.momentum, o.cosine_momentum
  self.student_temp = o.student_temp
  self.teacher_temp = o.teacher_temp
  self.warmup_teacher_temp = o.warmup_teacher_temp
  self.warmup_teacher_temp_epochs = o.warmup_teacher_temp_epochs
  self.current_teacher_temp = self:teacher_temp_at(0)
  self.center_momentum = o.center_momentum
  self.global_crops = int('global_crops', o.global_crops or 2, 1)
  self.freeze_last_layer = o.freeze_last_layer
  self.clip_grad = o.clip_grad
  local head_opts = { hidden_dim = o.hidden_dim, bottleneck_dim = o.bottleneck_dim, nlayers = o.nlayers,
                      use_bn = o.use_bn, norm_last_layer = o.norm_last_layer }
  self.trunk, self.head = o.trunk, DINOHead(feat, K, head_opts)
  self.teacher_trunk, self.teacher_head = o.teacher_trunk, DINOHead(feat, K, head_opts)
  local student, teacher = self:student_parameters(), self:teacher_parameters()
  if #student ~= #teacher then
    fail('DINO: trunk and teacher_trunk differ in their parameters; build both with the same constructor')
  end
  momentum.copy_tensors(teacher, student)
  for _, np in ipairs(teacher) do np[2].requires_grad = false end
  self.teacher_trunk:apply(function(mod) if mod.__name == 'DropPath' then mod.p = 0 end end)
  self:register_buffer('center', cr.zeros({ 1, K }))
end

-- The student's trunk and head and the teacher's, as {name, tensor} pairs in one order.
function DINO:student_parameters() return momentum.named_parameters_of(self.trunk, self.head) end
function DINO:teacher_parameters() return momentum.named_parameters_of(self.teacher_trunk, self.teacher_head) end

function DINO:features(x) return self.teacher_trunk(x) end
function DINO:feature_trunk() return self.teacher_trunk end

-- The teacher temperature of an epoch (0-based): linear warm-up, then constant.
function DINO:teacher_temp_at(epoch)
  local n = self.warmup_teacher_temp_epochs
  if epoch >= n then return self.teacher_temp end
  if n == 1 then return self.warmup_teacher_temp end
  return self.warmup_teacher_temp + (self.teacher_temp - self.warmup_teacher_temp) * epoch / (n - 1)
end

-- The outputs [n B, K] of a network on crops, one trunk forward per run of same-sized crops.
local function outputs(trunk, head, crops, first, last)
  local parts, i = {}, first
  while i <= last do
    local j = i
    while j < last and crops[j + 1].shape[3] == crops[i].shape[3] and crops[j + 1].shape[4] == crops[i].shape[4] do
      j = j + 1
    end
    local group = {}
    for v = i, j do group[#group + 1] = crops[v] end
    parts[#parts + 1] = trunk(#group == 1 and group[1] or cr.cat(group, 0))
    i = j + 1
  end
  return head(#parts == 1 and parts[1] or cr.cat(parts, 0))
end

-- forward(crops) -> {student = [V B, K] (with graph), teacher = [G B, K], batch = B}
function DINO:forward(crops)
  local G = self.global_crops
  if type(crops) ~= 'table' or cr.is_tensor(crops) or #crops < G or #crops < 2 then
    fail(string.format('DINO: the input must be a list of at least %d crops of the same batch, the %d global ' ..
      'crops first (a multi-crop loader gives it)', math.max(G, 2), G))
  end
  momentum.ema_update(self:teacher_parameters(), self:student_parameters(), self.momentum)
  local out = { batch = crops[1].shape[1] }
  out.student = outputs(self.trunk, self.head, crops, 1, #crops)
  cr.no_grad(function() out.teacher = outputs(self.teacher_trunk, self.teacher_head, crops, 1, G) end)
  return out
end

-- The DINO loss of forward's output; updates the center from the teacher's outputs.
function DINO:loss(out)
  local B, G = out.batch, self.global_crops
  local V = out.student.shape[1] / B
  local log_p = (out.student / self.student_temp):log_softmax(1)
  local teacher = out.teacher:detach()
  local q = ((teacher - self.center) / self.current_teacher_temp):softmax(1)
  local total, terms = nil, 0
  for t = 0, G - 1 do
    local qt = q:narrow(0, t * B, B)
    for s = 0, V - 1 do
      if s ~= t then
        local term = (qt * log_p:narrow(0, s * B, B)):sum(1):mean() * -1
        total = total and total + term or term
        terms = terms + 1
      end
    end
  end
  self:update_center(teacher)
  return total / terms
end

-- center = m center + (1 - m) mean of the teacher outputs [n, K] over every rank's rows.
function DINO:update_center(teacher)
  cr.no_grad(function()
    local sum = teacher:sum(0, true)
    local n = teacher.shape[1]
    local dist = cr.dist
    if dist.is_distributed() then
      sum = dist.all_reduce(sum:clone(), 'sum')
      n = n * dist.world_size()
    end
    local m = self.center_momentum
    self.center:copy_(self.center * m + sum * ((1 - m) / n))
  end)
end

-- Optimizer groups: no weight decay on biases, norm weights, the position embedding and
-- the class token (the parameters with one dim, or named pos_embed / cls_token).
function DINO.param_groups(_, named)
  local decay, plain = {}, {}
  for _, np in ipairs(named) do
    local name = np[1]
    local list = (np[2].ndim <= 1 or name:find('pos_embed', 1, true) or name:find('cls_token', 1, true)) and plain or decay
    list[#list + 1] = np
  end
  local groups = { { params = decay } }
  if #plain > 0 then groups[2] = { params = plain, weight_decay = 0, name = 'no_decay' } end
  return groups
end

-- The hooks: the teacher's momentum schedule and temperature, then, between backward and
-- the optimizer step, each gradient clipped on its own and the last layer's dropped while
-- frozen.
function DINO:hooks()
  local method = self
  local temp = { name = 'dino_teacher_temp', priority = 45,
    before_step = function(_, task)
      if task.phase_name ~= 'train' then return end
      method.current_teacher_temp = method:teacher_temp_at(task.epoch)
      task.storage:put_scalar('teacher_temp', method.current_teacher_temp, { smoothing_hint = false })
    end }
  local grads = { name = 'dino_grads', priority = 40,
    after_backward = function(_, task)
      if task.phase_name ~= 'train' then return end
      if method.clip_grad > 0 then
        for _, np in ipairs(method:student_parameters()) do
          if np[2].grad then cr.optim.clip_grad_norm({ np[2] }, method.clip_grad) end
        end
      end
      if task.epoch < method.freeze_last_layer then
        for _, np in ipairs(method.head.last_layer:named_parameters()) do np[2].grad = nil end
      end
    end }
  return { momentum.schedule_hook('dino', self), temp, grads }
end

-- The center is a buffer (checkpointed with the parameters); nothing else to save.
method_parts.stateless(DINO, 'DINO')

function DINO:extra_repr()
  return string.format('out_dim=%d, momentum=%g%s, teacher_temp=%g', self.center.shape[2], self.base_momentum,
    self.cosine_momentum and ' (cosine to 1)' or '', self.teacher_temp)
end

-- ---- recipes ------------------------------------------------------------------------
-- The recipe's (chosen on a held-out split of Fashion-MNIST for a 20-minute run:
-- docs/results/methods.md): a smaller K, a faster teacher and no frozen last layer than
-- the paper's ImageNet settings (65536, 0.996, one epoch), which learn too slowly here.
function M.build(cfg, parts)
  local total = 0
  for _, n in ipairs(cfg.crops.num) do total = total + n end
  if total < 2 or cfg.crops.num[1] < 1 then -- the loss pairs a teacher crop with another student crop
    error(string.format('dino: DINO needs global crops (crops.num[1] = %d) and two crops at least; e.g. ' ..
      "'crops.num={2,6}', or 'crops.num=2' for the global crops alone", cfg.crops.num[1]), 0)
  end
  local o = { trunk = parts.trunk(), teacher_trunk = parts.trunk(), feat_dim = parts.feat_dim,
              global_crops = cfg.crops.num[1] }
  for k, v in pairs(cfg.dino) do o[k] = v end
  return DINO(o)
end

return M
