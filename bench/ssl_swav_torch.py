#!/usr/bin/python3
"""ssl_swav_torch.py — the PyTorch twin of recipes/swav.lua (the SwAV recipe on
Fashion-MNIST; its defaults live in lua/crescent/ssl/) and of bench/ssl_swav.lua (the
step throughput). The recipe, as both sides implement it:
multi-crop (2 x 28 px scale (0.25, 1), 4 x 14 px scale (0.08, 0.25)), flip, colour jitter,
gaussian blur, normalise; ResNet-18 trunk (CIFAR stem, width 16, 1 channel), projection
head 128-512-128 with BN, 100 L2-normalised prototypes; the swapped-prediction loss with
3 Sinkhorn iterations (epsilon 0.05, temperature 0.1); SGD momentum 0.9, weight decay 1e-6,
lr 0.6 with one epoch of linear warmup then cosine to 0.0006; the weighted kNN monitor.

Every augmentation is written with torch tensor ops for a whole batch (no torchvision, no
PIL), and is importable (bench/data_pipeline_torch.py uses it):
  multicrop_groups(images_u8 [B, H, W], spec, gen) -> [n_g * B, 1, h, w] per crop size
  multicrop(images_u8, spec, gen)                  -> list of [B, 1, h, w], global first
with spec = SWAV_MULTICROP or MOCO_TWO_VIEWS (plain dicts). The resize is torchvision's
antialiased bilinear (PIL's triangle filter), as per-sample separable weight matrices
applied with two bmm; the blur is a per-sample separable gaussian with reflect padding.

Modes (threads: --threads, else env CRESCENT_THREADS, else the core count):
  --bench [--batch 256 --steps 6 --warmup 2 --modes eager,channels_last,compile,bf16,bf16_compile]
      median time of full SwAV train steps on fixed synthetic crops in each speed mode
      (harness_torch.CPU_MODES; the bf16 ones where the CPU has AVX512-BF16), the step's
      FLOPs per image, torch's 2048^2 matmul peak in f32 and bf16, and the multi-crop
      augmentation of 256 random u8 images; prints the JSON lines
      {"bench": "<mode>", "value": img/s}, {"bench": "swav_step_gflop_per_img", "value": g}
      (PyTorch 2.x), {"bench": "matmul_2048_<dtype>", "value": GFLOP/s} and
      {"bench": "swav_augment_samples_per_s", "value": y}
  --train [--epochs 5 --batch 256 --limit 0 --seed 0 --knn-at-start]
      trains the recipe (log every 50 steps on stderr), then the kNN top-1; last line
      {"recipe": "swav_torch", "epochs", "knn_top1", ["knn_top1_init",] "train_seconds",
       "img_per_s", "loss"}. --limit N: the first N train images, and the first N of
      the train and test sets for the kNN.
Run by build/torchenv's current PyTorch (`make torchenv`); the training mode also runs on
Debian's python3-torch."""
import argparse
import gzip
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from harness_torch import CPU_MODES, autocast, cpu_mode, cpu_modes, has_avx512_bf16, matmul_peak, median_seconds, \
    step_flops, threads as default_threads
from train_supervised_torch import ResNet18

DATA_DIR = '/usr/share/datasets/fashion-mnist'
MEAN, STD = 0.2860, 0.3530
RRC_ATTEMPTS = 10

# The per-crop ops shared by both pipelines; groups are (size, number of crops, scale).
_CROP_OPS = dict(ratio=(3 / 4, 4 / 3), flip=0.5, jitter=dict(p=0.8, brightness=0.4, contrast=0.4),
                 blur=dict(p=0.5, sigma=(0.1, 1.0)), mean=MEAN, std=STD)
SWAV_MULTICROP = dict(_CROP_OPS, groups=[(28, 2, (0.25, 1.0)), (14, 4, (0.08, 0.25))])
MOCO_TWO_VIEWS = dict(_CROP_OPS, groups=[(28, 2, (0.2, 1.0))])


# ---------------------------------------------------------------- augmentation

def _uniform(n, lo, hi, gen):
    return lo + (hi - lo) * torch.rand(n, generator=gen, dtype=torch.float64)


def crop_boxes(n, height, width, scale, ratio, gen):
    """RandomResizedCrop.get_params for n samples at once: 10 attempts each, the first
    that fits wins, else torchvision's fallback (the central crop within the ratio
    range). Returns top, left, crop height, crop width (int64 [n])."""
    area = height * width
    target = area * (scale[0] + (scale[1] - scale[0]) * torch.rand(n, RRC_ATTEMPTS, generator=gen,
                                                                      dtype=torch.float64))
    lo, hi = math.log(ratio[0]), math.log(ratio[1])
    aspect = torch.exp(lo + (hi - lo) * torch.rand(n, RRC_ATTEMPTS, generator=gen, dtype=torch.float64))
    w = torch.round(torch.sqrt(target * aspect)).long()
    h = torch.round(torch.sqrt(target / aspect)).long()
    fits = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = fits.long().argmax(1, keepdim=True)          # the first attempt that fits
    found = fits.any(1)
    h, w = h.gather(1, first).squeeze(1), w.gather(1, first).squeeze(1)
    in_ratio = width / height
    if in_ratio < ratio[0]:
        fh, fw = int(round(width / ratio[0])), width
    elif in_ratio > ratio[1]:
        fh, fw = height, int(round(height * ratio[1]))
    else:
        fh, fw = height, width
    h = torch.where(found, h, torch.full_like(h, fh))
    w = torch.where(found, w, torch.full_like(w, fw))
    top = (torch.rand(n, generator=gen, dtype=torch.float64) * (height - h + 1)).long()
    left = (torch.rand(n, generator=gen, dtype=torch.float64) * (width - w + 1)).long()
    top = torch.where(found, top, (height - h) // 2)
    left = torch.where(found, left, (width - w) // 2)
    return top, left, h, w


def resize_weights(start, length, in_size, out_size):
    """Per-sample resampling matrices [n, out_size, in_size] that cut [start, start +
    length) out of an axis and resize it to out_size with the antialiased triangle
    filter (PIL / torchvision antialias=True; plain bilinear when enlarging)."""
    scale = length.double() / out_size                                   # [n]
    support = scale.clamp(min=1.0)
    center = scale[:, None] * (torch.arange(out_size, dtype=torch.float64) + 0.5)   # [n, out]
    k = torch.arange(in_size, dtype=torch.float64)[None, :] - start[:, None].double()  # crop coords [n, in]
    x = (k[:, None, :] - center[:, :, None] + 0.5) / support[:, None, None]
    wt = (1 - x.abs()).clamp(min=0) * ((k >= 0) & (k < length[:, None].double()))[:, None, :]
    return (wt / wt.sum(-1, keepdim=True)).float()


def resized_crops(images, size, scale, ratio, flip_p, gen):
    """images f32 [n, H, W] in [0, 255] -> [n, size, size]: a RandomResizedCrop each,
    then a horizontal flip with probability flip_p."""
    n, height, width = images.shape
    top, left, h, w = crop_boxes(n, height, width, scale, ratio, gen)
    wy = resize_weights(top, h, height, size)                            # [n, size, H]
    wx = resize_weights(left, w, width, size)                            # [n, size, W]
    flip = torch.rand(n, generator=gen) < flip_p
    wx = torch.where(flip[:, None, None], wx.flip(1), wx)
    return torch.bmm(torch.bmm(wy, images), wx.transpose(1, 2))


def color_jitter(x, p, brightness, contrast, gen):
    """x [n, h, w] in [0, 255]: with probability p, brightness (x * b) and contrast
    ((x - mean) * c + mean) in a random order, clamped to [0, 255] after each op. On one
    channel saturation and hue are no-ops, so only the order of these two matters."""
    n = x.shape[0]
    on = torch.rand(n, generator=gen) < p
    b = _uniform(n, max(0.0, 1 - brightness), 1 + brightness, gen).float()
    c = _uniform(n, max(0.0, 1 - contrast), 1 + contrast, gen).float()
    brightness_first = (torch.rand(n, generator=gen) < 0.5)[:, None, None]
    b = torch.where(on, b, torch.ones_like(b))[:, None, None]
    c = torch.where(on, c, torch.ones_like(c))[:, None, None]
    x = torch.where(brightness_first, (x * b).clamp(0, 255), x)
    mean = x.mean((1, 2), keepdim=True)
    x = ((x - mean) * c + mean).clamp(0, 255)
    return torch.where(brightness_first, x, (x * b).clamp(0, 255))


def gaussian_blur(x, p, sigma, gen):
    """x [n, h, w]: with probability p a gaussian blur, sigma uniform in sigma, kernel
    size 2 * ceil(3 sigma) + 1 (at most 2 * min(h, w) - 1), reflect padding; a separable
    per-sample kernel (zeros past each sample's own half width, a unit tap when off)."""
    n, h, w = x.shape
    on = torch.rand(n, generator=gen) < p
    s = _uniform(n, sigma[0], sigma[1], gen)
    half = torch.ceil(3 * s).long().clamp(max=min(h, w) - 1)
    half = torch.where(on, half, torch.zeros_like(half))
    hmax = int(half.max())
    if hmax == 0:
        return x
    taps = torch.arange(-hmax, hmax + 1, dtype=torch.float64)
    kern = torch.exp(-0.5 * (taps[None, :] / s[:, None]) ** 2) * (taps.abs()[None, :] <= half[:, None])
    kern = (kern / kern.sum(1, keepdim=True)).float()                   # [n, K]; off: a unit tap
    xp = F.pad(x[None], (hmax, hmax, hmax, hmax), mode='reflect')[0]     # [n, h + 2hm, w + 2hm]
    rows = sum(kern[:, k, None, None] * xp[:, :, k:k + w] for k in range(2 * hmax + 1))
    return sum(kern[:, k, None, None] * rows[:, k:k + h, :] for k in range(2 * hmax + 1))


def multicrop_groups(images, spec, gen):
    """images u8 [B, H, W] (or [B, 1, H, W]) -> one f32 tensor [n_g * B, 1, size, size]
    per group of spec['groups'], crop-major (crop k of the group is rows k*B .. k*B+B-1),
    each crop augmented and normalised on its own draws."""
    if images.dim() == 4:
        images = images[:, 0]
    x = images.float()
    out = []
    for size, ncrops, scale in spec['groups']:
        y = resized_crops(x.repeat(ncrops, 1, 1), size, scale, spec['ratio'], spec['flip'], gen)
        j = spec['jitter']
        y = color_jitter(y, j['p'], j['brightness'], j['contrast'], gen)
        y = gaussian_blur(y, spec['blur']['p'], spec['blur']['sigma'], gen)
        out.append(((y / 255 - spec['mean']) / spec['std'])[:, None])
    return out


def multicrop(images, spec, gen):
    """The crops as a list of [B, 1, size, size], in crop order (global crops first)."""
    b = images.shape[0]
    return [c for g in multicrop_groups(images, spec, gen) for c in g.split(b)]


# ---------------------------------------------------------------- model and loss

class SwAV(nn.Module):
    """ResNet-18 trunk (CIFAR stem, 1 channel) -> head 128-512-128 (BN, ReLU) ->
    L2-normalised embedding -> 100 prototypes (no bias)."""

    def __init__(self, width=16, hidden=512, dim=128, num_prototypes=100):
        super().__init__()
        self.trunk = ResNet18(width)
        self.trunk.fc = nn.Identity()
        for m in self.trunk.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        feat = width * 8
        self.head = nn.Sequential(nn.Linear(feat, hidden), nn.BatchNorm1d(hidden), nn.ReLU(inplace=True),
                                  nn.Linear(hidden, dim))
        self.prototypes = nn.Linear(dim, num_prototypes, bias=False)
        self.normalize_prototypes()

    @torch.no_grad()
    def normalize_prototypes(self):
        self.prototypes.weight.copy_(F.normalize(self.prototypes.weight, dim=1, p=2))

    def forward(self, groups):
        """groups: one batch per crop resolution (the trunk's BN statistics per group);
        the head runs once over every crop, as SwAV's forward_head."""
        emb = F.normalize(self.head(torch.cat([self.trunk(g) for g in groups])), dim=1, p=2)
        return self.prototypes(emb)


@torch.no_grad()
def sinkhorn(scores, epsilon=0.05, iters=3):
    """SwAV's distributed_sinkhorn on one rank: scores [B, K] -> codes [B, K]."""
    q = torch.exp(scores / epsilon).t()
    q /= q.sum()
    k, b = q.shape
    for _ in range(iters):
        q /= q.sum(dim=1, keepdim=True)
        q /= k
        q /= q.sum(dim=0, keepdim=True)
        q /= b
    return (q * b).t()


def swav_loss(scores, batch, num_crops=6, crops_for_assign=(0, 1), temperature=0.1):
    """The swapped prediction: codes of each assigned crop predicted from every other crop."""
    total = 0
    for i in crops_for_assign:
        q = sinkhorn(scores[i * batch:(i + 1) * batch].detach())
        sub = 0
        for v in range(num_crops):
            if v != i:
                logp = F.log_softmax(scores[v * batch:(v + 1) * batch] / temperature, dim=1)
                sub = sub - (q * logp).sum(dim=1).mean()
        total = total + sub / (num_crops - 1)
    return total / len(crops_for_assign)


def swav_lr(step, total_steps, warmup_steps, base=0.6, final=0.0006):
    """Linear from 0 over warmup_steps, then cosine to final (per step)."""
    if step < warmup_steps:
        return base * step / warmup_steps
    t = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return final + 0.5 * (base - final) * (1 + math.cos(math.pi * t))


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.0, momentum=0.9, weight_decay=1e-6)


def train_step(model, opt, groups, batch, freeze_prototypes):
    """One SwAV step: forward, loss, backward, SGD, prototype normalisation."""
    loss = swav_loss(model(groups), batch)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if freeze_prototypes:
        model.prototypes.weight.grad = None
    opt.step()
    model.normalize_prototypes()
    return loss.item()


# ---------------------------------------------------------------- data and kNN

def read_idx(name):
    """An IDX file of the data set (gzip or plain) as a uint8 tensor."""
    base = os.path.join(DATA_DIR, name)
    for path, opener in ((base + '.gz', gzip.open), (base, open)):
        if os.path.exists(path):
            with opener(path, 'rb') as f:
                raw = f.read()
            break
    else:
        sys.exit(f'ssl_swav_torch: {base}[.gz] not found; Fashion-MNIST is expected in {DATA_DIR}')
    ndim = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * d:8 + 4 * d], 'big') for d in range(ndim)]
    return torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8).view(*shape)


def normalized(images):
    return ((images.float() / 255 - MEAN) / STD)[:, None]


@torch.no_grad()
def trunk_features(model, images, chunk=1000):
    model.eval()
    feats = [model.trunk(normalized(images[s:s + chunk])) for s in range(0, images.shape[0], chunk)]
    model.train()
    return F.normalize(torch.cat(feats), dim=1)


@torch.no_grad()
def knn_top1(model, train_x, train_y, test_x, test_y, k=200, temperature=0.1, num_classes=10, chunk=500):
    """Weighted kNN of InstDisc / DINO on trunk features in eval mode, in %."""
    bank, queries = trunk_features(model, train_x), trunk_features(model, test_x)
    k = min(k, bank.shape[0])
    hits = 0
    for s in range(0, queries.shape[0], chunk):
        sim = queries[s:s + chunk] @ bank.t()
        vals, idx = sim.topk(k, dim=1)
        votes = torch.zeros(sim.shape[0], num_classes).scatter_add_(1, train_y[idx], torch.exp(vals / temperature))
        hits += (votes.argmax(1) == test_y[s:s + chunk]).sum().item()
    return 100.0 * hits / queries.shape[0]


# ---------------------------------------------------------------- modes


def bench(args):
    """Per mode of harness_torch.CPU_MODES that runs here: the median img/s of SwAV train
    steps on fixed synthetic crops. Then the step's FLOPs per image (PyTorch's counter,
    eager f32) and the augmentation's samples/s."""
    b = args.batch
    base = [torch.randn(2 * b, 1, 28, 28), torch.randn(4 * b, 1, 14, 14)]
    for mode in cpu_modes(args.modes):
        channels_last, compiled, bf16 = cpu_mode(mode)
        torch.manual_seed(args.seed)
        model = SwAV()
        groups = base
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
            groups = [g.contiguous(memory_format=torch.channels_last) for g in base]
        forward = torch.compile(model) if compiled else model
        opt = make_optimizer(model)
        for g in opt.param_groups:
            g['lr'] = 0.1

        def step():
            with autocast(bf16):
                loss = swav_loss(forward(groups), b)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            model.normalize_prototypes()
        seconds = median_seconds(step, args.steps, args.warmup)
        print(f'torch {torch.__version__} threads {torch.get_num_threads()} batch {b} {mode}: '
              f'swav step {1e3 * seconds:.1f} ms', file=sys.stderr)
        print(json.dumps({'bench': mode, 'value': b / seconds}), flush=True)
    torch.manual_seed(args.seed)
    model = SwAV()
    flops = step_flops(lambda: swav_loss(model(base), b).backward())
    if flops:
        print(json.dumps({'bench': 'swav_step_gflop_per_img', 'value': flops / b / 1e9}), flush=True)
    print(json.dumps({'bench': 'matmul_2048_f32', 'value': matmul_peak(torch.float32)}), flush=True)
    if has_avx512_bf16():
        print(json.dumps({'bench': 'matmul_2048_bf16', 'value': matmul_peak(torch.bfloat16)}), flush=True)
    gen = torch.Generator().manual_seed(args.seed)
    images = torch.randint(0, 256, (256, 28, 28), dtype=torch.uint8, generator=gen)
    aug = median_seconds(lambda: multicrop(images, SWAV_MULTICROP, gen), 7, 2)
    print(json.dumps({'bench': 'swav_augment_samples_per_s', 'value': 256 / aug}), flush=True)


def train(args):
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    train_x, train_y = read_idx('train-images-idx3-ubyte'), read_idx('train-labels-idx1-ubyte').long()
    test_x, test_y = read_idx('t10k-images-idx3-ubyte'), read_idx('t10k-labels-idx1-ubyte').long()
    if args.limit > 0:
        train_x, train_y = train_x[:args.limit], train_y[:args.limit]
        test_x, test_y = test_x[:args.limit], test_y[:args.limit]
    b, n = args.batch, train_x.shape[0]
    per_epoch = n // b
    if per_epoch < 1:
        sys.exit(f'ssl_swav_torch: {n} train images make no batch of {b}; lower --batch or raise --limit')
    total = args.epochs * per_epoch
    model = SwAV()
    opt = make_optimizer(model)
    result = {'recipe': 'swav_torch', 'epochs': args.epochs}
    if args.knn_at_start:
        result['knn_top1_init'] = knn_top1(model, train_x, train_y, test_x, test_y)
        print(f'epoch 0: knn_top1 {result["knn_top1_init"]:.2f}', file=sys.stderr)
    it, losses = 0, []
    t_start = time.perf_counter()
    t_log = t_start
    for epoch in range(args.epochs):
        perm = torch.randperm(n, generator=gen)
        losses = []
        for s in range(per_epoch):
            groups = multicrop_groups(train_x[perm[s * b:(s + 1) * b]], SWAV_MULTICROP, gen)
            lr = swav_lr(it, total, per_epoch)
            for g in opt.param_groups:
                g['lr'] = lr
            losses.append(train_step(model, opt, groups, b, it < 100))
            it += 1
            if it % 50 == 0:
                now = time.perf_counter()
                print(f'epoch {epoch + 1} step {it}/{total}: loss {losses[-1]:.4f} lr {lr:.4f} '
                      f'{50 * b / (now - t_log):.0f} img/s', file=sys.stderr, flush=True)
                t_log = now
    seconds = time.perf_counter() - t_start
    result['knn_top1'] = knn_top1(model, train_x, train_y, test_x, test_y)
    result.update(train_seconds=seconds, img_per_s=total * b / seconds, loss=sum(losses) / len(losses))
    print(json.dumps(result), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument('--bench', action='store_true')
    mode.add_argument('--train', action='store_true')
    p.add_argument('--batch', type=int, default=256)
    p.add_argument('--modes', default=','.join(CPU_MODES), help='--bench: the modes to time')
    p.add_argument('--steps', type=int, default=6)
    p.add_argument('--warmup', type=int, default=2)
    p.add_argument('--epochs', type=int, default=5)
    p.add_argument('--limit', type=int, default=0)
    p.add_argument('--threads', type=int, default=default_threads())
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--knn-at-start', action='store_true')
    args = p.parse_args()
    for name in ('batch', 'steps', 'epochs', 'threads'):
        if getattr(args, name) < 1:
            p.error(f'--{name} must be >= 1')
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    (bench if args.bench else train)(args)


if __name__ == '__main__':
    main()
