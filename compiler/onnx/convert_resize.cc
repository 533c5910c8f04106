// ONNX Resize (opsets 10-17) and Upsample: per-axis gathers at indices and weights
// computed at import, following ONNX's reference (onnx/backend/test/case/node/resize.py).
//
// Interpolation is separable: each resized axis is one step, `take` at the taps'
// indices times their weights, summed. For every output coordinate the importer
// maps it back to the input (coordinate_transformation_mode), finds the taps (2 for
// nearest and linear, 4 for cubic, the data edge-padded as the reference pads it)
// and their coefficients; nearest picks one tap by nearest_mode, exclude_outside
// renormalizes cubic's, tf_crop_and_resize fills points outside the input with
// extrapolation_value.
#include <cmath>

#include "compiler/onnx/graph_importer.h"
#include "compiler/onnx/onnx_tensor.h"

namespace kiln::onnx_import {
namespace {

struct ResizeMode {
  std::string mode = "nearest", coord = "half_pixel", nearest = "round_prefer_floor";
  double cubicA = -0.75, extrapolation = 0;
  bool excludeOutside = false;
};

// One axis: taps[k][o] is the input index of tap k for output o, weights[k][o] its weight;
// outside[o] marks tf_crop_and_resize points beyond the input.
struct AxisPlan {
  std::vector<std::vector<int64_t>> taps;
  std::vector<std::vector<double>> weights;
  std::vector<bool> outside;
};

std::vector<double> coefficients(const ResizeMode& m, double ratio) {
  if (m.mode == "nearest") {
    if (ratio == 1.0) return {0, 1};
    if (m.nearest == "round_prefer_floor") return {ratio <= 0.5 ? 1.0 : 0.0, ratio > 0.5 ? 1.0 : 0.0};
    if (m.nearest == "round_prefer_ceil") return {ratio < 0.5 ? 1.0 : 0.0, ratio >= 0.5 ? 1.0 : 0.0};
    if (m.nearest == "floor") return {1, 0};
    return {0, 1};
  }
  if (m.mode == "linear") return {1 - ratio, ratio};
  double a = m.cubicA, r = ratio, s = 1 - ratio;
  return {((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a, ((a + 2) * r - (a + 3)) * r * r + 1,
          ((a + 2) * s - (a + 3)) * s * s + 1, ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a};
}

AxisPlan planAxis(const ResizeMode& m, int64_t in, int64_t out, double scale, double roiStart, double roiEnd) {
  int n = m.mode == "cubic" ? 4 : 2;
  AxisPlan p;
  p.taps.assign(static_cast<size_t>(n), std::vector<int64_t>(static_cast<size_t>(out)));
  p.weights.assign(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(out)));
  p.outside.assign(static_cast<size_t>(out), false);
  double outWidth = scale * static_cast<double>(in);  // the reference's (fractional) output width
  for (int64_t o = 0; o < out; ++o) {
    double x = static_cast<double>(o), xo;
    if (m.coord == "align_corners") xo = outWidth == 1 ? 0 : x * static_cast<double>(in - 1) / (outWidth - 1);
    else if (m.coord == "asymmetric") xo = x / scale;
    else if (m.coord == "tf_half_pixel_for_nn") xo = (x + 0.5) / scale;
    else if (m.coord == "pytorch_half_pixel") xo = outWidth == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
    else if (m.coord == "tf_crop_and_resize") {
      xo = outWidth == 1 ? (roiEnd - roiStart) * static_cast<double>(in - 1) / 2 : x * (roiEnd - roiStart) * static_cast<double>(in - 1) / (outWidth - 1);
      xo += roiStart * static_cast<double>(in - 1);
      p.outside[static_cast<size_t>(o)] = xo < 0 || xo > static_cast<double>(in - 1);
    } else xo = (x + 0.5) / scale - 0.5;  // half_pixel
    double base = std::floor(xo);
    double ratio = xo == base ? 1.0 : xo - base;
    // The taps: the n input positions nearest xo, leftmost first (as the reference's
    // sort by distance picks them); a whole xo counts as 1 past its left neighbour.
    int64_t left = static_cast<int64_t>(base) - (ratio == 1.0 ? 1 : 0) - (n == 4 ? 1 : 0);
    std::vector<double> w = coefficients(m, ratio);
    if (m.excludeOutside) {
      double sum = 0;
      for (int k = 0; k < n; ++k) {
        int64_t idx = left + k;
        if (idx < 0 || idx >= in) w[static_cast<size_t>(k)] = 0;
        sum += w[static_cast<size_t>(k)];
      }
      if (sum != 0)
        for (double& v : w) v /= sum;
    }
    for (int k = 0; k < n; ++k) {
      // The reference pads the data with its edge values: positions past it read the edge.
      p.taps[static_cast<size_t>(k)][static_cast<size_t>(o)] = std::clamp<int64_t>(left + k, 0, in - 1);
      p.weights[static_cast<size_t>(k)][static_cast<size_t>(o)] = w[static_cast<size_t>(k)];
    }
  }
  return p;
}

void resize(NodeContext& c, const ResizeMode& m, std::vector<double> scales, std::vector<int64_t> sizes, std::vector<double> roi) {
  const Value& x = c.input(0);
  if (!x.staticShape()) c.fail("the input's shape must be known");
  const auto& s = *x.shape;
  size_t rank = s.size();
  if (!scales.empty() && scales.size() != rank) c.fail("scales must have one entry per dimension");
  if (!sizes.empty() && sizes.size() != rank) c.fail("sizes must have one entry per dimension");
  if (scales.empty() && sizes.empty()) c.fail("either scales or sizes must be given");
  if (!roi.empty() && roi.size() != 2 * rank) c.fail("roi must have two entries per dimension");
  if (m.mode != "nearest" && m.mode != "linear" && m.mode != "cubic") c.fail("mode '" + m.mode + "' is not supported");
  std::string cur = c.ref(0);
  std::vector<int64_t> shape = s;
  for (size_t a = 0; a < rank; ++a) {
    double roiStart = roi.empty() ? 0 : roi[a], roiEnd = roi.empty() ? 1 : roi[a + rank];
    int64_t out;
    double scale;
    if (!sizes.empty()) {
      out = sizes[a];
      scale = static_cast<double>(out) / static_cast<double>(s[a]);
    } else {
      scale = scales[a];
      if (!(scale > 0)) c.fail("scales must be positive");
      double extent = m.coord == "tf_crop_and_resize" ? (roiEnd - roiStart) : 1.0;
      double size = std::floor(static_cast<double>(s[a]) * extent * scale);
      // Checked as a double: converting one past int64's range is undefined.
      if (!(size >= 0 && size <= static_cast<double>(int64_t(1) << 22)))
        c.fail("the output size is out of range (at most 2^22 per axis)");
      out = static_cast<int64_t>(size);
    }
    // The taps are tables the importer builds: an axis of up to 2^22 outputs.
    if (out < 0 || out > (int64_t(1) << 22)) c.fail("the output size " + std::to_string(out) + " is out of range (at most 2^22 per axis)");
    if (out == s[a] && scale == 1.0 && m.coord != "tf_crop_and_resize") continue;
    if (s[a] == 0) c.fail("cannot resize an empty dimension");
    AxisPlan p = planAxis(m, s[a], out, scale, roiStart, roiEnd);
    std::string ax = std::to_string(a);
    std::vector<int64_t> along(rank, 1);
    along[a] = out;
    auto indexTensor = [&](const std::vector<int64_t>& idx) {
      Tensor t = Tensor::empty(DType::Int64, {out});
      std::copy(idx.begin(), idx.end(), t.data<int64_t>());
      return c.constant(t, "resize_index");
    };
    auto weightTensor = [&](const std::vector<double>& w) {
      Tensor t = Tensor::empty(x.dtype, along);
      for (int64_t o = 0; o < out; ++o)
        writeScalar(static_cast<char*>(t.data()) + o * static_cast<int64_t>(dtypeSize(x.dtype)), x.dtype, 0, w[static_cast<size_t>(o)]);
      return c.constant(t, "resize_weight");
    };
    std::string e;
    if (m.mode == "nearest") {
      // One tap per output: the one its coefficient picks.
      std::vector<int64_t> pick(static_cast<size_t>(out));
      for (int64_t o = 0; o < out; ++o)
        pick[static_cast<size_t>(o)] = p.weights[1][static_cast<size_t>(o)] > 0.5 ? p.taps[1][static_cast<size_t>(o)] : p.taps[0][static_cast<size_t>(o)];
      e = "take(" + cur + ", " + indexTensor(pick) + ", axis=" + ax + ")";
    } else {
      for (size_t k = 0; k < p.taps.size(); ++k) {
        std::string term = "multiply(take(" + cur + ", " + indexTensor(p.taps[k]) + ", axis=" + ax + "), " + weightTensor(p.weights[k]) + ")";
        e = e.empty() ? term : "add(" + e + ", " + term + ")";
      }
    }
    if (m.coord == "tf_crop_and_resize") {
      Tensor mask = Tensor::empty(DType::Bool, along);
      for (int64_t o = 0; o < out; ++o) mask.data<bool>()[o] = p.outside[static_cast<size_t>(o)];
      e = "where(" + c.constant(mask, "resize_outside") + ", " + c.literal(m.extrapolation, x.dtype) + ", " + e + ")";
    }
    cur = c.let(e);
    shape[a] = out;
  }
  c.emit(0, "copy(" + cur + ")", x.dtype, shape);
}

std::vector<double> doubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (size_t k = 0; k < v.size(); ++k) {
    int64_t i;
    readScalar(static_cast<const char*>(t.data()) + k * dtypeSize(t.dtype()), t.dtype(), i, v[k]);
    if (!isFloat(t.dtype())) v[k] = static_cast<double>(i);
  }
  return v;
}

}  // namespace

void registerResizeConverters(std::map<std::string, Converter>& t) {
  t["Resize"] = [](NodeContext& c) {
    ResizeMode m;
    m.mode = c.stringAttr("mode", "nearest");
    std::vector<double> scales, roi;
    std::vector<int64_t> sizes;
    if (c.opset() < 11) {
      // Resize-10 resizes as Upsample does: asymmetric coordinates, nearest by floor.
      m.coord = "asymmetric";
      m.nearest = "floor";
      scales = doubles(c.knownInput(1, "scales"));
    } else {
      m.coord = c.stringAttr("coordinate_transformation_mode", "half_pixel");
      m.nearest = c.stringAttr("nearest_mode", "round_prefer_floor");
      m.cubicA = c.floatAttr("cubic_coeff_a", -0.75f);
      m.excludeOutside = c.intAttr("exclude_outside", 0) != 0;
      m.extrapolation = c.floatAttr("extrapolation_value", 0.0f);
      if (c.hasInput(1) && c.input(1).known && c.input(1).known->numel() > 0) roi = doubles(*c.input(1).known);
      else if (c.hasInput(1) && !c.input(1).known) c.fail("roi must be a constant");
      if (c.hasInput(2) && (!c.input(2).known || c.input(2).known->numel() > 0)) scales = doubles(c.knownInput(2, "scales"));
      if (c.hasInput(3)) sizes = c.knownInts(3, "sizes");
    }
    resize(c, m, scales, sizes, roi);
  };
  t["Upsample"] = [](NodeContext& c) {
    ResizeMode m;
    m.mode = c.stringAttr("mode", "nearest");
    m.coord = "asymmetric";
    m.nearest = "floor";
    std::vector<double> scales;
    if (c.opset() < 9) {
      auto f = c.floatsAttr("scales");
      if (!f) c.fail("scales are required");
      scales.assign(f->begin(), f->end());
    } else {
      scales = doubles(c.knownInput(1, "scales"));
    }
    resize(c, m, scales, {}, {});
  };
}

}  // namespace kiln::onnx_import
