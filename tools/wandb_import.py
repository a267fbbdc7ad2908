#!/usr/bin/env python3
"""tools/wandb_import.py — crescent run folders into Weights & Biases, through wandb's
public API (wandb.init, run.log, run.summary), so that a solo-learn or lightly user
sees crescent runs beside their others.

    pip install wandb
    python3 tools/wandb_import.py runs/swav                       # online: needs `wandb login`
    WANDB_MODE=offline python3 tools/wandb_import.py runs/swav runs/moco
    wandb sync runs/swav/wandb/offline-run-*                      # later, from a machine online

Each folder becomes one W&B run named after it (project `crescent` unless --project):
its config.lua as the run's config, every row of metrics.jsonl logged against the
`iteration` (the x axis of every chart, so a resumed run's rows keep their place), and
results.json as the summary. wandb keeps its files in <run folder>/wandb.

Why not `wandb sync --sync-tensorboard <folder>`: wandb 0.30 removed that option (wandb
0.31 answers "Downgrade to wandb<=0.29.0 to use them"), and `sync_tensorboard=True`
watches the event files of a Python process's own writer, not files written before.
"""
import argparse
import json
import math
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# config.lua read by crescent's own loader (cr.config.load: a Lua file returning a table),
# printed as JSON
CONFIG_TO_JSON = (
    "package.path = arg[1] .. '/lua/?.lua;' .. arg[1] .. '/lua/?/init.lua;' .. package.path "
    "local cr = require 'crescent' "
    "io.write(require('crescent.util').json(cr.config.load(arg[2])))"
)


def fail(msg):
    sys.stderr.write('wandb_import: ' + msg + '\n')
    sys.exit(1)


def read_config(folder):
    path = os.path.join(folder, 'config.lua')
    if not os.path.isfile(path):
        return {}
    try:
        out = subprocess.run(['luajit', '-', ROOT, path], input=CONFIG_TO_JSON, capture_output=True, text=True,
                             timeout=60, check=True).stdout
        return json.loads(out)
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        fail(f"cannot read '{path}' ({e}); the run can go in without it: move it aside")


def number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def rows(folder):
    path = os.path.join(folder, 'metrics.jsonl')
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                fail(f"'{path}' line {n} is not JSON (a run killed mid-line? remove that line)")
            yield rec


def check_folder(folder):
    if not os.path.isdir(folder):
        fail(f"'{folder}' is not a folder: give a crescent run folder (runs/<run.name>)")
    if not os.path.isfile(os.path.join(folder, 'metrics.jsonl')):
        fail(f"'{folder}' has no metrics.jsonl: give a crescent run folder (runs/<run.name>)")


def import_run(wandb, folder, args):
    folder = os.path.normpath(folder)
    name = args.name or os.path.basename(folder)
    run = wandb.init(project=args.project, entity=args.entity, name=name, config=read_config(folder),
                     dir=folder, job_type='crescent', reinit='finish_previous')
    run.define_metric('iteration')
    run.define_metric('*', step_metric='iteration')
    logged = 0
    for rec in rows(folder):
        values = {k: v for k, v in rec.items() if k != 'phase' and number(v)}
        if 'iteration' in values:
            run.log(values)
            logged += 1
    results = os.path.join(folder, 'results.json')
    if os.path.isfile(results):
        with open(results) as f:
            run.summary.update({k: v for k, v in json.load(f).items() if number(v) or isinstance(v, str)})
    where = run.dir
    run.finish()
    print(f"wandb_import: '{folder}' -> W&B run '{name}' ({logged} rows; wandb's files in {where})")


def main():
    ap = argparse.ArgumentParser(description='crescent run folders into Weights & Biases (one W&B run each)')
    ap.add_argument('folders', nargs='+', help='run folders, runs/<run.name>')
    ap.add_argument('--project', default='crescent', help='the W&B project (default: crescent)')
    ap.add_argument('--entity', default=None, help='the W&B entity (default: yours)')
    ap.add_argument('--name', default=None, help="the W&B run's name (default: the folder's; one folder only)")
    args = ap.parse_args()
    if args.name and len(args.folders) > 1:
        fail('--name names one run; give one folder with it')
    for folder in args.folders:
        check_folder(folder)
    try:
        import wandb
    except ImportError:
        fail('the wandb package is not installed: pip install wandb')
    for folder in args.folders:
        import_run(wandb, folder, args)


if __name__ == '__main__':
    main()
