// ONNX neural-network operators: MatMul, Gemm, Conv, pooling, normalization, softmax.
#include <cmath>
#include <limits>
#include <numeric>

#include "compiler/onnx/graph_importer.h"

namespace kiln::onnx_import {

// Pads for each spatial axis as (begin, end), from `pads` or `auto_pad`.
// Strides, dilations and kernel extents stay below 2^20, dimensions below 2^40,
// so the output-size arithmetic here stays inside int64.
constexpr int64_t kMaxStride = int64_t(1) << 20;

std::vector<std::pair<int64_t, int64_t>> spatialPads(NodeContext& c, const std::vector<int64_t>& in,
                                                     const std::vector<int64_t>& kernel, const std::vector<int64_t>& strides,
                                                     const std::vector<int64_t>& dilations) {
  size_t n = kernel.size();
  for (int64_t k : kernel)
    if (k < 1 || k > kMaxStride) c.fail("kernel extents must be between 1 and 2^20");
  std::vector<std::pair<int64_t, int64_t>> out(n, {0, 0});
  std::string autoPad = c.stringAttr("auto_pad", "NOTSET");
  if (autoPad == "NOTSET") {
    auto pads = c.intsAttr("pads").value_or(std::vector<int64_t>(2 * n, 0));
    if (pads.size() != 2 * n) c.fail("pads must have two entries per spatial axis");
    for (size_t i = 0; i < n; ++i) out[i] = {c.bounded(pads[i], "pads"), c.bounded(pads[i + n], "pads")};
  } else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    for (size_t i = 0; i < n; ++i) {
      if (in[i] < 0) c.fail("auto_pad " + autoPad + " needs the spatial dimensions to be known");
      int64_t outDim = (in[i] + strides[i] - 1) / strides[i];
      int64_t total = std::max<int64_t>(0, (outDim - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in[i]);
      int64_t small = total / 2, big = total - small;
      out[i] = autoPad == "SAME_UPPER" ? std::pair{small, big} : std::pair{big, small};
    }
  } else if (autoPad != "VALID") {
    c.fail("auto_pad '" + autoPad + "' is not supported");
  }
  return out;
}

std::vector<int64_t> spatialAttr(NodeContext& c, const char* name, size_t n, int64_t dflt) {
  auto v = c.intsAttr(name).value_or(std::vector<int64_t>(n, dflt));
  if (v.size() != n) c.fail(std::string(name) + " must have one entry per spatial axis");
  for (int64_t x : v)
    if (x < 1 || x > kMaxStride) c.fail(std::string(name) + " must be between 1 and 2^20");
  return v;
}

namespace {

const std::vector<int64_t>& needShape(NodeContext& c, const Value& v) {
  if (!v.shape) c.fail("the rank of '" + v.name + "' is unknown");
  return *v.shape;
}

// A 1-D operation runs as 2-D over a height of 1: NCW -> NC1W.
struct Spatial {
  size_t dims;  // 1 or 2
  std::string x;
};

Spatial to2d(NodeContext& c, size_t input) {
  const auto& s = needShape(c, c.input(input));
  if (s.size() != 3 && s.size() != 4) c.fail("only 1-D and 2-D spatial inputs are supported, not rank " + std::to_string(s.size()));
  std::string x = c.ref(input);
  if (s.size() == 3) return {1, "expand_dims(" + x + ", axis=2)"};
  return {2, x};
}

std::string padList(const std::vector<std::pair<int64_t, int64_t>>& p) {
  if (p.size() == 1) return intList({0, p[0].first, 0, p[0].second});
  return intList({p[0].first, p[1].first, p[0].second, p[1].second});
}

template <class T>
std::vector<int64_t> as2d(const std::vector<T>& v, T one) {
  if (v.size() == 1) return {static_cast<int64_t>(one), static_cast<int64_t>(v[0])};
  return std::vector<int64_t>(v.begin(), v.end());
}

void pool(std::map<std::string, Converter>& t, const char* onnx, bool isMax) {
  t[onnx] = [isMax](NodeContext& c) {
    if (isMax && c.hasOutput(1)) c.fail("the Indices output is not supported");
    const Value& x = c.input(0);
    if (x.shape && x.shape->size() == 5) return importPool3d(c, isMax);
    Spatial sp = to2d(c, 0);
    const auto& s = *x.shape;
    std::vector<int64_t> in(s.begin() + 2, s.end());
    auto kernel = c.intsAttr("kernel_shape");
    if (!kernel || kernel->size() != sp.dims) c.fail("kernel_shape must have one entry per spatial axis");
    auto strides = spatialAttr(c, "strides", sp.dims, 1), dil = spatialAttr(c, "dilations", sp.dims, 1);
    if (c.intAttr("storage_order", 0) != 0) c.fail("storage_order 1 is not supported");
    auto pads = spatialPads(c, in, *kernel, strides, dil);
    std::string e = std::string(isMax ? "nn.max_pool2d" : "nn.avg_pool2d") + "(" + sp.x + ", pool_size=" + intList(as2d(*kernel, int64_t(1))) +
                    ", strides=" + intList(as2d(strides, int64_t(1))) + ", dilation=" + intList(as2d(dil, int64_t(1))) +
                    ", padding=" + padList(pads) + ", ceil_mode=" + (c.intAttr("ceil_mode", 0) ? "True" : "False");
    if (!isMax) e += std::string(", count_include_pad=") + (c.intAttr("count_include_pad", 0) ? "True" : "False");
    e += ")";
    if (sp.dims == 1) e = "squeeze(" + e + ", axis=[2])";
    c.emit(0, e, x.dtype, std::nullopt);
  };
}

void globalPool(std::map<std::string, Converter>& t, const char* onnx, const char* reducer) {
  t[onnx] = [reducer](NodeContext& c) {
    const Value& x = c.input(0);
    const auto& s = needShape(c, x);
    if (s.size() < 3) c.fail("the input needs spatial axes");
    std::vector<int64_t> axes, out = s;
    for (size_t d = 2; d < s.size(); ++d) {
      axes.push_back(static_cast<int64_t>(d));
      out[d] = 1;
    }
    c.emit(0, std::string(reducer) + "(" + c.ref(0) + ", axis=" + intList(axes) + ", keepdims=True)", x.dtype, out);
  };
}

// Softmax and LogSoftmax: before opset 13 over the input flattened to 2-D at `axis`.
void softmax(std::map<std::string, Converter>& t, const char* onnx, const char* kiln) {
  t[onnx] = [kiln](NodeContext& c) {
    const Value& x = c.input(0);
    const auto& s = needShape(c, x);
    if (c.opset() >= 13) {
      int64_t axis = c.axis(c.intAttr("axis", -1), s.size());
      c.emit(0, std::string(kiln) + "(" + c.ref(0) + ", axis=" + std::to_string(axis) + ")", x.dtype, s);
      return;
    }
    int64_t axis = c.intAttr("axis", 1);
    if (axis < 0) axis += static_cast<int64_t>(s.size());
    if (axis < 0 || axis > static_cast<int64_t>(s.size())) c.fail("axis is out of range");
    if (axis == static_cast<int64_t>(s.size() - 1) || s.empty()) {
      c.emit(0, std::string(kiln) + "(" + c.ref(0) + ", axis=-1)", x.dtype, s);
      return;
    }
    if (!x.staticShape()) c.fail("opset " + std::to_string(c.opset()) + " softmax over several axes needs a static shape");
    int64_t tail = 1;
    for (size_t d = static_cast<size_t>(axis); d < s.size(); ++d) tail *= s[d];
    std::string flat = "reshape(" + c.ref(0) + ", newshape=[-1, " + std::to_string(tail) + "])";
    c.emit(0, "reshape(" + std::string(kiln) + "(" + flat + ", axis=1), newshape=" + intList(s) + ")", x.dtype, s);
  };
}

}  // namespace

void registerNNConverters(std::map<std::string, Converter>& t) {
  t["MatMul"] = [](NodeContext& c) {
    const Value &a = c.input(0), &b = c.input(1);
    const auto &sa = needShape(c, a), &sb = needShape(c, b);
    if (sa.empty() || sb.empty()) c.fail("operands must have rank at least 1");
    std::string ra = c.ref(0), rb = c.ref(1);
    bool vecA = sa.size() == 1, vecB = sb.size() == 1;
    if (vecA) ra = "expand_dims(" + ra + ", axis=0)";
    if (vecB) rb = "expand_dims(" + rb + ", axis=1)";
    size_t rankA = std::max<size_t>(sa.size(), 2), rankB = std::max<size_t>(sb.size(), 2);
    std::string e;
    if (rankB == 2) {
      e = "nn.matmul(" + ra + ", " + rb + ")";
    } else if (rankA == 3 && rankB == 3) {
      e = "nn.batch_matmul(" + ra + ", " + rb + ", transpose_b=False)";
    } else {
      // Batched over several axes: both operands broadcast to one batch shape, then
      // folded into one batch axis.
      if (!a.staticShape() || !b.staticShape()) c.fail("batched matmul of rank > 3 needs static shapes");
      std::vector<int64_t> ea = vecA ? std::vector<int64_t>{1, sa[0]} : sa, eb = vecB ? std::vector<int64_t>{sb[0], 1} : sb;
      size_t r = std::max(ea.size(), eb.size());
      std::vector<int64_t> batch(r - 2);
      for (size_t i = 0; i + 2 < r; ++i) {
        int64_t x = i < r - ea.size() ? 1 : ea[i - (r - ea.size())], y = i < r - eb.size() ? 1 : eb[i - (r - eb.size())];
        if (x != y && x != 1 && y != 1) c.fail("batch dimensions do not broadcast");
        batch[i] = x == 1 ? y : x;
      }
      int64_t nb = c.product(batch);
      int64_t m = ea[ea.size() - 2], k = ea.back(), n = eb.back();
      auto fold = [&](const std::string& v, int64_t rows, int64_t cols) {
        std::vector<int64_t> full = batch;
        full.push_back(rows);
        full.push_back(cols);
        return "reshape(broadcast_to(" + v + ", shape=" + intList(full) + "), newshape=" + intList({nb, rows, cols}) + ")";
      };
      std::vector<int64_t> out = batch;
      out.push_back(m);
      out.push_back(n);
      e = "reshape(nn.batch_matmul(" + fold(ra, m, k) + ", " + fold(rb, k, n) + ", transpose_b=False), newshape=" + intList(out) + ")";
    }
    if (vecA) e = "squeeze(" + e + ", axis=[-2])";
    if (vecB) e = "squeeze(" + e + ", axis=[-1])";
    c.emit(0, e, a.dtype, std::nullopt);
  };
  t["Gemm"] = [](NodeContext& c) {
    const Value& a = c.input(0);
    bool ta = c.intAttr("transA", 0) != 0, tb = c.intAttr("transB", 0) != 0;
    double alpha = c.floatAttr("alpha", 1.0f), beta = c.floatAttr("beta", 1.0f);
    std::string e = !ta && tb ? "nn.dense(" + c.ref(0) + ", " + c.ref(1) + ")"
                              : "nn.matmul(" + c.ref(0) + ", " + c.ref(1) + ", transpose_a=" + (ta ? "True" : "False") +
                                    ", transpose_b=" + (tb ? "True" : "False") + ")";
    if (alpha != 1) e = "multiply(" + e + ", " + c.literal(alpha, a.dtype) + ")";
    if (c.hasInput(2) && beta != 0) {
      std::string bias = c.ref(2);
      if (beta != 1) bias = "multiply(" + bias + ", " + c.literal(beta, a.dtype) + ")";
      e = "add(" + e + ", " + bias + ")";
    }
    c.emit(0, e, a.dtype, std::nullopt);
  };
  t["Conv"] = [](NodeContext& c) {
    const Value &x = c.input(0), &w = c.input(1);
    if (x.shape && x.shape->size() == 5) return importConv3d(c);
    Spatial sp = to2d(c, 0);
    const auto& s = *x.shape;
    const auto& ws = needShape(c, w);
    if (ws.size() != s.size()) c.fail("the weight's rank differs from the input's");
    std::vector<int64_t> in(s.begin() + 2, s.end()), kernel = c.intsAttr("kernel_shape").value_or(std::vector<int64_t>(ws.begin() + 2, ws.end()));
    for (int64_t k : kernel)
      if (k < 0) c.fail("the kernel's spatial dimensions must be known");
    auto strides = spatialAttr(c, "strides", sp.dims, 1), dil = spatialAttr(c, "dilations", sp.dims, 1);
    auto pads = spatialPads(c, in, kernel, strides, dil);
    std::string wr = c.ref(1);
    if (sp.dims == 1) wr = "expand_dims(" + wr + ", axis=2)";
    std::string e = "nn.conv2d(" + sp.x + ", " + wr + ", strides=" + intList(as2d(strides, int64_t(1))) + ", padding=" + padList(pads) +
                    ", dilation=" + intList(as2d(dil, int64_t(1))) + ", groups=" + std::to_string(c.intAttr("group", 1)) + ")";
    if (c.hasInput(2)) e = "nn.bias_add(" + e + ", " + c.ref(2) + ", axis=1)";
    if (sp.dims == 1) e = "squeeze(" + e + ", axis=[2])";
    c.emit(0, e, x.dtype, std::nullopt);
  };
  t["ConvTranspose"] = [](NodeContext& c) {
    // The transposed convolution is a convolution of the input spread out by the
    // stride (zeros between its elements), padded by the kernel's reach less the
    // pads, with the kernel flipped and its channel axes swapped per group.
    const Value &x = c.input(0), &w = c.input(1);
    const auto& s = needShape(c, x);
    const auto& ws = needShape(c, w);
    if ((s.size() != 3 && s.size() != 4) || ws.size() != s.size()) c.fail("only 1-D and 2-D transposed convolutions are supported");
    if (!x.staticShape() || !w.staticShape()) c.fail("the input's and the weight's shapes must be known");
    size_t n = s.size() - 2;
    int64_t group = c.intAttr("group", 1);
    if (group < 1 || ws[0] % group != 0 || s[1] != ws[0]) c.fail("group does not divide the channels");
    std::vector<int64_t> in(s.begin() + 2, s.end()), kernel(ws.begin() + 2, ws.end());
    auto strides = spatialAttr(c, "strides", n, 1), dil = spatialAttr(c, "dilations", n, 1);
    auto outPad = c.intsAttr("output_padding").value_or(std::vector<int64_t>(n, 0));
    if (outPad.size() != n) c.fail("output_padding must have one entry per spatial axis");
    for (int64_t& p : outPad) p = c.bounded(p, "output_padding");
    std::string autoPad = c.stringAttr("auto_pad", "NOTSET");
    auto outShape = c.intsAttr("output_shape");
    if (outShape && outShape->size() == n + 2) outShape = std::vector<int64_t>(outShape->begin() + 2, outShape->end());
    if (outShape && outShape->size() != n) c.fail("output_shape must have one entry per spatial axis");
    if (outShape)
      for (int64_t& d : *outShape) d = c.bounded(d, "output_shape");
    std::vector<int64_t> padB(n), padE(n);
    auto pads = c.intsAttr("pads").value_or(std::vector<int64_t>(2 * n, 0));
    if (pads.size() != 2 * n) c.fail("pads must have two entries per spatial axis");
    for (int64_t& p : pads) p = c.bounded(p, "pads");
    for (size_t i = 0; i < n; ++i) {
      int64_t full = strides[i] * (in[i] - 1) + outPad[i] + (kernel[i] - 1) * dil[i] + 1;
      if (outShape || autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
        int64_t target = outShape ? (*outShape)[i] : in[i] * strides[i];
        int64_t total = full - target;
        bool upper = autoPad != "SAME_LOWER";
        padB[i] = upper ? total / 2 : total - total / 2;
        padE[i] = total - padB[i];
      } else if (autoPad == "VALID") {
        padB[i] = padE[i] = 0;
      } else {
        padB[i] = pads[i];
        padE[i] = pads[i + n];
      }
    }
    int64_t cin = s[1], cout = ws[1] * group, gin = cin / group;
    // Spread: each spatial axis k becomes (len, 1) padded to (len, stride), then merged.
    std::string e = c.ref(0);
    {
      std::vector<int64_t> split{s[0], s[1]}, padW{0, 0, 0, 0}, merged{s[0], s[1]};
      std::string widths = "[[0, 0], [0, 0]";
      for (size_t i = 0; i < n; ++i) {
        split.push_back(in[i]);
        split.push_back(1);
        widths += ", [0, 0], [0, " + std::to_string(strides[i] - 1) + "]";
        merged.push_back(in[i] * strides[i]);
      }
      widths += "]";
      e = "reshape(nn.pad(reshape(" + e + ", newshape=" + intList(split) + "), " + c.literal(0, x.dtype) + ", pad_width=" + widths +
          "), newshape=" + intList(merged) + ")";
    }
    // Reach of the kernel less the pads: positive pads, negative crops; the spread's
    // trailing stride - 1 zeros are cropped as well.
    std::string widths = "[[0, 0], [0, 0]";
    std::vector<int64_t> begin, end, axes;
    for (size_t i = 0; i < n; ++i) {
      int64_t reach = dil[i] * (kernel[i] - 1);
      int64_t b = reach - padB[i], a = reach - padE[i] + outPad[i] - (strides[i] - 1);
      widths += ", [" + std::to_string(std::max<int64_t>(b, 0)) + ", " + std::to_string(std::max<int64_t>(a, 0)) + "]";
      if (b < 0 || a < 0) {
        axes.push_back(static_cast<int64_t>(i + 2));
        begin.push_back(std::max<int64_t>(-b, 0));
        end.push_back(a < 0 ? a : std::numeric_limits<int64_t>::max());
      }
    }
    widths += "]";
    e = "nn.pad(" + e + ", " + c.literal(0, x.dtype) + ", pad_width=" + widths + ")";
    if (!axes.empty()) e = "strided_slice(" + e + ", begin=" + intList(begin) + ", end=" + intList(end) + ", axes=" + intList(axes) + ")";
    // The kernel: [Cin, Cout/g, k...] -> [Cout, Cin/g, k...], flipped.
    std::vector<int64_t> grouped{group, gin, ws[1]}, perm{0, 2, 1}, oihw{cout, gin};
    for (size_t i = 0; i < n; ++i) {
      grouped.push_back(kernel[i]);
      perm.push_back(static_cast<int64_t>(i + 3));
      oihw.push_back(kernel[i]);
    }
    std::string k = "reshape(transpose(reshape(" + c.ref(1) + ", newshape=" + intList(grouped) + "), axes=" + intList(perm) + "), newshape=" + intList(oihw) + ")";
    for (size_t i = 0; i < n; ++i) k = "reverse(" + k + ", axis=" + std::to_string(i + 2) + ")";
    std::string xin = e, kin = k;
    if (n == 1) {
      xin = "expand_dims(" + xin + ", axis=2)";
      kin = "expand_dims(" + kin + ", axis=2)";
    }
    std::vector<int64_t> dil2 = n == 1 ? std::vector<int64_t>{1, dil[0]} : dil;
    std::string conv = "nn.conv2d(" + c.let(xin) + ", " + c.let(kin) + ", dilation=" + intList(dil2) + ", groups=" + std::to_string(group) + ")";
    if (c.hasInput(2)) conv = "nn.bias_add(" + conv + ", " + c.ref(2) + ", axis=1)";
    if (n == 1) conv = "squeeze(" + conv + ", axis=[2])";
    c.emit(0, conv, x.dtype, std::nullopt);
  };
  pool(t, "MaxPool", true);
  pool(t, "AveragePool", false);
  globalPool(t, "GlobalAveragePool", "mean");
  globalPool(t, "GlobalMaxPool", "max");
  softmax(t, "Softmax", "nn.softmax");
  softmax(t, "LogSoftmax", "nn.log_softmax");
  t["BatchNormalization"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    if (c.intAttr("training_mode", 0) != 0) c.fail("training mode is not supported");
    for (size_t i = 1; i < c.numOutputs(); ++i)
      if (c.hasOutput(i)) c.fail("the running statistics outputs (training) are not supported");
    double eps = c.floatAttr("epsilon", 1e-5f);
    // Inference with known statistics (the usual case: they are initializers) is
    // x * scale + shift per channel, both computed here: two element-wise operations
    // that fuse into the convolution before them and the activation after, as ONNX
    // Runtime folds BatchNormalization into Conv.
    bool known = x.shape && x.shape->size() >= 2 && x.dtype == DType::Float32;
    for (size_t k = 1; k <= 4; ++k)
      known = known && c.input(k).known && c.input(k).known->dtype() == DType::Float32 && c.input(k).known->rank() == 1;
    if (known) {
      int64_t channels = c.input(1).known->numel();
      for (size_t k = 2; k <= 4; ++k) known = known && c.input(k).known->numel() == channels;
      if ((*x.shape)[1] >= 0 && (*x.shape)[1] != channels) c.fail("the statistics do not match the channels");
    }
    if (known) {
      int64_t channels = c.input(1).known->numel();
      std::vector<int64_t> along(x.shape->size() - 1, 1);
      along[0] = channels;
      Tensor scale = Tensor::empty(DType::Float32, along), shift = Tensor::empty(DType::Float32, along);
      const float *gamma = c.input(1).known->data<float>(), *beta = c.input(2).known->data<float>();
      const float *mean = c.input(3).known->data<float>(), *var = c.input(4).known->data<float>();
      for (int64_t ch = 0; ch < channels; ++ch) {
        double sc = gamma[ch] / std::sqrt(static_cast<double>(var[ch]) + eps);
        scale.data<float>()[ch] = static_cast<float>(sc);
        shift.data<float>()[ch] = static_cast<float>(beta[ch] - mean[ch] * sc);
      }
      c.emit(0, "add(multiply(" + c.ref(0) + ", " + c.constant(scale, "bn_scale") + "), " + c.constant(shift, "bn_shift") + ")", x.dtype,
             x.shape);
      return;
    }
    std::string e = "nn.batch_norm(" + c.ref(0) + ", " + c.ref(1) + ", " + c.ref(2) + ", " + c.ref(3) + ", " + c.ref(4) +
                    ", axis=1, epsilon=" + floatText(eps) + ")";
    c.emit(0, c.let(e) + ".0", x.dtype, x.shape);
  };
  t["InstanceNormalization"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    const auto& s = needShape(c, x);
    if (s.size() < 3) c.fail("the input needs spatial axes");
    std::vector<int64_t> axes, bshape{-1};
    for (size_t d = 2; d < s.size(); ++d) {
      axes.push_back(static_cast<int64_t>(d));
      bshape.push_back(1);
    }
    std::string rx = c.ref(0), ax = intList(axes);
    std::string mean = c.let("mean(" + rx + ", axis=" + ax + ", keepdims=True)");
    std::string centered = c.let("subtract(" + rx + ", " + mean + ")");
    std::string var = "mean(multiply(" + centered + ", " + centered + "), axis=" + ax + ", keepdims=True)";
    std::string norm = "divide(" + centered + ", sqrt(add(" + var + ", " + c.literal(c.floatAttr("epsilon", 1e-5f), x.dtype) + ")))";
    std::string scale = "reshape(" + c.ref(1) + ", newshape=" + intList(bshape) + ")", bias = "reshape(" + c.ref(2) + ", newshape=" + intList(bshape) + ")";
    c.emit(0, "add(multiply(" + norm + ", " + scale + "), " + bias + ")", x.dtype, x.shape);
  };
  t["LayerNormalization"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    const auto& s = needShape(c, x);
    int64_t axis = c.axis(c.intAttr("axis", -1), s.size());
    std::vector<int64_t> axes;
    for (size_t d = static_cast<size_t>(axis); d < s.size(); ++d) axes.push_back(static_cast<int64_t>(d));
    std::string rx = c.ref(0), ax = intList(axes);
    std::string mean = c.let("mean(" + rx + ", axis=" + ax + ", keepdims=True)");
    std::string centered = c.let("subtract(" + rx + ", " + mean + ")");
    std::string var = "mean(multiply(" + centered + ", " + centered + "), axis=" + ax + ", keepdims=True)";
    std::string invStd = c.let("divide(" + c.literal(1, x.dtype) + ", sqrt(add(" + var + ", " + c.literal(c.floatAttr("epsilon", 1e-5f), x.dtype) + ")))");
    std::string e = "multiply(multiply(" + centered + ", " + invStd + "), " + c.ref(1) + ")";
    if (c.hasInput(2)) e = "add(" + e + ", " + c.ref(2) + ")";
    c.emit(0, e, x.dtype, x.shape);
    // Mean and InvStdDev keep the normalized axes as 1s.
    std::vector<int64_t> stat = s;
    for (int64_t a : axes) stat[static_cast<size_t>(a)] = 1;
    c.emit(1, "copy(" + mean + ")", x.dtype, stat);
    c.emit(2, "copy(" + invStd + ")", x.dtype, stat);
  };
}


}  // namespace kiln::onnx_import
