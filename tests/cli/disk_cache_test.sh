#!/usr/bin/env bash
# The on-disk kernel cache across processes: the first run compiles and stores,
# the second loads every kernel from disk (without loading LLVM) and computes the
# same results. Damaged, truncated, foreign (another CPU's key), stale (another
# code generator version's) and sealed-garbage
# entries are recompiled, never run, and rewritten.
set -u
probe="$1"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
run() { KILN_CACHE_DIR="$dir" "$probe" 2>&1 || { echo "FAIL: the probe failed: $*"; fail=1; }; }
expect() {  # expect LABEL OUTPUT WANT(compiled|disk) CODEGEN(loaded|not-loaded)
  echo "$1:"; echo "$2"
  [ "$(echo "$2" | grep -c "^$3 ")" -eq 3 ] || { echo "FAIL: $1: every kernel should be '$3'"; fail=1; }
  echo "$2" | grep -q "^codegen $4\$" || { echo "FAIL: $1: the code generator should be $4"; fail=1; }
  diff <(echo "$first" | awk '/^(disk|compiled) /{print $2}') <(echo "$2" | awk '/^(disk|compiled) /{print $2}') > /dev/null ||
    { echo "FAIL: $1: results differ from the first run"; fail=1; }
}
first=$(run first)
expect "first run" "$first" compiled loaded
[ "$(ls "$dir"/*.kobj 2>/dev/null | wc -l)" -eq 3 ] || { echo "FAIL: three kernel files expected in the cache"; fail=1; }
expect "second run" "$(run second)" disk not-loaded

for f in "$dir"/*.kobj; do printf 'garbage' > "$f"; done
expect "damaged files" "$(run damaged)" compiled loaded
expect "rewritten" "$(run rewritten)" disk not-loaded

for f in "$dir"/*.kobj; do head -c 100 "$f" > "$f.cut" && mv "$f.cut" "$f"; done
expect "truncated files" "$(run truncated)" compiled loaded

for f in "$dir"/*.kobj; do printf '\x01' | dd of="$f" bs=1 seek=2000 conv=notrunc status=none; done
expect "a flipped byte" "$(run flipped)" compiled loaded

"$probe" --foreign "$dir"/*.kobj || { echo "FAIL: --foreign"; fail=1; }
expect "another CPU's entries" "$(run foreign)" compiled loaded

# Files far larger than any kernel under the kernels' names: ignored, not read.
for f in "$dir"/*.kobj; do truncate -s 100G "$f"; done
expect "100 GB (sparse) entries" "$(run huge)" compiled loaded
expect "rewritten after that" "$(run rewritten2)" disk not-loaded

"$probe" --stale "$dir"/*.kobj || { echo "FAIL: --stale"; fail=1; }
expect "another Kiln version's entries" "$(run stale)" compiled loaded

"$probe" --sealed-garbage "$dir"/*.kobj || { echo "FAIL: --sealed-garbage"; fail=1; }
expect "sealed garbage" "$(run garbage)" compiled loaded
expect "rewritten again" "$(run again)" disk not-loaded
exit $fail
