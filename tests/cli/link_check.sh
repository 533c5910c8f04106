#!/usr/bin/env bash
# The library split, as the build shows it: what runs executables (vmrun, the
# runtime library, an embedding app) does not link LLVM; only the code generator
# library does, and it is opened on demand.
set -u
fail=0
for f in "$@"; do
  if readelf -d "$f" | grep -q 'NEEDED.*\(LLVM\|kiln_codegen\)'; then
    echo "FAIL: $f links LLVM or the code generator:"; readelf -d "$f" | grep NEEDED; fail=1
  else
    echo "ok: $(basename "$f") needs $(readelf -d "$f" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | tr '\n' ' ')"
  fi
done
exit $fail
