#!/usr/bin/env python3
# tools/ncu_summary.py — one line per kernel from an Nsight Compute CSV export
# (`ncu --import run.ncu-rep --csv --page raw`): calls, total and mean GPU time, the DRAM
# bytes it moved and their rate, largest total first. tools/gpu_check.sh's `kernels` part
# runs it over one bf16 SwAV step of bench/gpu_swav.lua.
#   python3 tools/ncu_summary.py raw.csv [top]
import csv
import re
import sys
from collections import defaultdict


def short_name(name):
    """The kernel's name without its return type, arguments and template parameters."""
    name = name.replace('(anonymous namespace)::', '')
    depth, out = 0, []
    for ch in name:
        if ch == '<':
            depth += 1
        elif ch == '>':
            depth -= 1
        elif ch == '(' and depth == 0:
            break
        elif depth == 0:
            out.append(ch)
    name = ''.join(out).strip()
    return name[5:] if name.startswith('void ') else name


def number(text):
    return float((text or '0').replace(',', '') or 0)


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    rows = list(csv.DictReader(open(path)))
    if rows and rows[0].get('ID', '') == '':
        rows = rows[1:]  # the units row
    totals = defaultdict(lambda: [0, 0.0, 0.0])
    for r in rows:
        name = short_name(r['Kernel Name'])
        t = totals[name]
        t[0] += 1
        t[1] += number(r['gpu__time_duration.sum'])  # ns (--print-units base)
        t[2] += number(r.get('dram__bytes_read.sum')) + number(r.get('dram__bytes_write.sum'))
    all_ns = sum(t[1] for t in totals.values())
    print(f'{len(rows)} kernels, {all_ns / 1e6:.2f} ms of GPU time')
    print(f'{"kernel":60s} {"calls":>6s} {"ms":>8s} {"%":>6s} {"us/call":>8s} {"GB":>8s} {"GB/s":>7s}')
    for name, (n, ns, b) in sorted(totals.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f'{name[:60]:60s} {n:6d} {ns / 1e6:8.3f} {100 * ns / all_ns:6.1f} {ns / n / 1e3:8.1f} '
              f'{b / 1e9:8.3f} {b / ns if ns else 0:7.0f}')


if __name__ == '__main__':
    main()
