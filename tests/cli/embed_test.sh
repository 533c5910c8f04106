#!/usr/bin/env bash
# The embedding sample loads an executable that kilnc wrote and runs it on 4 threads.
set -eu
kilnc=$1; embed=$2; src=$3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$kilnc" "$src/samples/mlp.relay" --params "$src/samples/mlp_weights.npz" -o "$tmp/mlp.kx"
out=$("$embed" "$tmp/mlp.kx")
echo "$out"
[ "$(echo "$out" | grep -c '^input [0-3]: class [0-9]$')" = 4 ]
# The four VMs share the Runtime's kernel table: the MLP's three kernels compile once.
echo "$out" | grep -q '^kernels compiled: 3 (for all four VMs)$'
