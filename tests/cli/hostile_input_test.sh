#!/usr/bin/env bash
# Hostile input through the tools: every case is one `error:` line naming the
# problem, the documented exit status, and nothing else on stderr.
set -u
vmrun=$1; kilnc=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
# expect STATUS TEXT COMMAND...: the command exits STATUS and its stderr is one line containing TEXT.
expect() {
  local want=$1 text=$2; shift 2
  "$@" > "$tmp/out" 2> "$tmp/err"; local got=$?
  local lines; lines=$(wc -l < "$tmp/err")
  if [ "$got" != "$want" ] || ! grep -qF -- "$text" "$tmp/err" || [ "$lines" != 1 ]; then
    echo "FAIL: $* -> exit $got (want $want), stderr:"; cat "$tmp/err"; fails=$((fails+1))
  else
    echo "ok: $text"
  fi
}

printf 'def @main() { zeros(shape=[4294967296, 4294967296, 4], dtype="float32") }\n' > "$tmp/overflow.relay"
expect 2 'overflow.relay:1:15: error: zeros: the result Tensor[(4294967296, 4294967296, 4), float32] has more than 2^40 elements' "$vmrun" "$tmp/overflow.relay"
expect 2 'has more than 2^40 elements' "$kilnc" "$tmp/overflow.relay" -o "$tmp/o.kx"
printf 'def @main(%%x: Tensor[(3, 0), float32], %%i: Tensor[(2,), int32]) { take(%%x, %%i, axis=1) }\n' > "$tmp/take.relay"
expect 2 'error: take: takes 6 element(s) from an empty axis of (3, 0)' "$kilnc" "$tmp/take.relay" -o "$tmp/t.kx"

printf 'def @main(%%x: float32) {\n  %%0 = fn (%%p0: float32, Primitive=1) { if (%%p0 > 0f) { %%p0 } else { 0f } };\n  %%0(%%x)\n}\n' > "$tmp/prim.relay"
expect 2 'prim.relay:2:41: error: a kernel can only hold operator calls on tensors, not this expression' "$kilnc" "$tmp/prim.relay" -o "$tmp/p.kx"

printf 'def @main(%%x: float32) {\n  %%0 = fn (%%p0: float32, Primitive=1) { add(%%p0, 1f) };\n  (%%0(%%x), %%0)\n}\n' > "$tmp/primval.relay"
expect 2 'primval.relay:2:3: error: %0 holds a function marked Primitive=1, which can only be called, not used as a value' "$kilnc" "$tmp/primval.relay" -o "$tmp/p.kx"

printf 'def @main(%%x: Tensor[(?, ?), float32]) { %%x }\n' > "$tmp/id.relay"
printf 'def @main(%%x: int8) { %%x }\n' > "$tmp/i8.relay"
expect 2 'out of memory on cpu: cannot allocate 4000000000000 bytes' "$vmrun" "$tmp/id.relay" --input 1000000x1000000xf32=0
expect 2 "input 'i8=300': 300 is out of the range of int8" "$vmrun" "$tmp/i8.relay" --input i8=300
expect 2 "input 'u8=-1': -1 is out of the range of uint8" "$vmrun" "$tmp/i8.relay" --input u8=-1
expect 2 "bad value '99999999999999999999'" "$vmrun" "$tmp/i8.relay" --input i32=99999999999999999999
expect 2 '--memory-limit 17179869185G is more bytes than a 64-bit size holds' "$vmrun" "$tmp/id.relay" --memory-limit 17179869185G --input 1x1xf32=0
mkdir "$tmp/dir"
expect 2 "cannot read '$tmp/dir': it is a directory" "$vmrun" "$tmp/dir"
expect 2 "cannot read '$tmp/dir': it is a directory" "$kilnc" "$tmp/dir" -o "$tmp/d.kx"
expect 2 "cannot read '$tmp/dir': it is a directory" "$vmrun" "$tmp/id.relay" --params "$tmp/dir" --input 1x1xf32=0
expect 2 "cannot read '$tmp/dir': it is a directory" "$vmrun" "$tmp/id.relay" --inputs "$tmp/dir"
expect 2 "cannot read '$tmp/dir': it is a directory" "$vmrun" "$tmp/id.relay" --input "@$tmp/dir"

# npy headers are checked before anything is allocated.
npy() {  # npy FILE HEADER-DICT: a version-1 .npy with that header and 8 data bytes
  local h=$2; local pad=$(( (64 - (10 + ${#h} + 1) % 64) % 64 ))
  { printf '\x93NUMPY\x01\x00'; printf "\\x$(printf %02x $(( (${#h} + pad + 1) % 256 )))\\x$(printf %02x $(( (${#h} + pad + 1) / 256 )))";
    printf '%s' "$h"; printf '%*s' $pad ''; printf '\n'; printf '\x00\x00\x00\x00\x00\x00\x00\x00'; } > "$1"
}
npy "$tmp/huge.npy" "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000), }"
expect 2 'array data is truncated (the header declares 4000000000000 bytes, the file holds 8)' "$vmrun" "$tmp/id.relay" --input "@$tmp/huge.npy"
npy "$tmp/digits.npy" "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999, 1), }"
expect 2 'a dimension is too large' "$vmrun" "$tmp/id.relay" --input "@$tmp/digits.npy"
npy "$tmp/letters.npy" "{'descr': '<f4', 'fortran_order': False, 'shape': (2x, 1), }"
expect 2 'not a list of sizes' "$vmrun" "$tmp/id.relay" --input "@$tmp/letters.npy"
npy "$tmp/wrap.npy" "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 2), }"
expect 2 'more bytes than memory can hold' "$vmrun" "$tmp/id.relay" --input "@$tmp/wrap.npy"

# A successful run that makes LLVM give up on vectorizing a loop prints no LLVM remarks.
printf 'def @main(%%x: Tensor[(3, ?), float32], %%i: Tensor[(2,), int32]) { take(%%x, %%i, axis=1, mode="wrap") }\n' > "$tmp/wrap.relay"
"$vmrun" "$tmp/wrap.relay" --input 3x2xf32=1,2,3,4,5,6 --input 2xi32=0,-1 > "$tmp/out" 2> "$tmp/err"
if [ -s "$tmp/err" ]; then echo "FAIL: stderr on success:"; cat "$tmp/err"; fails=$((fails+1)); else echo "ok: quiet stderr on success"; fi
KILN_LLVM_REMARKS=1 "$vmrun" "$tmp/wrap.relay" --input 3x2xf32=1,2,3,4,5,6 --input 2xi32=0,-1 > "$tmp/out" 2> "$tmp/err"
if ! grep -q '^llvm: .*loop not vectorized' "$tmp/err"; then echo "FAIL: KILN_LLVM_REMARKS=1 shows no remark"; fails=$((fails+1)); else echo "ok: remarks on request"; fi

[ $fails = 0 ] && echo "all hostile-input checks passed" || { echo "$fails failed"; exit 1; }
