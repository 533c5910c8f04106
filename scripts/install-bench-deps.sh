#!/usr/bin/env bash
# What bench/model_bench needs to run ONNX Runtime beside Kiln: Debian's nodejs,
# npm and python3-onnx, and the npm package onnxruntime-node in bench/ort. Only
# the benchmark uses these; building and testing Kiln never does.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
PKGS="python3-onnx python3-numpy"
# A node that already brings its own npm (NodeSource's) conflicts with Debian's npm.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then PKGS="$PKGS nodejs npm"; fi
$SUDO apt-get install -y --no-install-recommends $PKGS
# --ignore-scripts: the package's install script downloads GPU binaries (and
# fails offline); the CPU library ships inside the package.
npm install --ignore-scripts --no-save --no-audit --no-fund --prefix bench/ort onnxruntime-node@1.30
echo "ONNX Runtime for model_bench is in bench/ort/node_modules"
