# Shared by the CLI check scripts (sourced): `check NAME COMMAND...` runs the
# command, prints `ok   NAME` or `FAIL NAME`, and counts failures in $failures.
# `close A B`: files A and B hold the same text up to float numbers within a
# relative 1e-4 (a GPU kernel or a library sums in another order).
failures=0
close() {
  python3 - "$1" "$2" <<'PY'
import re, sys
a, b = (open(f).read() for f in sys.argv[1:3])
num = r"-?\d+\.?\d*(?:e[-+]?\d+)?"
if re.sub(num, "#", a) != re.sub(num, "#", b) or not a.strip(): sys.exit(1)
for x, y in zip(re.findall(num, a), re.findall(num, b)):
    if abs(float(x) - float(y)) > 1e-4 * max(1e-3, abs(float(y))): sys.exit(1)
PY
}
check() {  # name, condition...
  local name="$1"; shift
  if "$@"; then echo "ok   $name"; else echo "FAIL $name"; failures=$((failures + 1)); fi
}
