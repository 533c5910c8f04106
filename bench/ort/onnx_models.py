#!/usr/bin/python3
"""Builds the ONNX counterparts of model_bench's workloads with onnx.helper.

Usage: onnx_models.py DIR KIND  (KIND: mlp, lstm, cnn)
Reads the weights model_bench wrote as DIR/<name>.npy and writes DIR/model.onnx:
the same computation as the workload's Relay program, the weights as
initializers, the LSTM's steps as an ONNX Loop whose trip count is the input's
first dimension (static or not).
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def load(d, name):
    return numpy_helper.from_array(np.load(f"{d}/{name}.npy"), name)


def mlp(d):
    x = np.load(f"{d}/x.npy")
    inits = [load(d, n) for n in ("w1", "b1", "w2", "b2", "w3", "b3")]
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["g1"], transB=1),
        helper.make_node("Relu", ["g1"], ["h1"]),
        helper.make_node("Gemm", ["h1", "w2", "b2"], ["g2"], transB=1),
        helper.make_node("Relu", ["g2"], ["h2"]),
        helper.make_node("Gemm", ["h2", "w3", "b3"], ["y"], transB=1),
    ]
    return helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [x.shape[0], 10])], inits)


def lstm(d, dynamic):
    inits = [load(d, n) for n in ("w_ih", "w_hh", "b_ih", "b_hh")]
    hidden = 256
    inits.append(numpy_helper.from_array(np.zeros((1, hidden), np.float32), "zero_state"))
    inits.append(numpy_helper.from_array(np.array(0, np.int64), "axis0"))
    inits.append(numpy_helper.from_array(np.array(True), "keep_going"))
    body = helper.make_graph(
        [
            helper.make_node("Gather", ["xs", "t"], ["x"], axis=0),  # (1, 128)
            helper.make_node("Gemm", ["x", "w_ih", "b_ih"], ["gi"], transB=1),
            helper.make_node("Gemm", ["h", "w_hh", "b_hh"], ["gh"], transB=1),
            helper.make_node("Add", ["gi", "gh"], ["g"]),
            helper.make_node("Split", ["g"], ["i", "f", "gg", "o"], axis=1),
            helper.make_node("Sigmoid", ["i"], ["si"]),
            helper.make_node("Sigmoid", ["f"], ["sf"]),
            helper.make_node("Tanh", ["gg"], ["tg"]),
            helper.make_node("Sigmoid", ["o"], ["so"]),
            helper.make_node("Mul", ["sf", "c"], ["fc"]),
            helper.make_node("Mul", ["si", "tg"], ["it"]),
            helper.make_node("Add", ["fc", "it"], ["c2"]),
            helper.make_node("Tanh", ["c2"], ["tc"]),
            helper.make_node("Mul", ["so", "tc"], ["h2"]),
            helper.make_node("Identity", ["cond"], ["cond2"]),
        ],
        "step",
        [helper.make_tensor_value_info("t", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, hidden]),
         helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, hidden])],
        [helper.make_tensor_value_info("cond2", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h2", TensorProto.FLOAT, [1, hidden]),
         helper.make_tensor_value_info("c2", TensorProto.FLOAT, [1, hidden])])
    steps = "T" if dynamic else np.load(f"{d}/xs.npy").shape[0]
    nodes = [
        helper.make_node("Shape", ["xs"], ["xs_shape"]),
        helper.make_node("Gather", ["xs_shape", "axis0"], ["n"], axis=0),
        helper.make_node("Loop", ["n", "keep_going", "zero_state", "zero_state"], ["h_final", "c_final"], body=body),
    ]
    return helper.make_graph(
        nodes, "lstm", [helper.make_tensor_value_info("xs", TensorProto.FLOAT, [steps, 1, 128])],
        [helper.make_tensor_value_info("h_final", TensorProto.FLOAT, [1, hidden])], inits)


def cnn(d):
    inits = [load(d, n) for n in ("w1", "b1", "w2", "b2", "w3", "b3")]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], transB=1),
    ]
    return helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)


def main():
    d, kind = sys.argv[1], sys.argv[2]
    graph = {"mlp": lambda: mlp(d), "lstm": lambda: lstm(d, False), "lstm_dyn": lambda: lstm(d, True),
             "cnn": lambda: cnn(d)}[kind]()
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7  # ONNX Runtime 1.30 reads IR 7 with opset 13
    onnx.checker.check_model(model)
    onnx.save(model, f"{d}/model.onnx")


if __name__ == "__main__":
    main()
