#!/usr/bin/env bash
# Runs the run fuzzer (programs that compile are run on arguments made from their
# types, under a time and a memory limit) over every program in the tests and
# samples and its own seeds (tests/fuzz/run_seeds/run_*.relay: indexing, shapes, lists, loops, convolutions),
# for a bounded time.
#   fuzz_run_test.sh RUN_FUZZ SRC SECONDS
set -eu
fuzz=$1; src=$2; seconds=${3:-15}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp "$src"/tests/e2e/*.relay "$src"/tests/programs/*.relay "$src"/samples/*.relay "$src"/tests/fuzz/run_seeds/*.relay "$tmp/"
for f in "$src"/tests/tvm/*.relay; do cp "$f" "$tmp/tvm_$(basename "$f")"; done
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}abort_on_error=1"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}abort_on_error=1:print_stacktrace=1"
"$fuzz" "$tmp" "$seconds" || { echo "the failing input is $(pwd)/fuzz-crash.bin"; exit 1; }
