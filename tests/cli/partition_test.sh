#!/bin/bash
# Partitioning through kilnc and vmrun, as a user takes it: the stages print,
# the TVM report's let-bound program partitions and runs, the CNN sample's
# regions go to oneDNN (when Kiln has it) with the same result, a saved
# executable runs them again and its profile names the library, and bad
# requests are clear errors.
vmrun="$1"; kilnc="$2"; src="$3"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/check_lib.sh"
data="$src/tests/cli/partition"

lib=(--partition my_library --patterns "$data/my_library.pat")
"$kilnc" "$data/let_library_calls.relay" "${lib[@]}" --emit annotated > "$tmp/annotated"
check "annotated: both tagged calls marked" test "$(grep -c '/\* my_library \*/' "$tmp/annotated")" -eq 2
"$kilnc" "$data/let_library_calls.relay" "${lib[@]}" --emit regions > "$tmp/regions"
check "regions: two, not merged across the let" grep -q "^// 2 regions" "$tmp/regions"
"$kilnc" "$data/let_library_calls.relay" "${lib[@]}" --emit partitioned > "$tmp/part"
check "partitioned: the lets bind the library functions' results" grep -q "let %z: Tensor\[(1, 4), float32\] = @my_library_main_1(%x, %w);" "$tmp/part"
check "partitioned: a Compiler= function per region" test "$(grep -c 'Compiler="my_library"' "$tmp/part")" -eq 2
check "partitioned: the note says where it runs" grep -q "^// note: @my_library_main_0 runs on Kiln's kernels" "$tmp/part"
grep -v "^//" "$tmp/part" > "$tmp/part.relay"
check "the partitioned text compiles again" "$kilnc" "$tmp/part.relay" -o "$tmp/p.kx"
in=(--input 1x4xf32=1,2,3,4 --input 4x4xf32=0.5)
"$vmrun" "$data/let_library_calls.relay" "${in[@]}" > "$tmp/plain"
"$vmrun" "$data/let_library_calls.relay" "${lib[@]}" "${in[@]}" > "$tmp/libout"
check "the partitioned program runs with the plain one's result" cmp -s "$tmp/plain" "$tmp/libout"
check "...which is right" grep -qx "1x4xf32=\[\[10 10 10 10\]\]" "$tmp/plain"

# The CNN sample partitioned for oneDNN with Kiln's own dnnl patterns.
cnn=("$src/samples/cnn.relay" --params "$src/samples/cnn_weights.npz")
"$kilnc" "${cnn[@]}" --partition dnnl --emit partitioned > "$tmp/cnn.part"
check "cnn: convolutions with their bias and ReLU become dnnl composites" grep -q 'Composite="dnnl.conv2d_bias_relu"' "$tmp/cnn.part"
"$vmrun" "${cnn[@]}" --input 1x3x32x32xf32=random > "$tmp/cnn.plain"
"$vmrun" "${cnn[@]}" --partition dnnl --input 1x3x32x32xf32=random > "$tmp/cnn.dnnl" 2> "$tmp/err"
rc=$?
check "cnn partitioned for dnnl exits 0" test $rc -eq 0
test $rc -eq 0 || { echo "exit status $rc:"; cat "$tmp/err"; }
check "cnn partitioned for dnnl gives the plain result" close "$tmp/cnn.dnnl" "$tmp/cnn.plain"
"$kilnc" "${cnn[@]}" --partition dnnl -o "$tmp/cnn.kx"
"$vmrun" "$tmp/cnn.kx" --input 1x3x32x32xf32=random --profile > "$tmp/cnn.saved" 2> "$tmp/prof"
check "the saved executable gives the same result" close "$tmp/cnn.saved" "$tmp/cnn.plain"
if grep -q "^// note: .*Kiln cannot call the library 'dnnl'" "$tmp/cnn.part"; then
  echo "skip the profile names dnnl (this Kiln is built without oneDNN)"
else
  check "the profile names the library of each library kernel" grep -q "^dnnl_main_0 \[dnnl\] .* library dnnl" "$tmp/prof"
fi

# Every sample partitioned for oneDNN (what it takes runs there, the rest on
# Kiln) prints its expected result, within float tolerance.
cd "$src"
for prog in samples/*.relay; do
  run=$(sed -n 's|^// RUN: \(.*\)$|\1|p' "$prog" | head -1)
  sed -n 's|^// EXPECT: \(.*\)$|\1|p' "$prog" | head -1 > "$tmp/expect"
  eval "\"$vmrun\" \"$prog\" --partition dnnl $run" > "$tmp/got" 2> "$tmp/err"
  check "$(basename "$prog") partitioned for dnnl prints its expected result" close "$tmp/got" "$tmp/expect"
done
cd - > /dev/null

# Bad requests.
"$kilnc" "$data/let_library_calls.relay" --partition nolib --emit partitioned 2> "$tmp/err"; rc=$?
check "a library no pattern names: exit 2" test $rc -eq 2
check "...saying so" grep -q "no patterns name the library 'nolib'" "$tmp/err"
"$kilnc" "$data/let_library_calls.relay" --patterns "$data/my_library.pat" --emit ir 2> "$tmp/err"; rc=$?
check "--patterns without --partition: exit 2" test $rc -eq 2
printf 'supports x = tanh(*\n' > "$tmp/bad.pat"
"$kilnc" "$data/let_library_calls.relay" --partition x --patterns "$tmp/bad.pat" --emit ir 2> "$tmp/err"; rc=$?
check "a bad pattern file: exit 2" test $rc -eq 2
check "...at file:line:col" grep -q "bad.pat:2:1: error: expected ')'" "$tmp/err"
"$kilnc" "$data/let_library_calls.relay" --emit partitioned 2> "$tmp/err"; rc=$?
check "--emit partitioned without --partition: exit 2" test $rc -eq 2
"$vmrun" "$tmp/cnn.kx" --partition dnnl --input 1x3x32x32xf32=random 2> "$tmp/err"; rc=$?
check "vmrun --partition on an executable: exit 2" test $rc -eq 2
test $failures -eq 0
