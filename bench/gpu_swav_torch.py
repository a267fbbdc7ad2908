#!/usr/bin/python3
"""gpu_swav_torch.py — the PyTorch twin of bench/gpu_swav.lua, on the GPU: SwAV steps of
a ResNet-50 (torchvision's Bottleneck v1.5 layout) with head 2048-2048-128 and 3000
prototypes on multi-crop 2 x 224 + 6 x 96 synthetic batches, and supervised ResNet-50
steps at 224 px; SGD momentum 0.9 on both. Each is timed in bf16 autocast with
channels_last (the issue's reference) and in f32 (cuDNN may use TF32, PyTorch's default,
as crescent's convolutions do). Model FLOPs per image come from
torch.utils.flop_counter on one forward and backward. With --compile, the bf16 steps also
run with the model under torch.compile (its compilation, minutes, is in the warm-up).
  python3 bench/gpu_swav_torch.py [--batch 64] [--sup-batch 256] [--steps 20] [--warmup 5] [--compile] [--profile]
--profile: no timing; the CUDA kernels of `steps` bf16 steps of each model under
torch.profiler, the 25 that took the most GPU time printed as a table (the twin of
gpu_swav.lua profile=1).
Prints JSON lines {"bench": name, "value": x}: swav_bf16, swav_f32 (img/s),
swav_flops_per_img, supervised_bf16, supervised_f32, supervised_flops_per_img,
swav_bf16_compile and supervised_bf16_compile with --compile, and peak_bf16_flops for the
GPU when its datasheet figure is known."""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_torch import step_flops  # noqa: E402
from ssl_swav_torch import swav_loss  # noqa: E402  (the same loss as the cpu bench)

# Dense bf16 tensor-core peaks from NVIDIA's datasheets (SXM parts).
PEAK_BF16 = {'H100': 989.4e12, 'H200': 989.4e12, 'A100': 312e12}


class Bottleneck(nn.Module):
    def __init__(self, cin, planes, stride):
        super().__init__()
        cout = planes * 4
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class ResNet50(nn.Module):
    def __init__(self, num_classes=0):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, cin = [], 64
        for planes, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
            seq = []
            for b in range(blocks):
                seq.append(Bottleneck(cin, planes, stride if b == 0 else 1))
                cin = planes * 4
            layers.append(nn.Sequential(*seq))
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, num_classes) if num_classes else nn.Identity()

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.layers(x), 1), 1))


class SwAV50(nn.Module):
    def __init__(self, hidden=2048, dim=128, num_prototypes=3000):
        super().__init__()
        self.trunk = ResNet50()
        self.head = nn.Sequential(nn.Linear(2048, hidden), nn.BatchNorm1d(hidden), nn.ReLU(inplace=True),
                                  nn.Linear(hidden, dim))
        self.prototypes = nn.Linear(dim, num_prototypes, bias=False)

    def forward(self, groups):
        emb = torch.cat([F.normalize(self.head(self.trunk(g)), dim=1, p=2) for g in groups])
        return self.prototypes(emb)

    @torch.no_grad()
    def normalize_prototypes(self):
        self.prototypes.weight.copy_(F.normalize(self.prototypes.weight, dim=1, p=2))


PROFILE = False


def profiled(step, steps, warmup, name):
    from torch.profiler import ProfilerActivity, profile
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    print(f'--- torch profile of {steps} {name} steps (CUDA kernels)')
    print(prof.key_averages().table(sort_by='cuda_time_total', row_limit=25, max_name_column_width=70))
    return 0.0


def timed(step, steps, warmup, images_per_step, name=''):
    if PROFILE:
        return profiled(step, steps, warmup, name)
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return steps * images_per_step / (time.perf_counter() - t0)


# The modes timed: bf16 (channels_last), f32, and with compile bf16 under torch.compile.
def modes(compile_too):
    return ('bf16', 'f32', 'bf16_compile') if compile_too else ('bf16', 'f32')


def swav_rates(batch, steps, warmup, compile_too):
    out = {}
    for mode in modes(compile_too):
        torch.manual_seed(0)
        model = SwAV50().cuda()
        groups = [torch.randn(2 * batch, 3, 224, 224, device='cuda'), torch.randn(6 * batch, 3, 96, 96, device='cuda')]
        if mode != 'f32':
            model = model.to(memory_format=torch.channels_last)
            groups = [g.contiguous(memory_format=torch.channels_last) for g in groups]
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-6)
        forward = torch.compile(model) if mode == 'bf16_compile' else model

        def step():
            with torch.autocast('cuda', dtype=torch.bfloat16, enabled=mode != 'f32'):
                scores = forward(groups)
            loss = swav_loss(scores.float(), batch, num_crops=8)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            model.normalize_prototypes()

        out['swav_' + mode] = timed(step, steps, warmup, batch, 'swav_' + mode)
        if mode == 'f32' and not PROFILE:
            f = step_flops(step)
            if f:
                out['swav_flops_per_img'] = f / batch
    return out


def supervised_rates(batch, steps, warmup, compile_too):
    out = {}
    for mode in modes(compile_too):
        torch.manual_seed(0)
        model = ResNet50(num_classes=1000).cuda()
        x = torch.randn(batch, 3, 224, 224, device='cuda')
        y = torch.randint(0, 1000, (batch,), device='cuda')
        if mode != 'f32':
            model = model.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
        forward = torch.compile(model) if mode == 'bf16_compile' else model

        def step():
            with torch.autocast('cuda', dtype=torch.bfloat16, enabled=mode != 'f32'):
                loss = F.cross_entropy(forward(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        out['supervised_' + mode] = timed(step, steps, warmup, batch, 'supervised_' + mode)
        if mode == 'f32' and not PROFILE:
            f = step_flops(step)
            if f:
                out['supervised_flops_per_img'] = f / batch
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--batch', type=int, default=64)
    p.add_argument('--sup-batch', type=int, default=256)
    p.add_argument('--steps', type=int, default=20)
    p.add_argument('--warmup', type=int, default=5)
    p.add_argument('--compile', action='store_true', help='also time the bf16 steps under torch.compile')
    p.add_argument('--profile', action='store_true', help='print the CUDA kernels that took the most time instead')
    a = p.parse_args()
    global PROFILE
    PROFILE = a.profile
    if not torch.cuda.is_available():
        print(json.dumps({'bench': 'skipped', 'reason': 'torch sees no CUDA GPU'}))
        return
    torch.backends.cudnn.benchmark = True
    figures = swav_rates(a.batch, a.steps, a.warmup, a.compile)
    figures.update(supervised_rates(a.sup_batch, a.steps, a.warmup, a.compile))
    name = torch.cuda.get_device_name(0)
    for key, peak in PEAK_BF16.items():
        if key in name:
            figures['peak_bf16_flops'] = peak
    for k, v in figures.items():
        print(json.dumps({'bench': k, 'value': v}))


if __name__ == '__main__':
    main()
