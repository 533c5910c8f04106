#!/usr/bin/env bash
# Quick start, step 1: install dependencies, build Kiln, install it (kilnc, vmrun,
# the libraries, headers, CMake package and the Python module `kiln`) under
# KILN_PREFIX (default ~/.local), and run a sample program.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
prefix=${KILN_PREFIX:-$HOME/.local}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix"
cmake --build build
cmake --install build >/dev/null
echo "== installed under $prefix (kilnc, vmrun in $prefix/bin; find_package(kiln) with CMAKE_PREFIX_PATH=$prefix)"
echo "== vmrun samples/tree_sum.relay --input f32=1 --input f32=2 --input f32=3"
build/vmrun samples/tree_sum.relay --input f32=1 --input f32=2 --input f32=3
echo "== python3 -c 'import kiln'"
/usr/bin/python3 -c "import kiln; print('kiln', kiln.__file__)"
