#!/usr/bin/env bash
# Runs the ONNX import fuzzer over the test models and a spread of ONNX's backend
# cases (control flow, convolutions, reductions, shape arithmetic) for a bounded time.
#   fuzz_onnx_test.sh ONNX_FUZZ SRC SECONDS
set -eu
fuzz=$1; src=$2; seconds=${3:-15}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp "$src"/tests/onnx/models/*.onnx "$tmp/"
data=/usr/share/libonnx-testdata/data/node
for c in test_if test_loop11 test_scan9_sum test_conv_with_strides_padding test_reduce_sum_keepdims_example \
         test_reshape_extended_dims test_gather_0 test_slice_default_axes test_lstm_defaults test_resize_upsample_scales_linear; do
  if [ -f "$data/$c/model.onnx" ]; then cp "$data/$c/model.onnx" "$tmp/$c.onnx"; fi
done
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}abort_on_error=1"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}abort_on_error=1:print_stacktrace=1"
"$fuzz" "$tmp" "$seconds" || { echo "the failing input is $(pwd)/fuzz-crash.bin"; exit 1; }
