#!/usr/bin/env bash
# Quick start, step 2: build and run the whole test suite, plain and under ASan+UBSan,
# then the serving stress test under ThreadSanitizer (scripts/tsan.sh).
# Warnings are errors here. Set KILN_SKIP_SANITIZE=1 to skip the ASan+UBSan build,
# KILN_SKIP_TSAN=1 to skip the ThreadSanitizer run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)

cmake -S . -B build-test -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_WERROR=ON
cmake --build build-test -j "$jobs"
(cd build-test && ctest --output-on-failure -j "$jobs")

if [ "${KILN_SKIP_SANITIZE:-0}" != "1" ]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKILN_WERROR=ON -DKILN_SANITIZE=ON -DKILN_BUILD_BENCH=OFF
  cmake --build build-asan -j "$jobs"
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
     ctest --output-on-failure -j "$jobs")
fi

if [ "${KILN_SKIP_TSAN:-0}" != "1" ]; then
  scripts/tsan.sh
fi
