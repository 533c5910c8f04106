#!/usr/bin/env bash
# The embedding sample loads an executable that kilnc wrote and runs it on 4
# threads; with an executable that takes other inputs, or a file that is not one,
# it prints the error and exits 1 (never an uncaught exception).
set -eu
kilnc=$1; embed=$2; src=$3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$kilnc" "$src/samples/mlp.relay" --params "$src/samples/mlp_weights.npz" -o "$tmp/mlp.kx"
out=$("$embed" "$tmp/mlp.kx")
echo "$out"
[ "$(echo "$out" | grep -c '^input [0-3]: class [0-9]$')" = 4 ]
# The four VMs share the Runtime's kernel table: the MLP's three kernels compile once.
echo "$out" | grep -q '^kernels compiled: 3 (for all four VMs)$'

expect_error() {  # expect_error PATTERN ARGS...: exit 1, PATTERN on stderr, no abort
  local pattern=$1; shift
  set +e; "$embed" "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?; set -e
  cat "$tmp/err"
  [ "$rc" = 1 ] || { echo "FAIL: exit $rc for $*"; exit 1; }
  grep -q -- "$pattern" "$tmp/err" || { echo "FAIL: no '$pattern' for $*"; exit 1; }
  if grep -q "terminate called" "$tmp/err"; then echo "FAIL: uncaught exception for $*"; exit 1; fi
}
# The README's own line: the CNN's executable takes a 1x3x32x32 image (the error
# is raised inside the worker threads).
"$kilnc" "$src/samples/cnn.relay" --params "$src/samples/cnn_weights.npz" -o "$tmp/cnn.kx"
expect_error "kiln_embed: .*error: .*" "$tmp/cnn.kx"
expect_error "kiln_embed: .*error: " "$tmp/missing.kx"
head -c 300 /dev/urandom > "$tmp/junk.kx"
expect_error "kiln_embed: .*error: " "$tmp/junk.kx"
set +e; "$embed" 2>"$tmp/err"; rc=$?; set -e
[ "$rc" = 2 ] && grep -q "kilnc samples/mlp.relay" "$tmp/err"
echo "ok"
