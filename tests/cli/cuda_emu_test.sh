#!/bin/bash
# The emulated CUDA device through vmrun and kilnc, as a user takes it: results
# equal the CPU's, values cross to the device and back, the profile times GPU
# kernels with events, the GPU pool is reported, a second process takes the
# kernels from the disk cache, a saved executable runs on it, and it never
# stands in for a missing GPU (--device cuda stays an error).
vmrun="$1"; kilnc="$2"; src="$3"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/check_lib.sh"
unset KILN_CACHE_DIR
export KILN_CUDA_DRIVER=/nonexistent/libcuda.so.1   # no GPU driver, whatever this machine has

run_mlp() {
  "$vmrun" "$src/samples/mlp.relay" --params "$src/samples/mlp_weights.npz" --input 2x784xf32=random "$@"
}
run_mlp > "$tmp/cpu" 2> /dev/null
run_mlp --device cuda-emu --profile --stats > "$tmp/emu" 2> "$tmp/err"
check "mlp on cuda-emu exits 0" test $? -eq 0
check "mlp on cuda-emu prints the CPU's result" close "$tmp/emu" "$tmp/cpu"
check "the profile times GPU kernels" grep -q "^fused_nn_dense_nn_bias_add  *1  *[0-9.]* ms" "$tmp/err"
check "stats report the emulated GPU's pool" grep -q "^memory (cuda-emu): peak [1-9]" "$tmp/err"

# Placement: the CNN's tensors on the device, control flow on the host.
"$vmrun" "$src/samples/cnn.relay" --params "$src/samples/cnn_weights.npz" --input 1x3x32x32xf32=random > "$tmp/cpu" 2>/dev/null
"$vmrun" "$src/samples/cnn.relay" --params "$src/samples/cnn_weights.npz" --input 1x3x32x32xf32=random --device cuda-emu:1 > "$tmp/emu" 2> "$tmp/err"
check "cnn on cuda-emu:1 exits 0" test $? -eq 0
check "cnn on cuda-emu:1 prints the CPU's result" close "$tmp/emu" "$tmp/cpu"

# A second process takes every kernel from the disk cache.
export KILN_CACHE_DIR="$tmp/cache"
run_mlp --device cuda-emu --stats > /dev/null 2> "$tmp/err1"
run_mlp --device cuda-emu --stats > /dev/null 2> "$tmp/err2"
check "the first process compiles" grep -q "^kernels: [1-9][0-9]* by the code generator" "$tmp/err1"
check "a second process hits the disk cache" grep -q "^kernels: 0 by the code generator, 0 precompiled, [1-9][0-9]* from the disk cache" "$tmp/err2"
unset KILN_CACHE_DIR

# An executable compiled for the emulated device runs there after loading.
"$kilnc" "$src/samples/mlp.relay" --params "$src/samples/mlp_weights.npz" --device cuda-emu -o "$tmp/mlp.kx" 2> "$tmp/err"
check "kilnc --device cuda-emu -o exits 0" test $? -eq 0
"$vmrun" "$tmp/mlp.kx" --input 2x784xf32=random > "$tmp/exe" 2> "$tmp/err"
check "the saved executable runs" test -s "$tmp/exe"
run_mlp > "$tmp/cpu.mlp" 2>/dev/null
check "the saved executable's result is the CPU's" close "$tmp/exe" "$tmp/cpu.mlp"

# No silent stand-in: cuda without a GPU is the clear error it always was.
run_mlp --device cuda > /dev/null 2> "$tmp/err"; status=$?
check "--device cuda without a driver fails" test $status -ne 0
check "--device cuda without a driver says why" grep -q "error: .*CUDA driver.*could not be loaded" "$tmp/err"
run_mlp --device cuda-emu:2 > /dev/null 2> "$tmp/err"; status=$?
check "a third emulated device does not exist" test $status -ne 0
check "...and the error says so" grep -q "cuda-emu:2.*2 GPU" "$tmp/err"

echo "$failures check(s) failed"
test "$failures" -eq 0
