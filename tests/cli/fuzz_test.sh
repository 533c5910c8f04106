#!/usr/bin/env bash
# Builds a seed corpus (every end-to-end program compiled by kilnc) and runs the
# executable-loader fuzzer over it for a bounded time.
set -eu
kilnc=$1; fuzz=$2; src=$3; seconds=${4:-20}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for p in "$src"/tests/e2e/*.relay "$src"/samples/tree_sum.relay "$src"/samples/grow_loop.relay; do
  "$kilnc" "$p" -o "$tmp/$(basename "$p" .relay).kx"
done
"$fuzz" "$tmp" "$seconds"
