#!/usr/bin/env python3
"""data_pipeline_jpeg_torch.py — the twin of `luajit bench/data_pipeline.lua source=jpeg`:
a folder of JPEG photographs read the way SwAV's and MoCo's own code read ImageNet,
torchvision's ImageFolder with PIL-image transforms in DataLoader workers, timed in
samples/s, and PIL's decode alone. The transforms follow the official repositories:
SwAV's main_swav.py multi-crop (RandomResizedCrop, flip, colour distortion with strength
1, PIL gaussian blur with radius in (0.1, 2) at p 0.5) and MoCo v2's aug_plus
(RandomResizedCrop scale (0.2, 1), jitter (0.4, 0.4, 0.4, 0.1) at p 0.8, grayscale 0.2,
PIL gaussian blur at p 0.5, flip), both normalised with ImageNet's statistics.
1 thread: the main process does the work (num_workers = 0, torch.set_num_threads(1));
all threads: that many DataLoader worker processes. Prints one JSON line per figure:
{"bench": "<pipeline>@<threads>" or "decode", "value": samples/s or files/s}.
  build/torchenv/bin/python bench/data_pipeline_jpeg_torch.py --root data/photos/train \
      [--batch 32 --batches 12 --decode-files 200]"""
import argparse
import json
import random
import time

import torch
import torchvision.datasets as datasets
import torchvision.transforms as T
from PIL import Image, ImageFilter

from harness_torch import threads as default_threads

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class PILGaussianBlur:
    """Blur with a radius drawn from (lo, hi) with probability p (as both repositories)."""

    def __init__(self, p=0.5, lo=0.1, hi=2.0):
        self.p, self.lo, self.hi = p, lo, hi

    def __call__(self, img):
        if random.random() > self.p:
            return img
        return img.filter(ImageFilter.GaussianBlur(radius=random.uniform(self.lo, self.hi)))


def swav_multicrop():
    color = T.Compose([T.RandomApply([T.ColorJitter(0.8, 0.8, 0.8, 0.2)], p=0.8), T.RandomGrayscale(p=0.2)])
    crops = []
    for size, n, scale in ((224, 2, (0.14, 1.0)), (96, 6, (0.05, 0.14))):
        t = T.Compose([T.RandomResizedCrop(size, scale=scale), T.RandomHorizontalFlip(p=0.5), color,
                       PILGaussianBlur(), T.ToTensor(), T.Normalize(MEAN, STD)])
        crops += [t] * n
    return lambda img: [t(img) for t in crops]


def moco_two_views():
    t = T.Compose([T.RandomResizedCrop(224, scale=(0.2, 1.0)),
                   T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8), T.RandomGrayscale(p=0.2),
                   PILGaussianBlur(), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
    return lambda img: [t(img), t(img)]


PIPELINES = (('swav_multicrop', swav_multicrop), ('moco_two_views', moco_two_views))


def loader_rate(root, transform, batch, batches, workers):
    """samples/s of the first `batches` batches, timed from the start of the epoch (as
    the crescent side: the workers' start-up is amortised over the batches)."""
    ds = datasets.ImageFolder(root, transform=transform)
    loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, drop_last=True, num_workers=workers)
    t0 = time.perf_counter()
    it = iter(loader)
    for _ in range(batches):
        next(it)
    rate = batches * batch / (time.perf_counter() - t0)
    del it
    return rate


def decode_rate(root, n):
    """files/s of PIL decoding n of the files whole to RGB, spread over the classes,
    after one untimed pass (as the crescent side: both read from the page cache)."""
    paths = [p for p, _ in datasets.ImageFolder(root).samples]
    step = max(1, len(paths) // n)

    def decode_all():
        for i in range(n):
            with Image.open(paths[i * step]) as im:
                im.convert('RGB').load()

    decode_all()
    t0 = time.perf_counter()
    decode_all()
    return n / (time.perf_counter() - t0)


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--root', required=True)
    p.add_argument('--batch', type=int, default=32)
    p.add_argument("--batches", type=int, default=12)
    p.add_argument('--decode-files', type=int, default=200)
    a = p.parse_args()
    threads = default_threads()
    torch.set_num_threads(1)
    counts = (1,) if threads == 1 else (1, threads)
    for name, make in PIPELINES:
        for t in counts:
            rate = loader_rate(a.root, make(), a.batch, a.batches, 0 if t == 1 else t)
            print(json.dumps({'bench': '%s@%d' % (name, t), 'value': rate}), flush=True)
    print(json.dumps({'bench': 'decode', 'value': decode_rate(a.root, a.decode_files)}), flush=True)


if __name__ == '__main__':
    main()
