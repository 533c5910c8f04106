#!/usr/bin/env bash
# ONNX models through vmrun and kilnc as a user runs them: inputs by position, by
# the graph input's name and from an npz keyed by graph input names; executables
# from kilnc -o; --emit ir output that parses back; --device placement; and
# one `error:` line with exit 2 for models Kiln cannot import.
#   onnx_cli_test.sh VMRUN KILNC SRC
set -u
vmrun="$1"; kilnc="$2"; src="$3"
models="$src/tests/onnx/models"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/check_lib.sh"

# The same input three ways gives the same output.
"$vmrun" "$models/mlp.onnx" --input 3x8xf32=random > "$tmp/pos.txt" 2> "$tmp/err"
check "vmrun runs an ONNX model" test $? -eq 0
check "the MLP's output is 3x4" grep -q '^3x4xf32=\[\[' "$tmp/pos.txt"
"$vmrun" "$models/mlp.onnx" --input input.1=3x8xf32=random > "$tmp/named.txt"
check "an input bound by its ONNX name" cmp -s "$tmp/pos.txt" "$tmp/named.txt"
# --inputs: an npz keyed by the graph input's name.
/usr/bin/python3 -c "import numpy as np, sys; np.savez(sys.argv[1], **{'input.1': np.ones((2, 8), np.float32)})" "$tmp/in.npz"
"$vmrun" "$models/mlp.onnx" --inputs "$tmp/in.npz" > "$tmp/npz.txt"
"$vmrun" "$models/mlp.onnx" --input 2x8xf32=1 > "$tmp/ones.txt"
check "--inputs binds an npz keyed by ONNX input names" cmp -s "$tmp/npz.txt" "$tmp/ones.txt"
# Batch size is symbolic: the same model runs a batch of 7.
"$vmrun" "$models/mlp.onnx" --input 7x8xf32=1 > "$tmp/b7.txt"
check "a symbolic batch runs at 7" grep -q '^7x4xf32=' "$tmp/b7.txt"

# kilnc -o: an executable vmrun loads, with the weights inside.
"$kilnc" "$models/cnn.onnx" -o "$tmp/cnn.kiln" 2> "$tmp/err"
check "kilnc compiles an ONNX model" test $? -eq 0
"$vmrun" "$models/cnn.onnx" --input 2x3x8x8xf32=random > "$tmp/direct.txt"
"$vmrun" "$tmp/cnn.kiln" --input 2x3x8x8xf32=random > "$tmp/exe.txt"
check "the executable computes what the model does" cmp -s "$tmp/direct.txt" "$tmp/exe.txt"
"$vmrun" "$models/cnn.onnx" --device cpu:1,cpu --input 2x3x8x8xf32=random > "$tmp/placed.txt"
check "--device cpu:1,cpu runs an imported model" grep -q '^(2x5xf32=\[\[-4.675' "$tmp/placed.txt"
"$vmrun" "$models/cnn.onnx" --input 2x3x8x8xf32=random --profile > "$tmp/profile.txt" 2>&1
check "--profile lists the model's kernels" grep -q 'conv2d' "$tmp/profile.txt"

# --emit ir prints the imported program, which parses and type-checks again.
"$kilnc" "$models/cnn.onnx" --emit ir > "$tmp/cnn.relay"
check "--emit ir prints a typed @main" grep -q '^def @main(%x: Tensor\[(2, 3, 8, 8), float32\]' "$tmp/cnn.relay"
"$kilnc" "$tmp/cnn.relay" --emit ir > /dev/null 2>&1
check "the printed program re-checks" test $? -eq 0

# Axes fed as a graph input: the program is specialized to the value given, by
# position or by name; kilnc takes it from --params; without it, an error naming it.
"$vmrun" "$models/reduce_axes_input.onnx" --input 2x3x4xf32=1 --input 1xi64=1 > "$tmp/axes.txt"
check "axes given by position specialize the program" grep -q '^2x4xf32=\[\[3 3 3 3\]' "$tmp/axes.txt"
"$vmrun" "$models/reduce_axes_input.onnx" --input axes=1xi64=-1 --input x=2x3x4xf32=1 > "$tmp/axes.txt"
check "axes given by name specialize the program" grep -q '^2x3xf32=\[\[4 4 4\]' "$tmp/axes.txt"
"$vmrun" "$models/reduce_axes_input.onnx" --input 2x3x4xf32=1 > /dev/null 2> "$tmp/err"
check "without the axes: exit 2" test $? -eq 2
check "and the error names the input" grep -q "axes must be a constant, but is the graph input 'axes'" "$tmp/err"

/usr/bin/python3 -c "import numpy as np, sys; np.savez(sys.argv[1], axes=np.array([2], np.int64))" "$tmp/axes.npz"
"$kilnc" "$models/reduce_axes_input.onnx" --params "$tmp/axes.npz" -o "$tmp/axes.kiln" 2> "$tmp/err"
check "kilnc specializes to axes from --params" test $? -eq 0
"$vmrun" "$tmp/axes.kiln" --input 2x3x4xf32=1 > "$tmp/axes.txt"
check "and the executable sums that axis" grep -q '^2x3xf32=\[\[4 4 4\]' "$tmp/axes.txt"

# A program Kiln's type checker refuses after import: the error names the node.
"$kilnc" "$models/bad_broadcast.onnx" -o "$tmp/bad.kiln" 2> "$tmp/err"
check "a type error in an imported program exits 2" test $? -eq 2
check "and names the node" grep -q "error: node 'bad_add' (Add, opset 13): add: shapes (2, 3) and (4, 5) do not broadcast" "$tmp/err"

# A sequence whose tensors differ in rank prints (and saves) as tensors, not pairs.
"$vmrun" "$models/ragged_sequence.onnx" --input i64=2 --input 4xf32=1,2,3,4 --output "$tmp/ragged.npz" > "$tmp/ragged.txt"
check "a ragged sequence prints as its tensors" grep -qF '(Cons(f32=10, Cons(1xf32=[1], Cons(2xf32=[1 2], Nil))), Cons(f32=10, Cons(4xf32=[1 2 3 4], Nil)), 4xf32=[1 2 3 4])' "$tmp/ragged.txt"
check "--output saves each of its tensors" test "$(python3 -c "import zipfile, sys; print(len(zipfile.ZipFile(sys.argv[1]).namelist()))" "$tmp/ragged.npz")" = 6

# Models Kiln cannot import: one error line naming the node, exit 2.
"$vmrun" "$models/unsupported_op.onnx" --input 3x3xf32=1 > /dev/null 2> "$tmp/err"
check "an unsupported operator exits 2" test $? -eq 2
check "the error names the node" grep -q "error: node 'determinant' (Det, opset 13): the operator is not supported" "$tmp/err"
check "the error is one line" test "$(wc -l < "$tmp/err")" -eq 1
printf 'garbage bytes' > "$tmp/garbage.onnx"
"$kilnc" "$tmp/garbage.onnx" -o "$tmp/g.kiln" 2> "$tmp/err"
check "a file that is no model exits 2" test $? -eq 2
check "and says so" grep -q 'error: not an ONNX model' "$tmp/err"
head -c 700 "$models/cnn.onnx" > "$tmp/cut.onnx"
"$vmrun" "$tmp/cut.onnx" > /dev/null 2> "$tmp/err"
check "a truncated model exits 2" test $? -eq 2

echo "$failures failure(s)"
test "$failures" -eq 0
