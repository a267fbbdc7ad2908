#!/usr/bin/python3
"""data_pipeline_torch.py — the PyTorch twin of bench/data_pipeline.lua: augmented
samples/s of the SwAV multi-crop (2 x 28 px + 4 x 14 px) and of the MoCo two views
(2 x 28 px, scale (0.2, 1)) on batches of random u8 28x28 images, with the batched torch
augmentation of bench/ssl_swav_torch.py (imported, not repeated), at 1 thread and at
CRESCENT_THREADS threads (default the core count). Prints one JSON line per figure:
{"bench": "<pipeline>@<threads>", "value": samples/s}.
  /usr/bin/python3 bench/data_pipeline_torch.py [--batch 256 --repeats 7 --warmup 2]"""
import argparse
import json

import torch

from harness_torch import median_seconds, threads as default_threads
from ssl_swav_torch import MOCO_TWO_VIEWS, SWAV_MULTICROP, multicrop

PIPELINES = (('swav_multicrop', SWAV_MULTICROP), ('moco_two_views', MOCO_TWO_VIEWS))



def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--batch', type=int, default=256)
    p.add_argument('--repeats', type=int, default=7)
    p.add_argument('--warmup', type=int, default=2)
    args = p.parse_args()
    if args.batch < 1 or args.repeats < 1 or args.warmup < 0:
        p.error('--batch and --repeats must be >= 1, --warmup >= 0')
    threads = default_threads()
    torch.set_num_interop_threads(1)
    gen = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (args.batch, 28, 28), dtype=torch.uint8, generator=gen)
    for name, spec in PIPELINES:
        for t in sorted({1, threads}):
            torch.set_num_threads(t)
            sec = median_seconds(lambda: multicrop(images, spec, gen), args.repeats, args.warmup)
            print(json.dumps({'bench': f'{name}@{t}', 'value': args.batch / sec}), flush=True)


if __name__ == '__main__':
    main()
