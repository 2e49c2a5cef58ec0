# drafter: self-distil, train and evaluate speculative-decoding drafters.
#
#   make demo   set up, build, and run the pipeline on the bundled stories260k model
#   make test   set up, vet, and run every test on both compute paths (OpenBLAS and pure Go)
#   make bench  print one table of the benchmarks (see docs/performance.md)

GO        ?= go
BIN       := bin/drafter
MODEL     := models/stories260k
DEMO_OUT  := demo-out
export GOFLAGS ?= -mod=mod

.PHONY: all build setup demo test test-openblas test-purego vet bench fuzz clean

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

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

test: setup vet test-openblas test-purego

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
	rm -rf bin $(DEMO_OUT)
