// Loops as tail-recursive local functions in Relay text (see recurrence.h).
#include "compiler/onnx/recurrence.h"

#include <onnx/onnx_pb.h>

#include "compiler/onnx/onnx_tensor.h"

namespace kiln::onnx_import {

std::string tupleText(const std::vector<std::string>& v) {
  if (v.size() == 1) return v[0];
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s + ")";
}

std::string blockText(const std::vector<std::string>& lines, const std::string& result) {
  std::string s = "{\n";
  for (const auto& l : lines) s += "    " + l + "\n";
  return s + "    " + result + "\n  }";
}

SubgraphBody importSubgraph(NodeContext& c, const onnx::GraphProto& g, const std::vector<Value>& inputs) {
  if (static_cast<size_t>(g.input_size()) != inputs.size())
    c.fail("the subgraph has " + std::to_string(g.input_size()) + " inputs, expected " + std::to_string(inputs.size()));
  GraphScope scope(c.scope().state(), &c.scope());
  for (int i = 0; i < g.input_size(); ++i) scope.define(g.input(i).name(), inputs[static_cast<size_t>(i)]);
  for (const auto& init : g.initializer()) {
    Value v;
    v.known = tensorFromProto(init, c.scope().state().baseDir);
    v.dtype = v.known->dtype();
    v.shape = std::vector<int64_t>(v.known->shape().begin(), v.known->shape().end());
    scope.define(init.name(), std::move(v));
  }
  scope.importNodes(g);
  SubgraphBody b;
  for (const auto& o : g.output()) {
    const Value* v = scope.find(o.name());
    if (!v) c.fail("subgraph output '" + o.name() + "' is not computed");
    b.outputs.push_back(scope.refOf(*v));
    b.values.push_back(*v);
  }
  b.lines = scope.lines();
  return b;
}

Recurrence newRecurrence(ImportState& st) {
  Recurrence r;
  r.fn = "%" + st.freshName("loop");
  r.i = "%" + st.freshName("i");
  r.cond = "%" + st.freshName("cond");
  return r;
}

Value scanAccumulator(ImportState& st, DType dtype, const std::vector<int64_t>& elem) {
  Value v;
  v.ref = "%" + st.freshName("scan");
  v.dtype = dtype;
  std::vector<int64_t> shape = elem;
  shape.insert(shape.begin(), -1);
  v.shape = shape;
  return v;
}

std::string emitRecurrence(NodeContext& c, const Recurrence& r) {
  // Values whose types are not wholly known (sequences of unknown element rank) go
  // unannotated; Kiln's inference finds them from the loop's uses.
  std::vector<std::string> params{r.i + ": int64", r.cond + ": bool"}, resultTypes, done;
  bool allTyped = true;
  for (const auto* group : {&r.carried, &r.scans})
    for (const Value& v : *group) {
      std::string t = typeText(v);
      params.push_back(t.empty() ? v.ref : v.ref + ": " + t);
      resultTypes.push_back(t);
      allTyped &= !t.empty();
      done.push_back(v.ref);
    }
  std::vector<std::string> next{"add(" + r.i + ", 1i64)", r.nextCond.empty() ? r.cond : r.nextCond};
  next.insert(next.end(), r.nextCarried.begin(), r.nextCarried.end());
  for (size_t k = 0; k < r.scans.size(); ++k)
    next.push_back("concatenate((" + r.scans[k].ref + ", expand_dims(" + r.scanElements[k] + ", axis=0)), axis=0)");
  auto args = [](const std::vector<std::string>& v) {
    std::string a;
    for (size_t k = 0; k < v.size(); ++k) a += (k ? ", " : "") + v[k];
    return a;
  };
  std::string test = r.count.empty() ? r.cond : "logical_and(less(" + r.i + ", " + r.count + "), " + r.cond + ")";
  c.scope().line("let " + r.fn + " = fn (" + args(params) + ")" + (allTyped ? " -> " + tupleText(resultTypes) : "") + " {\n  if (" + test + ") " +
                 blockText(r.bodyLines, r.fn + "(" + args(next) + ")") + " else {\n    " + tupleText(done) + "\n  }\n  };");
  std::vector<std::string> start{"0i64", r.condInit};
  start.insert(start.end(), r.carriedInit.begin(), r.carriedInit.end());
  for (const Value& s : r.scans) {
    std::vector<int64_t> empty = *s.shape;
    empty[0] = 0;
    start.push_back("zeros(shape=" + intList(empty) + ", dtype=\"" + std::string(dtypeName(s.dtype)) + "\")");
  }
  return c.let(r.fn + "(" + args(start) + ")");
}

}  // namespace kiln::onnx_import
