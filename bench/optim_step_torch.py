#!/usr/bin/python3
"""optim_step_torch.py — the PyTorch twin of bench/optim_step.lua: one optimizer step
over ResNet-18's parameters (11.7M f32 values in 62 tensors) with torch.optim's foreach
implementations (SGD with momentum and weight decay, AdamW) and clip_grad_norm_, on the
same thread count (env CRESCENT_THREADS, default the core count). Prints one JSON line per
measurement {"bench": name, "value": ms, "unit": "ms/step"}."""
import json

import torch

from harness_torch import median_seconds, threads as default_threads

REPEATS = 11


def resnet18_shapes(num_classes=1000):
    shapes = [(64, 3, 7, 7), (64,), (64,)]
    cin = 64
    for width, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for block in range(2):
            s = stride if block == 0 else 1
            shapes += [(width, cin, 3, 3), (width,), (width,), (width, width, 3, 3), (width,), (width,)]
            if s != 1 or cin != width:
                shapes += [(width, cin, 1, 1), (width,), (width,)]
            cin = width
    shapes += [(num_classes, 512), (num_classes,)]
    return shapes



def main():
    threads = default_threads()
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    params = [torch.randn(s, requires_grad=True) for s in resnet18_shapes()]
    for p in params:
        p.grad = torch.randn(p.shape) * 1e-3
    n = sum(p.numel() for p in params)
    sgd = torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=5e-4, foreach=True)
    adamw = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, foreach=True)
    figures = {
        "sgd_step_resnet18": median_seconds(sgd.step, REPEATS, 2) * 1e3,
        "adamw_step_resnet18": median_seconds(adamw.step, REPEATS, 2) * 1e3,
        "clip_grad_norm_resnet18": median_seconds(
            lambda: torch.nn.utils.clip_grad_norm_(params, 1e9), REPEATS, 2) * 1e3,
    }
    for name, v in figures.items():
        print(json.dumps({"bench": name, "value": v, "unit": "ms/step"}))
    print(json.dumps({"bench": "optim_step_torch", "threads": threads, "numel": n, "figures": figures}))


if __name__ == "__main__":
    main()
