#!/bin/bash
# The CUDA path of vmrun on a stand-in driver (tests/support/fake_cuda.cc): the
# driver loads, values cross to the GPU and back intact, kernels are generated
# as PTX, loaded and launched with the plan's grids, profiles and statistics
# report the GPU, and a second process takes its PTX from the disk cache. The
# stand-in runs no kernels, so only values that no kernel touches are compared.
vmrun="$1"; fake="$2"; src="$3"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/check_lib.sh"
export KILN_CUDA_DRIVER="$fake" KILN_FAKE_CUDA_LOG="$tmp/launches"
unset KILN_CACHE_DIR

# Values go to the GPU and come back: a parameter returned whole, inside a tuple and a list.
cat > "$tmp/round_trip.relay" <<'R'
def @main(%x: Tensor[(4), float32], %n: int32) {
  (%x, Cons(%x, Nil), %n)
}
R
"$vmrun" "$tmp/round_trip.relay" --device cuda --input 4xf32=1,2,3,4 --input i32=7 > "$tmp/out" 2> "$tmp/err"
check "round trip exits 0" test $? -eq 0
check "round trip values come back" grep -qx "(4xf32=\[1 2 3 4\], Cons(4xf32=\[1 2 3 4\], Nil), i32=7)" "$tmp/out"
check "round trip launches nothing" test ! -s "$tmp/launches"

# The MLP: dense layers of 2 rows as skinny products (a warp per column: 128
# columns in 16 blocks of 256 threads), epilogues flat; of 64 rows as tiled
# products (256 threads, 128x128 tiles).
"$vmrun" "$src/samples/mlp.relay" --params "$src/samples/mlp_weights.npz" --input 2x784xf32=random --device cuda --profile --stats > "$tmp/out" 2> "$tmp/err"
check "mlp exits 0" test $? -eq 0
check "mlp launches a skinny product" grep -q "^launch kiln_[0-9a-f]*_0_skinny grid 16 1 1 block 256$" "$tmp/launches"
check "mlp launches more than one kernel" test "$(wc -l < "$tmp/launches")" -ge 4
check "stats report the GPU pool" grep -q "^memory (cuda): peak [1-9]" "$tmp/err"
check "profile lists GPU kernels with their calls and GPU time" grep -q "^fused_nn_dense_nn_bias_add  *1  *0.001 ms" "$tmp/err"
check "stats count the compiles" grep -q "^jit: .* compiled in this process" "$tmp/err"
: > "$tmp/launches"
"$vmrun" "$src/samples/mlp.relay" --params "$src/samples/mlp_weights.npz" --input 64x784xf32=random --device cuda > "$tmp/out" 2> "$tmp/err"
check "mlp of 64 rows exits 0" test $? -eq 0
check "mlp of 64 rows launches a tiled product" grep -q "^launch kiln_[0-9a-f]*_0 grid 1 1 1 block 256$" "$tmp/launches"

# The CNN: host loops over images around an unfold and a tiled product.
: > "$tmp/launches"
"$vmrun" "$src/samples/cnn.relay" --params "$src/samples/cnn_weights.npz" --input 1x3x32x32xf32=random --device cuda > "$tmp/out" 2> "$tmp/err"
check "cnn exits 0" test $? -eq 0
check "cnn launches its kernels" test "$(wc -l < "$tmp/launches")" -ge 6

# A second process takes the PTX from the disk cache.
export KILN_CACHE_DIR="$tmp/cache"
"$vmrun" "$src/samples/mlp.relay" --params "$src/samples/mlp_weights.npz" --input 2x784xf32=random --device cuda --stats > /dev/null 2> "$tmp/err1"
"$vmrun" "$src/samples/mlp.relay" --params "$src/samples/mlp_weights.npz" --input 2x784xf32=random --device cuda --stats > /dev/null 2> "$tmp/err2"
check "the disk cache holds PTX" test -n "$(ls "$tmp/cache"/*.ptx 2>/dev/null)"
check "a second process hits the disk cache" grep -q "[1-9][0-9]* disk-cache hits" "$tmp/err2"

# A GPU that is not there.
"$vmrun" "$tmp/round_trip.relay" --device cuda:1 --input 4xf32=1 --input i32=1 > /dev/null 2> "$tmp/err"
check "cuda:1 on a one-GPU machine exits 2" test $? -eq 2 -o $? -eq 1
check "cuda:1 on a one-GPU machine says so" grep -q "error: .*cuda:1.*1 GPU" "$tmp/err"

echo "$failures check(s) failed"
test "$failures" -eq 0
