#!/usr/bin/env bash
# Installs what drafter's build and tests use on a fresh Debian/Ubuntu machine.
# Safe to rerun: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
ldconfig -p 2>/dev/null | grep -q 'libopenblas\.so' || need_apt+=(libopenblas-dev)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
# The CUDA device's toolchain (make cuda-check): clang-16 compiles the kernels
# to PTX, g++ builds the CPU simulator and the stand-in driver.
command -v clang-16 >/dev/null 2>&1 || need_apt+=(clang-16)
command -v g++ >/dev/null 2>&1 || need_apt+=(g++)
if [ ${#need_apt[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  if [ -z "$sudo" ] || command -v sudo >/dev/null 2>&1; then
    echo "setup: installing ${need_apt[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "setup: cannot install ${need_apt[*]} (not root, no sudo); OpenBLAS-less builds fall back to pure Go, make cuda-check needs clang-16 and g++"
  fi
fi

# The independent Arrow reader (npm apache-arrow) for the shard tests.
if [ -f scripts/arrowjs/package.json ] && command -v npm >/dev/null 2>&1; then
  if [ ! -d scripts/arrowjs/node_modules/apache-arrow ]; then
    echo "setup: installing the Apache Arrow JavaScript reader"
    (cd scripts/arrowjs && npm ci --silent --no-audit --no-fund)
  fi
fi

# A real serving engine for the --generator integration test: llama.cpp through
# npm node-llama-cpp (pinned in scripts/llamaserver/package-lock.json). Only its
# prebuilt CPU binary for Linux x86-64 is installed (--omit=optional drops the
# CUDA and Vulkan builds, 600 MB; --ignore-scripts skips its postinstall, which
# would try to build llama.cpp from source when no prebuilt binary fits).
if [ -f scripts/llamaserver/package.json ] && command -v npm >/dev/null 2>&1; then
  node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
    echo "setup: node-llama-cpp is pinned for Linux x86-64 only; the llama.cpp integration test will skip here"
  elif [ "$node_major" -lt 20 ]; then
    echo "setup: node-llama-cpp needs node 20 or later (this is $(node --version 2>/dev/null)); the llama.cpp integration test will skip"
  elif [ ! -d scripts/llamaserver/node_modules/node-llama-cpp ]; then
    echo "setup: installing the llama.cpp test server (node-llama-cpp)"
    (cd scripts/llamaserver && npm ci --silent --no-audit --no-fund --omit=optional --ignore-scripts)
  fi
fi

# NVIDIA's ptxas for make ptx-check (registers, shared memory and spills of
# the committed PTX), from PyPI's nvidia-cuda-nvcc-cu12 wheel: no CUDA toolkit
# install. scripts/ptxas-check.sh unpacks it into build/ptxas.
wheel_version=12.9.86
if ! ls build/wheels/nvidia_cuda_nvcc_cu12-$wheel_version-*.whl >/dev/null 2>&1; then
  pip=""
  if command -v pip >/dev/null 2>&1; then pip="pip"
  elif command -v python3 >/dev/null 2>&1 && python3 -m pip --version >/dev/null 2>&1; then pip="python3 -m pip"; fi
  if [ -n "$pip" ]; then
    echo "setup: downloading ptxas (nvidia-cuda-nvcc-cu12 $wheel_version wheel)"
    $pip download --quiet --no-deps --only-binary=:all: --dest build/wheels "nvidia-cuda-nvcc-cu12==$wheel_version" ||
      echo "setup: could not download the ptxas wheel; make ptx-check will skip its ptxas part"
  else
    echo "setup: no pip: make ptx-check will skip its ptxas part (install python3-pip to enable it)"
  fi
fi

# The engine-style reference forwards (scripts/enginecheck: numpy re-implementations
# of how the serving engines load and run an exported draft), in a venv of their
# own at build/pyenv with numpy and safetensors from PyPI. The Go tests that
# compare drafter's logits with them skip without it (DRAFTER_REQUIRE_PYTHON=1
# makes them fail instead).
if [ ! -x build/pyenv/bin/python ] || ! build/pyenv/bin/python -c 'import numpy, safetensors' >/dev/null 2>&1; then
  # Debian's python3 lacks venv's ensurepip until python3-venv is installed.
  if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1 &&
    command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" = 0 ] || command -v sudo >/dev/null 2>&1; }; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    echo "setup: installing python3-venv"
    $sudo apt-get install -y -qq python3-venv >/dev/null || echo "setup: could not install python3-venv"
  fi
  if command -v python3 >/dev/null 2>&1 && python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    echo "setup: creating build/pyenv (numpy, safetensors) for the engine-style reference forwards"
    rm -rf build/pyenv
    # Versions pinned to those the comparisons were written against, as npm's lock files pin
    # the JavaScript references.
    python3 -m venv build/pyenv &&
      build/pyenv/bin/python -m pip install --quiet --disable-pip-version-check numpy==2.4.6 safetensors==0.8.0 ||
      echo "setup: could not create build/pyenv; the engine-style forward comparisons will skip"
  else
    echo "setup: no python3 with venv: the engine-style forward comparisons will skip (install python3-venv to enable them)"
  fi
fi

# Hugging Face transformers and torch in the same venv: the reference the target
# architectures are compared with (scripts/hfref/tiny.py builds tiny random-weight
# checkpoints with transformers' own classes and records their logits and greedy ids;
# pkg/model/hfref_test.go and cmd/drafter/arch_e2e_test.go run drafter on them). Used on
# the CPU only, but PyPI's Linux torch wheel is the CUDA build and does not import without
# its nvidia-* wheels (libtorch_global_deps.so links libcudart and the rest; the CPU-only
# wheels live on download.pytorch.org, not PyPI), so this is the full install: 5.5 GB and
# about two and a half minutes (measured from an empty pip cache). Pinned like numpy and
# safetensors above: a new transformers may change a default these references were recorded
# with. Only what is missing or at another version is installed. The released tool needs
# none of this.
hf_pins=(torch==2.15.0 transformers==5.25.0 huggingface-hub==2.4.0 tokenizers==0.23.3)
if [ -x build/pyenv/bin/python ]; then
  if ! build/pyenv/bin/python - "${hf_pins[@]}" >/dev/null 2>&1 <<'PY'
import sys
from importlib.metadata import version
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    if version(name) != want:
        sys.exit(1)
import torch, transformers  # noqa: E401,F401  (the wheels import, not only their metadata)
PY
  then
    echo "setup: installing torch and transformers into build/pyenv (5.5 GB, a few minutes) for the Hugging Face reference tests"
    # --no-cache-dir: pip's cache would keep another 3 GB of wheels in ~/.cache/pip.
    build/pyenv/bin/python -m pip install --quiet --disable-pip-version-check --no-cache-dir "${hf_pins[@]}" ||
      echo "setup: could not install torch and transformers into build/pyenv (disk space? network?); the Hugging Face reference tests will skip (fail under DRAFTER_REQUIRE_PYTHON=1)"
  fi
else
  echo "setup: no build/pyenv: the Hugging Face reference tests will skip (fail under DRAFTER_REQUIRE_PYTHON=1)"
fi

go mod download
