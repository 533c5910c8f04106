#!/usr/bin/env bash
# Serving under ThreadSanitizer: builds Kiln with -fsanitize=thread (build-tsan/)
# and runs, at full count, the stress test of 8 threads each with its own VM over
# one executable, 10,000 requests per thread (static and dynamic shapes,
# recursion; every result checked against a single-threaded run), then the
# embedding sample and the VM's multi-threaded unit tests (forks and stopping runs
# included). Any data race ThreadSanitizer reports fails the script.
# scripts/test.sh runs it too (unless KILN_SKIP_TSAN=1).
#
#   scripts/tsan.sh [REQUESTS_PER_THREAD]   (default 10000)
set -euo pipefail
cd "$(dirname "$0")/.."
requests=${1:-10000}
jobs=$(nproc)
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_WERROR=ON -DKILN_SANITIZE_THREAD=ON \
      -DKILN_BUILD_BENCH=OFF >/dev/null
cmake --build build-tsan -j "$jobs" --target serve_stress kiln_tests kilnc kiln_embed kiln_codegen
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:report_signal_unsafe=0"
build-tsan/tests/serve_stress --threads 8 --requests "$requests" --rounds 2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
build-tsan/kilnc samples/mlp.relay --params samples/mlp_weights.npz -o "$tmp/mlp.kx"
build-tsan/samples/embed/kiln_embed "$tmp/mlp.kx"
build-tsan/tests/kiln_tests -tc="*thread*,*concurren*,*parallel*,fork:*,stop:*"
echo "tsan: no data race reported"
