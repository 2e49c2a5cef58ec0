#!/usr/bin/env bash
# Installs what drafter's build and tests use on a fresh Debian/Ubuntu machine.
# Safe to rerun: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
ldconfig -p 2>/dev/null | grep -q 'libopenblas\.so' || need_apt+=(libopenblas-dev)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
if [ ${#need_apt[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  if [ -z "$sudo" ] || command -v sudo >/dev/null 2>&1; then
    echo "setup: installing ${need_apt[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "setup: cannot install ${need_apt[*]} (not root, no sudo); OpenBLAS-less builds fall back to pure Go"
  fi
fi

# The independent Arrow reader (npm apache-arrow) for the shard tests.
if [ -f scripts/arrowjs/package.json ] && command -v npm >/dev/null 2>&1; then
  if [ ! -d scripts/arrowjs/node_modules/apache-arrow ]; then
    echo "setup: installing the Apache Arrow JavaScript reader"
    (cd scripts/arrowjs && npm ci --silent --no-audit --no-fund)
  fi
fi

go mod download
