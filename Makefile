# drafter: self-distil, train and evaluate speculative-decoding drafters.
#
#   make demo   set up, build, and run the pipeline on the bundled stories260k model
#   make test   set up, vet, and run every test on both compute paths (OpenBLAS and pure Go)
#   make bench  print one table of the benchmarks (see docs/performance.md)
#   make acceptance  the acceptance measurement of docs/acceptance.md (about 30 minutes)
#   make block-acceptance  EAGLE-3, DFlash and DSpark on the same data (docs/acceptance.md)

GO        ?= go
BIN       := bin/drafter
MODEL     := models/stories260k
DEMO_OUT  := demo-out
export GOFLAGS ?= -mod=mod

.PHONY: all build setup demo acceptance block-acceptance test test-openblas test-purego vet bench fuzz clean
.PHONY: ptx ptx-check cuda-standin cuda-standin-test cuda-kernel-test cuda-check gpu-check-build

all: build

# setup installs what the build and the tests need on a Debian/Ubuntu machine:
# OpenBLAS (optional at run time: drafter falls back to pure Go without it) and
# the Node.js Apache Arrow reader used as an independent check of our shards,
# and llama.cpp through node-llama-cpp, a real serving engine for distill --generator.
setup:
	@scripts/setup.sh

build:
	$(GO) build -o $(BIN) ./cmd/drafter

demo: setup build
	@scripts/demo.sh $(BIN) $(MODEL) $(DEMO_OUT)

# The acceptance measurement of docs/acceptance.md (every training default, 8400 distilled
# prompts; about 30 minutes on 2 cores).
acceptance: setup build
	@scripts/acceptance.sh $(BIN) $(MODEL) acceptance-out

# Issue 30's table: EAGLE-3, DFlash and DSpark with their defaults on the same 2000 prompts,
# distilled at temperature 0 and at 1, evaluated at each.
block-acceptance: setup build
	@scripts/block-acceptance.sh $(BIN) $(MODEL) block-acceptance-out

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GO) run ./scripts/docscheck

test: setup vet test-openblas test-purego cuda-check

# OpenBLAS when the library is installed (loaded at run time), cgo on; with
# the kernel family the drafter binary would set (scripts/coretype).
test-openblas:
	env $$($(GO) run ./scripts/coretype) $(GO) test -count=1 ./...

# The pure-Go path: no cgo at all, the build a user gets with CGO_ENABLED=0.
test-purego:
	CGO_ENABLED=0 DRAFTER_BLAS=go $(GO) test -count=1 ./...

bench: build
	$(GO) run ./scripts/bench

fuzz:
	$(GO) test -run XXX -fuzz FuzzParseHeader -fuzztime 30s ./pkg/safetensors
	$(GO) test -run XXX -fuzz FuzzEncodeDecode -fuzztime 30s ./pkg/tokenizer

clean:
	rm -rf bin build $(DEMO_OUT)

# ---- The CUDA device (pkg/tensor/cuda), tested without a GPU.
#
#   make ptx               regenerate pkg/tensor/cuda/ptx (PTX + ptxas's resources.txt) after editing a .cu
#   make ptx-check         fail if the committed PTX or resources.txt is stale, or a kernel spills
#   make cuda-standin      build the stand-in libcuda.so.1 / libcublas.so.{13,12,11} into build/cuda-standin
#   make cuda-standin-test test the stand-ins themselves
#   make cuda-kernel-test  run each kernels/test/test_*.cc in the simulator: plain, TSan, ASan+UBSan
#   make cuda-check        all of the above, then the Go CUDA tests on the stand-ins
# The stand-in device has 8 GiB (address space only); DRAFTER_STANDIN_MEMORY=2G sets another size.

CUDA      := pkg/tensor/cuda
KERNELS   := $(CUDA)/kernels
STANDIN   := build/cuda-standin
SIMCXX    ?= g++
SIMFLAGS  := -std=c++17 -g -Wall -Wextra -DDRAFTER_CUDA_SIM -I$(KERNELS)
CUDA_CU   := $(sort $(wildcard $(KERNELS)/*.cu))
SIM_SRC   := $(wildcard $(KERNELS)/*.h) $(KERNELS)/sim/cudasim.h $(KERNELS)/sim/cudasim.cc
NPROC     := $(shell nproc 2>/dev/null || echo 2)

ptx:
	@scripts/ptxas-check.sh --update

ptx-check:
	@scripts/ptxas-check.sh

# The stand-in driver compiles every kernel with the simulator; the table of
# kernels is generated from their declarations (plus the sample kernels the
# stand-in's own test launches). -z nodelete: a driver stays loaded, as the
# real one does (its fiber stacks and arena must not vanish under dlclose).
STANDIN_CU    := $(CUDA_CU) $(KERNELS)/test/sample.cu
STANDIN_FLAGS := $(SIMFLAGS) -O2 -fPIC -fvisibility=hidden -I$(CUDA)/standin
STANDIN_LINK  := -shared -Wl,-soname,libcuda.so.1 -Wl,-z,nodelete -Wl,--no-undefined \
	-Wl,--version-script,$(CUDA)/standin/libcuda.map -ldl -lpthread

cuda-standin: $(STANDIN)/libcuda.so.1 $(STANDIN)/initfail/libcuda.so.1 $(STANDIN)/libcublas.so.12 \
	$(STANDIN)/libcublas.so.13 $(STANDIN)/libcublas.so.11

# Regenerated every time (a removed .cu must leave the table too); the script
# rewrites the file only when its content changes, so nothing recompiles then.
$(STANDIN)/kernels.cc: FORCE
	@mkdir -p $(@D)
	@$(CUDA)/standin/genkernels.sh $@ $(STANDIN_CU)

$(STANDIN)/kernels.o: $(STANDIN)/kernels.cc $(STANDIN_CU) $(SIM_SRC) $(CUDA)/standin/kernels.h $(CUDA)/standin/table.h
	$(SIMCXX) $(STANDIN_FLAGS) -c $< -o $@

$(STANDIN)/cudasim.o: $(SIM_SRC)
	@mkdir -p $(@D)
	$(SIMCXX) $(STANDIN_FLAGS) -c $(KERNELS)/sim/cudasim.cc -o $@

$(STANDIN)/cuda.o: $(CUDA)/standin/cuda.cc $(CUDA)/standin/graph.h $(CUDA)/standin/standin.h $(CUDA)/standin/kernels.h
	@mkdir -p $(@D)
	$(SIMCXX) $(STANDIN_FLAGS) -c $< -o $@

$(STANDIN)/cuda-initfail.o: $(CUDA)/standin/cuda.cc $(CUDA)/standin/graph.h $(CUDA)/standin/standin.h $(CUDA)/standin/kernels.h
	@mkdir -p $(@D)
	$(SIMCXX) $(STANDIN_FLAGS) -DSTANDIN_INITFAIL -c $< -o $@

$(STANDIN)/libcuda.so.1: $(STANDIN)/cuda.o $(STANDIN)/cudasim.o $(STANDIN)/kernels.o $(CUDA)/standin/libcuda.map
	$(SIMCXX) -o $@ $(filter %.o,$^) $(STANDIN_LINK)

$(STANDIN)/initfail/libcuda.so.1: $(STANDIN)/cuda-initfail.o $(STANDIN)/cudasim.o $(STANDIN)/kernels.o $(CUDA)/standin/libcuda.map
	@mkdir -p $(@D)
	$(SIMCXX) -o $@ $(filter %.o,$^) $(STANDIN_LINK)

$(STANDIN)/libcublas.so.12: $(CUDA)/standin/cublas.cc $(CUDA)/standin/standin.h $(CUDA)/standin/libcublas.map
	@mkdir -p $(@D)
	$(SIMCXX) $(STANDIN_FLAGS) -shared -Wl,-soname,libcublas.so.12 -Wl,--no-undefined \
	  -Wl,--version-script,$(CUDA)/standin/libcublas.map -o $@ $< -ldl

$(STANDIN)/libcublas.so.13 $(STANDIN)/libcublas.so.11: $(STANDIN)/libcublas.so.12
	ln -sf libcublas.so.12 $@

$(STANDIN)/test_standin: $(CUDA)/standin/test_standin.c
	@mkdir -p $(@D)
	$(CC) -std=c11 -O1 -g -Wall -Wextra -o $@ $< -ldl -lm

cuda-standin-test: cuda-standin $(STANDIN)/test_standin
	$(STANDIN)/test_standin $(STANDIN)

# Each kernels/test/test_X.cc becomes three binaries: plain -O1, TSan (a
# missing __syncthreads shows as a data race), ASan+UBSan.
KTEST     := build/cuda-kernel-test
KTEST_BIN := $(patsubst $(KERNELS)/test/%.cc,$(KTEST)/%,$(sort $(wildcard $(KERNELS)/test/test_*.cc)))
KTEST_ALL := $(KTEST_BIN) $(addsuffix .tsan,$(KTEST_BIN)) $(addsuffix .asan,$(KTEST_BIN))
KTEST_DEP := $(SIM_SRC) $(CUDA_CU) $(wildcard $(KERNELS)/test/*.h $(KERNELS)/test/*.cu)
TSAN_FLAGS := -fsanitize=thread
ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer

$(KTEST)/%: $(KERNELS)/test/%.cc $(KTEST_DEP)
	@mkdir -p $(@D)
	$(SIMCXX) $(SIMFLAGS) -O1 -o $@ $< $(KERNELS)/sim/cudasim.cc -ldl -lpthread

$(KTEST)/%.tsan: $(KERNELS)/test/%.cc $(KTEST_DEP)
	@mkdir -p $(@D)
	$(SIMCXX) $(SIMFLAGS) -O1 $(TSAN_FLAGS) -o $@ $< $(KERNELS)/sim/cudasim.cc -ldl -lpthread

$(KTEST)/%.asan: $(KERNELS)/test/%.cc $(KTEST_DEP)
	@mkdir -p $(@D)
	$(SIMCXX) $(SIMFLAGS) -O1 $(ASAN_FLAGS) -o $@ $< $(KERNELS)/sim/cudasim.cc -ldl -lpthread

cuda-kernel-test:
	@$(MAKE) --no-print-directory -j$(NPROC) $(KTEST_ALL)
	@set -e; for t in $(KTEST_ALL); do \
	  echo "== $$t"; \
	  TSAN_OPTIONS="atexit_sleep_ms=0 halt_on_error=1 $$TSAN_OPTIONS" \
	  ASAN_OPTIONS="detect_leaks=1 $$ASAN_OPTIONS" UBSAN_OPTIONS="print_stacktrace=1 $$UBSAN_OPTIONS" $$t; \
	done

FORCE:

# The Go path on the stand-ins: the device conformance suite and the CUDA
# package's own tests, then the commands on --device cuda (greedy parity with
# the CPU device, eval lossless in chain and tree mode for both methods, on a
# float32 and a bf16 checkpoint) and --device's fallbacks, and the forward on the
# tiny Hugging Face transformers checkpoints against transformers (TestHFReference),
# CUDA graphs against the plain path (TestCUDAGraphs*: the same logits and outputs,
# replays counted), and distill on --device cuda (TestCUDA of capture/distill: tokens
# and features against the CPU device's, a kill and resume, the batch sized from free memory).
cuda-check: ptx-check cuda-kernel-test cuda-standin-test
	DRAFTER_LIBCUDA=$(CURDIR)/$(STANDIN)/libcuda.so.1 DRAFTER_CUDA_LIBS=$(CURDIR)/$(STANDIN) DRAFTER_REQUIRE_CUDA=1 \
	  $(GO) test -count=1 ./$(CUDA)/...
	DRAFTER_LIBCUDA=$(CURDIR)/$(STANDIN)/libcuda.so.1 DRAFTER_CUDA_LIBS=$(CURDIR)/$(STANDIN) DRAFTER_REQUIRE_CUDA=1 \
	  $(GO) test -count=1 -timeout 40m -run 'TestCUDA|TestDeviceFallbacks' ./cmd/drafter
	DRAFTER_LIBCUDA=$(CURDIR)/$(STANDIN)/libcuda.so.1 DRAFTER_CUDA_LIBS=$(CURDIR)/$(STANDIN) DRAFTER_REQUIRE_CUDA=1 \
	  $(GO) test -count=1 -run 'TestHFReference|TestCUDAGraphs' ./pkg/model
	DRAFTER_LIBCUDA=$(CURDIR)/$(STANDIN)/libcuda.so.1 DRAFTER_CUDA_LIBS=$(CURDIR)/$(STANDIN) DRAFTER_REQUIRE_CUDA=1 \
	  $(GO) test -count=1 -run 'TestCUDA' ./capture/distill

# What scripts/gpu-check.sh runs on a GPU machine (which has no Go): the
# binary and the test binaries, built here; carry bin/ and build/gpu-check.
# Its pipeline step (scripts/random-pipeline.sh: drafter bench --save, then
# distill, train, eval) and drafter bench --random need nothing else: the
# random checkpoint is written there by the binary, the prompts are tracked.
gpu-check-build: build
	@mkdir -p build/gpu-check
	$(GO) test -c -o build/gpu-check/cuda.test ./$(CUDA)
	$(GO) test -c -o build/gpu-check/model.test ./pkg/model
