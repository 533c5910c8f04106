#!/usr/bin/env bash
# End-to-end checks of kilnc through the path a user takes: exit codes, the typed
# program on stdout, and one `file:line:col: error:` line on stderr.
set -u
kilnc="$1"
src="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/check_lib.sh"

# Every sample type-checks and prints its typed program.
for f in "$src"/samples/*.relay; do
  "$kilnc" --emit ir "$f" > "$tmp/out.relay" 2> "$tmp/err"
  check "sample $(basename "$f") exits 0" test $? -eq 0
  check "sample $(basename "$f") prints a typed @main" grep -q '^def @main(.*) -> ' "$tmp/out.relay"
  # The printed program is itself a valid program.
  "$kilnc" --emit ir "$tmp/out.relay" > /dev/null 2>&1
  check "sample $(basename "$f") output re-checks" test $? -eq 0
done

# The tree sample's inferred types.
"$kilnc" --emit ir "$src/samples/tree_sum.relay" > "$tmp/tree.relay"
check "tree_sum infers the @main result" grep -q -- '-> (float32, int32) {' "$tmp/tree.relay"
check "tree_sum infers let types" grep -q 'let %kids: List\[float32\] = @map(@tree_sum, %children);' "$tmp/tree.relay"

# Fusion and kernels: the MLP has three kernels (dense+bias+relu, dense+bias, softmax).
"$kilnc" --emit fused "$src/samples/mlp.relay" > "$tmp/fused.relay"
check "--emit fused marks primitive functions" test "$(grep -c '/\* primitive \*/ fn' "$tmp/fused.relay")" -eq 3
check "--emit fused keeps dense+bias+relu together" grep -q 'nn.relu(nn.bias_add(nn.dense(%p0, %p1, units=128), %p2, axis=-1))' "$tmp/fused.relay"
"$kilnc" --emit kernels "$src/samples/mlp.relay" > "$tmp/kernels.txt"
check "--emit kernels lists input shapes with ?" grep -q '^kernel0: inputs (Tensor\[(?, 784), float32\], Tensor\[(128, 784), float32\], Tensor\[(128,), float32\]) -> (Tensor\[(?, 128), float32\]), 1 call site$' "$tmp/kernels.txt"
check "--emit kernels finds three kernels" test "$(grep -c '^kernel' "$tmp/kernels.txt")" -eq 3
"$kilnc" --emit llvm "$src/samples/mlp.relay" > "$tmp/kernels.ll"
check "--emit llvm prints optimized IR with AVX-512 vectors or at least a kernel" grep -q '^define void @kiln_' "$tmp/kernels.ll"
"$kilnc" --emit loops "$src/samples/mlp.relay" > "$tmp/loops.txt"
check "--emit loops prints loop nests" grep -q 'parallel for' "$tmp/loops.txt"

# A type error: exit 2, one error line naming file:line:col.
printf 'def @main(%%a: Tensor[(2, 3), float32]) {\n  %%a + ones(shape=[4], dtype="float32")\n}\n' > "$tmp/bad.relay"
"$kilnc" --emit ir "$tmp/bad.relay" > "$tmp/out" 2> "$tmp/err"
check "type error exits 2" test $? -eq 2
check "type error names file:line:col" grep -q "^$tmp/bad.relay:2:6: error: add: shapes (2, 3) and (4,) do not broadcast$" "$tmp/err"
check "type error is one line" test "$(wc -l < "$tmp/err")" -eq 1
check "type error prints nothing on stdout" test ! -s "$tmp/out"

# A syntax error.
printf 'def @main() {\n  let %%x = 1\n}\n' > "$tmp/syntax.relay"
"$kilnc" --emit ir "$tmp/syntax.relay" 2> "$tmp/err" > /dev/null
check "syntax error exits 2" test $? -eq 2
check "syntax error names file:line:col" grep -q "^$tmp/syntax.relay:3:1: error: expected ';' after the bound value, but found '}'$" "$tmp/err"

# --emit memory: the CNN's static chain shares one storage; without planning, one storage each.
cnn="$src/samples/cnn.relay"
"$kilnc" "$cnn" --params "$src/samples/cnn_weights.npz" --emit memory > "$tmp/mem"
check "emit memory summarizes sharing" grep -q "// 3 storages, 5 tensors placed (3 in shared storage)" "$tmp/mem"
check "emit memory shows the shared arena" grep -q "alloc_storage r[0-9]*, 81920, 64, cpu" "$tmp/mem"
check "emit memory prints the memory pass's plan" grep -q "^// @main: 6 kernel calls, 1 shared arena" "$tmp/mem"
check "emit memory prints each call's decision" grep -q "^//   %[0-9]* = k[0-9]* fused_nn_max_pool2d on cpu: arena 0 at 65536" "$tmp/mem"
"$kilnc" "$cnn" --params "$src/samples/cnn_weights.npz" --emit memory --no-memory-plan > "$tmp/mem"
check "no-memory-plan gives each tensor its storage" grep -q "// 5 storages, 5 tensors placed (0 in shared storage)" "$tmp/mem"
"$kilnc" "$src/samples/tree_sum.relay" --emit memory > "$tmp/mem"
check "emit memory marks moved operands" grep -q "alloc_adt r[0-9]*, Cons, \[\^r[0-9]* \^r[0-9]*\]" "$tmp/mem"
check "unused prelude functions are not emitted" sh -c "! grep -q '^def @compose' '$tmp/mem'"

# --emit devices: every binding's device, the copies and the specializations.
"$kilnc" "$src/tests/e2e/placement_conflict.relay" --device cpu:1,cpu --emit devices > "$tmp/dev"
check "emit devices lists the default device and host" grep -q "^// devices: cpu:1 (default), cpu; host cpu$" "$tmp/dev"
check "emit devices annotates bindings" grep -q "device_copy(%t, src_device=\"cpu:1\", dst_device=\"cpu\");  // cpu$" "$tmp/dev"
check "emit devices annotates parameters" grep -qF "%x: Tensor[(4,), float32] /* cpu:1 */" "$tmp/dev"
check "emit devices counts the copies" grep -q "^// 1 copy inserted$" "$tmp/dev"
"$kilnc" "$src/tests/e2e/placement_specialize.relay" --emit devices > "$tmp/dev"
check "emit devices names specializations" grep -q "^// 1 specialization: @scale@cpu.cpu$" "$tmp/dev"
check "a specialization is a function of its own" grep -q "^def @scale@cpu.cpu(" "$tmp/dev"
"$kilnc" "$src/tests/e2e/placement_conflict.relay" --device cpu:1,cpu -o "$tmp/c.kx"
check "kilnc --device cpu:1,cpu compiles" test $? -eq 0

# --emit ptx: each kernel as PTX for sm_90 with its launches, no GPU needed.
"$kilnc" "$src/samples/mlp.relay" --emit ptx > "$tmp/ptx" 2> "$tmp/err"
check "emit ptx exits 0" test $? -eq 0
check "emit ptx targets sm_90" grep -q "^.target sm_90$" "$tmp/ptx"
check "emit ptx says what the host runs" grep -q "^// sm_90; what the host runs:" "$tmp/ptx"
check "emit ptx maps the dense to a tiled product" grep -q "^//   launch kernel0_0 (gemm)" "$tmp/ptx"
check "emit ptx maps its epilogue flat" grep -q "^//   launch kernel0_1 (flat, 2 loops collapsed)" "$tmp/ptx"
check "emit ptx tiles through shared memory" grep -qF ".shared .align 16 .b8 kiln_tile_a[4096];" "$tmp/ptx"
"$kilnc" "$src/samples/cnn.relay" --emit ptx > "$tmp/ptx_cnn" 2>&1
check "emit ptx runs a convolution's images in a host loop" grep -q "^//   for v0 (a host loop; v0 is an argument)" "$tmp/ptx_cnn"
check "emit ptx: kilnc compiles for cuda without a GPU" "$kilnc" "$src/samples/mlp.relay" --device cuda -o "$tmp/mlp_cuda.kexe"
check "emit ptx prints no warnings" test ! -s "$tmp/err"

# Unusable invocations.
"$kilnc" --emit ir "$tmp/missing.relay" 2> "$tmp/err" > /dev/null
check "missing file exits 2" test $? -eq 2
check "missing file says so" grep -q "^error: cannot read '$tmp/missing.relay'" "$tmp/err"
"$kilnc" --bogus 2> "$tmp/err" > /dev/null
check "unknown flag exits 2" test $? -eq 2
check "unknown flag says so" grep -q "^error: unknown option '--bogus'" "$tmp/err"

# TVM 0.8's integer device attributes (1 cpu, 2 cuda) place like the named ones.
printf 'def @main(%%x: Tensor[(2,), float32]) {\n  let %%y = on_device(%%x * 2f, device_type=2);\n  device_copy(%%y, src_dev_type=2, dst_dev_type=1)\n}\n' > "$tmp/tvmdev.relay"
"$kilnc" "$tmp/tvmdev.relay" --device cuda,cpu --emit devices > "$tmp/devs"
check "device_type=2 puts the product on cuda" grep -q "})(%x);  // cuda" "$tmp/devs"
check "dst_dev_type=1 copies the result to cpu" grep -q "device_copy(%y, src_dev_type=2, dst_dev_type=1)  // cpu" "$tmp/devs"
printf 'def @main(%%x: Tensor[(2,), float32]) { on_device(%%x, device_type=7) }\n' > "$tmp/tvmdev7.relay"
"$kilnc" "$tmp/tvmdev7.relay" -o "$tmp/d.kx" 2> "$tmp/err"
check "an unknown device type is a located error" grep -q "tvmdev7.relay:1:40: error: on_device: attribute 'device_type' = 7 is not a device type" "$tmp/err"

if [ "$failures" -ne 0 ]; then echo "$failures check(s) failed"; exit 1; fi
echo "all kilnc checks passed"
