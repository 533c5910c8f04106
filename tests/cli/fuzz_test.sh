#!/usr/bin/env bash
# Builds a seed corpus (every end-to-end program compiled by kilnc, two of them also
# precompiled) and runs the
# executable-loader fuzzer over it for a bounded time.
set -eu
kilnc=$1; fuzz=$2; src=$3; seconds=${4:-20}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for p in "$src"/tests/e2e/*.relay "$src"/samples/tree_sum.relay "$src"/samples/grow_loop.relay; do
  "$kilnc" "$p" -o "$tmp/$(basename "$p" .relay).kx"
done
# Executables with a precompiled section (format 2.3), so mutations reach its reader.
for p in "$src"/samples/tree_sum.relay "$src"/samples/grow_loop.relay; do
  "$kilnc" "$p" -o "$tmp/$(basename "$p" .relay)_pre.kx" --precompile
done
# Sanitizer reports end in abort(), so the driver's handler saves the input too.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}abort_on_error=1"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}abort_on_error=1:print_stacktrace=1"
"$fuzz" "$tmp" "$seconds" || { echo "the failing input is $(pwd)/fuzz-crash.bin"; exit 1; }
