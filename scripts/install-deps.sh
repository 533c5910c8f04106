#!/usr/bin/env bash
# Installs the Debian 12 packages Kiln needs to build and test (run as root or with sudo).
set -euo pipefail
packages=(build-essential cmake ninja-build llvm-19-dev libmimalloc-dev libboost-dev doctest-dev libdlpack-dev
          python3 python3-dev python3-numpy pybind11-dev
          libonnx-dev libprotobuf-dev libonnx-testdata libdnnl-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
