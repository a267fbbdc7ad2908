#!/usr/bin/env python3
"""tools/fetch_onednn.py — oneDNN 3.2 for the build, from Intel's wheels on PyPI (make deps).

Debian 12 ships oneDNN 2.6, whose bf16 AMX products ran at a third of the rate of 3.x's
(579 against PyTorch's oneDNN 3 at 1,986 GFLOP/s in one run, a 2048^2 product on 2 cores;
3.2 alone reached 3,127 in a C program). Intel publishes 3.x as PyPI
wheels; the GNU OpenMP build (onednn-cpu-gomp, 2023.2.0 = oneDNN 3.2) shares libgomp with
crescent's own loops, so one thread pool serves both (the newer wheels use TBB and SYCL).
The wheels are pinned by SHA-256; only the headers and libdnnl.so.3 are kept.

usage: python3 tools/fetch_onednn.py DEST     (DEST/include/oneapi/dnnl, DEST/lib/libdnnl.so.3)
"""
import hashlib
import io
import os
import re
import shutil
import sys
import urllib.request
import zipfile

VERSION = '2023.2.0'
WHEELS = {  # package: sha256 of its manylinux1 x86-64 wheel
    'onednn-cpu-gomp': '2f22a54d6a890ed14bfa185d42a4be65d8b5b1df85dc1f0f3a9abe31620416fb',
    'onednn-devel-cpu-gomp': '9763c69e8c907e119056bd52ad918ca84ac9ba939d130a99dfa95ccca3e5e284',
}


def wheel_bytes(package, sha256):
    # the simple index (PEP 503) lists each file as <a href="URL#sha256=HEX">
    with urllib.request.urlopen(f'https://pypi.org/simple/{package}/', timeout=60) as r:
        index = r.read().decode()
    urls = re.findall(r'href="([^"#]+)#sha256=' + sha256 + '"', index)
    if not urls:
        sys.exit(f'fetch_onednn: PyPI lists no {package} {VERSION} wheel with the pinned SHA-256')
    with urllib.request.urlopen(urls[0], timeout=600) as r:
        data = r.read()
    if hashlib.sha256(data).hexdigest() != sha256:
        sys.exit(f'fetch_onednn: {package} {VERSION}: the download does not match the pinned SHA-256')
    return zipfile.ZipFile(io.BytesIO(data))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    dest = sys.argv[1]
    staging = dest + '.partial'
    shutil.rmtree(staging, ignore_errors=True)
    for package, sha256 in WHEELS.items():
        wheel = wheel_bytes(package, sha256)
        for name in wheel.namelist():
            # <package>-<version>.data/data/{include,lib}/...
            parts = name.split('/')
            if len(parts) < 4 or parts[1] != 'data':
                continue
            rel = '/'.join(parts[2:])
            if not (rel.startswith('include/') or rel == 'lib/libdnnl.so.3'):
                continue
            path = os.path.join(staging, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, 'wb') as f:
                f.write(wheel.read(name))
    if not os.path.isfile(os.path.join(staging, 'lib/libdnnl.so.3')):
        sys.exit('fetch_onednn: the wheels held no lib/libdnnl.so.3')
    shutil.rmtree(dest, ignore_errors=True)
    os.rename(staging, dest)  # whole or not at all: a killed fetch leaves no half folder
    print(f'onednn: oneDNN 3.2 (PyPI onednn-cpu-gomp {VERSION}) in {dest}')


if __name__ == '__main__':
    main()
