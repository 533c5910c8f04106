// Import-time evaluation of nodes whose inputs are all known, through Kiln's own compiler and VM.
#include <cstring>

#include <onnx/onnx_pb.h>

#include "compiler/onnx/graph_importer.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/vm.h"

namespace kiln::onnx_import {
namespace {

constexpr int64_t kMaxFoldElements = int64_t(1) << 16;

// Static output shapes from ONNX's inference, each small; nullopt otherwise.
bool smallStaticOutputs(GraphScope& scope, const onnx::NodeProto& node) {
  for (const auto& name : node.output()) {
    if (name.empty()) continue;
    const onnx::TypeProto* t = scope.inferredType(name);
    std::string why;
    auto v = t ? valueFromType(*t, why) : std::nullopt;
    if (!v || !v->staticShape() || elementCount(*v->shape).value_or(kMaxFoldElements + 1) > kMaxFoldElements) return false;
  }
  return true;
}

}  // namespace

std::optional<std::vector<Tensor>> evaluateKnownNode(GraphScope& scope, const onnx::NodeProto& node, const Converter& convert) {
  if (node.op_type() == "Constant" || node.input_size() == 0) return std::nullopt;
  for (const auto& a : node.attribute())
    if (a.has_g() || a.graphs_size()) return std::nullopt;
  int64_t elements = 0;
  for (const auto& in : node.input()) {
    if (in.empty()) continue;
    const Value* v = scope.find(in);
    if (!v || !v->known) return std::nullopt;
    elements += v->known->numel();
  }
  if (elements > kMaxFoldElements || !smallStaticOutputs(scope, node)) return std::nullopt;

  // The node alone, its inputs as weights, in a program of its own.
  ImportState state;
  state.opset = scope.state().opset;
  state.inferred = scope.state().inferred;
  GraphScope sub(state, nullptr);
  for (const auto& in : node.input())
    if (!in.empty() && !sub.find(in)) {
      Value v = *scope.find(in);
      v.ref.clear();
      sub.define(in, std::move(v));
    }
  NodeContext ctx(sub, node);
  try {
    convert(ctx);
    std::vector<std::string> results;
    for (const auto& name : node.output())
      if (!name.empty()) results.push_back(sub.refOf(*sub.find(name)));
    if (results.empty()) return std::nullopt;
    CompileOptions options;
    std::vector<std::string> params;
    for (const Weight& w : state.weights) {
      params.push_back(weightParamText(w));
      options.params[w.param] = w.tensor;
    }
    auto exe = compile(mainFunctionText(params, sub.lines(), results), "<onnx fold>", options);
    VirtualMachine vm(exe);
    kiln::Value out = vm.invoke("main", std::span<const kiln::Value>{});
    std::vector<Tensor> tensors;
    if (results.size() == 1) {
      tensors.push_back(out.tensor());
    } else {
      for (const kiln::Value& f : out.fields()) tensors.push_back(f.tensor());
    }
    // Results live in pooled memory the VM may reuse; the known values keep their own copies.
    std::vector<Tensor> owned;
    for (const Tensor& t : tensors) {
      Tensor c = Tensor::empty(t.dtype(), t.shape());
      if (t.nbytes()) std::memcpy(c.data(), t.data(), t.nbytes());
      owned.push_back(std::move(c));
    }
    // Outputs skipped by name (empty) keep their positions.
    std::vector<Tensor> byOutput;
    size_t k = 0;
    for (const auto& name : node.output()) byOutput.push_back(name.empty() ? Tensor() : owned[k++]);
    return byOutput;
  } catch (const Error&) {
    return std::nullopt;  // imported as usual; any real problem surfaces there
  }
}

}  // namespace kiln::onnx_import
