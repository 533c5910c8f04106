#!/usr/bin/env bash
# Quick start, step 1: install dependencies, build Kiln, and run a sample program.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build
echo "== vmrun samples/tree_sum.relay --input f32=1 --input f32=2 --input f32=3"
build/vmrun samples/tree_sum.relay --input f32=1 --input f32=2 --input f32=3
