// One small program per operator (each in float32; element-wise ones also in
// float64 and float16, arithmetic also in int32), shared by the GPU tests: the
// PTX test assembles their kernels, the emulated-device test runs them.
#pragma once

#include <set>
#include <string>
#include <vector>

namespace kiln_test {

// Operators that never become GPU kernels: data-dependent ones run natively on
// the host (their results' extents decide allocations), annotations are spent
// by device placement.
inline const std::set<std::string> kHostOnly = {"arange", "shape_of", "dyn.reshape", "dyn.broadcast_to", "dyn.zeros",
                                         "dyn.strided_slice", "argwhere", "on_device", "device_copy"};

inline std::vector<std::string> operatorPrograms() {
  std::vector<std::string> out;
  auto unary = [&](const std::string& body, const std::string& dtype) {
    out.push_back("def @main(%x: Tensor[(4, 8), " + dtype + "]) { " + body + " }");
  };
  for (const char* op : {"exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "sin", "cos", "negative", "abs",
                         "nn.relu", "floor", "ceil", "round", "copy"})
    for (const char* t : {"float32", "float64", "float16"}) unary(std::string(op) + "(%x)", t);
  for (const char* t : {"int32", "int8"}) {
    unary("negative(%x)", t);
    unary("abs(%x)", t);
  }
  unary("logical_not(%x)", "bool");
  unary("clip(%x, a_min=-1f, a_max=1f)", "float32");
  unary("nn.leaky_relu(%x, alpha=0.2f)", "float32");
  unary("nn.pad(%x, 0f, pad_width=[[1, 1], [0, 2]])", "float32");
  unary("nn.pad(%x, 0f, pad_width=[[1, 1], [0, 2]], pad_mode=\"reflect\")", "float32");
  unary("nn.pad(%x, 0f, pad_width=[[1, 1], [0, 2]], pad_mode=\"edge\")", "float32");
  unary("fixed_point_multiply(%x, multiplier=1073741824, shift=-1)", "int32");
  unary("layout_transform(%x, src_layout=\"HW\", dst_layout=\"WH\")", "float32");
  out.push_back("def @main(%x: Tensor[(2, 8, 4), float32], %p: Tensor[(8), float32]) { let %r = nn.batch_norm(%x, %p, %p, %p, %p); (%r.0, %r.2) }");
  unary("cast(%x, dtype=\"int32\")", "float32");
  unary("cast(%x, dtype=\"float16\")", "int64");
  for (const char* op : {"add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "floor_divide", "mod",
                         "floor_mod", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal"})
    for (const char* t : {"float32", "int32", "float64"})
      out.push_back(std::string("def @main(%x: Tensor[(4, 8), ") + t + "], %y: Tensor[(8), " + t + "]) { " + op + "(%x, %y) }");
  for (const char* op : {"logical_and", "logical_or"})
    out.push_back(std::string("def @main(%x: Tensor[(4, 8), bool], %y: Tensor[(4, 8), bool]) { ") + op + "(%x, %y) }");
  out.push_back("def @main(%c: Tensor[(4, 8), bool], %x: Tensor[(4, 8), float32], %y: Tensor[(8), float32]) { where(%c, %x, %y) }");
  for (const char* op : {"sum", "mean", "max", "min", "prod", "argmax", "argmin"})
    for (const char* t : {"float32", "int32"}) unary(std::string(op) + "(%x, axis=[1])", t);
  unary("sum(%x)", "float32");
  unary("all(%x, axis=[0])", "bool");
  unary("any(%x)", "bool");
  unary("cumsum(%x, axis=1)", "float32");
  unary("cumsum(%x, axis=0, exclusive=True)", "int32");
  unary("collapse_sum_to(%x, shape=[1, 8])", "float32");
  out.push_back("def @main(%x: Tensor[(?, 4, 8), int32], %l: Tensor[(?, 1), int32]) { collapse_sum_like(%x, %l) }");
  out.push_back("def @main(%x: Tensor[(4, 8), float32], %w: Tensor[(16, 8), float32]) { nn.dense(%x, %w) }");
  out.push_back("def @main(%x: Tensor[(?, 8), float64], %w: Tensor[(16, 8), float64]) { nn.dense(%x, %w) }");
  out.push_back("def @main(%x: Tensor[(4, 8), float32], %w: Tensor[(8, 16), float32]) { nn.matmul(%x, %w) }");
  out.push_back("def @main(%x: Tensor[(8, 4), float16], %w: Tensor[(16, 8), float16]) { nn.matmul(%x, %w, transpose_a=True, transpose_b=True) }");
  out.push_back("def @main(%x: Tensor[(2, 4, 8), float32], %w: Tensor[(2, 16, 8), float32]) { nn.batch_matmul(%x, %w) }");
  out.push_back("def @main(%x: Tensor[(4, 8), float32], %b: Tensor[(8), float32]) { nn.relu(nn.bias_add(%x, %b, axis=1)) }");
  unary("nn.softmax(%x)", "float32");
  unary("nn.softmax(%x, axis=0)", "float16");
  unary("nn.log_softmax(%x)", "float32");
  out.push_back("def @main(%x: Tensor[(4, 8), float32], %g: Tensor[(8), float32], %b: Tensor[(8), float32]) { nn.layer_norm(%x, %g, %b) }");
  out.push_back("def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) { nn.conv2d(%x, %w, padding=[1, 1]) }");
  out.push_back("def @main(%x: Tensor[(1, 4, 8, 8), float64], %w: Tensor[(4, 2, 3, 3), float64]) { nn.conv2d(%x, %w, strides=[2, 2], groups=2) }");
  out.push_back("def @main(%x: Tensor[(1, 3, 8, 8), uint8], %w: Tensor[(4, 3, 3, 3), int8]) { nn.conv2d(%x, %w, out_dtype=\"int32\") }");
  out.push_back("def @main(%x: Tensor[(1, 8, 8, 3), float32], %w: Tensor[(3, 3, 3, 4), float32]) { nn.conv2d(%x, %w, data_layout=\"NHWC\", kernel_layout=\"HWIO\", padding=[1, 1]) }");
  for (const char* op : {"nn.max_pool2d(%x, pool_size=[2, 2])", "nn.avg_pool2d(%x, pool_size=[3, 3], padding=[1, 1])",
                         "nn.global_avg_pool2d(%x)"})
    out.push_back(std::string("def @main(%x: Tensor[(1, 3, 8, 8), float32]) { ") + op + " }");
  unary("reshape(%x, newshape=[8, -1])", "float32");
  unary("transpose(%x, axes=[1, 0])", "float32");
  unary("expand_dims(%x, axis=0) + 1f", "float32");
  out.push_back("def @main(%x: Tensor[(4, 1, 8), float32]) { squeeze(%x, axis=[1]) * 2f }");
  out.push_back("def @main(%x: Tensor[(4, 8), float32], %y: Tensor[(2, 8), float32]) { concatenate((%x, %y), axis=0) }");
  out.push_back("def @main(%x: Tensor[(4, 8), float32], %y: Tensor[(4, 8), float32]) { stack((%x, %y), axis=1) }");
  unary("split(%x, indices_or_sections=2, axis=1)", "float32");
  unary("strided_slice(%x, begin=[0, 1], end=[4, 8], strides=[1, 2])", "float32");
  out.push_back("def @main(%x: Tensor[(4, 8), float32], %i: Tensor[(3), int32]) { take(%x, %i, axis=0) }");
  out.push_back("def @main(%x: Tensor[(4, 8), float32], %i: Tensor[(4, 3), int64]) { gather(%x, %i, axis=1) }");
  out.push_back("def @main(%v: Tensor[(8), float32]) { broadcast_to(%v, shape=[4, 8]) }");
  unary("tile(%x, reps=[2, 1])", "float32");
  unary("reverse(%x, axis=1)", "float32");
  out.push_back("def @main(%x: Tensor[(4, 8), float32]) { zeros(shape=[4, 8], dtype=\"float32\") + ones(shape=[8], dtype=\"float32\") + %x }");
  out.push_back("def @main(%v: float32) { full(%v, shape=[4, 8], dtype=\"float32\") }");
  unary("zeros_like(%x) + ones_like(%x)", "int32");
  out.push_back("def @main(%x: Tensor[(4, 8), float32], %v: float32) { full_like(%x, %v) }");
  return out;
}

}  // namespace kiln_test
