// 3-D convolution and pooling as 2-D ones over depth slices.
//
// Output depth od reads input depths od * stride + kd * dilation (after padding):
// for each kernel depth kd, the slice of those depths is folded into the batch
// (N, C, OD, H, W) -> (N * OD, C, H, W) and convolved (pooled) in 2-D with that
// depth's kernel; the results are summed (max-ed, averaged) over kd and unfolded.
// Kiln's fast 2-D convolution does all the arithmetic.
#include <limits>

#include "compiler/onnx/graph_importer.h"

namespace kiln::onnx_import {
namespace {

// One 2-D operation per kernel depth is written out: deeper kernels would make
// programs of unbounded size.
constexpr int64_t kMaxKernelDepth = 64;

struct Volume {
  std::vector<int64_t> in, kernel, strides, dil;
  std::vector<std::pair<int64_t, int64_t>> pads;
  int64_t n, channels, outDepth, outH, outW;
};

Volume volumeOf(NodeContext& c, const std::vector<int64_t>& kernel, bool ceil) {
  const Value& x = c.input(0);
  if (!x.staticShape()) c.fail("3-D operations need the input's shape to be known");
  Volume v;
  const auto& s = *x.shape;
  v.n = s[0];
  v.channels = s[1];
  v.in.assign(s.begin() + 2, s.end());
  v.kernel = kernel;
  v.strides = spatialAttr(c, "strides", 3, 1);
  v.dil = spatialAttr(c, "dilations", 3, 1);
  v.pads = spatialPads(c, v.in, kernel, v.strides, v.dil);
  int64_t out[3];
  for (size_t a = 0; a < 3; ++a) {
    int64_t span = v.in[a] + v.pads[a].first + v.pads[a].second - v.dil[a] * (kernel[a] - 1) - 1;
    if (span < 0) c.fail("the kernel is larger than the padded input");
    out[a] = (ceil ? (span + v.strides[a] - 1) / v.strides[a] : span / v.strides[a]) + 1;
  }
  v.outDepth = out[0];
  v.outH = out[1];
  v.outW = out[2];
  return v;
}

// The input padded in depth (with `fill`) and cut into the slice for kernel depth kd,
// folded into the batch: (N * OD, C, H, W).
std::string foldedSlice(NodeContext& c, const std::string& padded, const Volume& v, int64_t kd) {
  int64_t begin = kd * v.dil[0], end = begin + (v.outDepth - 1) * v.strides[0] + 1;
  std::string slice = "strided_slice(" + padded + ", begin=[" + std::to_string(begin) + "], end=[" + std::to_string(end) + "], strides=[" +
                      std::to_string(v.strides[0]) + "], axes=[2])";
  return "reshape(transpose(" + slice + ", axes=[0, 2, 1, 3, 4]), newshape=" + intList({c.product({v.n, v.outDepth}), v.channels, v.in[1], v.in[2]}) + ")";
}

std::string depthPadded(NodeContext& c, const Volume& v, const std::string& fill, int64_t extraEnd) {
  if (v.pads[0].first == 0 && v.pads[0].second + extraEnd == 0) return c.ref(0);
  return c.let("nn.pad(" + c.ref(0) + ", " + fill + ", pad_width=[[0, 0], [0, 0], [" + std::to_string(v.pads[0].first) + ", " +
               std::to_string(v.pads[0].second + extraEnd) + "], [0, 0], [0, 0]])");
}

// (N * OD, C', OH, OW) back to (N, C', OD, OH, OW).
std::string unfold(const std::string& e, const Volume& v) {
  return "transpose(reshape(" + e + ", newshape=" + intList({v.n, v.outDepth, -1, v.outH, v.outW}) + "), axes=[0, 2, 1, 3, 4])";
}

std::string hwPads(const Volume& v) {
  return intList({v.pads[1].first, v.pads[2].first, v.pads[1].second, v.pads[2].second});
}

}  // namespace

void importConv3d(NodeContext& c) {
  const Value &x = c.input(0), &w = c.input(1);
  if (!w.staticShape() || w.shape->size() != 5) c.fail("the weight must have rank 5 and a known shape");
  std::vector<int64_t> kernel(w.shape->begin() + 2, w.shape->end());
  if (kernel[0] > kMaxKernelDepth) c.fail("kernels deeper than " + std::to_string(kMaxKernelDepth) + " are not supported");
  Volume v = volumeOf(c, kernel, false);
  std::string padded = depthPadded(c, v, c.literal(0, x.dtype), 0);
  std::string sum;
  for (int64_t kd = 0; kd < kernel[0]; ++kd) {
    std::string k = c.let("squeeze(strided_slice(" + c.ref(1) + ", begin=[" + std::to_string(kd) + "], end=[" + std::to_string(kd + 1) +
                          "], axes=[2]), axis=[2])");
    std::string conv = "nn.conv2d(" + c.let(foldedSlice(c, padded, v, kd)) + ", " + k + ", strides=" + intList({v.strides[1], v.strides[2]}) +
                       ", padding=" + hwPads(v) + ", dilation=" + intList({v.dil[1], v.dil[2]}) + ", groups=" + std::to_string(c.intAttr("group", 1)) + ")";
    sum = sum.empty() ? c.let(conv) : c.let("add(" + sum + ", " + conv + ")");
  }
  std::string e = unfold(sum, v);
  if (c.hasInput(2)) e = "nn.bias_add(" + e + ", " + c.ref(2) + ", axis=1)";
  c.emit(0, e, x.dtype, std::nullopt);
}

void importPool3d(NodeContext& c, bool isMax) {
  const Value& x = c.input(0);
  auto kernel = c.intsAttr("kernel_shape");
  if (!kernel || kernel->size() != 3) c.fail("kernel_shape must have three entries");
  bool ceil = c.intAttr("ceil_mode", 0) != 0;
  if ((*kernel)[0] > kMaxKernelDepth) c.fail("kernels deeper than " + std::to_string(kMaxKernelDepth) + " are not supported");
  Volume v = volumeOf(c, *kernel, ceil);
  // Windows past the padded end (ceil_mode) see padding: -inf for max; average
  // pooling is supported where every depth window is whole.
  int64_t need = (v.outDepth - 1) * v.strides[0] + v.dil[0] * ((*kernel)[0] - 1) + 1;
  int64_t extra = std::max<int64_t>(0, need - (v.in[0] + v.pads[0].first + v.pads[0].second));
  bool countPad = c.intAttr("count_include_pad", 0) != 0;
  if (!isMax && (extra > 0 || ((v.pads[0].first || v.pads[0].second) && !countPad)))
    c.fail("3-D average pooling over padded depths is supported with count_include_pad=1 and whole windows only");
  std::string fill = isMax ? c.literal(-std::numeric_limits<double>::infinity(), x.dtype) : c.literal(0, x.dtype);
  std::string padded = depthPadded(c, v, fill, extra);
  std::string acc;
  for (int64_t kd = 0; kd < (*kernel)[0]; ++kd) {
    std::string pool = std::string(isMax ? "nn.max_pool2d(" : "nn.avg_pool2d(") + c.let(foldedSlice(c, padded, v, kd)) + ", pool_size=" +
                       intList({(*kernel)[1], (*kernel)[2]}) + ", strides=" + intList({v.strides[1], v.strides[2]}) + ", dilation=" +
                       intList({v.dil[1], v.dil[2]}) + ", padding=" + hwPads(v) + ", ceil_mode=" + (ceil ? "True" : "False") +
                       (isMax ? "" : std::string(", count_include_pad=") + (countPad ? "True" : "False")) + ")";
    acc = acc.empty() ? c.let(pool) : c.let(std::string(isMax ? "maximum(" : "add(") + acc + ", " + pool + ")");
  }
  if (!isMax) acc = c.let("divide(" + acc + ", " + c.literal(static_cast<double>((*kernel)[0]), x.dtype) + ")");
  c.emit(0, unfold(acc, v), x.dtype, std::nullopt);
}

}  // namespace kiln::onnx_import
