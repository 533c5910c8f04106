// ONNX loss operators: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, composed
// from gather, take, where and reductions.
#include "compiler/onnx/graph_importer.h"

namespace kiln::onnx_import {
namespace {

// The loss of `logProb` (N, C, d...) at the classes `target` (N, d...), weighted and
// reduced as ONNX defines NegativeLogLikelihoodLoss.
std::string nllLoss(NodeContext& c, const std::string& logProb, const Value& x, size_t targetInput, size_t weightInput) {
  if (!x.shape || x.shape->size() < 2) c.fail("the input must have rank 2 or more (N, C, ...)");
  std::string reduction = c.stringAttr("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean") c.fail("reduction '" + reduction + "' is not supported");
  std::string target = c.ref(targetInput);
  std::string mask;
  // Targets equal to ignore_index weigh nothing; their class reads as 0 (in range).
  if (c.attr("ignore_index")) {
    std::string ignore = c.literal(static_cast<double>(c.intAttr("ignore_index", 0)), c.input(targetInput).dtype);
    mask = c.let("not_equal(" + target + ", " + ignore + ")");
    target = c.let("where(" + mask + ", " + target + ", zeros_like(" + target + "))");
  }
  std::string picked = c.let("squeeze(gather(" + logProb + ", expand_dims(" + target + ", axis=1), axis=1), axis=[1])");
  std::string weight = c.hasInput(weightInput) ? "take(" + c.ref(weightInput) + ", " + target + ", axis=0)" : "ones_like(" + picked + ")";
  if (!mask.empty()) weight = "where(" + mask + ", " + weight + ", zeros_like(" + picked + "))";
  weight = c.let(weight);
  std::string loss = c.let("negative(multiply(" + picked + ", " + weight + "))");
  if (reduction == "none") return loss;
  if (reduction == "sum") return "sum(" + loss + ")";
  return "divide(sum(" + loss + "), sum(" + weight + "))";
}

// Checked here as well as in nllLoss: the two are arguments of one call, evaluated
// in either order (a rank-1 input once reached the erase below first).
std::optional<std::vector<int64_t>> lossShape(NodeContext& c, const Value& x) {
  if (c.stringAttr("reduction", "mean") != "none") return std::vector<int64_t>{};
  if (!x.shape) return std::nullopt;
  if (x.shape->size() < 2) c.fail("the input must have rank 2 or more (N, C, ...)");
  std::vector<int64_t> s = *x.shape;
  s.erase(s.begin() + 1);
  return s;
}

}  // namespace

void registerLossConverters(std::map<std::string, Converter>& t) {
  t["NegativeLogLikelihoodLoss"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    c.emit(0, nllLoss(c, c.ref(0), x, 1, 2), x.dtype, lossShape(c, x));
  };
  t["SoftmaxCrossEntropyLoss"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    std::string logProb = c.let("nn.log_softmax(" + c.ref(0) + ", axis=1)");
    c.emit(0, nllLoss(c, logProb, x, 1, 2), x.dtype, lossShape(c, x));
    c.emit(1, "copy(" + logProb + ")", x.dtype, x.shape);
  };
}

}  // namespace kiln::onnx_import
