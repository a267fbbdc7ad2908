"""bench/harness_torch.py — what the PyTorch twins share (bench/harness.lua's other half):
the thread count both libraries use (env CRESCENT_THREADS, default the core count) and
the median of timed repeats after untimed warm-up runs."""
import os
import statistics
import time


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
