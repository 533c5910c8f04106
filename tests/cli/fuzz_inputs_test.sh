#!/usr/bin/env bash
# Runs the Relay front-end fuzzer over every program in the tests and samples, and
# the npy/npz reader fuzzer over archives vmrun writes (every dtype, ranks 0 to 3)
# and the samples' weights, each for a bounded time.
#   fuzz_inputs_test.sh VMRUN RELAY_FUZZ NPY_FUZZ SRC SECONDS
set -eu
vmrun=$1; relay_fuzz=$2; npy_fuzz=$3; src=$4; seconds=${5:-15}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/relay" "$tmp/npy"
cp "$src"/tests/e2e/*.relay "$src"/tests/programs/*.relay "$src"/samples/*.relay "$tmp/relay/"
# TVM's text (its std files and test programs): lower-case constructors, refs, extern types.
for f in "$src"/tests/tvm/*.relay "$src"/tests/tvm/std/*.rly; do cp "$f" "$tmp/relay/tvm_$(basename "$f")"; done
cp "$src"/samples/cnn_weights.npz "$tmp/npy/"
printf 'def @main(%%a: Tensor[(2, 3), float32], %%b: int64, %%c: Tensor[(4,), uint8], %%d: Tensor[(1, 2, 2), float16], %%e: Tensor[(2,), bool], %%f: Tensor[(3,), uint16]) { (%%a, %%b, %%c, %%d, %%e, %%f) }\n' > "$tmp/io.relay"
"$vmrun" "$tmp/io.relay" --input 2x3xf32=random --input i64=7 --input 4xu8=1,2,3,4 --input 1x2x2xf16=0.5 --input 2xbool=true,false --input 3xu16=1,2,65535 \
  --output "$tmp/npy/outputs.npz" > /dev/null
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}abort_on_error=1"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}abort_on_error=1:print_stacktrace=1"
echo "relay front end:"; "$relay_fuzz" "$tmp/relay" "$seconds" || { echo "the failing input is $(pwd)/fuzz-crash.bin"; exit 1; }
echo "npy/npz readers:"; "$npy_fuzz" "$tmp/npy" "$seconds" || { echo "the failing input is $(pwd)/fuzz-crash.bin"; exit 1; }
