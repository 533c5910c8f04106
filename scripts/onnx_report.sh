#!/usr/bin/env bash
# Regenerates tests/onnx/backend_report.txt: every ONNX backend test case
# (libonnx-testdata's node, simple, pytorch-converted and pytorch-operator) run
# through Kiln, one line each (pass, fail: why, unsupported: why) and the totals.
# The onnx_backend test then fails if a case listed as passing stops passing.
#   scripts/onnx_report.sh [BUILD_DIR]   (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cmake --build "$build" --target onnx_backend_cases
"$build/tests/onnx_backend_cases" /usr/share/libonnx-testdata/data --report tests/onnx/backend_report.txt > /dev/null
grep '^#' tests/onnx/backend_report.txt
