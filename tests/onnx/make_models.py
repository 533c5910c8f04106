#!/usr/bin/python3
"""Writes the small ONNX models the ONNX import tests use (tests/onnx/models/).

The models are checked in; run this (it needs Debian's python3-onnx) only to
change them. Each is built with onnx.helper, checked, and saved with fixed seeds.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), 'models')
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(7)


def save(model, name, **kw):
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(out, name), **kw)


def weights(name, *shape):
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.5, name)


# An MLP with a symbolic batch, an input named as PyTorch names them, and weights.
mlp = helper.make_graph(
    [helper.make_node('Gemm', ['input.1', 'fc1.weight', 'fc1.bias'], ['h'], transB=1),
     helper.make_node('Relu', ['h'], ['r']),
     helper.make_node('MatMul', ['r', 'fc2.weight'], ['m']),
     helper.make_node('Add', ['m', 'fc2.bias'], ['out'])],
    'mlp',
    [helper.make_tensor_value_info('input.1', TensorProto.FLOAT, ['batch', 8])],
    [helper.make_tensor_value_info('out', TensorProto.FLOAT, ['batch', 4])],
    [weights('fc1.weight', 16, 8), weights('fc1.bias', 16), weights('fc2.weight', 16, 4), weights('fc2.bias', 4)])
save(helper.make_model(mlp, opset_imports=[helper.make_opsetid('', 13)]), 'mlp.onnx')

# A small CNN: Conv (SAME_UPPER), BatchNormalization, Relu, MaxPool, a Shape/Reshape
# chain the importer folds, Gemm; two outputs.
cnn = helper.make_graph(
    [helper.make_node('Conv', ['x', 'w1', 'b1'], ['c1'], auto_pad='SAME_UPPER', kernel_shape=[3, 3]),
     helper.make_node('BatchNormalization', ['c1', 'g', 'beta', 'mean', 'var'], ['bn'], epsilon=1e-3),
     helper.make_node('Relu', ['bn'], ['r1']),
     helper.make_node('MaxPool', ['r1'], ['p1'], kernel_shape=[2, 2], strides=[2, 2]),
     helper.make_node('Shape', ['p1'], ['s']),
     helper.make_node('Gather', ['s', 'zero'], ['n'], axis=0),
     helper.make_node('Unsqueeze', ['n', 'zero_axes'], ['n1']),
     helper.make_node('Concat', ['n1', 'minus_one'], ['flat_shape'], axis=0),
     helper.make_node('Reshape', ['p1', 'flat_shape'], ['flat']),
     helper.make_node('Gemm', ['flat', 'fc', 'fcb'], ['logits'], transB=1),
     helper.make_node('Softmax', ['logits'], ['probs'], axis=1)],
    'cnn',
    [helper.make_tensor_value_info('x', TensorProto.FLOAT, [2, 3, 8, 8])],
    [helper.make_tensor_value_info('logits', TensorProto.FLOAT, [2, 5]),
     helper.make_tensor_value_info('probs', TensorProto.FLOAT, [2, 5])],
    [weights('w1', 4, 3, 3, 3), weights('b1', 4),
     numpy_helper.from_array(np.linspace(0.5, 1.5, 4).astype(np.float32), 'g'), weights('beta', 4),
     weights('mean', 4), numpy_helper.from_array(np.linspace(0.5, 2, 4).astype(np.float32), 'var'),
     numpy_helper.from_array(np.array(0, dtype=np.int64), 'zero'),
     numpy_helper.from_array(np.array([0], dtype=np.int64), 'zero_axes'),
     numpy_helper.from_array(np.array([-1], dtype=np.int64), 'minus_one'),
     weights('fc', 5, 64), weights('fcb', 5)])
save(helper.make_model(cnn, opset_imports=[helper.make_opsetid('', 13)]), 'cnn.onnx')

# The MLP again with its weights in an external data file beside it.
ext = onnx.load(os.path.join(out, 'mlp.onnx'))
if os.path.exists(os.path.join(out, 'mlp_external.data')):
    os.remove(os.path.join(out, 'mlp_external.data'))  # onnx.save appends to it
onnx.save(ext, os.path.join(out, 'mlp_external.onnx'), save_as_external_data=True, all_tensors_to_one_file=True,
          location='mlp_external.data', size_threshold=0)

# An operator Kiln does not import, to check the message names the node.
bad = helper.make_graph(
    [helper.make_node('Relu', ['x'], ['y'], name='first'),
     helper.make_node('Det', ['y'], ['z'], name='determinant')],
    'unsupported',
    [helper.make_tensor_value_info('x', TensorProto.FLOAT, [3, 3])],
    [helper.make_tensor_value_info('z', TensorProto.FLOAT, [])])
save(helper.make_model(bad, opset_imports=[helper.make_opsetid('', 13)]), 'unsupported_op.onnx')
print('wrote', sorted(os.listdir(out)))

# Inputs and numpy's outputs for the CNN, for the import test to compare with.
def conv_same(x, w, b):
    n, c, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd), np.float64)
    for i in range(h):
        for j in range(wd):
            out[:, :, i, j] = np.einsum('nchw,ochw->no', xp[:, :, i:i + 3, j:j + 3], w)
    return out + b[None, :, None, None]


init = {t.name: numpy_helper.to_array(t) for t in cnn.initializer}
x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
c1 = conv_same(x.astype(np.float64), init['w1'], init['b1'])
bn = (c1 - init['mean'][None, :, None, None]) / np.sqrt(init['var'][None, :, None, None] + 1e-3) * \
    init['g'][None, :, None, None] + init['beta'][None, :, None, None]
r1 = np.maximum(bn, 0)
p1 = r1.reshape(2, 4, 4, 2, 4, 2).max(axis=(3, 5))
logits = p1.reshape(2, -1) @ init['fc'].T + init['fcb']
e = np.exp(logits - logits.max(axis=1, keepdims=True))
np.savez(os.path.join(out, 'cnn_io.npz'), x=x, logits=logits.astype(np.float32),
         probs=(e / e.sum(axis=1, keepdims=True)).astype(np.float32))

# An LSTM over a sequence of symbolic length as an ONNX Loop (as exporters write
# recurrent loops): the trip count is the input's first dimension; the carried
# (h, c) start at zero; a scan output collects every step's h.
hidden, feat = 16, 8
w_ih, w_hh = weights('w_ih', 4 * hidden, feat), weights('w_hh', 4 * hidden, hidden)
b_ih, b_hh = weights('b_ih', 4 * hidden), weights('b_hh', 4 * hidden)
step = helper.make_graph(
    [helper.make_node('Gather', ['xs', 't'], ['x'], axis=0),
     helper.make_node('Gemm', ['x', 'w_ih', 'b_ih'], ['gi'], transB=1),
     helper.make_node('Gemm', ['h', 'w_hh', 'b_hh'], ['gh'], transB=1),
     helper.make_node('Add', ['gi', 'gh'], ['g']),
     helper.make_node('Split', ['g'], ['i', 'f', 'gg', 'o'], axis=1),
     helper.make_node('Sigmoid', ['i'], ['si']), helper.make_node('Sigmoid', ['f'], ['sf']),
     helper.make_node('Tanh', ['gg'], ['tg']), helper.make_node('Sigmoid', ['o'], ['so']),
     helper.make_node('Mul', ['sf', 'c'], ['fc']), helper.make_node('Mul', ['si', 'tg'], ['it']),
     helper.make_node('Add', ['fc', 'it'], ['c2']), helper.make_node('Tanh', ['c2'], ['tc']),
     helper.make_node('Mul', ['so', 'tc'], ['h2']),
     helper.make_node('Identity', ['cond'], ['cond2']),
     helper.make_node('Identity', ['h2'], ['h_step'])],
    'step',
    [helper.make_tensor_value_info('t', TensorProto.INT64, []),
     helper.make_tensor_value_info('cond', TensorProto.BOOL, []),
     helper.make_tensor_value_info('h', TensorProto.FLOAT, [1, hidden]),
     helper.make_tensor_value_info('c', TensorProto.FLOAT, [1, hidden])],
    [helper.make_tensor_value_info('cond2', TensorProto.BOOL, []),
     helper.make_tensor_value_info('h2', TensorProto.FLOAT, [1, hidden]),
     helper.make_tensor_value_info('c2', TensorProto.FLOAT, [1, hidden]),
     helper.make_tensor_value_info('h_step', TensorProto.FLOAT, [1, hidden])])
lstm = helper.make_graph(
    [helper.make_node('Shape', ['xs'], ['xs_shape']),
     helper.make_node('Gather', ['xs_shape', 'axis0'], ['n'], axis=0),
     helper.make_node('Loop', ['n', 'keep_going', 'zero_state', 'zero_state'], ['h_final', 'c_final', 'h_all'], body=step)],
    'lstm_loop',
    [helper.make_tensor_value_info('xs', TensorProto.FLOAT, ['T', 1, feat])],
    [helper.make_tensor_value_info('h_final', TensorProto.FLOAT, [1, hidden]),
     helper.make_tensor_value_info('h_all', TensorProto.FLOAT, ['T', 1, hidden])],
    [w_ih, w_hh, b_ih, b_hh, numpy_helper.from_array(np.zeros((1, hidden), np.float32), 'zero_state'),
     numpy_helper.from_array(np.array(0, np.int64), 'axis0'), numpy_helper.from_array(np.array(True), 'keep_going')])
save(helper.make_model(lstm, opset_imports=[helper.make_opsetid('', 13)]), 'lstm_loop.onnx')

W = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in (w_ih, w_hh, b_ih, b_hh)}
xs = rng.standard_normal((5, 1, feat)).astype(np.float32)
h, c, hs = np.zeros((1, hidden)), np.zeros((1, hidden)), []
sig = lambda v: 1 / (1 + np.exp(-v))
for t in range(xs.shape[0]):
    g = xs[t] @ W['w_ih'].T + W['b_ih'] + h @ W['w_hh'].T + W['b_hh']
    i, f, gg, o = np.split(g, 4, axis=1)
    c = sig(f) * c + sig(i) * np.tanh(gg)
    h = sig(o) * np.tanh(c)
    hs.append(h)
np.savez(os.path.join(out, 'lstm_io.npz'), xs=xs, h_final=h.astype(np.float32), h_all=np.stack(hs).astype(np.float32))

# ONNX's RNN operator with per-sequence lengths: steps past a sequence's length
# leave its state alone and output zeros.
rw, rr, rb = weights('W', 1, 6, 4), weights('R', 1, 6, 6), weights('B', 1, 12)
rnn = helper.make_graph(
    [helper.make_node('RNN', ['X', 'W', 'R', 'B', 'lens'], ['Y', 'Y_h'], hidden_size=6)],
    'rnn_lengths',
    [helper.make_tensor_value_info('X', TensorProto.FLOAT, [5, 2, 4]),
     helper.make_tensor_value_info('lens', TensorProto.INT32, [2])],
    [helper.make_tensor_value_info('Y', TensorProto.FLOAT, [5, 1, 2, 6]),
     helper.make_tensor_value_info('Y_h', TensorProto.FLOAT, [1, 2, 6])],
    [rw, rr, rb])
save(helper.make_model(rnn, opset_imports=[helper.make_opsetid('', 14)]), 'rnn_lengths.onnx')
Wr, Rr, Br = (numpy_helper.to_array(t).astype(np.float64)[0] for t in (rw, rr, rb))
X = rng.standard_normal((5, 2, 4)).astype(np.float32)
lens = np.array([3, 5], np.int32)
h = np.zeros((2, 6))
Y = np.zeros((5, 1, 2, 6))
for t in range(5):
    new = np.tanh(X[t] @ Wr.T + h @ Rr.T + Br[:6] + Br[6:])
    live = (t < lens)[:, None]
    Y[t, 0] = np.where(live, new, 0)
    h = np.where(live, new, h)
np.savez(os.path.join(out, 'rnn_io.npz'), X=X, lens=lens, Y=Y.astype(np.float32), Y_h=h[None].astype(np.float32))

# A ReduceSum whose axes are a graph input (as ONNX's own node tests feed them):
# the importer specializes the program to the axes given with the inputs.
reduce_axes = helper.make_graph(
    [helper.make_node('ReduceSum', ['x', 'axes'], ['y'], keepdims=0), helper.make_node('Relu', ['y'], ['z'])],
    'reduce_axes_input',
    [helper.make_tensor_value_info('x', TensorProto.FLOAT, [2, 3, 4]),
     helper.make_tensor_value_info('axes', TensorProto.INT64, [1])],
    [helper.make_tensor_value_info('z', TensorProto.FLOAT, ['a', 'b'])])
save(helper.make_model(reduce_axes, opset_imports=[helper.make_opsetid('', 13)]), 'reduce_axes_input.onnx')

# A model ONNX's checker passes but whose Add cannot broadcast: Kiln's type checker
# refuses the imported program, and the error names the node.
bad_add = helper.make_graph(
    [helper.make_node('Relu', ['x'], ['r'], name='first'), helper.make_node('Add', ['r', 'y'], ['z'], name='bad_add')],
    'bad_add',
    [helper.make_tensor_value_info('x', TensorProto.FLOAT, [2, 3]),
     helper.make_tensor_value_info('y', TensorProto.FLOAT, [4, 5])],
    [helper.make_tensor_value_info('z', TensorProto.FLOAT, [2, 3])])
save(helper.make_model(bad_add, opset_imports=[helper.make_opsetid('', 13)]), 'bad_broadcast.onnx')

# Sequences whose tensors differ in rank. `seq`: x's sum (a scalar), then the
# prefixes x[:1], x[:2], ... appended by a Loop (the body makes the carried sequence
# ragged). `pair`: the sum and x; `last` takes x back out of it with SequenceAt (its
# rank from the value_info an exporter writes). Kiln holds such sequences as (data,
# shape) pairs and onnxResult turns them back into tensors.
ragged_body = helper.make_graph(
    [helper.make_node('Constant', [], ['one'], value=helper.make_tensor('one', TensorProto.INT64, [1], [1])),
     helper.make_node('Constant', [], ['zero'], value=helper.make_tensor('zero', TensorProto.INT64, [1], [0])),
     helper.make_node('Add', ['i', 'one'], ['end']),
     helper.make_node('Slice', ['x', 'zero', 'end'], ['prefix']),
     helper.make_node('SequenceInsert', ['seq_in', 'prefix'], ['seq_out']),
     helper.make_node('Identity', ['cond_in'], ['cond_out'])],
    'ragged_body',
    [helper.make_tensor_value_info('i', TensorProto.INT64, []),
     helper.make_tensor_value_info('cond_in', TensorProto.BOOL, []),
     helper.make_tensor_sequence_value_info('seq_in', TensorProto.FLOAT, None)],
    [helper.make_tensor_value_info('cond_out', TensorProto.BOOL, []),
     helper.make_tensor_sequence_value_info('seq_out', TensorProto.FLOAT, None)])
ragged = helper.make_graph(
    [helper.make_node('ReduceSum', ['x'], ['total'], keepdims=0),
     helper.make_node('SequenceConstruct', ['total'], ['seq0']),
     helper.make_node('Loop', ['n', '', 'seq0'], ['seq'], body=ragged_body),
     helper.make_node('SequenceConstruct', ['total', 'x'], ['pair']),
     helper.make_node('Constant', [], ['minus_one'], value=helper.make_tensor('minus_one', TensorProto.INT64, [], [-1])),
     helper.make_node('SequenceAt', ['pair', 'minus_one'], ['last'])],
    'ragged_sequence',
    [helper.make_tensor_value_info('n', TensorProto.INT64, []),
     helper.make_tensor_value_info('x', TensorProto.FLOAT, [4])],
    [helper.make_tensor_sequence_value_info('seq', TensorProto.FLOAT, None),
     helper.make_tensor_sequence_value_info('pair', TensorProto.FLOAT, None),
     helper.make_tensor_value_info('last', TensorProto.FLOAT, ['k'])])
save(helper.make_model(ragged, opset_imports=[helper.make_opsetid('', 13)]), 'ragged_sequence.onnx')
