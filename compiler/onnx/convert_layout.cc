// ONNX operators composed from reshapes, index grids and comparisons: DepthToSpace,
// SpaceToDepth, Trilu, OneHot, EyeLike, Hardmax, LRN, MeanVarianceNormalization.
#include <cmath>

#include "compiler/onnx/graph_importer.h"
#include "compiler/onnx/onnx_tensor.h"

namespace kiln::onnx_import {
namespace {

const std::vector<int64_t>& needShape(NodeContext& c, const Value& v) {
  if (!v.shape) c.fail("the rank of '" + v.name + "' is unknown");
  return *v.shape;
}

// N, C, H, W of a rank-4 input whose C, H, W are known (N may be `?`).
std::vector<int64_t> nchw(NodeContext& c, const Value& x) {
  const auto& s = needShape(c, x);
  if (s.size() != 4) c.fail("the input must have rank 4");
  for (size_t d = 1; d < 4; ++d)
    if (s[d] < 0) c.fail("the channel and spatial dimensions must be known");
  return s;
}

// `0, 1, ..., n-1` as an int64 tensor of `rank` dimensions, laid along `axis`.
std::string indexAlong(int64_t n, size_t axis, size_t rank) {
  std::vector<int64_t> shape(rank, 1);
  shape[axis] = n;
  return "reshape(arange(0i64, " + std::to_string(n) + "i64, 1i64, dtype=\"int64\"), newshape=" + intList(shape) + ")";
}

std::string dtypeAttr(DType t) { return "dtype=\"" + std::string(dtypeName(t)) + "\""; }

}  // namespace

void registerLayoutConverters(std::map<std::string, Converter>& t) {
  t["DepthToSpace"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    auto s = nchw(c, x);
    int64_t b = c.intAttr("blocksize", 0);
    if (b > (int64_t(1) << 20)) c.fail("blocksize must be at most 2^20");
    if (b < 1 || s[1] % (b * b) != 0) c.fail("blocksize must divide the channels as blocksize^2");
    int64_t n = s[0] < 0 ? -1 : s[0], ch = s[1] / (b * b);
    bool crd = c.stringAttr("mode", "DCR") == "CRD";
    std::string e = crd ? "transpose(reshape(" + c.ref(0) + ", newshape=" + intList({n, ch, b, b, s[2], s[3]}) + "), axes=[0, 1, 4, 2, 5, 3])"
                        : "transpose(reshape(" + c.ref(0) + ", newshape=" + intList({n, b, b, ch, s[2], s[3]}) + "), axes=[0, 3, 4, 1, 5, 2])";
    std::vector<int64_t> out{s[0], ch, s[2] * b, s[3] * b};
    c.emit(0, "reshape(" + e + ", newshape=" + intList({n, ch, s[2] * b, s[3] * b}) + ")", x.dtype, out);
  };
  t["SpaceToDepth"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    auto s = nchw(c, x);
    int64_t b = c.intAttr("blocksize", 0);
    if (b > (int64_t(1) << 20)) c.fail("blocksize must be at most 2^20");
    if (b < 1 || s[2] % b != 0 || s[3] % b != 0) c.fail("blocksize must divide the spatial dimensions");
    int64_t n = s[0] < 0 ? -1 : s[0];
    std::string e = "transpose(reshape(" + c.ref(0) + ", newshape=" + intList({n, s[1], s[2] / b, b, s[3] / b, b}) + "), axes=[0, 3, 5, 1, 2, 4])";
    int64_t depth = c.product({s[1], b, b});
    c.emit(0, "reshape(" + e + ", newshape=" + intList({n, depth, s[2] / b, s[3] / b}) + ")", x.dtype,
           std::vector<int64_t>{s[0], depth, s[2] / b, s[3] / b});
  };
  t["Trilu"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    const auto& s = needShape(c, x);
    if (s.size() < 2 || s[s.size() - 2] < 0 || s.back() < 0) c.fail("the last two dimensions must be known");
    bool upper = c.intAttr("upper", 1) != 0;
    std::string k = c.hasInput(1) ? c.ref(1) : "0i64";
    if (c.hasInput(1) && c.input(1).dtype != DType::Int64) c.fail("k must be int64");
    if (c.hasInput(1) && c.input(1).shape && !c.input(1).shape->empty()) k = "reshape(" + k + ", newshape=[])";
    std::string diff = "subtract(" + indexAlong(s.back(), 1, 2) + ", " + indexAlong(s[s.size() - 2], 0, 2) + ")";
    std::string keep = std::string(upper ? "greater_equal(" : "less_equal(") + diff + ", " + k + ")";
    std::string rx = c.ref(0);
    c.emit(0, "where(" + keep + ", " + rx + ", zeros_like(" + rx + "))", x.dtype, x.shape);
  };
  t["OneHot"] = [](NodeContext& c) {
    const Value& idx = c.input(0);
    const auto& s = needShape(c, idx);
    const Value& values = c.input(2);
    size_t rank = s.size() + 1;
    size_t axis = static_cast<size_t>(c.axis(c.intAttr("axis", -1), rank));
    // depth: known (a static dimension) or computed (a `?` one); any numeric type.
    int64_t depth = -1;
    std::string depthRef;
    if (c.input(1).known) {
      const Tensor& depthT = *c.input(1).known;
      if (depthT.numel() != 1) c.fail("depth must be one value");
      int64_t di = 0;
      double df = 0;
      readScalar(depthT.data(), depthT.dtype(), di, df);
      depth = isFloat(depthT.dtype()) ? static_cast<int64_t>(df) : di;
      if (depth < 1 || depth > (int64_t(1) << 24)) c.fail("depth must be between 1 and 2^24");
      depthRef = std::to_string(depth) + "i64";
    } else {
      depthRef = c.let("reshape(cast(" + c.ref(1) + ", dtype=\"int64\"), newshape=[])");
    }
    std::vector<int64_t> along(rank, 1);
    along[axis] = -1;
    std::string classes = "reshape(arange(0i64, " + depthRef + ", 1i64, dtype=\"int64\"), newshape=" + intList(along) + ")";
    // Indices may be of any numeric type; negative ones count from depth.
    std::string i = c.let("cast(" + c.ref(0) + ", dtype=\"int64\")");
    i = c.let("where(less(" + i + ", 0i64), add(" + i + ", " + depthRef + "), " + i + ")");
    std::string hit = "equal(expand_dims(" + i + ", axis=" + std::to_string(axis) + "), " + classes + ")";
    std::string rv = c.ref(2);
    std::vector<int64_t> out = s;
    out.insert(out.begin() + static_cast<std::ptrdiff_t>(axis), depth);
    c.emit(0, "where(" + hit + ", take(" + rv + ", 1i64), take(" + rv + ", 0i64))", values.dtype, out);
  };
  t["EyeLike"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    if (!x.staticShape() || x.shape->size() != 2) c.fail("the input must be a matrix of known shape");
    DType dt = x.dtype;
    if (const auto* a = c.attr("dtype")) {
      (void)a;
      auto d = dtypeFromOnnx(static_cast<int>(c.intAttr("dtype", 1)));
      if (!d) c.fail("dtype is not supported");
      dt = *d;
    }
    int64_t rows = (*x.shape)[0], cols = (*x.shape)[1], k = c.intAttr("k", 0);
    Tensor eye = Tensor::empty(dt, {rows, cols});
    char* p = static_cast<char*>(eye.data());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t col = 0; col < cols; ++col)
        writeScalar(p + (r * cols + col) * static_cast<int64_t>(dtypeSize(dt)), dt, col - r == k ? 1 : 0, col - r == k ? 1.0 : 0.0);
    c.emitKnown(0, eye);
  };
  t["Hardmax"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    const auto& s = needShape(c, x);
    if (!x.staticShape()) c.fail("the input's shape must be known");
    auto hardmax = [&](const std::string& v, size_t axis, size_t rank, int64_t n) {
      std::string arg = "cast(argmax(" + v + ", axis=[" + std::to_string(axis) + "], keepdims=True), dtype=\"int64\")";
      return "cast(equal(" + indexAlong(n, axis, rank) + ", " + arg + "), " + dtypeAttr(x.dtype) + ")";
    };
    if (c.opset() >= 13) {
      size_t axis = static_cast<size_t>(c.axis(c.intAttr("axis", -1), s.size()));
      c.emit(0, hardmax(c.ref(0), axis, s.size(), s[axis]), x.dtype, s);
      return;
    }
    // Before opset 13: over the input flattened to 2-D at `axis`.
    size_t axis = static_cast<size_t>(c.axis(c.intAttr("axis", 1), s.size()));
    int64_t tail = 1;
    for (size_t d = axis; d < s.size(); ++d) tail *= s[d];
    std::string flat = c.let("reshape(" + c.ref(0) + ", newshape=[-1, " + std::to_string(tail) + "])");
    c.emit(0, "reshape(" + hardmax(flat, 1, 2, tail) + ", newshape=" + intList(s) + ")", x.dtype, s);
  };
  t["LRN"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    const auto& s = needShape(c, x);
    if (s.size() < 3 || s[1] < 0) c.fail("the input needs a known channel dimension");
    int64_t size = c.intAttr("size", 0);
    if (size < 1 || size > 1024) c.fail("size must be between 1 and 1024");
    double alpha = c.floatAttr("alpha", 1e-4f), beta = c.floatAttr("beta", 0.75f), bias = c.floatAttr("bias", 1.0f);
    int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
    std::string rx = c.ref(0);
    std::string pads = "[[0, 0], [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    for (size_t d = 2; d < s.size(); ++d) pads += ", [0, 0]";
    pads += "]";
    std::string sq = c.let("nn.pad(multiply(" + rx + ", " + rx + "), " + c.literal(0, x.dtype) + ", pad_width=" + pads + ")");
    std::string sum;
    for (int64_t j = 0; j < size; ++j) {
      std::string part = "strided_slice(" + sq + ", begin=[" + std::to_string(j) + "], end=[" + std::to_string(j + s[1]) + "], axes=[1])";
      sum = sum.empty() ? part : "add(" + sum + ", " + part + ")";
    }
    std::string denom = "power(add(" + c.literal(bias, x.dtype) + ", multiply(" + c.literal(alpha / static_cast<double>(size), x.dtype) + ", " +
                        c.let(sum) + ")), " + c.literal(beta, x.dtype) + ")";
    c.emit(0, "divide(" + rx + ", " + denom + ")", x.dtype, x.shape);
  };
  // Window functions: their size is an input, their values computed at import.
  auto window = [](double a0, double a1, double a2) {
    return [a0, a1, a2](NodeContext& c) {
      std::vector<int64_t> size = c.knownInts(0, "size");
      if (size.size() != 1 || size[0] < 0 || size[0] > (int64_t(1) << 24)) c.fail("size must be one value between 0 and 2^24");
      int64_t n = size[0];
      bool periodic = c.intAttr("periodic", 1) != 0;
      auto dt = dtypeFromOnnx(static_cast<int>(c.intAttr("output_datatype", 1)));
      if (!dt) c.fail("output_datatype is not supported");
      double denom = static_cast<double>(periodic ? n : n - 1);
      Tensor w = Tensor::empty(*dt, {n});
      for (int64_t i = 0; i < n; ++i) {
        double phase = denom > 0 ? 2 * M_PI * static_cast<double>(i) / denom : 0;
        double v = a0 - a1 * std::cos(phase) + a2 * std::cos(2 * phase);
        writeScalar(static_cast<char*>(w.data()) + i * static_cast<int64_t>(dtypeSize(*dt)), *dt, static_cast<int64_t>(v), v);
      }
      c.emitKnown(0, w);
    };
  };
  t["HannWindow"] = window(0.5, 0.5, 0);
  t["HammingWindow"] = window(25.0 / 46.0, 1 - 25.0 / 46.0, 0);
  t["BlackmanWindow"] = window(0.42, 0.5, 0.08);
  t["Compress"] = [](NodeContext& c) {
    // The positions where the condition holds (a data-dependent count), taken.
    const Value& x = c.input(0);
    std::string picks = "reshape(argwhere(" + c.ref(1) + "), newshape=[-1])";
    if (!c.attr("axis")) {
      c.emit(0, "take(reshape(" + c.ref(0) + ", newshape=[-1]), " + picks + ")", x.dtype, std::vector<int64_t>{-1});
      return;
    }
    const auto& s = needShape(c, x);
    int64_t axis = c.axis(c.intAttr("axis", 0), s.size());
    std::vector<int64_t> out = s;
    out[static_cast<size_t>(axis)] = -1;
    c.emit(0, "take(" + c.ref(0) + ", " + picks + ", axis=" + std::to_string(axis) + ")", x.dtype, out);
  };
  t["NonZero"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    const auto& s = needShape(c, x);
    std::string cond = x.dtype == DType::Bool ? c.ref(0) : "not_equal(" + c.ref(0) + ", " + c.literal(0, x.dtype) + ")";
    c.emit(0, "cast(transpose(argwhere(" + cond + "), axes=[1, 0]), dtype=\"int64\")", DType::Int64,
           std::vector<int64_t>{static_cast<int64_t>(s.size()), -1});
  };
  t["ReverseSequence"] = [](NodeContext& c) {
    // Along the time axis, each batch entry's first len[b] steps reversed: a gather
    // at index (t < len ? len - 1 - t : t), broadcast over the other axes.
    const Value& x = c.input(0);
    const auto& s = needShape(c, x);
    if (s.size() < 2) c.fail("the input needs a batch and a time axis");
    int64_t timeAxis = c.axis(c.intAttr("time_axis", 0), s.size()), batchAxis = c.axis(c.intAttr("batch_axis", 1), s.size());
    if (timeAxis == batchAxis || s[static_cast<size_t>(timeAxis)] < 0) c.fail("the time axis must be known and differ from the batch axis");
    int64_t steps = s[static_cast<size_t>(timeAxis)];
    std::vector<int64_t> tShape(s.size(), 1), bShape(s.size(), 1);
    tShape[static_cast<size_t>(timeAxis)] = steps;
    bShape[static_cast<size_t>(batchAxis)] = -1;
    std::string time = "reshape(arange(0i64, " + std::to_string(steps) + "i64, 1i64, dtype=\"int64\"), newshape=" + intList(tShape) + ")";
    std::string len = c.let("reshape(cast(" + c.ref(1) + ", dtype=\"int64\"), newshape=" + intList(bShape) + ")");
    std::string idx = "where(less(" + time + ", " + len + "), subtract(subtract(" + len + ", 1i64), " + time + "), " + time + ")";
    std::string full = c.let("add(" + idx + ", zeros_like(cast(" + c.ref(0) + ", dtype=\"int64\")))");
    c.emit(0, "gather(" + c.ref(0) + ", " + full + ", axis=" + std::to_string(timeAxis) + ")", x.dtype, x.shape);
  };
  t["MeanVarianceNormalization"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    const auto& s = needShape(c, x);
    std::vector<int64_t> axes = c.intsAttr("axes").value_or(std::vector<int64_t>{0, 2, 3});
    for (int64_t& a : axes) a = c.axis(a, s.size(), "axes");
    std::string rx = c.ref(0), ax = intList(axes);
    std::string centered = c.let("subtract(" + rx + ", mean(" + rx + ", axis=" + ax + ", keepdims=True))");
    std::string stddev = "sqrt(mean(multiply(" + centered + ", " + centered + "), axis=" + ax + ", keepdims=True))";
    c.emit(0, "divide(" + centered + ", add(" + stddev + ", " + c.literal(1e-9, x.dtype) + "))", x.dtype, x.shape);
  };
}

}  // namespace kiln::onnx_import
