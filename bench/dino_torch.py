"""dino_torch.py — an independent PyTorch DINO on Fashion-MNIST, the twin of crescent's
recipes/dino.lua. Written from the DINO paper (Caron et al. 2021) and the official code
(facebookresearch/dino: main_dino.py, utils.py, vision_transformer.py), not from crescent,
on timm's VisionTransformer:

- trunk: timm's vit_{tiny,small,base} at the global crop size with model.patch patches,
  one input channel, no classifier, drop_path_rate model.drop_path for the student and none
  for the teacher, dynamic_img_size so the local crops get a bicubically resampled
  position embedding;
- head: main_dino's DINOHead (Linear, GELU, ..., Linear to the bottleneck, trunc_normal
  0.02 init; L2 normalisation; weight_norm(Linear(bottleneck, K, bias=False)) with
  weight_g filled with 1 and frozen when norm_last_layer);
- MultiCropWrapper: one trunk forward per run of same-sized crops, the head over all;
- DINOLoss: the teacher's outputs centred and sharpened by a temperature warmed up per
  epoch, the student's at student_temp, cross-entropy over every (global teacher crop,
  other student crop) pair, averaged; the center's EMA after each loss;
- the teacher started as the student's copy and moved after each optimizer step by an EMA
  whose momentum follows a cosine from dino.momentum to 1 over the iterations;
- AdamW over two groups, the decayed and the rest (biases, 1-d weights and timm's
  no_weight_decay() set: pos_embed, cls_token); lr linear warm-up then cosine to final_lr,
  both scaled by batch / optim.base_batch_size with optim.scaling=linear; weight decay
  on a cosine from optim.weight_decay to optim.weight_decay_end; each parameter's gradient
  clipped to dino.clip_grad on its own; the last layer's gradients dropped during the
  first dino.freeze_last_layer epochs;
- views, data and the kNN monitor of bench/ssl_reference_torch.py (torchvision
  transforms per sample, the weighted kNN on the teacher's trunk, as eval_knn.py reads it;
  with data.val_split the kNN reads the same held-out training images as crescent's);
- train.amp: bf16 autocast over the forwards and the loss for bf16, and for auto where
  the CPU has AVX512-BF16 (as crescent's train.amp=auto on a CPU), else f32.

  build/torchenv/bin/python bench/dino_torch.py --config cfg.json          # train, then kNN
  build/torchenv/bin/python bench/dino_torch.py --config cfg.json --bench  # step img/s
cfg.json is the resolved crescent config (cr.config.load('recipes/dino.lua', ...)). The
last line on stdout is one JSON object: {"side": "pytorch", "method": "dino", "knn_top1",
"train_seconds", "loss"} (training); with --bench one line per speed mode
(--modes: eager, compile, bf16 autocast, bf16 under torch.compile; the bf16 ones where the
CPU has AVX512-BF16), {"bench": "<mode>", "value": img/s}, as bench/ssl_methods.lua reads
them."""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import timm
import torch
import torch.nn as nn
import torch.nn.functional as F

import ssl_reference_torch as ref
from harness_torch import autocast, cpu_mode, cpu_modes, has_avx512_bf16, median_seconds


class DINOHead(nn.Module):
    def __init__(self, in_dim, out_dim, hidden_dim, bottleneck_dim, nlayers, use_bn, norm_last_layer):
        super().__init__()
        if nlayers == 1:
            self.mlp = nn.Linear(in_dim, bottleneck_dim)
        else:
            layers = [nn.Linear(in_dim, hidden_dim)] + ([nn.BatchNorm1d(hidden_dim)] if use_bn else []) + [nn.GELU()]
            for _ in range(nlayers - 2):
                layers += [nn.Linear(hidden_dim, hidden_dim)] + ([nn.BatchNorm1d(hidden_dim)] if use_bn else [])
                layers += [nn.GELU()]
            layers.append(nn.Linear(hidden_dim, bottleneck_dim))
            self.mlp = nn.Sequential(*layers)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=.02)
                nn.init.constant_(m.bias, 0)
        self.last_layer = nn.utils.weight_norm(nn.Linear(bottleneck_dim, out_dim, bias=False))
        self.last_layer.weight_g.data.fill_(1)
        if norm_last_layer:
            self.last_layer.weight_g.requires_grad = False

    def forward(self, x):
        return self.last_layer(F.normalize(self.mlp(x), dim=-1, p=2))


class MultiCropWrapper(nn.Module):
    def __init__(self, backbone, head):
        super().__init__()
        self.backbone, self.head = backbone, head

    def forward(self, crops):
        sizes = torch.tensor([c.shape[-1] for c in crops])
        ends = torch.cumsum(torch.unique_consecutive(sizes, return_counts=True)[1], 0)
        out, start = [], 0
        for end in ends.tolist():
            out.append(self.backbone(torch.cat(crops[start:end])))
            start = end
        return self.head(torch.cat(out))


class DINOLoss(nn.Module):
    def __init__(self, out_dim, ncrops, warmup_teacher_temp, teacher_temp, warmup_epochs, nepochs, student_temp,
                 center_momentum):
        super().__init__()
        self.student_temp, self.center_momentum, self.ncrops = student_temp, center_momentum, ncrops
        self.register_buffer('center', torch.zeros(1, out_dim))
        self.teacher_temp_schedule = np.concatenate((np.linspace(warmup_teacher_temp, teacher_temp, warmup_epochs),
                                                     np.ones(max(nepochs - warmup_epochs, 0)) * teacher_temp))

    def forward(self, student_output, teacher_output, epoch, global_crops):
        student_out = (student_output / self.student_temp).chunk(self.ncrops)
        temp = self.teacher_temp_schedule[epoch]
        teacher_out = F.softmax((teacher_output - self.center) / temp, dim=-1).detach().chunk(global_crops)
        total, terms = 0, 0
        for iq, q in enumerate(teacher_out):
            for v in range(len(student_out)):
                if v == iq:
                    continue
                total = total + torch.sum(-q * F.log_softmax(student_out[v], dim=-1), dim=-1).mean()
                terms += 1
        self.update_center(teacher_output)
        return total / terms

    @torch.no_grad()
    def update_center(self, teacher_output):
        batch_center = torch.sum(teacher_output, dim=0, keepdim=True) / len(teacher_output)
        self.center = self.center * self.center_momentum + batch_center * (1 - self.center_momentum)


def vit(cfg, drop_path):
    m = cfg['model']
    return timm.create_model(f"{m['arch']}_patch16_224", pretrained=False, img_size=cfg['crops']['size'][0],
                             patch_size=m['patch'], in_chans=1, num_classes=0, drop_path_rate=drop_path,
                             dynamic_img_size=True)


def build(cfg):
    d = cfg['dino']
    student_trunk, teacher_trunk = vit(cfg, cfg['model']['drop_path']), vit(cfg, 0.0)
    feat = student_trunk.num_features

    def head():
        return DINOHead(feat, d['out_dim'], d['hidden_dim'], d['bottleneck_dim'], d['nlayers'], d['use_bn'],
                        d['norm_last_layer'])
    student, teacher = MultiCropWrapper(student_trunk, head()), MultiCropWrapper(teacher_trunk, head())
    teacher.load_state_dict(student.state_dict())
    for p in teacher.parameters():
        p.requires_grad = False
    return student, teacher


def param_groups(model):
    skip = {'backbone.' + n for n in model.backbone.no_weight_decay()}
    regularized, plain = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (plain if name.endswith('.bias') or p.ndim == 1 or name in skip else regularized).append(p)
    return [{'params': regularized}, {'params': plain, 'weight_decay': 0.}]


def cosine(start, end, step, total):
    return end + 0.5 * (start - end) * (1 + math.cos(math.pi * step / total))


def check_supported(cfg):
    bad = []
    o, m, d = cfg['optim'], cfg['model'], cfg['data']
    if o['name'] != 'adamw':
        bad.append('optim.name=' + o['name'])
    if o.get('scaling', 'off') not in ('off', 'linear'):
        bad.append('optim.scaling=' + o['scaling'])
    if not m['arch'].startswith('vit_'):
        bad.append('model.arch=' + m['arch'])
    if d['name'] != 'fashion_mnist':
        bad.append('data.name=' + d['name'])
    if bad:
        sys.exit('dino_torch: not implemented here: ' + ', '.join(bad))


def lr_factor(cfg):
    o = cfg['optim']
    return cfg['data']['batch_size'] / o['base_batch_size'] if o.get('scaling') == 'linear' else 1.0


class Trainer:
    """The student, teacher, loss and optimizer of one run, stepped as main_dino's loop."""
    def __init__(self, cfg, per_epoch):
        self.cfg, self.d, self.o = cfg, cfg['dino'], cfg['optim']
        self.student, self.teacher = build(cfg)
        self.global_crops = cfg['crops']['num'][0]
        ncrops = sum(cfg['crops']['num'])
        self.loss_fn = DINOLoss(self.d['out_dim'], ncrops, self.d['warmup_teacher_temp'], self.d['teacher_temp'],
                                self.d['warmup_teacher_temp_epochs'], cfg['train']['epochs'], self.d['student_temp'],
                                self.d['center_momentum'])
        self.opt = torch.optim.AdamW(param_groups(self.student), betas=tuple(self.o['betas']), eps=self.o['eps'])
        self.total, self.warmup = ref.iterations(cfg, per_epoch)
        self.total = max(self.total, 1)
        f = lr_factor(cfg)
        self.lr = dict(self.o, lr=self.o['lr'] * f, final_lr=self.o['final_lr'] * f)
        self.student.train()
        self.teacher.train()
        # train.amp; the speed modes of --bench set bf16 and the forwards under torch.compile
        amp = cfg['train'].get('amp', 'off')
        self.bf16 = amp == 'bf16' or (amp == 'auto' and has_avx512_bf16())
        self.student_fwd, self.teacher_fwd = self.student, self.teacher

    def step(self, crops, it, epoch):
        o, d = self.o, self.d
        wd_end = o['weight_decay_end'] if o.get('weight_decay_end', -1) >= 0 else o['weight_decay']
        for i, g in enumerate(self.opt.param_groups):
            g['lr'] = ref.lr_at(it, self.total, self.warmup, self.lr)
            if i == 0:
                g['weight_decay'] = cosine(o['weight_decay'], wd_end, it, self.total)
        with autocast(self.bf16):
            with torch.no_grad():
                teacher_output = self.teacher_fwd(crops[:self.global_crops])
            student_output = self.student_fwd(crops)
            loss = self.loss_fn(student_output, teacher_output, epoch, self.global_crops)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if d['clip_grad'] > 0:
            for p in self.student.parameters():
                if p.grad is not None:
                    norm = p.grad.data.norm(2)
                    coef = d['clip_grad'] / (norm + 1e-6)
                    if coef < 1:
                        p.grad.data.mul_(coef)
        if epoch < d['freeze_last_layer']:
            for n, p in self.student.named_parameters():
                if 'last_layer' in n:
                    p.grad = None
        self.opt.step()
        with torch.no_grad():
            m = 1 - (1 - d['momentum']) * (math.cos(math.pi * it / self.total) + 1) / 2 if d['cosine_momentum'] \
                else d['momentum']
            for ps, pt in zip(self.student.parameters(), self.teacher.parameters()):
                pt.data.mul_(m).add_((1 - m) * ps.detach().data)
        return loss.item()


def train(cfg, workers):
    check_supported(cfg)
    seed, epochs = cfg['train']['seed'], cfg['train']['epochs']
    d = ref.training_data(cfg, workers)
    loader = d['loader']
    t = Trainer(cfg, len(loader))
    it, t0, losses = 0, time.perf_counter(), []
    for epoch in range(epochs):
        for crops in loader:
            losses.append(t.step(crops, it, epoch))
            it += 1
            if it % cfg['train']['log_every'] == 0:
                print(f'epoch {epoch + 1} it {it}/{t.total} loss {np.mean(losses[-50:]):.4f} '
                      f'{time.perf_counter() - t0:.0f}s', file=sys.stderr, flush=True)
    seconds = time.perf_counter() - t0
    top1 = ref.knn_eval(t.teacher.backbone, d, cfg['knn'])
    per_epoch = len(loader)
    return {'side': 'pytorch', 'method': 'dino', 'epochs': epochs, 'seed': seed, 'knn_top1': round(top1, 2),
            'train_seconds': round(seconds, 1), 'loss': round(float(np.mean(losses[-per_epoch:])), 4),
            'torch': torch.__version__, 'timm': timm.__version__}


def bench(cfg, batch, steps, windows, mode):
    """img/s of train steps on random crops of the recipe's sizes (median of windows) in
    one speed mode of harness_torch.CPU_MODES (channels_last means nothing to a ViT)."""
    check_supported(cfg)
    torch.manual_seed(0)
    torch.set_num_threads(cfg['train']['threads'] or os.cpu_count())
    c = cfg['crops']
    crops = [torch.randn(batch, 1, s, s) for s, n in zip(c['size'], c['num']) for _ in range(n)]
    cfg = dict(cfg, train=dict(cfg['train'], epochs=2))   # timed in the second epoch: the last layer learns
    t = Trainer(cfg, 100)
    _, compiled, t.bf16 = cpu_mode(mode)
    if compiled:
        t.student_fwd, t.teacher_fwd = torch.compile(t.student), torch.compile(t.teacher)

    def window():
        for i in range(steps):
            t.step(crops, i, 1)
    window()
    return batch * steps / median_seconds(window, windows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--config', required=True, help="the resolved crescent config (JSON)")
    ap.add_argument('--workers', type=int, default=None, help='DataLoader workers (default: data.workers)')
    ap.add_argument('--bench', action='store_true', help='time train steps on random crops')
    ap.add_argument('--batch', type=int, default=64, help='--bench: the batch')
    ap.add_argument('--steps', type=int, default=2, help='--bench: steps per timed window')
    ap.add_argument('--windows', type=int, default=3, help='--bench: timed windows (the median is reported)')
    ap.add_argument('--modes', default='eager,compile,bf16,bf16_compile',
                    help='--bench: the speed modes to time (bf16 ones where the CPU has AVX512-BF16)')
    a = ap.parse_args()
    with open(a.config) as f:
        cfg = json.load(f)
    if a.bench:
        for mode in cpu_modes(a.modes):
            if mode == 'channels_last':
                continue
            print(json.dumps({'bench': mode, 'value': bench(cfg, a.batch, a.steps, a.windows, mode), 'unit': 'img/s'}),
                  flush=True)
        return
    workers = a.workers if a.workers is not None else cfg['data']['workers']
    print(json.dumps(train(cfg, workers)), flush=True)


if __name__ == '__main__':
    main()
