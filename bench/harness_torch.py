"""bench/harness_torch.py — what the PyTorch twins share (bench/harness.lua's other half):
the thread count both libraries use (env CRESCENT_THREADS, default the core count), the
median of timed repeats after untimed warm-up runs, the CPU modes a PyTorch user would try
for speed, and the FLOPs of a training step by PyTorch's own counter."""
import contextlib
import os
import statistics
import time

# The CPU speed modes of the step twins: eager NCHW, channels_last, torch.compile, bf16
# autocast with channels_last, and that under torch.compile. bf16 modes run only where the
# CPU has AVX512-BF16 (elsewhere PyTorch emulates them, slower than f32).
CPU_MODES = ('eager', 'channels_last', 'compile', 'bf16', 'bf16_compile')


def threads():
    """CRESCENT_THREADS, else the machine's core count."""
    return int(os.environ.get('CRESCENT_THREADS') or os.cpu_count() or 1)


def median_seconds(fn, repeats, warmup=1):
    """Median seconds of fn() over `repeats` runs after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def has_avx512_bf16():
    """Whether /proc/cpuinfo lists avx512_bf16."""
    try:
        with open('/proc/cpuinfo') as f:
            return 'avx512_bf16' in f.read().split()
    except OSError:
        return False


def cpu_mode(mode):
    """(channels_last, compile, bf16 autocast) of a CPU_MODES name; ValueError otherwise."""
    if mode not in CPU_MODES:
        raise ValueError(f'unknown mode {mode!r}; modes are {", ".join(CPU_MODES)}')
    return (mode in ('channels_last', 'bf16', 'bf16_compile'), mode in ('compile', 'bf16_compile'),
            mode in ('bf16', 'bf16_compile'))


def cpu_modes(names):
    """The modes of a comma-separated list that run on this CPU (bf16 ones need
    AVX512-BF16)."""
    modes = [m for m in names.split(',') if m]
    for m in modes:
        cpu_mode(m)
    return [m for m in modes if not cpu_mode(m)[2] or has_avx512_bf16()]


def autocast(enabled):
    """bf16 autocast on the cpu when enabled, else nothing."""
    import torch
    return torch.autocast('cpu', dtype=torch.bfloat16) if enabled else contextlib.nullcontext()


def step_flops(step):
    """FLOPs of one call of step() (forward and backward) by torch.utils.flop_counter, or
    None where this PyTorch has no counter."""
    try:
        from torch.utils.flop_counter import FlopCounterMode
    except ImportError:
        return None
    counter = FlopCounterMode(display=False)
    with counter:
        step()
    return counter.get_total_flops()


def matmul_peak(dtype, n=2048, repeats=7):
    """GFLOP/s of torch.mm on n x n matrices of dtype, the fastest of `repeats` after two
    warm-ups (a peak: the best run, on machines whose speed drifts)."""
    import torch
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    for _ in range(2):
        torch.mm(a, b)
    best = float('inf')
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best / 1e9
