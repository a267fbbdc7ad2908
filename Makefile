# crescent — build, dependencies, tests and benchmarks.
#   make        build build/libcrescent.so (feature probes print ✓/✗)
#   make deps   apt-get only the missing Debian packages, then pydeps (PyPI, when reachable)
#   make test   deps, build, every spec; last line "N passed, N failed"
#   make check-all  make test, then the longer checks (the combination matrix at nightly size)
#   make run    the main recipe (recipes/swav.lua)
#   make bench  benchmarks beside their PyTorch twins
#   make sanitize  the C library with ASan + UBSan (build/sanitize), then every spec against it
#   make fuzz   100,000 random calls of the Lua API with bad arguments: no crash, no hang
#   make torchenv  a current PyTorch + torchvision from PyPI in build/torchenv (learning parity)
#   make install PREFIX=~/.local   the Lua modules, the native files and bin/crescent, laid out as
#               LuaRocks does (PREFIX/share/lua/5.1, PREFIX/lib/lua/5.1/crescent, PREFIX/bin)
SHELL := /bin/bash
, := ,
BUILD := build
CC ?= cc
# ARCH: the build runs where it was built (CI, the GPU machine builds its own); override
# with ARCH=-march=x86-64-v3 for a portable library.
ARCH ?= -march=native
# -fno-trapping-math -fno-math-errno: nothing in crescent reads floating-point exception
# flags or errno after math calls, and with them GCC vectorises selects and sqrtf. No
# -ffast-math: sums keep their order and NaN/inf keep their meaning.
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -O3 $(ARCH) -fPIC -fopenmp -g -fno-trapping-math -fno-math-errno \
               -Wall -Wextra -Werror -Wno-unused-parameter -Icsrc -Icsrc/include -Icsrc/core -Icsrc/gpu -Icsrc/ops -Icsrc/autograd
# -z defs: every symbol resolved at link time. -z nodelete: LuaJIT dlcloses the library
# at exit while libgomp's idle threads still run in it, which crashed at exit.
LDLIBS := -lm -lz -lturbojpeg -lpng -lpthread -fopenmp -Wl,-z,defs -Wl,-z,nodelete

# Debian packages: what building and testing need, and what benchmarks add.
# dataset-fashion-mnist: the data of recipes/supervised.lua (/usr/share/datasets/fashion-mnist).
# chromium: report_spec renders the run report headless. python3-torch: torch_import_spec
# loads PyTorch-exported weights (Debian's torch 1.13; the benchmark twins use build/torchenv).
DEPS_TEST := luajit libluajit-5.1-dev lua-busted lua-check tmux lua-cjson zlib1g-dev \
             libturbojpeg0-dev libpng-dev dataset-fashion-mnist python3-venv libopenmpi-dev openmpi-bin \
             luarocks libreadline8 chromium python3-torch
# libopenblas0-openmp: Debian's torch calls the system BLAS, the slow netlib one unless
# OpenBLAS is installed; a fair matmul comparison needs the fast one.
DEPS_BENCH := python3-torch libopenblas0-openmp

# ---- feature probes -------------------------------------------------------------
# oneDNN 3.2 from Intel's PyPI wheels (tools/fetch_onednn.py, run by make deps): Debian 12's
# 2.6 multiplied bf16 matrices at a third of oneDNN 3's rate on AMX. Always build/onednn,
# whatever BUILD is.
ONEDNN_HOME := build/onednn
HAVE_DNNL := $(shell test -f $(ONEDNN_HOME)/include/oneapi/dnnl/dnnl.h -a -f $(ONEDNN_HOME)/lib/libdnnl.so.3 && echo 1)
CUDA_HOME ?= /usr/local/cuda
HAVE_NVCC := $(shell test -x $(CUDA_HOME)/bin/nvcc && echo 1)
CUDNN_HOME ?= $(CUDA_HOME)
HAVE_CUDNN := $(shell ls $(CUDNN_HOME)/include/cudnn.h /usr/include/cudnn.h $(CUDA_HOME)/include/*/cudnn.h 2>/dev/null | head -1)
NCCL_HOME ?= $(CUDA_HOME)
HAVE_NCCL := $(shell ls $(NCCL_HOME)/include/nccl.h /usr/include/nccl.h 2>/dev/null | head -1)
MPICC ?= mpicc
HAVE_MPI := $(shell command -v $(MPICC) >/dev/null 2>&1 && echo 1)

# SAN: sanitizer flags for compiling and linking (make sanitize sets them)
SAN ?=
CFLAGS := $(CFLAGS_BASE) $(SAN)
# libdnnl.so.3 is linked beside libcrescent.so ($(BUILD)/libdnnl.so.3, found through $$ORIGIN)
# so the build folder, and an install, carry it along
ifeq ($(HAVE_DNNL),1)
CFLAGS += -DCR_HAVE_DNNL -I$(ONEDNN_HOME)/include
LDLIBS += -L$(BUILD) -l:libdnnl.so.3 -Wl,-rpath,'$$ORIGIN'
DNNL_LIB := $(BUILD)/libdnnl.so.3
endif
# the toolkit's headers tell csrc/gpu/cuda_probe.c which CUDA version the build targets
ifeq ($(HAVE_NVCC),1)
CFLAGS += -DCR_HAVE_CUDA -I$(CUDA_HOME)/include
endif
LDLIBS += -ldl $(SAN)

SRCS := $(wildcard csrc/core/*.c csrc/gpu/*.c csrc/ops/*.c csrc/autograd/*.c csrc/optim/*.c csrc/data/*.c \
                  csrc/ssl/*.c csrc/io/*.c csrc/dist/*.c)
OBJS := $(patsubst csrc/%.c,$(BUILD)/obj/%.o,$(SRCS))
HDRS := $(wildcard csrc/*.h csrc/include/*.h csrc/include/ops/*.h csrc/core/*.h csrc/gpu/*.h csrc/ops/*.h \
                  csrc/autograd/*.h csrc/optim/*.h csrc/data/*.h csrc/loop/*.h csrc/ssl/*.h csrc/io/*.h csrc/dist/*.h)

.PHONY: all deps onednn pydeps test check-all bench clean probes lint run install torchenv sanitize fuzz FORCE
LOOP_SRCS := $(wildcard csrc/loop/*.c)
# The CUDA backend is a library of its own, opened at run time by gpu/cuda_loader.c: built
# when nvcc and cuDNN are present, and libcrescent.so never needs a CUDA library to load.
CUDA_LIB := $(if $(and $(HAVE_NVCC),$(HAVE_CUDNN)),$(BUILD)/libcrescent_cuda.so)
# The MPI transport of cpu collectives is a library of its own too (csrc/dist/mpi/, built with
# mpicc when it is present), opened by lua/crescent/dist/comm.lua only in an MPI run.
MPI_LIB := $(if $(HAVE_MPI),$(BUILD)/libcrescent_mpi.so)
all: probes $(BUILD)/libcrescent.so $(BUILD)/crescent_cdef.h $(if $(LOOP_SRCS),$(BUILD)/crescent_loop.so) $(CUDA_LIB) \
     $(MPI_LIB)

probes:
	@echo "crescent features:"
	@echo "  $(if $(HAVE_DNNL),✓ oneDNN 3.2 in $(ONEDNN_HOME),✗ oneDNN: none in $(ONEDNN_HOME) (make deps fetches it))"
	@echo "  $(if $(HAVE_NVCC),✓,✗) CUDA (nvcc at $(CUDA_HOME))"
	@echo "  $(if $(HAVE_CUDNN),✓,✗) cuDNN (CUDNN_HOME=$(CUDNN_HOME))"
	@echo "  $(if $(CUDA_LIB),✓ GPU backend build/libcrescent_cuda.so for $(CUDA_ARCHS),✗ GPU backend: needs nvcc and cuDNN)"
	@echo "  $(if $(and $(CUDA_LIB),$(HAVE_NCCL)),✓ NCCL in the GPU backend,✗ NCCL (needs the GPU backend and nccl.h))"
	@echo "  $(if $(HAVE_MPI),✓ MPI build/libcrescent_mpi.so,✗ MPI: no $(MPICC) (libopenmpi-dev); cpu ranks need it)"

# Objects depend on the flags too, so a build that gains oneDNN (or loses it) recompiles.
$(BUILD)/flags: FORCE
	@mkdir -p $(BUILD)
	@echo '$(CFLAGS) $(LDLIBS) $(NVCCFLAGS)' | cmp -s - $@ || echo '$(CFLAGS) $(LDLIBS) $(NVCCFLAGS)' > $@

$(BUILD)/obj/%.o: csrc/%.c $(HDRS) $(BUILD)/flags
	@mkdir -p $(dir $@)
	@echo "  CC $<"
	@$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libdnnl.so.3: $(ONEDNN_HOME)/lib/libdnnl.so.3
	@mkdir -p $(BUILD)
	@ln -sfr $< $@

$(BUILD)/libcrescent.so: $(OBJS) $(BUILD)/flags $(DNNL_LIB)
	@echo "  LD $@"
	@$(CC) -shared -Wl,-soname,libcrescent.so -o $@.tmp $(OBJS) $(LDLIBS) && mv -f $@.tmp $@  # rename: running processes keep the old file

# ---- the CUDA backend: C glue (csrc/cuda/*.c) and kernels (csrc/cuda/kernels/*.cu) for
# sm_80 (A100) and sm_90 (H100/H200), plus PTX for newer GPUs to compile at load time.
# cudart is linked statically; cuBLAS comes from CUDA_HOME or LD_LIBRARY_PATH at run time.
CUDA_ARCHS ?= sm_80 sm_90
NVCC := $(CUDA_HOME)/bin/nvcc
CUDNN_INC := $(dir $(HAVE_CUDNN))
# machine code for each of CUDA_ARCHS, and PTX of the last one
GENCODE := $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a:sm_%=%),code=$(a)) \
           -gencode arch=compute_$(lastword $(CUDA_ARCHS:sm_%=%)),code=compute_$(lastword $(CUDA_ARCHS:sm_%=%))
NVCCFLAGS := -O3 -std=c++17 -Xcompiler -fPIC -Icsrc/include -Icsrc/core -Icsrc/gpu -Icsrc/cuda/kernels $(GENCODE)
# NCCL (GPU collectives) is part of the backend when its header is there
CUDA_NCCL_CFLAGS := $(if $(HAVE_NCCL),-DCR_HAVE_NCCL -I$(dir $(HAVE_NCCL)))
CUDA_NCCL_LIBS := $(if $(HAVE_NCCL),-L$(NCCL_HOME)/lib64 -lnccl -Wl$(,)-rpath$(,)$(NCCL_HOME)/lib64)
CUDA_C_SRCS := $(wildcard csrc/cuda/*.c)
CUDA_CU_SRCS := $(wildcard csrc/cuda/kernels/*.cu)
CUDA_OBJS := $(patsubst csrc/%.c,$(BUILD)/obj/%.o,$(CUDA_C_SRCS)) \
             $(patsubst csrc/%.cu,$(BUILD)/obj/%.o,$(CUDA_CU_SRCS))
CUDA_HDRS := $(wildcard csrc/cuda/*.h csrc/cuda/kernels/*.h csrc/cuda/kernels/*.cuh) csrc/gpu/gpu_chunks.h \
             csrc/core/half.h csrc/core/rng.h

$(BUILD)/obj/cuda/%.o: csrc/cuda/%.c $(HDRS) $(CUDA_HDRS) $(BUILD)/flags
	@mkdir -p $(dir $@)
	@echo "  CC $<"
	@$(CC) $(CFLAGS) -Icsrc/cuda -I$(CUDNN_INC) $(CUDA_NCCL_CFLAGS) -c $< -o $@

$(BUILD)/obj/cuda/kernels/%.o: csrc/cuda/kernels/%.cu $(CUDA_HDRS) $(BUILD)/flags
	@mkdir -p $(dir $@)
	@echo "  NVCC $<"
	@$(NVCC) $(NVCCFLAGS) -c $< -o $@

# the Philox draws repeat the cpu's f32 arithmetic bit for bit: no fused multiply-adds
$(BUILD)/obj/cuda/kernels/random.o: NVCCFLAGS += -fmad=false

$(BUILD)/libcrescent_cuda.so: $(CUDA_OBJS) $(BUILD)/libcrescent.so
	@echo "  LD $@"
	@$(CC) -shared -o $@.tmp $(CUDA_OBJS) -L$(BUILD) -lcrescent -L$(CUDA_HOME)/lib64 -L$(CUDNN_HOME)/lib64 \
	  -lcudnn -lcublas $(CUDA_NCCL_LIBS) -lcudart_static -lrt -ldl -lpthread -lstdc++ -lm \
	  -Wl,-rpath,'$$ORIGIN' -Wl,-rpath,$(CUDA_HOME)/lib64 -Wl,-z,defs && mv -f $@.tmp $@

$(BUILD)/obj/dist/mpi/%.o: csrc/dist/mpi/%.c $(HDRS) $(BUILD)/flags
	@mkdir -p $(dir $@)
	@echo "  MPICC $<"
	@$(MPICC) $(CFLAGS) -c $< -o $@

$(BUILD)/libcrescent_mpi.so: $(patsubst csrc/%.c,$(BUILD)/obj/%.o,$(wildcard csrc/dist/mpi/*.c)) $(BUILD)/libcrescent.so
	@echo "  LD $@"
	@$(MPICC) -shared -o $@.tmp $(filter %.o,$^) -L$(BUILD) -lcrescent -Wl,-rpath,'$$ORIGIN' -Wl,-z,defs \
	  -fopenmp -lm $(SAN) && mv -f $@.tmp $@

# The step loop is a Lua C module (luaopen_crescent_loop), apart from libcrescent.so: it
# uses the Lua C API, whose symbols come from the luajit executable (Debian links LuaJIT
# statically into it), so this one is linked without -z defs.
LUA_INC := /usr/include/luajit-2.1
$(BUILD)/crescent_loop.so: $(LOOP_SRCS) $(HDRS) $(BUILD)/libcrescent.so $(BUILD)/flags
	@echo "  LD $@"
	@$(CC) $(CFLAGS) -I$(LUA_INC) -shared -o $@.tmp $(LOOP_SRCS) -L$(BUILD) -Wl,-rpath,'$$ORIGIN' \
	  -lcrescent -lm && mv -f $@.tmp $@

# The FFI declarations are the public header itself, preprocessed.
$(BUILD)/crescent_cdef.h: $(HDRS)
	@mkdir -p $(BUILD)
	@$(CC) -E -P -DCR_CDEF -Icsrc/include csrc/include/crescent.h | grep -v '^\s*$$' > $@.tmp && mv -f $@.tmp $@

# ---- install: what `require 'crescent'` loads, in the layout of LuaRocks (whose `luarocks make
# rocks/crescent-scm-1.rockspec` runs this target with its own directories). The native files of
# the build go together into LIBDIR/crescent/, where lua/crescent/native_files.lua finds them
# (beside PREFIX/share/lua/5.1, or through LUA_CPATH). The crescent folders are replaced whole,
# so no file of an older install (a CUDA backend this build lacks) stays beside the new ones.
# crescent.lua at the root is not installed: it only serves `require` from the checkout.
PREFIX ?= /usr/local
LUADIR ?= $(PREFIX)/share/lua/5.1
LIBDIR ?= $(PREFIX)/lib/lua/5.1
BINDIR ?= $(PREFIX)/bin
NATIVE_FILES := $(BUILD)/libcrescent.so $(DNNL_LIB) $(BUILD)/crescent_cdef.h $(if $(LOOP_SRCS),$(BUILD)/crescent_loop.so) \
                $(CUDA_LIB) $(MPI_LIB)
install: all
	@test -n "$(LUADIR)" -a -n "$(LIBDIR)" -a -n "$(BINDIR)" || { echo "install: LUADIR, LIBDIR and BINDIR must not be empty"; exit 1; }
	@rm -rf "$(LUADIR)/crescent" "$(LIBDIR)/crescent"
	@mkdir -p "$(LUADIR)" "$(LIBDIR)/crescent"
	@cp -R lua/crescent "$(LUADIR)/"
	@cp $(NATIVE_FILES) "$(LIBDIR)/crescent/"
	@if [ -f bin/crescent ]; then mkdir -p "$(BINDIR)" && install -m 755 bin/crescent "$(BINDIR)/"; fi
	@echo "installed: Lua modules in $(LUADIR)/crescent, native files in $(LIBDIR)/crescent$(if \
	  $(wildcard bin/crescent),$(,) bin/crescent in $(BINDIR))"

deps:
	@missing=""; for p in $(DEPS_TEST) $(EXTRA_DEPS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	else echo "deps: all present"; fi
	@$(MAKE) --no-print-directory onednn pydeps
# oneDNN 3.2 into build/onednn (see ONEDNN_HOME); without it the build runs crescent's own
# kernels everywhere (correct, several times slower)
onednn:
	@$(if $(HAVE_DNNL),echo "onednn: present",timeout 600 /usr/bin/python3 tools/fetch_onednn.py $(ONEDNN_HOME) || \
	  echo "onednn: not fetched (see above); building without oneDNN (crescent's own kernels, several times slower)")

# Python packages of the interop specs (safetensors reads our files, TensorBoard's reader
# our events, wandb takes a run folder through tools/wandb_import.py), from PyPI into a
# venv under build/ that also sees Debian's numpy and torch. Where PyPI cannot be reached
# those specs skip, each with one line saying why.
PYENV := $(BUILD)/pyenv
pydeps:
	@if $(PYENV)/bin/python -c 'import safetensors, tensorboard, wandb' 2>/dev/null; then echo "pydeps: all present"; \
	else /usr/bin/python3 -m venv --system-site-packages $(PYENV) && \
	  timeout 300 $(PYENV)/bin/pip install -q --disable-pip-version-check safetensors tensorboard wandb >/dev/null 2>&1 \
	  && echo "pydeps: safetensors, tensorboard and wandb installed in $(PYENV)" \
	  || echo "pydeps: PyPI unreachable; the Python interop specs will skip"; fi

# deps first, then a fresh make: the feature probes are read when make parses this file,
# so a build in the same invocation as the install would miss what it just installed.
test: deps
	@$(MAKE) --no-print-directory all
	@bash tools/run_specs.sh

# The longer checks, beyond CI's 15 minutes: every spec, then the combination matrix at
# nightly size (spec/matrix_spec.lua: 3 epochs, every recipe x ranks x precision x
# SyncBatchNorm, DINO's too; about 15 minutes on 2 cores).
check-all: test
	@CRESCENT_MATRIX=full bash tools/run_specs.sh spec/matrix_spec.lua

# AddressSanitizer + UBSan: the C library built in build/sanitize (no CUDA backend: its
# kernels are not instrumented), then every spec against it. LuaJIT is not instrumented,
# so libasan is preloaded; leak checking is off (LuaJIT's own allocator and the caches
# keep memory to exit). A report stops the spec run that hit it.
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer
sanitize: deps
	@$(MAKE) --no-print-directory BUILD=build/sanitize SAN="$(SAN_FLAGS)" HAVE_NVCC= all
	@LD_PRELOAD=$$($(CC) -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 CRESCENT_BUILD=$(CURDIR)/build/sanitize CRESCENT_SANITIZE=1 \
	  bash tools/run_specs.sh

# The API fuzz at length: 100,000 random calls with bad arguments (spec/input_guards_spec.lua
# runs 3,000 in CI); a crash prints the call that made it.
fuzz: all
	@for seed in 1 2 3 4 5; do luajit tools/fuzz_api.lua calls=20000 seed=$$seed > build/fuzz-$$seed.log 2>&1 || \
	  { echo "seed $$seed crashed at: $$(grep '^call' build/fuzz-$$seed.log | tail -1)"; exit 1; }; \
	  grep -v '^call' build/fuzz-$$seed.log; done

# The main recipe: SwAV on Fashion-MNIST with a kNN evaluation (a version of the README's
# tour is examples/tour.lua; recipes/supervised.lua trains the same ResNet with labels).
run: deps
	@$(MAKE) --no-print-directory all
	@luajit recipes/swav.lua

# A current PyTorch with torchvision and timm from PyPI, in its own venv (the reference twins of
# bench/learning_parity.lua); about 3.5 GB, so only the benchmarks that need it ask for it.
TORCHENV := $(BUILD)/torchenv
torchenv:
	@if $(TORCHENV)/bin/python -c 'import torch, torchvision, safetensors, timm' 2>/dev/null; then echo "torchenv: present"; \
	else /usr/bin/python3 -m venv $(TORCHENV) && \
	  $(TORCHENV)/bin/pip install -q --disable-pip-version-check torch torchvision safetensors timm && \
	  echo "torchenv: torch, torchvision and timm installed in $(TORCHENV)"; fi

bench: EXTRA_DEPS = $(DEPS_BENCH)
bench: deps torchenv
	@$(MAKE) --no-print-directory all
	@# learning_parity.lua trains for hours: run it by hand (see its header); harness,
	@# parity_settings and data_pipeline_jpeg are modules of the others
	@for b in bench/*.lua; do case $$b in bench/harness.lua|bench/learning_parity.lua|bench/parity_settings.lua|\
	  bench/data_pipeline_jpeg.lua) continue;; esac; \
	  echo "== $$b"; luajit $$b || exit 1; done

lint:
	luacheck lua spec bench

clean:
	rm -rf $(BUILD)
