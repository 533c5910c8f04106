#!/usr/bin/env bash
# End-to-end program tests: each tests/e2e/*.relay names its vmrun arguments and
# expected result in header comments, and runs through vmrun as a user would —
# once from text and once compiled by kilnc -o and loaded (save → load → run must
# give the same output).
#   // RUN: <vmrun arguments>      // EXPECT: <stdout line>
#   // EXIT: <status, default 0>   // STDERR: <text stderr must contain>
set -u
#   // KILNC: <extra kilnc arguments, e.g. --params>
#   // WITH: <files, relative to the source root, put before the program (their
#   //        #[version] lines dropped after the first), as TVM loads its std files>
#   // COMPILE-ONLY: <why>  (no entry point to run: checked by kilnc -o and counted apart)
# Paths in RUN and KILNC lines are relative to the source root (the fourth argument).
# A fifth argument names a GPU (cuda-emu, cuda) that every program runs on instead
# (placement programs: as their second device, in place of cpu:1); programs that
# pick other devices, expect to fail or check host-specific reports are counted apart.
vmrun=$1; kilnc=$2; dir=$3; root=${4:-.}; device=${5:-}
cd "$root" || exit 1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# Outputs match when their text is equal, or when they differ only in floating
# numbers within a relative 1e-5 (printed with 6 digits; a kernel that sums in
# another order may move the last one). Everything else must match exactly.
same_output() {
  [ "$1" = "$2" ] && return 0
  awk -v got="$1" -v want="$2" 'BEGIN {
    num = "-?[0-9]+\\.?[0-9]*(e[-+]?[0-9]+)?"
    while (length(got) > 0 && length(want) > 0) {
      if (match(got, "^" num) && (g = substr(got, 1, RLENGTH)) != "" && match(want, "^" num)) {
        w = substr(want, 1, RLENGTH)
        if (g !~ /[.e]/ || w !~ /[.e]/) { if (g != w) exit 1 }
        else { d = g - w; if (d < 0) d = -d; s = (w < 0 ? -w : w); if (s < 1e-3) s = 1e-3; if (d > 1e-5 * s) exit 1 }
        got = substr(got, length(g) + 1); want = substr(want, RLENGTH + 1); continue
      }
      if (substr(got, 1, 1) != substr(want, 1, 1)) exit 1
      got = substr(got, 2); want = substr(want, 2)
    }
    exit (length(got) == 0 && length(want) == 0) ? 0 : 1
  }'
}
fails=0; count=0
compiled_only=0; own_devices=0
for prog in "$dir"/*.relay; do
  name=$(basename "$prog" .relay)
  with=$(sed -n 's|^// WITH: \(.*\)$|\1|p' "$prog" | head -1)
  if [ -n "$with" ]; then
    first=1; : > "$tmp/$name.relay"
    for w in $with $prog; do
      if [ $first = 1 ]; then cat "$w"; else sed '/^#\[version/d' "$w"; fi >> "$tmp/$name.relay"; first=0
    done
    prog=$tmp/$name.relay
  fi
  args=$(sed -n 's|^// RUN:\(.*\)$|\1|p' "$prog" | head -1)
  expect=$(sed -n 's|^// EXPECT: \(.*\)$|\1|p' "$prog" | head -1)
  exit_want=$(sed -n 's|^// EXIT: \(.*\)$|\1|p' "$prog" | head -1); exit_want=${exit_want:-0}
  stderr_want=$(sed -n 's|^// STDERR: \(.*\)$|\1|p' "$prog" | head -1)
  kargs=$(sed -n 's|^// KILNC:\(.*\)$|\1|p' "$prog" | head -1)
  if [ -n "$device" ]; then
    if [ "$exit_want" != 0 ] || [ -n "$stderr_want" ]; then own_devices=$((own_devices+1)); continue; fi
    if grep -q 'cpu:1' "$prog" || case "$args $kargs" in *cpu:1*) true;; *) false;; esac; then
      # A placement program: its second device (cpu:1) becomes the GPU.
      sed "s/cpu:1/$device/g" "$prog" > "$tmp/$name.placed.relay"; prog=$tmp/$name.placed.relay
      args=${args//cpu:1/$device}; kargs=${kargs//cpu:1/$device}
    else
      case "$args $kargs" in *--device*) own_devices=$((own_devices+1)); continue;; esac
      kargs="$kargs --device $device"; args="$args --device $device"
    fi
  fi
  # shellcheck disable=SC2086
  "$kilnc" "$prog" $kargs -o "$tmp/$name.kx" 2>"$tmp/kilnc.err" || {
    # Its two runs (text and compiled) count as failed, so that the summary never reads "-3/0".
    echo "FAIL $name: kilnc -o failed: $(cat "$tmp/kilnc.err")"; count=$((count+2)); fails=$((fails+2)); continue
  }
  if grep -q '^// COMPILE-ONLY:' "$prog"; then compiled_only=$((compiled_only+1)); continue; fi
  for form in text exe; do
    count=$((count+1))
    input=$prog; [ $form = exe ] && input=$tmp/$name.kx
    # shellcheck disable=SC2086
    out=$("$vmrun" "$input" $args 2>"$tmp/err"); status=$?
    if [ "$status" != "$exit_want" ]; then
      echo "FAIL $name ($form): exit $status, expected $exit_want; stderr: $(cat "$tmp/err")"; fails=$((fails+1)); continue
    fi
    if [ -n "$expect" ] && ! same_output "$out" "$expect"; then
      echo "FAIL $name ($form):"; echo "  got      $out"; echo "  expected $expect"; fails=$((fails+1)); continue
    fi
    if [ -n "$stderr_want" ] && ! grep -qF -- "$stderr_want" "$tmp/err"; then
      echo "FAIL $name ($form): stderr lacks '$stderr_want': $(cat "$tmp/err")"; fails=$((fails+1)); continue
    fi
    if [ "$status" != 0 ] && [ "$(wc -l < "$tmp/err")" != 1 ]; then
      echo "FAIL $name ($form): a failure must print exactly one error line"; fails=$((fails+1)); continue
    fi
  done
done
echo "$((count-fails))/$count end-to-end runs passed${device:+ on $device}; $compiled_only program(s) compiled only (no entry point)${device:+; $own_devices choose their own devices, expect an error or check host-specific reports (not run on $device)}"
[ $fails = 0 ]
