// ONNX tensor operators: constants, shapes, reshaping, slicing, gathering, reductions.
#include <algorithm>
#include <limits>
#include <numeric>

#include <onnx/onnx_pb.h>

#include "compiler/onnx/graph_importer.h"
#include "compiler/onnx/onnx_tensor.h"

namespace kiln::onnx_import {
namespace {

std::string dtypeAttr(DType t) { return "dtype=\"" + std::string(dtypeName(t)) + "\""; }

Tensor int64Tensor(const std::vector<int64_t>& v) {
  int64_t n = static_cast<int64_t>(v.size());
  Tensor t = Tensor::empty(DType::Int64, {n});
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

const std::vector<int64_t>& needShape(NodeContext& c, const Value& v) {
  if (!v.shape) c.fail("the rank of '" + v.name + "' is unknown");
  return *v.shape;
}

// Axes from the `axes` attribute (older opsets) or the input at `inputIndex`.
std::optional<std::vector<int64_t>> axesOf(NodeContext& c, int64_t inputSince, size_t inputIndex) {
  if (c.opset() >= inputSince) {
    if (!c.hasInput(inputIndex)) return std::nullopt;
    return c.knownInts(inputIndex, "axes");
  }
  return c.intsAttr("axes");
}

std::vector<int64_t> normalizeAxes(NodeContext& c, std::vector<int64_t> axes, size_t rank) {
  for (int64_t& a : axes) a = c.axis(a, rank, "axes");
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) c.fail("axes repeat an axis");
  return axes;
}

std::vector<int64_t> reducedShape(const std::vector<int64_t>& s, const std::vector<int64_t>& axes, bool keep) {
  std::vector<int64_t> out;
  for (size_t d = 0; d < s.size(); ++d) {
    bool reduced = std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end();
    if (!reduced) out.push_back(s[d]);
    else if (keep) out.push_back(1);
  }
  return out;
}

// ReduceX: `pre` maps x before the reduction, `post` the result after it.
void reduce(std::map<std::string, Converter>& t, const char* onnx, const char* kiln, const char* pre, const char* post) {
  t[onnx] = [kiln, pre, post](NodeContext& c) {
    const Value& x = c.input(0);
    const auto& s = needShape(c, x);
    bool keep = c.intAttr("keepdims", 1) != 0;
    // ReduceSum takes its axes as an input from opset 13 (the others from 18).
    auto axes = axesOf(c, std::string(c.node().op_type()) == "ReduceSum" ? 13 : 18, 1);
    if ((!axes || axes->empty()) && c.intAttr("noop_with_empty_axes", 0)) return c.alias(0, x);
    std::vector<int64_t> ax;
    if (axes && !axes->empty()) ax = normalizeAxes(c, *axes, s.size());
    else for (size_t d = 0; d < s.size(); ++d) ax.push_back(static_cast<int64_t>(d));
    std::string e = c.ref(0);
    std::string p = pre;
    if (p == "abs") e = "abs(" + e + ")";
    else if (p == "square") e = "multiply(" + e + ", " + e + ")";
    else if (p == "exp") e = "exp(" + e + ")";
    e = std::string(kiln) + "(" + e + ", axis=" + intList(ax) + ", keepdims=" + (keep ? "True" : "False") + ")";
    if (*post) e = std::string(post) + "(" + e + ")";
    c.emit(0, e, x.dtype, reducedShape(s, ax, keep));
  };
}

void argReduce(std::map<std::string, Converter>& t, const char* onnx, const char* kiln) {
  t[onnx] = [kiln](NodeContext& c) {
    const Value& x = c.input(0);
    const auto& s = needShape(c, x);
    int64_t a = c.axis(c.intAttr("axis", 0), s.size());
    bool keep = c.intAttr("keepdims", 1) != 0;
    std::string rx = c.ref(0), ax = std::to_string(a);
    bool last = c.intAttr("select_last_index", 0) != 0;
    // The last extreme is the first one along the reversed axis.
    if (last) rx = "reverse(" + rx + ", axis=" + ax + ")";
    std::string e = std::string(kiln) + "(" + rx + ", axis=[" + ax + "], keepdims=" + (keep ? "True" : "False") + ")";
    if (last) {
      int64_t n = s[static_cast<size_t>(a)];
      if (n < 0) c.fail("select_last_index needs the axis's extent to be known");
      e = "subtract(" + std::to_string(n - 1) + ", " + e + ")";
    }
    c.emit(0, "cast(" + e + ", dtype=\"int64\")", DType::Int64, reducedShape(s, {a}, keep));
  };
}

std::string tupleOf(NodeContext& c, size_t from, size_t to) {
  std::string s = "(";
  for (size_t i = from; i < to; ++i) s += (i > from ? ", " : "") + c.ref(i);
  return s + (to - from == 1 ? ",)" : ")");
}

}  // namespace

void registerTensorConverters(std::map<std::string, Converter>& t) {
  t["Constant"] = [](NodeContext& c) {
    if (const auto* a = c.attr("value")) return c.emitKnown(0, tensorFromProto(a->t(), c.scope().state().baseDir));
    if (const auto* a = c.attr("value_float")) {
      Tensor v = Tensor::empty(DType::Float32, std::span<const int64_t>{});
      *v.data<float>() = a->f();
      return c.emitKnown(0, v);
    }
    if (const auto* a = c.attr("value_int")) {
      Tensor v = Tensor::empty(DType::Int64, std::span<const int64_t>{});
      *v.data<int64_t>() = a->i();
      return c.emitKnown(0, v);
    }
    if (auto v = c.intsAttr("value_ints")) return c.emitKnown(0, int64Tensor(*v));
    if (auto v = c.floatsAttr("value_floats")) {
      Tensor out = Tensor::empty(DType::Float32, {static_cast<int64_t>(v->size())});
      std::copy(v->begin(), v->end(), out.data<float>());
      return c.emitKnown(0, out);
    }
    c.fail("only value, value_float(s) and value_int(s) constants are supported (no sparse or string constants)");
  };
  t["Shape"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    const auto& s = needShape(c, x);
    int64_t r = static_cast<int64_t>(s.size());
    auto clampEnd = [&](int64_t v) { return std::clamp(v < 0 ? v + r : v, int64_t(0), r); };
    int64_t start = clampEnd(c.intAttr("start", 0)), end = clampEnd(c.intAttr("end", r));
    end = std::max(start, end);
    std::vector<int64_t> dims(s.begin() + start, s.begin() + end);
    if (std::all_of(dims.begin(), dims.end(), [](int64_t d) { return d >= 0; })) return c.emitKnown(0, int64Tensor(dims));
    std::string e = "shape_of(" + c.ref(0) + ", dtype=\"int64\")";
    if (start != 0 || end != r) e = "strided_slice(" + c.let(e) + ", begin=[" + std::to_string(start) + "], end=[" + std::to_string(end) + "])";
    c.emit(0, e, DType::Int64, std::vector<int64_t>{end - start});
  };
  t["Size"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    if (!x.staticShape()) {
      c.emit(0, "prod(shape_of(" + c.ref(0) + ", dtype=\"int64\"))", DType::Int64, std::vector<int64_t>{});
      return;
    }
    Tensor v = Tensor::empty(DType::Int64, std::span<const int64_t>{});
    *v.data<int64_t>() = c.product(*x.shape);
    c.emitKnown(0, v);
  };
  t["Reshape"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    bool allowZero = c.intAttr("allowzero", 0) != 0;
    if (c.opset() >= 5 && !c.input(1).known) {
      // A computed shape: the output's rank is the shape's length.
      const Value& sh = c.input(1);
      std::optional<std::vector<int64_t>> out;
      if (sh.shape && sh.shape->size() == 1 && (*sh.shape)[0] >= 0) out = std::vector<int64_t>(static_cast<size_t>((*sh.shape)[0]), -1);
      c.emit(0, "dyn.reshape(" + c.ref(0) + ", " + c.ref(1) + (allowZero ? ", allowzero=True" : "") + ")", x.dtype, out);
      return;
    }
    std::vector<int64_t> shape = c.opset() < 5 ? c.intsAttr("shape").value_or(std::vector<int64_t>{}) : c.knownInts(1, "shape");
    // The result's shape: 0 copies the input's dimension, -1 takes what is left.
    std::vector<int64_t> out = shape;
    int64_t known = 1, infer = -1;
    for (size_t d = 0; d < out.size(); ++d) {
      if (out[d] == 0 && !allowZero) out[d] = x.shape && d < x.shape->size() ? (*x.shape)[d] : -1;
      else if (out[d] == -1) infer = static_cast<int64_t>(d);
      if (out[d] >= 0 && static_cast<int64_t>(d) != infer && known >= 0) known = elementCount({known, out[d]}).value_or(-1);
      else if (static_cast<int64_t>(d) != infer) known = -1;
    }
    if (infer >= 0) {
      int64_t total = x.staticShape() ? elementCount(*x.shape).value_or(-1) : -1;
      out[static_cast<size_t>(infer)] = total >= 0 && known > 0 ? total / known : -1;
    }
    c.emit(0, "reshape(" + c.ref(0) + ", newshape=" + intList(shape) + (allowZero ? ", allowzero=True" : "") + ")", x.dtype, out);
  };
  t["Flatten"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    const auto& s = needShape(c, x);
    int64_t axis = c.intAttr("axis", 1);
    if (axis < 0) axis += static_cast<int64_t>(s.size());
    if (axis < 0 || axis > static_cast<int64_t>(s.size())) c.fail("axis is out of range");
    auto prod = [&](size_t b, size_t e) { return elementCount(std::vector<int64_t>(s.begin() + static_cast<std::ptrdiff_t>(b), s.begin() + static_cast<std::ptrdiff_t>(e))).value_or(-1); };
    int64_t head = prod(0, static_cast<size_t>(axis)), tail = prod(static_cast<size_t>(axis), s.size());
    if (head < 0 && tail < 0) c.fail("flattening needs the dimensions on one side of the axis to be known");
    c.emit(0, "reshape(" + c.ref(0) + ", newshape=" + intList({head, tail}) + ")", x.dtype, std::vector<int64_t>{head, tail});
  };
  t["Transpose"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    const auto& s = needShape(c, x);
    std::vector<int64_t> perm = c.intsAttr("perm").value_or(std::vector<int64_t>{});
    if (perm.empty())
      for (size_t d = s.size(); d-- > 0;) perm.push_back(static_cast<int64_t>(d));
    if (perm.size() != s.size()) c.fail("perm has " + std::to_string(perm.size()) + " entries for rank " + std::to_string(s.size()));
    std::vector<int64_t> out;
    for (int64_t p : perm) out.push_back(s[static_cast<size_t>(c.axis(p, s.size(), "perm"))]);
    c.emit(0, "transpose(" + c.ref(0) + ", axes=" + intList(perm) + ")", x.dtype, out);
  };
  t["Concat"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    const auto& s = needShape(c, x);
    int64_t axis = c.axis(c.intAttr("axis", 0), s.size());
    c.emit(0, "concatenate(" + tupleOf(c, 0, c.numInputs()) + ", axis=" + std::to_string(axis) + ")", x.dtype, std::nullopt);
  };
  t["Split"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    const auto& s = needShape(c, x);
    int64_t axis = c.axis(c.intAttr("axis", 0), s.size());
    std::optional<std::vector<int64_t>> sizes = c.opset() >= 13 ? (c.hasInput(1) ? std::optional(c.knownInts(1, "split")) : std::nullopt)
                                                                 : c.intsAttr("split");
    std::string how;
    if (sizes) {
      if (sizes->size() != c.numOutputs()) c.fail("split has " + std::to_string(sizes->size()) + " sizes for " + std::to_string(c.numOutputs()) + " outputs");
      std::vector<int64_t> idx;
      int64_t at = 0;
      for (size_t i = 0; i + 1 < sizes->size(); ++i) idx.push_back(at += (*sizes)[i]);
      how = intList(idx);
      if (s[static_cast<size_t>(axis)] >= 0 && at + sizes->back() != s[static_cast<size_t>(axis)]) c.fail("the split sizes do not add up to the axis");
    } else {
      how = std::to_string(c.numOutputs());
    }
    std::string tup = c.let("split(" + c.ref(0) + ", indices_or_sections=" + how + ", axis=" + std::to_string(axis) + ")");
    for (size_t i = 0; i < c.numOutputs(); ++i) c.emit(i, tup + "." + std::to_string(i), x.dtype, std::nullopt);
  };
  t["Squeeze"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    const auto& s = needShape(c, x);
    auto axes = axesOf(c, 13, 1);
    if (!axes) {
      c.emit(0, "squeeze(" + c.ref(0) + ")", x.dtype, std::nullopt);
      return;
    }
    auto ax = normalizeAxes(c, *axes, s.size());
    c.emit(0, "squeeze(" + c.ref(0) + ", axis=" + intList(ax) + ")", x.dtype, reducedShape(s, ax, false));
  };
  t["Unsqueeze"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    const auto& s = needShape(c, x);
    auto axes = axesOf(c, 13, 1);
    if (!axes) c.fail("axes are required");
    auto ax = normalizeAxes(c, *axes, s.size() + axes->size());
    std::string e = c.ref(0);
    std::vector<int64_t> out = s;
    for (int64_t a : ax) {
      e = "expand_dims(" + e + ", axis=" + std::to_string(a) + ")";
      out.insert(out.begin() + a, 1);
    }
    c.emit(0, e, x.dtype, out);
  };
  t["Slice"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    const auto& s = needShape(c, x);
    std::vector<int64_t> starts, ends, axes, steps;
    if (c.opset() < 10) {
      starts = c.intsAttr("starts").value_or(std::vector<int64_t>{});
      ends = c.intsAttr("ends").value_or(std::vector<int64_t>{});
      axes = c.intsAttr("axes").value_or(std::vector<int64_t>{});
    } else if ((!c.input(1).known || !c.input(2).known) && [&] {
                 // Computed bounds on the leading axes (no axes, or 0, 1, ...): dyn.strided_slice.
                 if (!c.hasInput(3)) return true;
                 auto ax = c.knownInts(3, "axes");
                 for (size_t k = 0; k < ax.size(); ++k)
                   if (c.axis(ax[k], s.size(), "axes") != static_cast<int64_t>(k)) return false;
                 return true;
               }()) {
      std::string steps = c.hasInput(4) ? c.ref(4) : "ones_like(" + c.ref(1) + ")";
      c.emit(0, "dyn.strided_slice(" + c.ref(0) + ", " + c.ref(1) + ", " + c.ref(2) + ", " + steps + ")", x.dtype,
             std::vector<int64_t>(s.size(), -1));
      return;
    } else {
      starts = c.knownInts(1, "starts");
      ends = c.knownInts(2, "ends");
      if (c.hasInput(3)) axes = c.knownInts(3, "axes");
      if (c.hasInput(4)) steps = c.knownInts(4, "steps");
    }
    if (axes.empty())
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    if (steps.empty()) steps.assign(starts.size(), 1);
    if (starts.size() != ends.size() || axes.size() != starts.size() || steps.size() != starts.size())
      c.fail("starts, ends, axes and steps must have one entry per sliced axis");
    for (int64_t& a : axes) a = c.axis(a, s.size(), "axes");
    for (int64_t st : steps)
      if (st == 0) c.fail("steps must not contain 0");
    c.emit(0, "strided_slice(" + c.ref(0) + ", begin=" + intList(starts) + ", end=" + intList(ends) + ", strides=" + intList(steps) +
                  ", axes=" + intList(axes) + ")",
           x.dtype, std::nullopt);
  };
  t["Gather"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    const auto& s = needShape(c, x);
    int64_t axis = c.axis(c.intAttr("axis", 0), s.size());
    // Negative indices count from the end, as ONNX allows; "wrap" reads them so.
    c.emit(0, "take(" + c.ref(0) + ", " + c.ref(1) + ", axis=" + std::to_string(axis) + ", mode=\"wrap\")", x.dtype, std::nullopt);
  };
  t["GatherElements"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    const auto& s = needShape(c, x);
    int64_t axis = c.axis(c.intAttr("axis", 0), s.size());
    c.emit(0, "gather(" + c.ref(0) + ", " + c.ref(1) + ", axis=" + std::to_string(axis) + ")", x.dtype, c.input(1).shape);
  };
  t["Expand"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    const auto& s = needShape(c, x);
    if (!c.input(1).known) {
      // A computed shape: broadcasting both ways is multiplying by ones of that shape.
      const Value& sh = c.input(1);
      if (!sh.shape || sh.shape->size() != 1 || (*sh.shape)[0] < 0) c.fail("the shape input's length must be known");
      std::string ones = "dyn.broadcast_to(" + c.literal(1, x.dtype) + ", " + c.ref(1) + ")";
      std::string e = x.dtype == DType::Bool ? "logical_and(" + c.ref(0) + ", " + ones + ")" : "multiply(" + c.ref(0) + ", " + ones + ")";
      c.emit(0, e, x.dtype, std::vector<int64_t>(std::max<size_t>(s.size(), static_cast<size_t>((*sh.shape)[0])), -1));
      return;
    }
    std::vector<int64_t> shape = c.knownInts(1, "shape");
    size_t r = std::max(s.size(), shape.size());
    std::vector<int64_t> out(r);
    for (size_t i = 0; i < r; ++i) {
      int64_t a = i < r - s.size() ? 1 : s[i - (r - s.size())];
      int64_t b = i < r - shape.size() ? 1 : shape[i - (r - shape.size())];
      if (a < 0 && b == 1) c.fail("expanding a `?` dimension is not supported");
      out[i] = a == 1 ? b : a;
    }
    c.emit(0, "broadcast_to(" + c.ref(0) + ", shape=" + intList(out) + ")", x.dtype, out);
  };
  t["Tile"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    c.emit(0, "tile(" + c.ref(0) + ", reps=" + intList(c.knownInts(1, "repeats")) + ")", x.dtype, std::nullopt);
  };
  t["Range"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    c.emit(0, "arange(" + c.ref(0) + ", " + c.ref(1) + ", " + c.ref(2) + ", " + dtypeAttr(x.dtype) + ")", x.dtype, std::vector<int64_t>{-1});
  };
  t["ConstantOfShape"] = [](NodeContext& c) {
    DType dt = DType::Float32;
    double v = 0;
    if (const auto* a = c.attr("value")) {
      Tensor t = tensorFromProto(a->t(), "");
      if (t.numel() != 1) c.fail("value must hold one element");
      int64_t i;
      readScalar(t.data(), t.dtype(), i, v);
      if (!isFloat(t.dtype())) v = static_cast<double>(i);
      dt = t.dtype();
    }
    if (!c.input(0).known) {
      const Value& sh = c.input(0);
      std::optional<std::vector<int64_t>> out;
      if (sh.shape && sh.shape->size() == 1 && (*sh.shape)[0] >= 0) out = std::vector<int64_t>(static_cast<size_t>((*sh.shape)[0]), -1);
      c.emit(0, "dyn.broadcast_to(" + c.literal(v, dt) + ", " + c.ref(0) + ")", dt, out);
      return;
    }
    std::vector<int64_t> shape = c.knownInts(0, "shape");
    c.emit(0, "full(" + c.literal(v, dt) + ", shape=" + intList(shape) + ", " + dtypeAttr(dt) + ")", dt, shape);
  };
  t["Pad"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    const auto& s = needShape(c, x);
    std::string mode = c.stringAttr("mode", "constant");
    std::vector<int64_t> pads;
    std::string value;
    if (c.opset() < 11) {
      pads = c.intsAttr(c.opset() < 2 ? "paddings" : "pads").value_or(std::vector<int64_t>{});
      value = c.literal(c.floatAttr("value", 0), x.dtype);
    } else {
      pads = c.knownInts(1, "pads");
      value = c.hasInput(2) ? c.ref(2) : c.literal(0, x.dtype);
    }
    if (pads.size() != 2 * s.size()) c.fail("pads must have two entries per dimension");
    for (int64_t& p : pads) p = c.bounded(p, "pads");
    if (mode != "constant" && mode != "edge" && mode != "reflect") c.fail("mode '" + mode + "' is not supported");
    // Negative pads crop: pad by the positive parts, then slice the negative ones off.
    std::string width = "[";
    std::vector<int64_t> begin, end, axes;
    for (size_t d = 0; d < s.size(); ++d) {
      int64_t b = pads[d], e = pads[d + s.size()];
      width += (d ? ", [" : "[") + std::to_string(std::max<int64_t>(b, 0)) + ", " + std::to_string(std::max<int64_t>(e, 0)) + "]";
      if (b < 0 || e < 0) {
        axes.push_back(static_cast<int64_t>(d));
        begin.push_back(std::max<int64_t>(-b, 0));
        end.push_back(e < 0 ? e : std::numeric_limits<int64_t>::max());
      }
    }
    width += "]";
    std::string e = "nn.pad(" + c.ref(0) + ", " + value + ", pad_width=" + width + ", pad_mode=\"" + mode + "\")";
    if (!axes.empty()) e = "strided_slice(" + e + ", begin=" + intList(begin) + ", end=" + intList(end) + ", axes=" + intList(axes) + ")";
    c.emit(0, e, x.dtype, std::nullopt);
  };
  t["CumSum"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    const auto& s = needShape(c, x);
    auto axisVals = c.knownInts(1, "axis");
    if (axisVals.size() != 1) c.fail("axis must be one integer");
    int64_t axis = c.axis(axisVals[0], s.size());
    bool reverse = c.intAttr("reverse", 0) != 0;
    std::string e = c.ref(0), ax = std::to_string(axis);
    if (reverse) e = "reverse(" + e + ", axis=" + ax + ")";
    e = "cumsum(" + e + ", axis=" + ax + (c.intAttr("exclusive", 0) ? ", exclusive=True" : "") + ")";
    if (reverse) e = "reverse(" + e + ", axis=" + ax + ")";
    c.emit(0, e, x.dtype, x.shape);
  };
  t["Dropout"] = [](NodeContext& c) {
    // Inference: the identity, and a mask of all true. Training mode drops at random.
    const Value& x = c.input(0);
    if (c.intAttr("is_test", 1) == 0 && c.opset() < 7) c.fail("training mode (is_test=0) is not supported");
    if (c.hasInput(2)) {
      const Tensor& training = c.knownInput(2, "training_mode");
      if (training.numel() != 1) c.fail("training_mode must be one value");
      int64_t on;
      double f;
      readScalar(training.data(), training.dtype(), on, f);
      // Training drops at random, except at a ratio of 0 (then it is the identity).
      double ratio = 0.5;
      if (c.hasInput(1)) {
        const Tensor& r = c.knownInput(1, "ratio");
        int64_t ri;
        readScalar(r.data(), r.dtype(), ri, ratio);
      }
      if (on && ratio != 0) c.fail("training mode (random dropout) is not supported");
    }
    c.alias(0, x);
    if (c.hasOutput(1)) c.emit(1, "cast(ones_like(" + c.ref(0) + "), dtype=\"bool\")", DType::Bool, x.shape);
  };

  reduce(t, "ReduceSum", "sum", "", "");
  reduce(t, "ReduceMean", "mean", "", "");
  reduce(t, "ReduceMax", "max", "", "");
  reduce(t, "ReduceMin", "min", "", "");
  reduce(t, "ReduceProd", "prod", "", "");
  reduce(t, "ReduceL1", "sum", "abs", "");
  reduce(t, "ReduceL2", "sum", "square", "sqrt");
  reduce(t, "ReduceSumSquare", "sum", "square", "");
  reduce(t, "ReduceLogSum", "sum", "", "log");
  reduce(t, "ReduceLogSumExp", "sum", "exp", "log");
  argReduce(t, "ArgMax", "argmax");
  argReduce(t, "ArgMin", "argmin");
}

}  // namespace kiln::onnx_import
