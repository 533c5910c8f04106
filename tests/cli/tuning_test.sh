#!/bin/bash
# Tuning as a user takes it: kilnc lists the tasks, vmrun records the shapes of a
# run with `?` dimensions inside a loop, kiln-tune tunes them into a log, vmrun
# applies the log with the same result, and bad logs and records are clear errors.
vmrun="$1"; kilnc="$2"; tune="$3"; src="$4"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/check_lib.sh"

cnn=("$src/samples/cnn.relay" --params "$src/samples/cnn_weights.npz")
"$kilnc" "${cnn[@]}" --emit tasks > "$tmp/tasks"
check "cnn: the tasks list says how many and what was left out" grep -q "^5 task(s) from 5 kernel(s); 1 left out: 1 copy or reshape" "$tmp/tasks"
check "cnn: the first convolution is a task with its shapes" grep -q "shapes: 1x3x32x32;16x3x3x3;16" "$tmp/tasks"

# A loop whose tensor grows each step: its kernels have `?` dimensions.
grow=("$src/samples/grow_loop.relay" --input 1x4xf32=1,2,3,4 --input i32=3)
"$kilnc" "$src/samples/grow_loop.relay" --emit tasks > "$tmp/unresolved" 2>&1
check "grow_loop without a record: ? kernels are unresolved" grep -q "^unresolved: " "$tmp/unresolved"
"$vmrun" "${grow[@]}" --record-shapes "$tmp/shapes" > "$tmp/plain"
check "vmrun --record-shapes writes one line per kernel and shape" grep -q "^kernel=.* task=[0-9a-f]\{16\} shapes=.* calls=[0-9]* us=" "$tmp/shapes"
"$kilnc" "$src/samples/grow_loop.relay" --emit tasks --shapes "$tmp/shapes" > "$tmp/recorded"
check "with the record, no kernel is unresolved" bash -c "! grep -q '^unresolved' '$tmp/recorded'"
"$kilnc" "$src/samples/grow_loop.relay" --emit tasks --dims 4:16 > "$tmp/ranged"
check "with --dims, ? kernels are tasks at the range's sizes" bash -c "! grep -q '^unresolved' '$tmp/ranged'"

# Tuning the CNN sample briefly, then running it with the log.
"$tune" "${cnn[@]}" --log "$tmp/cnn.log" --trials 3 --rounds 3 > "$tmp/tune.out" 2> "$tmp/tune.err"; rc=$?
check "kiln-tune exits 0" test $rc -eq 0
test $rc -eq 0 || cat "$tmp/tune.err"
check "kiln-tune shows progress" grep -q "^task 1/5 .*: trial 1 " "$tmp/tune.err"
check "kiln-tune writes a record per task" test "$(grep -c '^task=' "$tmp/cnn.log")" -eq 5
check "kiln-tune prints the table" grep -q "5 task(s) tuned" "$tmp/tune.out"
check "...each task beside its floor and the room it leaves" grep -q " [0-9.]*x  \(FLOPs at peak\|bytes read\)" "$tmp/tune.out"
check "...and how many tasks had room for 1.2x" grep -q "^[0-5] of them with room for 1.2x" "$tmp/tune.out"
check "kiln-tune's progress gives each task's floor" grep -q ": done: .*; floor [0-9.]* us (" "$tmp/tune.err"
"$tune" "${cnn[@]}" --log "$tmp/cnn.log" --trials 3 > "$tmp/resume.out" 2> "$tmp/resume.err"
check "a second run resumes from the log" test "$(grep -c 'in the log already' "$tmp/resume.err")" -eq 5
check "...and appends nothing" test "$(grep -c '^task=' "$tmp/cnn.log")" -eq 5
"$vmrun" "${cnn[@]}" --input 1x3x32x32xf32=random > "$tmp/cnn.plain"
"$vmrun" "${cnn[@]}" --input 1x3x32x32xf32=random --tuning-log "$tmp/cnn.log" > "$tmp/cnn.tuned" 2> "$tmp/err"
check "the tuned run gives the default's result" close "$tmp/cnn.tuned" "$tmp/cnn.plain"

# With the program's inputs, each tuned schedule is also timed in the program,
# and its figures there are recorded (a schedule slower there is not applied).
/usr/bin/python3 -c "import numpy as np, sys; np.savez(sys.argv[1], data=np.ones((1, 3, 32, 32), np.float32))" "$tmp/cnn_in.npz"
"$tune" "${cnn[@]}" --inputs "$tmp/cnn_in.npz" --log "$tmp/prog.log" --trials 4 --rounds 3 > "$tmp/prog.out" 2> "$tmp/prog.err"; rc=$?
check "kiln-tune --inputs exits 0" test $rc -eq 0
test $rc -eq 0 || cat "$tmp/prog.err"
tunedCount=$(grep -c '^task=.* schedule=[^d]' "$tmp/prog.log")  # records whose schedule is not the default
checkedCount=$(grep -c ' program_us=[0-9.]* program_default_us=[0-9.]* ' "$tmp/prog.log")
check "...adds one in-program record per tuned schedule ($tunedCount tuned, $checkedCount checked)" \
  test "$checkedCount" -eq $((tunedCount / 2))
if [ "$checkedCount" -gt 0 ]; then
  check "...and says so in the table" grep -q "^$checkedCount tuned schedule(s) timed in the program: [0-9]* slower there" "$tmp/prog.out"
else
  echo "note: no schedule beat the default in this short search; the in-program records are not exercised"
fi
/usr/bin/python3 -c "import numpy as np, sys; np.savez(sys.argv[1], nodata=np.ones((1, 3, 32, 32), np.float32))" "$tmp/bad_in.npz"
"$tune" "${cnn[@]}" --inputs "$tmp/bad_in.npz" --log "$tmp/bad_in.log" > /dev/null 2> "$tmp/err"; rc=$?
check "kiln-tune --inputs naming no parameter: exit 2, naming it" \
  bash -c "test $rc -eq 2 && grep -q \"'nodata' is not a parameter of @main\" '$tmp/err'"
/usr/bin/python3 -c "import numpy as np, sys; np.savez(sys.argv[1], data=np.ones((1, 3, 32, 31), np.float32))" "$tmp/bad_in.npz"
"$tune" "${cnn[@]}" --inputs "$tmp/bad_in.npz" --log "$tmp/bad_in.log" > /dev/null 2> "$tmp/err"; rc=$?
check "kiln-tune --inputs of another shape: exit 2 before any tuning" \
  bash -c "test $rc -eq 2 && grep -q 'data' '$tmp/err' && ! test -s '$tmp/bad_in.log'"

# kilnc --emit llvm --tuning-log: the kernels as the log's schedules compile them.
# A softmax under stores=stream is lowered write-only and its stores stream.
printf 'def @main(%%x: Tensor[(64, 1024), float32]) {\n  nn.softmax(%%x, axis=-1)\n}\n' > "$tmp/softmax.relay"
key=$("$kilnc" "$tmp/softmax.relay" --emit tasks | sed -n 's/^task 1\/1 \([0-9a-f]\{16\}\) .*/\1/p')
cpu=$(grep -o 'cpu=[^ ]*' "$tmp/cnn.log" | head -1)
echo "task=$key shapes=64x1024 schedule=stores=stream us=1 default_us=2 machine=test $cpu" > "$tmp/softmax.log"
"$kilnc" "$tmp/softmax.relay" --emit llvm --tuning-log "$tmp/softmax.log" > "$tmp/tuned.ll"
check "kilnc --emit llvm --tuning-log compiles with the log's schedule" grep -q '!nontemporal' "$tmp/tuned.ll"
"$kilnc" "$tmp/softmax.relay" --emit llvm > "$tmp/plain.ll"
check "...which the default schedule does not take" bash -c "! grep -q '!nontemporal' '$tmp/plain.ll'"
"$kilnc" "$tmp/softmax.relay" --emit loops --tuning-log "$tmp/softmax.log" > "$tmp/tuned.loops"
check "kilnc --emit loops --tuning-log names the schedule" grep -q '^// schedule: stores=stream$' "$tmp/tuned.loops"
check "...and prints the loops it leaves (the softmax write-only: its output never read)" \
  bash -c "grep -q 'exp_nonpositive' '$tmp/tuned.loops' && ! grep -q 'mul(out0\[' '$tmp/tuned.loops'"
"$kilnc" "$tmp/softmax.relay" --emit ir --tuning-log "$tmp/softmax.log" > /dev/null 2> "$tmp/err"; rc=$?
check "kilnc --tuning-log with another --emit: exit 2" bash -c "test $rc -eq 2 && grep -q 'goes with --emit llvm or --emit loops' '$tmp/err'"

# Bad logs: a corrupted line names it; another CPU's records are a note.
sed '3s/schedule=[^ ]*/schedule=vec=3/' "$tmp/cnn.log" > "$tmp/bad.log"
"$vmrun" "${cnn[@]}" --input 1x3x32x32xf32=random --tuning-log "$tmp/bad.log" > /dev/null 2> "$tmp/err"; rc=$?
check "a corrupted log: exit 2" test $rc -eq 2
check "...naming the line" grep -q "tuning log $tmp/bad.log:3: bad value '3' for schedule key 'vec'" "$tmp/err"
sed 's/cpu=[^ ]*/cpu=x86_64|OtherCpu|f1m1s1|0|xcr0=0/' "$tmp/cnn.log" > "$tmp/foreign.log"
"$vmrun" "${cnn[@]}" --input 1x3x32x32xf32=random --tuning-log "$tmp/foreign.log" > "$tmp/cnn.foreign" 2> "$tmp/err"; rc=$?
check "another machine's log: exit 0" test $rc -eq 0
check "...with a note that its records are ignored" grep -q "note: .*5 tuning record(s) measured on another CPU are ignored" "$tmp/err"
check "...and the default's result" close "$tmp/cnn.foreign" "$tmp/cnn.plain"
"$kilnc" "${cnn[@]}" --emit llvm --tuning-log "$tmp/bad.log" > /dev/null 2> "$tmp/err"; rc=$?
check "kilnc with a corrupted log: exit 2, naming the line" bash -c "test $rc -eq 2 && grep -q 'bad.log:3: ' '$tmp/err'"
echo "kernel=k task=xyz shapes=4 calls=1 us=1" > "$tmp/bad.shapes"
"$kilnc" "$src/samples/grow_loop.relay" --emit tasks --shapes "$tmp/bad.shapes" > /dev/null 2> "$tmp/err"; rc=$?
check "a bad shape record: exit 2, naming the line" bash -c "test $rc -eq 2 && grep -q 'bad.shapes:1: task' '$tmp/err'"
"$tune" "${cnn[@]}" > /dev/null 2> "$tmp/err"; rc=$?
check "kiln-tune without --log: exit 2" test $rc -eq 2
test $failures -eq 0
