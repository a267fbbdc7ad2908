#!/usr/bin/env bash
# tools/gpu_prepare.sh — everything tools/gpu_check.sh needs on the GPU machine, made here
# first: the build (sm_80 and sm_90), the Debian packages it lacks (.gpu/debs, through
# ../shared/gpu/fetch-debs.sh), the CUDA backend and oneDNN's library xz-compressed
# (.gpu/libcrescent_cuda.so.xz, 3.6 MB against 28; .gpu/libdnnl.so.3.xz, 7 MB against 54:
# the tree that travels holds 64 MiB; gpu_check.sh unpacks them into build/) and the
# first 30,000 Fashion-MNIST training images with the test set (.gpu/data; the whole
# training file would put the carried tree over the device tool's 64 MiB). Then, through the device tool:
#   run(command = "bash tools/gpu_check.sh",
#       carry = [".gpu", "build/libcrescent.so", "build/crescent_cdef.h", "build/crescent_loop.so"])
set -euo pipefail
cd "$(dirname "$0")/.."
make
bash ../shared/gpu/fetch-debs.sh lua-cjson
[ -f build/libcrescent_cuda.so ] || { echo "no build/libcrescent_cuda.so: the build needs nvcc and cuDNN" >&2; exit 1; }
xz -T2 -6 -c build/libcrescent_cuda.so > .gpu/libcrescent_cuda.so.xz
rm -f .gpu/libdnnl.so.3.xz
if [ -f build/onednn/lib/libdnnl.so.3 ]; then
  xz -T2 -6 -c build/onednn/lib/libdnnl.so.3 > .gpu/libdnnl.so.3.xz
fi
src=/usr/share/datasets/fashion-mnist
dst=.gpu/data/fashion-mnist
[ -f "$src/train-images-idx3-ubyte.gz" ] || { echo "no $src: run make deps first" >&2; exit 1; }
mkdir -p "$dst"
cp "$src"/t10k-*.gz "$dst"/
python3 - "$src" "$dst" 30000 <<'EOF'
import gzip, struct, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
# IDX: a 4-byte magic, then one 4-byte count per dim (the first is the number of items)
for name, header in (('train-images-idx3-ubyte', 16), ('train-labels-idx1-ubyte', 8)):
    data = gzip.open(f'{src}/{name}.gz').read()
    dims = struct.unpack(f'>{header // 4 - 1}I', data[4:header])
    item = 1
    for d in dims[1:]:
        item *= d
    out = data[:4] + struct.pack(f'>{len(dims)}I', n, *dims[1:]) + data[header:header + n * item]
    with gzip.open(f'{dst}/{name}.gz', 'wb', compresslevel=9) as f:
        f.write(out)
EOF
echo "ready: $(du -sh .gpu | cut -f1) in .gpu, $(du -ch build/libcrescent.so build/crescent_loop.so | tail -1 | cut -f1) of libraries carried beside it"
