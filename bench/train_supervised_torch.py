"""bench/train_supervised_torch.py — the PyTorch twin of bench/train_supervised.lua:
training images/s of ResNet-18 (CIFAR stem: 3x3/1 conv, no max pool; base width W;
1 input channel; 10 classes) with SGD (momentum 0.9, nesterov, weight decay 5e-4), or
with arch=vit_tiny of timm's ViT-tiny (patch=P px patches on 28 px, DropPath 0.1 at the
last block, linear from 0) with AdamW (lr 1e-3, weight decay 0.05), on
the same synthetic 28x28 batches, same batch size and thread count, in each speed mode
(harness_torch.CPU_MODES: eager, channels_last, compile, and bf16 autocast with
channels_last, also compiled, where the CPU has AVX512-BF16; `modes=a,b` picks some).
Prints one JSON line {"bench": "<mode>", "value": img/s} per mode. Run by build/torchenv's
current PyTorch; ResNet18 is also imported by the other twins."""
import json
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from harness_torch import CPU_MODES, autocast, cpu_mode, cpu_modes, threads as default_threads


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class ResNet18(nn.Module):
    def __init__(self, width, in_channels=1, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        layers, cin = [], width
        for i, stride in enumerate([1, 2, 2, 2]):
            cout = width * 2 ** i
            layers.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def window_seconds(model, opt, batch, warmup, windows, steps, forward=None, channels_last=False, bf16=False):
    """Trains on 8 synthetic batches, cycled (as the crescent side does), calling
    forward (default model) under bf16 autocast when asked; returns the seconds of each
    window of `steps` steps after `warmup` steps."""
    forward = model if forward is None else forward
    nb = 8
    xs = [torch.randn(batch, 1, 28, 28) for _ in range(nb)]
    if channels_last:
        xs = [x.contiguous(memory_format=torch.channels_last) for x in xs]
    ys = [torch.randint(0, 10, (batch,)) for _ in range(nb)]
    i = 0

    def step():
        nonlocal i
        x, y = xs[i % nb], ys[i % nb]
        i += 1
        opt.zero_grad(set_to_none=True)
        with autocast(bf16):
            loss = F.cross_entropy(forward(x), y)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    seconds = []
    for _ in range(windows):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        seconds.append(time.perf_counter() - t0)
    return seconds


def main():
    args = dict(a.split('=', 1) for a in sys.argv[1:])
    arch, patch = args.get('arch', 'resnet18'), int(args.get('patch', 7))
    if arch not in ('resnet18', 'vit_tiny'):
        sys.exit(f'train_supervised_torch: arch={arch} is not benchmarked; use resnet18 or vit_tiny')
    width, batch = int(args.get('width', 16)), int(args.get('batch', 128))
    warmup, windows, steps = int(args.get('warmup', 3)), int(args.get('windows', 5)), int(args.get('steps', 5))
    threads = default_threads()
    torch.set_num_threads(threads)
    for mode in cpu_modes(args.get('modes', ','.join(CPU_MODES))):
        channels_last, compiled, bf16 = cpu_mode(mode)
        torch.manual_seed(0)
        if arch == 'vit_tiny':
            import timm
            model = timm.create_model('vit_tiny_patch16_224', pretrained=False, img_size=28, patch_size=patch,
                                      in_chans=1, num_classes=10, drop_path_rate=0.1)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
        else:
            model = ResNet18(width)
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
        model.train()
        forward = torch.compile(model) if compiled else model
        seconds = window_seconds(model, opt, batch, warmup, windows, steps, forward, channels_last, bf16)
        rates = [steps * batch / t for t in seconds]
        name = f'vit_tiny patch {patch}' if arch == 'vit_tiny' else f'width {width}'
        print(f'torch {torch.__version__} threads {threads} {name} batch {batch} {mode}: '
              f'windows {[round(r) for r in rates]}', file=sys.stderr)
        print(json.dumps({'bench': mode, 'value': statistics.median(rates)}), flush=True)


if __name__ == '__main__':
    main()
