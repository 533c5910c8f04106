#!/usr/bin/env bash
# Kiln's CUDA path on a real GPU, from a build made on this (Debian) machine.
#
#   scripts/gpu_check.sh pack [BUILD]   here: BUILD's programs and libraries (default build/),
#                                       stripped, with the shared libraries they need that a
#                                       CUDA machine may lack, libdevice and the ONNX test data,
#                                       into gpu-pack/kiln.tar.xz (ignored by git)
#   scripts/gpu_check.sh run            on the GPU machine, from a checkout holding gpu-pack/:
#                                       the real-GPU checks, each bounded by a timeout
#
# The checks: a sample on `--device cuda` next to the CPU; the GPU-against-CPU kernel
# cases (`cuda-emu*` test cases with KILN_GPU_TEST_DEVICE=cuda; SWEEP=1 adds the long
# sweep); every end-to-end program, TVM corpus program and sample on cuda; per-kernel
# profiles of the samples on cuda and on the host; gpu_bench;
# the ONNX backend cases on cuda (SKIP_ONNX=1 leaves them out). A GPU machine needs its
# driver (libcuda.so.1) and, for libdevice, nothing else: the pack carries it.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
pack=$root/gpu-pack
case "${1:-}" in
pack)
  build=$(cd "${2:-$root/build}" && pwd) || exit 1
  stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
  mkdir -p "$stage/bin" "$stage/lib" "$pack"
  programs=("$build/vmrun" "$build/kilnc" "$build/tests/kiln_tests" "$build/tests/onnx_backend_cases"
            "$build/bench/gpu_bench")
  for f in "${programs[@]}" "$build"/libkiln_*.so; do
    [ -f "$f" ] || { echo "gpu_check: $f is missing; build first" >&2; exit 1; }
    dest=$stage/bin; case $f in *.so) dest=$stage/lib;; esac
    strip --strip-unneeded -o "$dest/$(basename "$f")" "$f" || exit 1
  done
  # The libraries the programs load beyond the C and C++ runtimes (which a newer
  # system has in newer, compatible versions): oneDNN, ONNX, protobuf, mimalloc, ...
  for f in "${programs[@]}" "$build"/libkiln_*.so; do ldd "$f"; done |
    awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux-x86-64|libpthread|libdl|librt)\.so' |
    grep -v "^$build/" | while read -r lib; do cp -L "$lib" "$stage/lib/"; done
  cp /usr/local/cuda/nvvm/libdevice/libdevice.10.bc "$stage/lib/" 2>/dev/null
  [ -d /usr/share/libonnx-testdata/data ] && cp -r /usr/share/libonnx-testdata/data "$stage/onnxdata"
  tar -C "$stage" -cf - . | xz -T0 -6 > "$pack/kiln.tar.xz" || exit 1
  echo "gpu_check: $(du -h "$pack/kiln.tar.xz" | cut -f1) in $pack/kiln.tar.xz"
  ;;
run)
  [ -f "$pack/kiln.tar.xz" ] || { echo "gpu_check: no $pack/kiln.tar.xz; run 'scripts/gpu_check.sh pack' where Kiln was built" >&2; exit 1; }
  k=$(mktemp -d)
  tar -C "$k" -xJf "$pack/kiln.tar.xz" || exit 1
  export LD_LIBRARY_PATH=$k/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  [ -f /usr/local/cuda/nvvm/libdevice/libdevice.10.bc ] || export KILN_LIBDEVICE=$k/lib/libdevice.10.bc
  command -v ptxas > /dev/null || export PATH=$PATH:/usr/local/cuda/bin
  cd "$root" || exit 1
  failed=0
  step() { echo; echo "=== $* ($(date +%T))"; }
  check() { "$@" || { failed=$((failed+1)); echo "gpu_check: FAILED: $*"; }; }
  step machine
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
  ldd "$k/bin/vmrun" | grep 'not found'
  step "sample on cuda, then on the cpu"
  check timeout 120 "$k/bin/vmrun" samples/mlp.relay --params samples/mlp_weights.npz --input 2x784xf32=random \
    --device cuda --profile --stats
  check timeout 60 "$k/bin/vmrun" samples/mlp.relay --params samples/mlp_weights.npz --input 2x784xf32=random
  step "every operator's GPU kernel against its CPU kernel"
  check env KILN_GPU_TEST_DEVICE=cuda timeout 300 "$k/bin/kiln_tests" -tc='cuda-emu*'
  if [ "${SWEEP:-0}" = 1 ]; then
    step "the same, the long sweep"
    check env KILN_CUDA_EMU_SWEEP=1 KILN_GPU_TEST_DEVICE=cuda timeout 300 "$k/bin/kiln_tests" -tc='cuda-emu*'
  fi
  step "end-to-end programs on cuda"
  for s in tests/e2e tests/tvm samples; do
    check timeout 300 bash tests/cli/e2e_test.sh "$k/bin/vmrun" "$k/bin/kilnc" "$root/$s" "$root" cuda
  done
  # Steady-state GPU time per kernel (CUDA events) beside the host's, for each
  # sample, with its own RUN arguments.
  for prog in samples/cnn.relay samples/lstm_list.relay samples/mlp.relay; do
    read -r -a args <<< "$(sed -n 's|^// RUN: ||p' "$prog")"
    for dev in cuda cpu; do
      step "profile of $prog on $dev, 200 runs"
      check timeout 120 "$k/bin/vmrun" "$prog" "${args[@]}" --device $dev --repeat 200 --warmup 20 --profile
    done
  done
  step gpu_bench
  check timeout 300 "$k/bin/gpu_bench"
  if [ "${SKIP_ONNX:-0}" != 1 ] && [ -d "$k/onnxdata" ]; then
    step "ONNX backend cases on cuda"
    check timeout 600 "$k/bin/onnx_backend_cases" "$k/onnxdata" --device cuda --expect tests/onnx/backend_report.txt
  fi
  step "done: $failed check(s) failed"
  rm -rf "$k"
  [ "$failed" = 0 ]
  ;;
*)
  echo "usage: scripts/gpu_check.sh pack [BUILD] | run" >&2; exit 2
  ;;
esac
