"""bench/dist_torch.py — the PyTorch twin of bench/dist.lua: training images/s of the
supervised step (ResNet-18, CIFAR stem, base width W, 1 input channel, 10 classes; SGD
momentum 0.9, nesterov, weight decay 5e-4; 8 synthetic [B, 1, 28, 28] batches per rank,
cycled) on `nproc` cpu ranks of one thread each. nproc=1: one process, no process group
and no DDP (as crescent alone). nproc>1: the ranks are started by
torch.multiprocessing.spawn, join a gloo group at MASTER_ADDR=127.0.0.1 and a free port,
and train through torch.nn.parallel.DistributedDataParallel (bucket_mb MB buckets, buffers
broadcast, as crescent's DDP), each rank bound to a core of its own (as mpirun binds
crescent's ranks); B is per rank, so the global batch is nproc * B.
Each window's time is the slowest rank's; the figure is nproc * B * steps / time,
medians over the windows after warm-up steps.
  python3 bench/dist_torch.py [nproc=1] [width=16] [batch=64] [windows=5] [steps=5] [warmup=3] [bucket_mb=25]
Last line: {"bench": "dist_torch", "nproc": n, "value": img/s, "windows": [...]}, or
{"bench": "dist_torch", "skipped": why} (with one line saying why) where torch.distributed
or its gloo backend is unavailable. Run by /usr/bin/python3 (Debian's torch)."""
import datetime
import json
import os
import socket
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_supervised_torch import ResNet18, window_seconds  # noqa: E402  (the same model and steps)


def parse_args():
    args = {'nproc': 1, 'width': 16, 'batch': 64, 'windows': 5, 'steps': 5, 'warmup': 3, 'bucket_mb': 25.0}
    for a in sys.argv[1:]:
        k, _, v = a.partition('=')
        try:
            args[k] = type(args[k])(v)   # KeyError: an unknown name
        except (KeyError, ValueError):
            sys.exit('usage: python3 bench/dist_torch.py ' + ' '.join(f'[{k}={v}]' for k, v in args.items()))
    return args


def why_no_gloo():
    """None where torch.distributed with gloo can run, else the reason."""
    import torch.distributed as dist
    if not dist.is_available():
        return 'torch.distributed is not available in this torch build'
    if not dist.is_gloo_available():
        return "torch.distributed has no gloo backend in this torch build"
    return None


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def run(rank, nproc, args, port):
    """Trains on this rank; rank 0 prints the figures."""
    torch.set_num_threads(1)
    distributed = nproc > 1
    if distributed:
        # each rank on a core of its own, as mpirun's default binding (--bind-to core) puts
        # crescent's ranks
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[rank % len(cores)]})
        import torch.distributed as dist
        os.environ['MASTER_ADDR'] = '127.0.0.1'
        os.environ['MASTER_PORT'] = str(port)
        dist.init_process_group('gloo', rank=rank, world_size=nproc, timeout=datetime.timedelta(seconds=300))
    torch.manual_seed(0)
    width, batch = args['width'], args['batch']
    model = ResNet18(width)
    model.train()
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args['bucket_mb'])
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
    torch.manual_seed(1 + rank)  # each rank its own data
    times = window_seconds(model, opt, batch, args['warmup'], args['windows'], args['steps'])
    t = torch.tensor(times, dtype=torch.float64)
    if distributed:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank's window
    if rank == 0:
        rates = [nproc * batch * args['steps'] / x for x in t.tolist()]
        value = statistics.median(rates)
        print(f'torch {torch.__version__} {nproc} rank(s) x 1 thread, width {width}, batch {batch} per rank: '
              f'windows {[round(r) for r in rates]}', flush=True)
        print(json.dumps({'bench': 'dist_torch', 'nproc': nproc, 'value': value,
                          'windows': [round(r, 1) for r in rates]}), flush=True)
    if distributed:
        # Ends without destroy_process_group: with torch 1.13's gloo a rank sometimes spins
        # forever in the teardown after rank 0 (the store's host) has left. The barrier
        # keeps every rank until all are done; os._exit skips the teardown.
        dist.barrier()
        sys.stdout.flush()
        os._exit(0)


def main():
    args = parse_args()
    nproc = args['nproc']
    if nproc > 1:
        why = why_no_gloo()
        if why:
            print(f'dist_torch: skipped, {why}')
            print(json.dumps({'bench': 'dist_torch', 'skipped': why}))
            return
        os.environ.setdefault('GLOO_SOCKET_IFNAME', 'lo')  # offline: the loopback device
        import torch.multiprocessing as mp
        mp.spawn(run, args=(nproc, args, free_port()), nprocs=nproc, join=True)
    else:
        run(0, 1, args, None)


if __name__ == '__main__':
    main()
