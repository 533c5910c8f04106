#!/usr/bin/env bash
# Precompiled executables: used as they are on this CPU (no LLVM loaded); damaged,
# garbage or another CPU's code is compiled from the kernels' IR instead, with the
# same results; lying section headers are refused. Also through kilnc and vmrun.
set -u
probe="$1" kilnc="$2" vmrun="$3" root="$4"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
check() { local label="$1" out="$2" pre="$3" codegen="$4" llvm="$5"
  echo "$label: $out"
  echo "$out" | grep -q "^precompiled $pre codegen $codegen llvm $llvm result " || { echo "FAIL: $label"; fail=1; }
  [ "${out##* result }" = "${good##* result }" ] || { echo "FAIL: $label: result differs"; fail=1; }
}
"$probe" make "$dir/p.kx" || { echo "FAIL: make"; exit 1; }
good=$("$probe" run "$dir/p.kx")
n=$(echo "$good" | awk '{print $2}')
[ "${n:-0}" -ge 2 ] || { echo "FAIL: expected the program's kernels precompiled: $good"; fail=1; }
check "precompiled" "$good" "$n" 0 not-loaded
"$probe" damage "$dir/p.kx" "$dir/damaged.kx" && check "damaged code" "$("$probe" run "$dir/damaged.kx")" 0 "$n" loaded
"$probe" foreign "$dir/p.kx" "$dir/foreign.kx" && check "another CPU's code" "$("$probe" run "$dir/foreign.kx")" 0 "$n" loaded
"$probe" garbage "$dir/p.kx" "$dir/garbage.kx" && check "sealed garbage" "$("$probe" run "$dir/garbage.kx")" 0 "$n" loaded
"$probe" hostile "$dir/p.kx" || { echo "FAIL: a lying precompiled section was accepted"; fail=1; }

# The tools: kilnc --precompile, then vmrun --stats says nothing was compiled.
"$kilnc" "$root/samples/mlp.relay" --params "$root/samples/mlp_weights.npz" -o "$dir/mlp.kx" --precompile ||
  { echo "FAIL: kilnc --precompile"; fail=1; }
out=$("$vmrun" "$dir/mlp.kx" --input 2x784xf32=random --stats 2>&1) || { echo "FAIL: vmrun: $out"; fail=1; }
echo "$out" | grep "^kernels:\|^time:"
echo "$out" | grep -q "^kernels: 0 by the code generator, [1-9][0-9]* precompiled, .*code generator not loaded" ||
  { echo "FAIL: vmrun of a precompiled executable compiled or loaded LLVM"; fail=1; }
echo "$out" | grep -q "^time: load .* ms, kernels .* ms (on load, parallel), first run .* ms" ||
  { echo "FAIL: vmrun --stats does not report load, compile and first-run time"; fail=1; }
"$kilnc" "$root/samples/mlp.relay" --precompile > /dev/null 2>&1 && { echo "FAIL: --precompile without -o"; fail=1; }
exit $fail
