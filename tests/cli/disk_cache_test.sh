#!/usr/bin/env bash
# The on-disk kernel cache across processes: the first run compiles and stores,
# the second loads every kernel from disk and computes the same results.
set -u
probe="$1"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
first=$(KILN_CACHE_DIR="$dir" "$probe") || { echo "FAIL first run"; exit 1; }
second=$(KILN_CACHE_DIR="$dir" "$probe") || { echo "FAIL second run"; exit 1; }
echo "first run:"; echo "$first"
echo "second run:"; echo "$second"
fail=0
[ "$(echo "$first" | grep -c '^compiled ')" -eq 3 ] || { echo "FAIL: the first run should compile all three"; fail=1; }
[ "$(echo "$second" | grep -c '^disk ')" -eq 3 ] || { echo "FAIL: the second run should load all three from disk"; fail=1; }
[ "$(ls "$dir"/*.o | wc -l)" -eq 3 ] || { echo "FAIL: three objects expected in the cache"; fail=1; }
# Same results either way (the checksum column).
diff <(echo "$first" | awk '{print $2}') <(echo "$second" | awk '{print $2}') > /dev/null || { echo "FAIL: results differ"; fail=1; }
# A damaged entry is ignored and rewritten, never a crash.
for f in "$dir"/*.o; do printf 'garbage' > "$f"; done
third=$(KILN_CACHE_DIR="$dir" "$probe" 2>&1) && echo "third run (damaged cache): $third" || { echo "FAIL: a damaged cache made the probe fail: $third"; fail=1; }
exit $fail
