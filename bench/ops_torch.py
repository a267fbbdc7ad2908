#!/usr/bin/python3
"""ops_torch.py — the PyTorch twin of bench/ops.lua: the same op benchmarks (per-op
overhead of add on 1-element tensors, 1024x1024 f32 matmul, the 2048x2048 matmul peak in
f32 and (where the CPU has AVX512-BF16) bf16 (the best of 7 runs), conv2d forward+backward on ResNet-shaped
layers, scaled_dot_product_attention forward+backward at ViT shapes), the same repeats,
medians and thread count (env CRESCENT_THREADS, default the machine's core count). Prints one JSON line per measurement,
{"bench": name, "value": x, "unit": u}, then a summary line {"bench": "ops_torch", ...}.
bench/ops.lua runs this script itself; it also runs alone."""
import json

import torch

from harness_torch import has_avx512_bf16, matmul_peak, median_seconds, threads as default_threads

REPEATS = 7
CONV_LAYERS = [  # name, input shape, out channels, kernel, padding (same as ops.lua)
    ("conv_64x56x56_3x3", (8, 64, 56, 56), 64, 3, 1),
    ("conv_128x28x28_3x3", (8, 128, 28, 28), 128, 3, 1),
    ("conv_256x14x14_1x1_to_1024", (8, 256, 14, 14), 1024, 1, 0),
]



def bench_add(requires_grad, n=100000):
    a = torch.tensor([1.5], requires_grad=requires_grad)
    b = torch.tensor([2.5])

    def loop():
        for _ in range(n):
            a + b

    return median_seconds(loop, REPEATS) / n * 1e6


def bench_matmul(size=1024):
    a = torch.randn(size, size)
    b = torch.randn(size, size)
    t = median_seconds(lambda: torch.mm(a, b), 11)
    return 2.0 * size ** 3 / t / 1e9


ATTENTION_SHAPES = [  # name, B, heads, tokens, head dim (same as ops.lua)
    ("attention_b64_h3_t50_d64", 64, 3, 50, 64),
    ("attention_b8_h6_t197_d64", 8, 6, 197, 64),
]


def bench_attention(b, h, t, d):
    q, k, v = (torch.randn(b, h, t, d, requires_grad=True) for _ in range(3))
    gy = torch.randn(b, h, t, d)

    def step():
        q.grad = k.grad = v.grad = None
        torch.nn.functional.scaled_dot_product_attention(q, k, v).backward(gy)

    return median_seconds(step, 11) * 1e3


def bench_conv(shape, cout, k, pad):
    x = torch.randn(*shape, requires_grad=True)
    w = torch.randn(cout, shape[1], k, k, requires_grad=True)
    y = torch.nn.functional.conv2d(x, w, None, padding=pad)
    gy = torch.randn(y.shape)

    def step():
        x.grad = None
        w.grad = None
        out = torch.nn.functional.conv2d(x, w, None, padding=pad)
        out.backward(gy)

    return median_seconds(step, 11) * 1e3


def main():
    threads = default_threads()
    torch.set_num_threads(threads)
    results = {}

    def emit(name, value, unit):
        results[name] = value
        print(json.dumps({"bench": name, "value": value, "unit": unit}), flush=True)

    emit("add_overhead_nograd", bench_add(False), "us/op")
    emit("add_overhead_grad", bench_add(True), "us/op")
    emit("matmul_1024_f32", bench_matmul(), "GFLOP/s")
    emit("matmul_2048_f32", matmul_peak(torch.float32), "GFLOP/s")
    if has_avx512_bf16():
        emit("matmul_2048_bf16", matmul_peak(torch.bfloat16), "GFLOP/s")
    for name, shape, cout, k, pad in CONV_LAYERS:
        emit(name, bench_conv(shape, cout, k, pad), "ms/iter")
    for name, b, h, t, d in ATTENTION_SHAPES:
        emit(name, bench_attention(b, h, t, d), "ms/iter")
    summary = {"bench": "ops_torch", "threads": threads, "torch": torch.__version__}
    summary.update(results)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
