# Shared by the CLI check scripts (sourced): `check NAME COMMAND...` runs the
# command, prints `ok   NAME` or `FAIL NAME`, and counts failures in $failures.
failures=0
check() {  # name, condition...
  local name="$1"; shift
  if "$@"; then echo "ok   $name"; else echo "FAIL $name"; failures=$((failures + 1)); fi
}
