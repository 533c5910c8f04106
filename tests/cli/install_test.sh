#!/usr/bin/env bash
# The installed package, used as an app would: `cmake --install` into a fresh
# prefix; the embedding sample configured and built as a project of its own with
# find_package(kiln) and run on an executable the *installed* kilnc compiled
# (the installed runtime finds the installed code generator beside itself); an
# app that includes an internal header does not compile; nothing installed links
# LLVM but the code generator.
set -eu
build=$1; src=$2; generator=$3; sanitize=${4:-}
flags=(-DCMAKE_CXX_FLAGS="$sanitize" -DCMAKE_EXE_LINKER_FLAGS="$sanitize")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/kilnc bin/vmrun lib/libkiln_runtime.so lib/libkiln_compiler.so lib/libkiln_codegen.so \
         include/kiln/vm.h include/kiln/kiln.h include/kiln/dlpack.h lib/cmake/kiln/kilnConfig.cmake; do
  [ -e "$prefix/$f" ] || { echo "FAIL: $f not installed"; exit 1; }
done
# Only the public headers.
extra=$(cd "$prefix/include" && find . -type f ! -path './kiln/*')
[ -z "$extra" ] || { echo "FAIL: headers outside include/kiln: $extra"; exit 1; }

# The tools run from the prefix (moved away from the build tree).
"$prefix/bin/kilnc" "$src/samples/mlp.relay" --params "$src/samples/mlp_weights.npz" -o "$tmp/mlp.kx"
KILN_CACHE_DIR= "$prefix/bin/vmrun" "$src/samples/tree_sum.relay" --input f32=1 --input f32=2 --input f32=3 | grep -q '^(f32=12, i32=3)$'

# The sample, out of tree.
cmake -S "$src/samples/embed" -B "$tmp/embed" -G "$generator" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_BUILD_TYPE=Release "${flags[@]}" >"$tmp/configure.log" || { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/embed" >"$tmp/build.log" || { cat "$tmp/build.log"; exit 1; }
out=$("$tmp/embed/kiln_embed" "$tmp/mlp.kx")
echo "$out"
[ "$(echo "$out" | grep -c '^input [0-3]: class [0-9]$')" = 4 ]
readelf -d "$tmp/embed/kiln_embed" | grep -q 'NEEDED.*libkiln_runtime.so'
if readelf -d "$tmp/embed/kiln_embed" | grep -q 'NEEDED.*\(LLVM\|kiln_codegen\|kiln_compiler\)'; then
  echo "FAIL: the sample links more than the runtime"; exit 1
fi

# An app against kiln::runtime cannot include Kiln's internal headers.
mkdir -p "$tmp/internal"
cat > "$tmp/internal/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(internal_include LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 20)
find_package(kiln REQUIRED CONFIG)
add_executable(public_only public.cc)
target_link_libraries(public_only PRIVATE kiln::compiler)
add_executable(internal internal.cc)
target_link_libraries(internal PRIVATE kiln::compiler)
CMAKE
printf '#include "kiln/compile.h"\n#include "kiln/kiln.h"\n#include "kiln/dlpack.h"\nint main() { return kiln::compile("def @main() { 1f }") ? 0 : 1; }\n' > "$tmp/internal/public.cc"
printf '#include "vm/interpreter.h"\nint main() { return 0; }\n' > "$tmp/internal/internal.cc"
cmake -S "$tmp/internal" -B "$tmp/internal/build" -G "$generator" -DCMAKE_PREFIX_PATH="$prefix" "${flags[@]}" >/dev/null
cmake --build "$tmp/internal/build" --target public_only >/dev/null
"$tmp/internal/build/public_only"
if cmake --build "$tmp/internal/build" --target internal >"$tmp/internal.log" 2>&1; then
  echo "FAIL: an internal header compiled against the installed package"; exit 1
fi
grep -q "vm/interpreter.h: No such file" "$tmp/internal.log"
echo "ok: installed package builds the sample; internal headers are not reachable"
