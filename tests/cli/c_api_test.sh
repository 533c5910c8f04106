#!/usr/bin/env bash
# Compiles the C API test's program with kilnc and runs the C test on it.
set -eu
kilnc=$1; test=$2; program=$3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$kilnc" "$program" -o "$tmp/lists.kx"
"$test" "$tmp/lists.kx"
