"""ssl_reference_torch.py — independent PyTorch implementations of MoCo v2, SwAV, SimCLR,
BYOL and Barlow Twins on Fashion-MNIST, the other side of bench/learning_parity.lua.
Written from the papers and the authors' code (facebookresearch/moco with its CIFAR demo,
facebookresearch/swav, google-research/simclr, deepmind-research/byol,
facebookresearch/barlowtwins), not from crescent, so that what both sides do differently
from the references shows up as a difference in learning:

- views: torchvision transforms on PIL images (RandomResizedCrop, RandomHorizontalFlip,
  RandomApply(ColorJitter), RandomGrayscale, PIL's GaussianBlur as SwAV's, RandomSolarize,
  ToTensor, Normalize), drawn per sample by a DataLoader;
- trunk: torchvision's ResNet (BasicBlock, kaiming fan_out init) at a base width, with the
  CIFAR stem (3x3/1 conv, no max-pool) and pooled features out;
- head: Linear -> [BatchNorm1d] -> ReLU -> Linear;
- MoCo v2: query and momentum key encoders, the key encoder updated before the keys are
  computed, shuffled keys, a queue of L2-normalised keys started as random unit vectors,
  InfoNCE with the positive at index 0; BatchNorm split into `moco.bn_splits` groups in
  both encoders (the CIFAR demo's SplitBatchNorm standing in for per-GPU BatchNorm);
- SwAV: one trunk forward per crop resolution, the head and prototypes over all crops,
  Sinkhorn-Knopp codes, the swapped prediction, prototypes L2-normalised before every
  step and frozen (grad None) for the first iterations;
- SimCLR: both views through the trunk as one batch, NT-Xent over the 2B projections;
- BYOL: online trunk, projector and predictor (Linear, BatchNorm, ReLU, Linear), a target
  trunk and projector started as copies and moved after every optimizer step by an EMA
  with tau = 1 - (1 - tau0) (cos(pi k / K) + 1) / 2; loss 2 - 2 cos of each view's
  prediction against the other view's target projection, summed over both directions;
- Barlow Twins: each view through trunk and a bias-free projector, a BatchNorm1d without
  affine parameters, c = bn(z1)^T bn(z2) / B, loss sum (1 - c_ii)^2 + lambda sum c_ij^2;
- SGD with momentum and weight decay (optim.no_decay_bias_norm: none on biases and norm
  weights), or LARS as the Barlow Twins code writes it (the update g + wd p scaled by
  eta ||p|| / ||g + wd p||, biases and norm weights left out of the scaling and of the
  decay as optim.exclude_bias_norm and no_decay_bias_norm say, then momentum); the lr per
  iteration: linear warm-up from 0, then cosine to final_lr (SwAV's schedule);
- the weighted kNN monitor (InstDisc / the MoCo demo): cosine similarity to the k nearest
  train features, votes exp(sim / T).

The settings come as one JSON file (--config), the full config of the crescent recipe that
learning_parity.lua resolved (cr.config.load), so both sides read the same values; a
setting this twin does not implement is refused, not ignored.

  build/torchenv/bin/python bench/ssl_reference_torch.py --method moco --config cfg.json
  build/torchenv/bin/python bench/ssl_reference_torch.py --method byol --config cfg.json --bench
--bench times train steps instead (bench/ssl_methods.lua). Training's last line on stdout: {"side": "pytorch", "method", "epochs", "seed", "knn_top1",
"knn_top5", "train_seconds", "loss"}; progress on stderr."""
import argparse
import copy
import gzip
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image, ImageFilter
from torchvision import transforms

from harness_torch import CPU_MODES, autocast, cpu_mode, cpu_modes, median_seconds

DATA_DIR = '/usr/share/datasets/fashion-mnist'


# ---- data -----------------------------------------------------------------------------
def read_idx(path):
    with gzip.open(path, 'rb') as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], 'big') for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def fashion_mnist(split, root=DATA_DIR, limit=0):
    prefix = 'train' if split == 'train' else 't10k'
    images = read_idx(os.path.join(root, prefix + '-images-idx3-ubyte.gz'))
    labels = read_idx(os.path.join(root, prefix + '-labels-idx1-ubyte.gz')).astype(np.int64)
    if limit > 0:
        images, labels = images[:limit], labels[:limit]
    return images, labels


def philox_words(n, seed):
    """The first n words of crescent's Philox4x32-10 stream for a seed (offset 0), as
    cr_rng_philox_words gives them: counter i // 4 in words 0-1 of the block, key = seed."""
    blocks = (n + 3) // 4
    ctr = np.arange(blocks, dtype=np.uint64)
    low = np.uint64(0xffffffff)
    c0, c1 = ctr & low, ctr >> np.uint64(32)
    c2, c3 = np.zeros(blocks, np.uint64), np.zeros(blocks, np.uint64)
    k0, k1 = seed & 0xffffffff, (seed >> 32) & 0xffffffff
    for _ in range(10):
        p0, p1 = np.uint64(0xD2511F53) * c0, np.uint64(0xCD9E8D57) * c2
        c0, c2 = (p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0), (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1)
        c1, c3 = p1 & low, p0 & low
        k0, k1 = (k0 + 0x9E3779B9) & 0xffffffff, (k1 + 0xBB67AE85) & 0xffffffff
    return np.stack([c0, c1, c2, c3], 1).reshape(-1)[:n]


def hold_out(images, labels, val_split):
    """crescent's data.val_split (Dataset:hold_out with seed 0): the same held-out
    training samples, each part in its original order. Returns (rest, held_out) pairs."""
    n = len(labels)
    n_val = int(math.floor(val_split * n + 0.5)) if val_split < 1 else int(val_split)
    if not 1 <= n_val < n:
        sys.exit(f'data.val_split = {val_split} holds out {n_val} of the {n} training samples; give a fraction '
                 f'in (0, 1) or a count in [1, {n})')
    order = np.argsort(philox_words(n, 0).astype(np.int64), kind='stable')
    rest, held = np.sort(order[n_val:]), np.sort(order[:n_val])
    return (images[rest], labels[rest]), (images[held], labels[held])


class PILGaussianBlur:
    """SwAV's PILRandomGaussianBlur without its own probability (RandomApply gives it)."""
    def __init__(self, sigma):
        self.sigma = sigma

    def __call__(self, img):
        return img.filter(ImageFilter.GaussianBlur(radius=np.random.uniform(*self.sigma)))


def view_transform(size, scale, aug, mean, std):
    ops = [transforms.RandomResizedCrop(size, scale=tuple(scale), ratio=(3 / 4, 4 / 3)),
           transforms.RandomHorizontalFlip(p=aug['flip'])]
    if aug['jitter'] > 0:
        jitter = transforms.ColorJitter(aug['brightness'], aug['contrast'], aug['saturation'], aug['hue'])
        ops.append(transforms.RandomApply([jitter], p=aug['jitter']))
    if aug['grayscale'] > 0:
        ops.append(transforms.RandomGrayscale(p=aug['grayscale']))
    if aug['blur'] > 0:
        ops.append(transforms.RandomApply([PILGaussianBlur(aug['blur_sigma'])], p=aug['blur']))
    if aug['solarize'] > 0:
        ops.append(transforms.RandomSolarize(128, p=aug['solarize']))
    ops += [transforms.ToTensor(), transforms.Normalize([mean], [std])]
    return transforms.Compose(ops)


class MultiViewSet(torch.utils.data.Dataset):
    """Each sample: the list of its crops, crops.num[i] of crops.size[i] px, global first."""
    def __init__(self, images, crops, aug, mean, std):
        self.images = images
        self.views = []
        for size, num, lo, hi in zip(crops['size'], crops['num'], crops['min_scale'], crops['max_scale']):
            self.views += [view_transform(size, (lo, hi), aug, mean, std)] * num

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        img = Image.fromarray(self.images[i], mode='L')
        return [v(img) for v in self.views]


def seed_worker(worker_id):
    np.random.seed(torch.initial_seed() % 2 ** 32)


# ---- model ----------------------------------------------------------------------------
def split_forward(bn, x):
    """The MoCo CIFAR demo's SplitBatchNorm: in training, statistics per group of samples
    n = j (mod num_splits), as on num_splits GPUs; the running stats take the groups'
    average update."""
    C, S = x.shape[1], bn.num_splits
    rm, rv = bn.running_mean.repeat(S), bn.running_var.repeat(S)
    y = F.batch_norm(x.reshape(-1, C * S, *x.shape[2:]), rm, rv, bn.weight.repeat(S), bn.bias.repeat(S),
                     True, bn.momentum, bn.eps).reshape(x.shape)
    with torch.no_grad():
        bn.running_mean.copy_(rm.view(S, C).mean(0))
        bn.running_var.copy_(rv.view(S, C).mean(0))
        bn.num_batches_tracked += 1
    return y


class SplitBatchNorm2d(nn.BatchNorm2d):
    def __init__(self, num_features, num_splits):
        super().__init__(num_features)
        self.num_splits = num_splits

    def forward(self, x):
        return split_forward(self, x) if self.training else super().forward(x)


class SplitBatchNorm1d(nn.BatchNorm1d):
    def __init__(self, num_features, num_splits):
        super().__init__(num_features)
        self.num_splits = num_splits

    def forward(self, x):
        return split_forward(self, x) if self.training else super().forward(x)


class BasicBlock(nn.Module):
    def __init__(self, cin, planes, stride, norm):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = norm(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = norm(planes)
        self.downsample = None
        if stride != 1 or cin != planes:
            self.downsample = nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False), norm(planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    """torchvision's ResNet-18/34 with BasicBlocks at base width `width`, the CIFAR stem,
    pooled features out (no fc)."""
    LAYERS = {'resnet18': [2, 2, 2, 2], 'resnet34': [3, 4, 6, 3]}

    def __init__(self, arch, width, in_channels, norm):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, 3, 1, 1, bias=False)
        self.bn1 = norm(width)
        cin, layers = width, []
        for i, n in enumerate(self.LAYERS[arch]):
            planes = width * 2 ** i
            blocks = []
            for b in range(n):
                blocks.append(BasicBlock(cin, planes, 2 if (b == 0 and i > 0) else 1, norm))
                cin = planes
            layers.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.num_features = cin
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)


def norm_layers(splits):
    if splits > 1:
        return (lambda c: SplitBatchNorm2d(c, splits)), (lambda c: SplitBatchNorm1d(c, splits))
    return nn.BatchNorm2d, nn.BatchNorm1d


def head(feat, hidden, out, bn, norm1d=nn.BatchNorm1d):
    if hidden == 0:
        return nn.Linear(feat, out)
    layers = [nn.Linear(feat, hidden)] + ([norm1d(hidden)] if bn else []) + [nn.ReLU(), nn.Linear(hidden, out)]
    return nn.Sequential(*layers)


class Encoder(nn.Module):
    def __init__(self, cfg, splits=1):
        super().__init__()
        m = cfg['model']
        norm2d, norm1d = norm_layers(splits)
        self.trunk = ResNet(m['arch'], m['width'], 1, norm2d)
        self.head = head(self.trunk.num_features, m['hidden_dim'], m['out_dim'], m['head_bn'], norm1d)

    def forward(self, x):
        return self.head(self.trunk(x))


# ---- methods --------------------------------------------------------------------------
class MoCo(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c = cfg['moco']
        self.T, self.m, self.symmetric = c['temperature'], c['momentum'], c.get('symmetric', False)
        self.query = Encoder(cfg, c['bn_splits'])
        self.key = Encoder(cfg, c['bn_splits'])
        for pq, pk in zip(self.query.parameters(), self.key.parameters()):
            pk.data.copy_(pq.data)
            pk.requires_grad = False
        self.register_buffer('queue', F.normalize(torch.randn(cfg['model']['out_dim'], c['queue_length']), dim=0))
        self.ptr = 0

    @property
    def trunk(self):
        return self.query.trunk

    @torch.no_grad()
    def keys(self, x):
        perm = torch.randperm(x.shape[0])
        k = F.normalize(self.key(x[perm]), dim=1)
        return k[torch.argsort(perm)]

    def contrast(self, xq, xk):
        q = F.normalize(self.query(xq), dim=1)
        k = self.keys(xk)
        l_pos = (q * k).sum(1, keepdim=True)
        l_neg = q @ self.queue.clone().detach()
        logits = torch.cat([l_pos, l_neg], 1) / self.T
        return F.cross_entropy(logits, torch.zeros(len(q), dtype=torch.long)), k

    def forward(self, views):
        with torch.no_grad():
            for pq, pk in zip(self.query.parameters(), self.key.parameters()):
                pk.mul_(self.m).add_(pq.detach(), alpha=1 - self.m)
        if self.symmetric:
            l12, k2 = self.contrast(views[0], views[1])
            l21, k1 = self.contrast(views[1], views[0])
            loss, k = l12 + l21, torch.cat([k1, k2])
        else:
            loss, k = self.contrast(views[0], views[1])
        with torch.no_grad():
            n = k.shape[0]
            self.queue[:, self.ptr:self.ptr + n] = k.t()
            self.ptr = (self.ptr + n) % self.queue.shape[1]
        return loss


@torch.no_grad()
def sinkhorn(out, epsilon, iterations):
    Q = torch.exp(out / epsilon).t()
    K, B = Q.shape
    Q /= Q.sum()
    for _ in range(iterations):
        Q /= Q.sum(dim=1, keepdim=True)
        Q /= K
        Q /= Q.sum(dim=0, keepdim=True)
        Q /= B
    Q *= B
    return Q.t()


class SwAV(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        s = cfg['swav']
        self.encoder = Encoder(cfg)
        self.prototypes = nn.Linear(cfg['model']['out_dim'], s['num_prototypes'], bias=False)
        self.T, self.eps, self.iters = s['temperature'], s['epsilon'], s['sinkhorn_iterations']
        self.assign = s['crops_for_assign']
        self.freeze_iters = s['freeze_prototypes_iterations']

    @property
    def trunk(self):
        return self.encoder.trunk

    @torch.no_grad()
    def normalize_prototypes(self):
        self.prototypes.weight.copy_(F.normalize(self.prototypes.weight, dim=1))

    def forward(self, views):
        # one trunk forward per run of crops of the same resolution (SwAV's multi-res forward)
        feats, start = [], 0
        while start < len(views):
            end = start
            while end < len(views) and views[end].shape[-1] == views[start].shape[-1]:
                end += 1
            feats.append(self.trunk(torch.cat(views[start:end])))
            start = end
        z = F.normalize(self.encoder.head(torch.cat(feats)), dim=1)
        scores = self.prototypes(z)
        B, V = views[0].shape[0], len(views)
        loss = 0
        for c in self.assign:
            q = sinkhorn(scores[c * B:(c + 1) * B].detach(), self.eps, self.iters)
            sub = 0
            for v in range(V):
                if v != c:
                    sub -= torch.mean(torch.sum(q * F.log_softmax(scores[v * B:(v + 1) * B] / self.T, dim=1), dim=1))
            loss += sub / (V - 1)
        return loss / len(self.assign)


class SimCLR(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.encoder = Encoder(cfg)
        self.T = cfg['simclr']['temperature']

    @property
    def trunk(self):
        return self.encoder.trunk

    def forward(self, views):
        z = F.normalize(self.encoder(torch.cat(views)), dim=1)
        n = z.shape[0]
        B = n // 2
        sim = (z @ z.t()) / self.T
        sim = sim.masked_fill(torch.eye(n, dtype=torch.bool), float('-inf'))
        labels = torch.cat([torch.arange(B, n), torch.arange(0, B)])
        return F.cross_entropy(sim, labels)


def mlp(dims, bias=True):
    """Linear -> BatchNorm1d -> ReLU between the sizes in dims, the last Linear alone."""
    layers = []
    for i in range(len(dims) - 2):
        layers += [nn.Linear(dims[i], dims[i + 1], bias=bias), nn.BatchNorm1d(dims[i + 1]), nn.ReLU()]
    layers.append(nn.Linear(dims[-2], dims[-1], bias=bias))
    return nn.Sequential(*layers)


class BYOL(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        m, c = cfg['model'], cfg['byol']
        self.trunk = ResNet(m['arch'], m['width'], 1, nn.BatchNorm2d)
        self.projector = mlp([self.trunk.num_features, m['hidden_dim'], m['out_dim']])
        self.predictor = mlp([m['out_dim'], m['hidden_dim'], m['out_dim']])
        self.target_trunk, self.target_projector = copy.deepcopy(self.trunk), copy.deepcopy(self.projector)
        for p in list(self.target_trunk.parameters()) + list(self.target_projector.parameters()):
            p.requires_grad = False
        self.tau0, self.cosine = c['momentum'], c['cosine_momentum']

    def forward(self, views):
        online = [self.predictor(self.projector(self.trunk(v))) for v in views]
        with torch.no_grad():
            target = [self.target_projector(self.target_trunk(v)) for v in views]
        loss = 0
        for i, j in ((0, 1), (1, 0)):
            loss = loss + (2 - 2 * F.cosine_similarity(online[i], target[j], dim=1)).mean()
        return loss

    @torch.no_grad()
    def update_target(self, step, total):
        tau = self.tau0
        if self.cosine:
            tau = 1 - (1 - self.tau0) * (math.cos(math.pi * step / total) + 1) / 2
        for online, target in ((self.trunk, self.target_trunk), (self.projector, self.target_projector)):
            for po, pt in zip(online.parameters(), target.parameters()):
                pt.mul_(tau).add_(po, alpha=1 - tau)


class BarlowTwins(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        m, c = cfg['model'], cfg['barlow_twins']
        self.trunk = ResNet(m['arch'], m['width'], 1, nn.BatchNorm2d)
        dims = [self.trunk.num_features] + [m['hidden_dim']] * (c['proj_layers'] - 1) + [m['out_dim']]
        self.projector = mlp(dims, bias=False)
        self.bn = nn.BatchNorm1d(dims[-1], affine=False)
        self.lambd = c['lambda']

    def forward(self, views):
        z1, z2 = (self.bn(self.projector(self.trunk(v))) for v in views)
        c = z1.t() @ z2 / z1.shape[0]
        on = (torch.diagonal(c) - 1).pow(2).sum()
        off = c.pow(2).sum() - torch.diagonal(c).pow(2).sum()
        return on + self.lambd * off


class LARS(torch.optim.Optimizer):
    """The Barlow Twins code's LARS: exclude filters for biases and norm weights (ndim 1)."""
    def __init__(self, params, lr, momentum, weight_decay, eta, exclude_1d, no_decay_1d):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, eta=eta))
        self.exclude_1d, self.no_decay_1d = exclude_1d, no_decay_1d

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            for p in g['params']:
                if p.grad is None:
                    continue
                dp = p.grad
                if not (self.no_decay_1d and p.ndim == 1):
                    dp = dp.add(p, alpha=g['weight_decay'])
                if not (self.exclude_1d and p.ndim == 1):
                    pn, un, one = torch.norm(p), torch.norm(dp), torch.ones_like(p)
                    dp = dp.mul(torch.where(pn > 0, torch.where(un > 0, g['eta'] * pn / un, one), one))
                state = self.state[p]
                if 'mu' not in state:
                    state['mu'] = torch.zeros_like(p)
                mu = state['mu']
                mu.mul_(g['momentum']).add_(dp)
                p.add_(mu, alpha=-g['lr'])


def optimizer(model, o):
    params = [p for p in model.parameters() if p.requires_grad]
    if o.get('name', 'sgd') == 'lars':
        return LARS(params, o['lr'], o['momentum'], o['weight_decay'], o['trust_coefficient'],
                    o['exclude_bias_norm'], o['no_decay_bias_norm'])
    if o.get('no_decay_bias_norm'):
        params = [{'params': [p for p in params if p.ndim > 1]},
                  {'params': [p for p in params if p.ndim <= 1], 'weight_decay': 0}]
    return torch.optim.SGD(params, lr=o['lr'], momentum=o['momentum'], weight_decay=o['weight_decay'])


METHODS = {'moco': MoCo, 'swav': SwAV, 'simclr': SimCLR, 'byol': BYOL, 'barlow_twins': BarlowTwins}


# ---- kNN ------------------------------------------------------------------------------
@torch.no_grad()
def features(trunk, images, mean, std, batch=500):
    was = trunk.training
    trunk.eval()
    out = []
    for s in range(0, len(images), batch):
        x = torch.from_numpy(images[s:s + batch].astype(np.float32) / 255).unsqueeze(1)
        out.append(trunk((x - mean) / std))
    trunk.train(was)
    return F.normalize(torch.cat(out), dim=1)


@torch.no_grad()
def knn_top1(train_f, train_y, test_f, test_y, k, T, num_classes=10, chunk=500):
    hits = 0
    k = min(k, len(train_f))
    for s in range(0, len(test_f), chunk):
        sim = test_f[s:s + chunk] @ train_f.t()
        w, idx = sim.topk(k, dim=1)
        votes = torch.zeros(len(w), num_classes).scatter_add_(1, train_y[idx], (w / T).exp())
        hits += (votes.argmax(1) == test_y[s:s + chunk]).sum().item()
    return 100.0 * hits / len(test_f)


# ---- the settings ---------------------------------------------------------------------
def check_supported(method, cfg):
    """Refuses settings this twin does not implement, naming them."""
    bad = []
    o, m, d = cfg['optim'], cfg['model'], cfg['data']
    if o.get('name', 'sgd') not in ('sgd', 'lars'):
        bad.append('optim.name=' + o['name'])
    if o.get('nesterov'):
        bad.append('optim.nesterov=true')
    if o.get('name') == 'lars' and o.get('lars_clip'):
        bad.append('optim.lars_clip=true')
    if m['arch'] not in ResNet.LAYERS:
        bad.append('model.arch=' + m['arch'])
    if m.get('stem', 'auto') not in ('auto', 'cifar'):
        bad.append('model.stem=' + m['stem'])
    if d['name'] != 'fashion_mnist':
        bad.append('data.name=' + d['name'])
    if method == 'swav' and cfg['swav']['queue_length'] > 0:
        bad.append('swav.queue_length>0')
    if method == 'moco' and cfg['moco'].get('cosine_momentum'):
        bad.append('moco.cosine_momentum=true')
    if bad:
        sys.exit('ssl_reference_torch: not implemented here: ' + ', '.join(bad))


def iterations(cfg, per_epoch):
    """The run's iteration count and warm-up iterations (the last iteration is never warm-up)."""
    total = per_epoch * cfg['train']['epochs']
    return total, min(round(cfg['optim']['warmup_epochs'] * per_epoch), total - 1) if total > 0 else 0


def lr_at(it, total, warmup_iters, o):
    if it < warmup_iters:
        return o['lr'] * it / warmup_iters
    t = (it - warmup_iters) / max(1, total - warmup_iters)
    return o['final_lr'] + 0.5 * (o['lr'] - o['final_lr']) * (1 + math.cos(math.pi * t))


def training_data(cfg, workers):
    """Seeds torch and numpy, sets the threads, and gives the run's data: the multi-crop
    DataLoader over the training images, both splits' images and labels (the second the
    held-out part of train with data.val_split), mean and std."""
    seed = cfg['train']['seed']
    torch.manual_seed(seed)
    np.random.seed(seed)
    torch.set_num_threads(cfg['train']['threads'] or os.cpu_count())
    limit = cfg['data']['limit']
    train_x, train_y = fashion_mnist('train', limit=limit)
    test_x, test_y = fashion_mnist('test', limit=limit)
    if cfg['data'].get('val_split', 0):   # the kNN reads the held-out part, as crescent's recipes do
        (train_x, train_y), (test_x, test_y) = hold_out(train_x, train_y, cfg['data']['val_split'])
    mean, std = 0.2860, 0.3530       # the usual per-pixel figures of the train set
    data = MultiViewSet(train_x, cfg['crops'], cfg['augment'], mean, std)
    gen = torch.Generator().manual_seed(seed)
    loader = torch.utils.data.DataLoader(data, batch_size=cfg['data']['batch_size'], shuffle=True, drop_last=True,
                                         num_workers=workers, generator=gen, worker_init_fn=seed_worker,
                                         persistent_workers=workers > 0)
    return {'loader': loader, 'train_x': train_x, 'train_y': train_y, 'test_x': test_x, 'test_y': test_y,
            'mean': mean, 'std': std}


def knn_eval(trunk, d, knn):
    """kNN top-1 on the test (or held-out) split of training_data's dict d, by the trunk's features."""
    tr = features(trunk, d['train_x'], d['mean'], d['std'])
    te = features(trunk, d['test_x'], d['mean'], d['std'])
    return knn_top1(tr, torch.from_numpy(d['train_y']), te, torch.from_numpy(d['test_y']), knn['k'], knn['temperature'])


def train(method, cfg, workers):
    check_supported(method, cfg)
    epochs = cfg['train']['epochs']
    d = training_data(cfg, workers)
    loader = d['loader']
    model = METHODS[method](cfg)
    o = cfg['optim']
    opt = optimizer(model, o)
    per_epoch = len(loader)
    total, warmup = iterations(cfg, per_epoch)
    it, t0, losses = 0, time.perf_counter(), []
    model.train()
    for epoch in range(epochs):
        for views in loader:
            for g in opt.param_groups:
                g['lr'] = lr_at(it, total, warmup, o)
            if method == 'swav':
                model.normalize_prototypes()
            loss = model(views)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if method == 'swav' and it < model.freeze_iters:
                model.prototypes.weight.grad = None
            opt.step()
            if method == 'byol':
                model.update_target(it, total)
            losses.append(loss.item())
            it += 1
            if it % cfg['train']['log_every'] == 0:
                print(f'epoch {epoch + 1} it {it}/{total} loss {np.mean(losses[-per_epoch:]):.4f} '
                      f'lr {opt.param_groups[0]["lr"]:.4f} {time.perf_counter() - t0:.0f}s', file=sys.stderr, flush=True)
    seconds = time.perf_counter() - t0
    top1 = knn_eval(model.trunk, d, cfg['knn'])
    loss = float(np.mean(losses[-per_epoch:])) if losses else None
    return {'side': 'pytorch', 'method': method, 'epochs': epochs, 'seed': cfg['train']['seed'],
            'knn_top1': round(top1, 2),
            'train_seconds': round(seconds, 1), 'loss': loss and round(loss, 4), 'torch': torch.__version__}


# ---- step throughput (bench/ssl_methods.lua) -------------------------------------------
def bench_step(method, cfg, batch, steps, windows, warmup, modes):
    """Median img/s of whole train steps (forward, loss, backward, optimizer, and the
    method's own updates) on fixed synthetic crops of the config's sizes, per mode of
    harness_torch.CPU_MODES that runs on this CPU. One JSON line per mode:
    {"bench": "<mode>", "value": img/s}."""
    check_supported(method, cfg)
    c = cfg['crops']
    sizes = [s for s, n in zip(c['size'], c['num']) for _ in range(n)]
    data = [[torch.randn(batch, 1, s, s) for s in sizes] for _ in range(2)]
    for mode in cpu_modes(modes):
        channels_last, compiled, bf16 = cpu_mode(mode)
        torch.manual_seed(0)
        model = METHODS[method](cfg)
        views = data
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
            views = [[v.contiguous(memory_format=torch.channels_last) for v in vs] for vs in data]
        model.train()
        forward = torch.compile(model) if compiled else model
        opt = optimizer(model, cfg['optim'])
        it = [0]

        def window():
            for _ in range(steps):
                if method == 'swav':
                    model.normalize_prototypes()
                with autocast(bf16):
                    loss = forward(views[it[0] % 2])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                if method == 'byol':
                    model.update_target(it[0], 10 ** 6)
                it[0] += 1
        seconds = median_seconds(window, windows, warmup)
        print(json.dumps({'bench': mode, 'value': steps * batch / seconds}), flush=True)


# ---- component comparison (bench/parity_components.lua) --------------------------------
TWIN_PREFIX = {'moco': [('trunk.', 'query.trunk.'), ('head.', 'query.head.'), ('key_trunk.', 'key.trunk.'),
                        ('key_head.', 'key.head.')],
               'swav': [('trunk.', 'encoder.trunk.'), ('head.', 'encoder.head.'), ('prototypes.', 'prototypes.')],
               'simclr': [('trunk.', 'encoder.trunk.'), ('head.', 'encoder.head.')],
               'byol': [('', '')], 'barlow_twins': [('', '')]}


def twin_name(method, name):
    for a, b in TWIN_PREFIX[method]:
        if name.startswith(a):
            return b + name[len(a):]
    raise KeyError('no twin name for crescent tensor ' + name)


def compare(method, cfg, d, dtype, losses_only=False):
    """Loads crescent's initial weights and batches from d, steps the same way in `dtype`
    with the key shuffle as the identity, writes d/twin_<dtype>.safetensors (in f32); with
    losses_only, just the loss of every step."""
    from safetensors.torch import load_file, save_file
    init, inputs = load_file(os.path.join(d, 'init.safetensors')), load_file(os.path.join(d, 'inputs.safetensors'))
    dt = {'float32': torch.float32, 'float64': torch.float64}[dtype]
    inputs = {k: v.to(dt) for k, v in inputs.items()}
    torch.manual_seed(0)
    model = METHODS[method](cfg).to(dt)
    mine = dict(model.named_parameters())
    mine.update(dict(model.named_buffers()))
    own_init = {tn: t.detach().clone() for tn, t in model.named_parameters()}   # before crescent's weights
    names = {}
    for name, t in init.items():
        tn = 'queue' if name == 'queue' else twin_name(method, name)
        if tn not in mine:
            sys.exit(f'compare: the twin has no tensor {tn} for crescent\'s {name}')
        names[tn] = name
        with torch.no_grad():
            mine[tn].copy_(t.t() if name == 'queue' else t)
    missing = sorted(set(mine) - set(names))
    if missing:
        sys.exit('compare: crescent gave no value for ' + ', '.join(missing))
    torch.randperm = lambda n, **kw: torch.arange(n)
    B = cfg['data']['batch_size']
    S = cfg['moco']['bn_splits'] if method == 'moco' else 1
    n = B // S
    # the twin's group j holds samples i * S + j; crescent's group j holds j * n + i
    order = torch.tensor([j * n + i for i in range(n) for j in range(S)])
    back = torch.argsort(order)
    o = cfg['optim']
    opt = optimizer(model, o)
    total, warmup = iterations(cfg, min(cfg['data']['limit'] or 60000, 60000) // B)
    out, losses, step = {}, [], 0
    model.train()
    while f'step{step}.view0' in inputs:
        views, v = [], 0
        while f'step{step}.view{v}' in inputs:
            views.append(inputs[f'step{step}.view{v}'][order])
            v += 1
        for g in opt.param_groups:
            g['lr'] = lr_at(step, total, warmup, o)
        if method == 'swav':
            model.normalize_prototypes()
        if method == 'byol':   # crescent moves the target at the start of step k, with tau(k)
            model.update_target(step, total)
        ptr = getattr(model, 'ptr', 0)
        loss = model(views)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if method == 'swav' and step < model.freeze_iters:
            model.prototypes.weight.grad = None
        for tn, p in model.named_parameters():
            if p.grad is not None and not losses_only:
                out[f'grad.step{step}.{names[tn]}'] = p.grad.clone()
        opt.step()
        for tn, p in model.named_parameters():
            if not losses_only:
                out[f'after.step{step}.{names[tn]}'] = p.detach().clone()
        if method == 'moco':   # the keys just enqueued, back in crescent's order
            with torch.no_grad():
                model.queue[:, ptr:ptr + B] = model.queue[:, ptr:ptr + B][:, back]
        losses.append(loss.item())
        del inputs[f'step{step}.view0']
        step += 1
        if losses_only and step % 50 == 0:
            print(f'step {step} loss {np.mean(losses[-50:]):.4f}', file=sys.stderr, flush=True)
    if losses_only:
        save_file({'losses': torch.tensor(losses, dtype=torch.float64)}, os.path.join(d, f'twin_{dtype}.safetensors'))
        return
    for tn, t in list(model.named_parameters()) + list(model.named_buffers()):
        out['final.' + names[tn]] = (t.t() if tn == 'queue' else t).detach().clone().contiguous()
    for tn, t in own_init.items():   # the spread of the twin's own initial weights
        out['init_std.' + names[tn]] = t.double().std().reshape(1) if t.numel() > 1 else t.double().abs().reshape(1)
    out = {k: v.float() if v.is_floating_point() else v for k, v in out.items()}
    out['losses'] = torch.tensor(losses, dtype=torch.float64)
    knn_path = os.path.join(d, 'knn.safetensors')
    if os.path.exists(knn_path):
        k = load_file(knn_path)
        top1 = knn_top1(F.normalize(k['train'], dim=1), k['train_y'], F.normalize(k['test'], dim=1), k['test_y'],
                        200, 0.1)
        out['knn_top1'] = torch.tensor([top1], dtype=torch.float64)
    save_file(out, os.path.join(d, f'twin_{dtype}.safetensors'))


def lr_schedule(cfg, path):
    """The lr of every iteration of the run cfg describes, as train() sets it, into path (JSON)."""
    total, warmup = iterations(cfg, min(cfg['data']['limit'] or 60000, 60000) // cfg['data']['batch_size'])
    with open(path, 'w') as f:
        json.dump([lr_at(it, total, warmup, cfg['optim']) for it in range(total)], f)


def ks_distance(a, b):
    """Two-sample Kolmogorov-Smirnov distance: the largest gap between the empirical CDFs."""
    a, b = np.sort(np.asarray(a, np.float64)), np.sort(np.asarray(b, np.float64))
    grid = np.concatenate([a, b])
    return float(np.max(np.abs(np.searchsorted(a, grid, 'right') / len(a) - np.searchsorted(b, grid, 'right') / len(b))))


def compare_augment(cfg, d):
    """The crop draws and views crescent wrote to d/augment.safetensors beside
    torchvision's on the same images: per crop group, distances between the two
    distributions (KS) of the box's area fraction, aspect ratio and centre, of the jitter
    factors and of the views' pixel statistics, the flip and jitter rates, and how far
    crescent's resampled crop is from PIL's for the same box (in grey levels, jitter off).
    Writes d/augment.json: a list of rows {group, what, crescent, pytorch, distance, limit}."""
    from safetensors.torch import load_file
    c = {k: v.numpy() for k, v in load_file(os.path.join(d, 'augment.safetensors')).items()}
    images, _ = fashion_mnist('train')
    aug, crops = cfg['augment'], cfg['crops']
    mean, std = 0.2860, 0.3530
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    rows = []
    for g, (size, lo, hi) in enumerate(zip(crops['size'], crops['min_scale'], crops['max_scale'])):
        n = len(c[f'g{g}.area'])
        crop = transforms.RandomResizedCrop(size, scale=(lo, hi), ratio=(3 / 4, 4 / 3))
        probe = Image.fromarray(images[0], mode='L')
        boxes = np.array([crop.get_params(probe, crop.scale, crop.ratio) for _ in range(n)], np.float64)
        H, W = images.shape[1:]
        t = {'area': boxes[:, 2] * boxes[:, 3] / (H * W), 'log_ratio': np.log(boxes[:, 3] / boxes[:, 2]),
             'centre_x': boxes[:, 1] + boxes[:, 3] / 2, 'centre_y': boxes[:, 0] + boxes[:, 2] / 2,
             'flip': rng.random(n) < aug['flip'], 'jitter': rng.random(n) < aug['jitter']}
        if aug['jitter'] > 0:
            fb = transforms.ColorJitter(aug['brightness'], aug['contrast'])
            draws = [fb.get_params(fb.brightness, fb.contrast, None, None) for _ in range(n)]
            t['brightness'] = np.array([float(x[1]) for x in draws])
            t['contrast'] = np.array([float(x[2]) for x in draws])
        view = view_transform(size, (lo, hi), aug, mean, std)
        idx = c[f'g{g}.index'].astype(np.int64)
        pix = torch.stack([view(Image.fromarray(images[i], mode='L')) for i in idx]).numpy() * std + mean
        t['view_mean'] = pix.reshape(len(idx), -1).mean(1) * 255
        t['view_std'] = pix.reshape(len(idx), -1).std(1) * 255
        limit = 1.95 * math.sqrt(2 / n)     # KS at the 0.1% level for two samples of n
        for k in ('area', 'log_ratio', 'centre_x', 'centre_y', 'brightness', 'contrast', 'view_mean', 'view_std'):
            if k not in t:
                continue
            lim = 1.95 * math.sqrt(2 / len(t[k])) if k.startswith('view') else limit
            rows.append({'group': g, 'what': k + ' (KS)', 'crescent': float(np.median(c[f'g{g}.{k}'])),
                         'pytorch': float(np.median(t[k])), 'distance': ks_distance(c[f'g{g}.{k}'], t[k]),
                         'limit': lim})
        for k in ('flip', 'jitter'):
            p = float(np.mean(t[k]))
            rows.append({'group': g, 'what': k + ' rate', 'crescent': float(np.mean(c[f'g{g}.{k}'])), 'pytorch': p,
                         'distance': abs(float(np.mean(c[f'g{g}.{k}'])) - p),
                         'limit': 4 * math.sqrt(max(p * (1 - p), 1e-9) * 2 / n)})
        # the resampling: crescent's crop of (top, left, height, width, flip) against PIL's,
        # which rounds to integers after each pass (up to a grey level from crescent's f32)
        worst = 0.0
        for j, (i, top, left, h, w, flip) in enumerate(c[f'g{g}.boxes'].astype(np.int64)):
            img = Image.fromarray(images[i], mode='L').crop((left, top, left + w, top + h))
            img = img.resize((size, size), Image.BILINEAR)
            if flip:
                img = img.transpose(Image.FLIP_LEFT_RIGHT)
            worst = max(worst, float(np.abs(np.asarray(img, np.float64) - c[f'g{g}.resampled'][j] * 255).max()))
        rows.append({'group': g, 'what': 'resampled crop, max |crescent - PIL| (grey levels)', 'crescent': worst,
                     'pytorch': 0.0, 'distance': worst, 'limit': 1.5})
    with open(os.path.join(d, 'augment.json'), 'w') as f:
        json.dump(rows, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--method', required=True, choices=sorted(METHODS))
    ap.add_argument('--config', required=True, help='JSON of the resolved crescent recipe config')
    ap.add_argument('--workers', type=int, default=None, help='DataLoader workers (default: data.workers)')
    ap.add_argument('--compare', metavar='DIR', help='step on the weights and batches crescent wrote to DIR')
    ap.add_argument('--losses-only', action='store_true', help='--compare: keep only the loss of every step')
    ap.add_argument('--dtype', default='float32', choices=['float32', 'float64'], help='--compare: the twin\'s dtype')
    ap.add_argument('--augment', metavar='DIR', help='compare the crop draws and views crescent wrote to DIR')
    ap.add_argument('--lr-schedule', metavar='FILE', help='write the lr of every iteration (JSON) and stop')
    ap.add_argument('--bench', action='store_true', help='time train steps on synthetic crops (bench/ssl_methods.lua)')
    ap.add_argument('--batch', type=int, default=256, help='--bench: the batch')
    ap.add_argument('--steps', type=int, default=2, help='--bench: steps per timed window')
    ap.add_argument('--windows', type=int, default=3, help='--bench: timed windows (the median is reported)')
    ap.add_argument('--warmup', type=int, default=1, help='--bench: untimed windows first')
    ap.add_argument('--modes', default=','.join(CPU_MODES), help='--bench: the modes to time')
    a = ap.parse_args()
    with open(a.config) as f:
        cfg = json.load(f)
    torch.set_num_threads(cfg['train']['threads'] or os.cpu_count())
    if a.compare:
        compare(a.method, cfg, a.compare, a.dtype, a.losses_only)
        return
    if a.augment:
        compare_augment(cfg, a.augment)
        return
    if a.lr_schedule:
        lr_schedule(cfg, a.lr_schedule)
        return
    if a.bench:
        bench_step(a.method, cfg, a.batch, a.steps, a.windows, a.warmup, a.modes)
        return
    workers = a.workers if a.workers is not None else cfg['data']['workers']
    print(json.dumps(train(a.method, cfg, workers)), flush=True)


if __name__ == '__main__':
    main()
