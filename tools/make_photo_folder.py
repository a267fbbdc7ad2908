#!/usr/bin/env python3
"""make_photo_folder.py — a benchmark image folder of real photographs at ImageNet's size
distribution, for `bench/data_pipeline.lua source=jpeg` (issue 19). Noise images decode
at another speed than photographs, so the headline decode figures come from these.

The sources are the twelve nature photographs of Debian's mate-backgrounds package
(1280 x 1024 to 2560 x 1920; fetched with `apt-get download` into build/photo-src unless
there). Each output file is a different random window of one of them (a fifth to all of
its side), resized with Lanczos to an ImageNet size and saved as a JPEG of quality 90:
long side 500 for 70% of the files (500 x 375, 500 x 333 and their portraits, as most of
ImageNet), else 320 to 800 px, aspect 4:3, 3:2, 1:1 or 16:9. Layout: <dir>/train/<photo>/
<n>.jpg, one class per source photo, as torchvision's ImageFolder and
cr.data.image_folder read it.

  build/torchenv/bin/python tools/make_photo_folder.py data/photos [--n 4000] [--seed 0]

Needs Pillow (the torchenv of `make torchenv` has it)."""
import argparse
import glob
import os
import random
import subprocess
import sys

from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, 'build', 'photo-src')
PHOTOS = 'usr/share/backgrounds/mate/nature/*.jpg'
ASPECTS = ((4 / 3, 0.60), (3 / 2, 0.25), (1.0, 0.05), (16 / 9, 0.10))


def sources():
    """The source photographs, fetched and unpacked on first use."""
    found = sorted(glob.glob(os.path.join(SRC, PHOTOS)))
    if found:
        return found
    os.makedirs(SRC, exist_ok=True)
    subprocess.run(['apt-get', 'download', 'mate-backgrounds'], cwd=SRC, check=True)
    debs = glob.glob(os.path.join(SRC, 'mate-backgrounds_*.deb'))
    if not debs:
        sys.exit('make_photo_folder: apt-get download mate-backgrounds gave no .deb in ' + SRC)
    subprocess.run(['dpkg', '-x', debs[0], SRC], check=True)
    found = sorted(glob.glob(os.path.join(SRC, PHOTOS)))
    if not found:
        sys.exit('make_photo_folder: mate-backgrounds holds no ' + PHOTOS)
    return found


def target_size(rng):
    """(width, height) of one output file."""
    aspect = rng.choices([a for a, _ in ASPECTS], weights=[q for _, q in ASPECTS])[0]
    long_side = 500 if rng.random() < 0.7 else rng.randint(320, 800)
    short_side = max(1, round(long_side / aspect))
    return (long_side, short_side) if rng.random() < 0.75 else (short_side, long_side)


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('dir')
    p.add_argument('--n', type=int, default=4000)
    p.add_argument('--seed', type=int, default=0)
    a = p.parse_args()
    if a.n < 1:
        p.error('--n must be >= 1')
    rng = random.Random(a.seed)
    photos = [(os.path.splitext(os.path.basename(f))[0], Image.open(f).convert('RGB')) for f in sources()]
    for name, _ in photos:
        os.makedirs(os.path.join(a.dir, 'train', name), exist_ok=True)
    total = 0
    for i in range(a.n):
        name, im = photos[i % len(photos)]
        w, h = target_size(rng)
        # a window of the photo with the output's aspect, a fifth to all of what fits
        fit = min(im.width / w, im.height / h)
        scale = fit * rng.uniform(0.2, 1.0)
        cw, ch = max(1, int(w * scale)), max(1, int(h * scale))
        x, y = rng.randint(0, im.width - cw), rng.randint(0, im.height - ch)
        out = im.crop((x, y, x + cw, y + ch)).resize((w, h), Image.LANCZOS)
        path = os.path.join(a.dir, 'train', name, '%05d.jpg' % i)
        out.save(path, quality=90)
        total += os.path.getsize(path)
    print('make_photo_folder: %d JPEGs (quality 90) from %d photographs in %s/train, %.1f MB, %.0f KB each'
          % (a.n, len(photos), a.dir, total / 1e6, total / a.n / 1e3))


if __name__ == '__main__':
    main()
