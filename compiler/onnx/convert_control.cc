// ONNX control flow: If becomes `if`, Loop and Scan become tail-recursive local functions.
//
// A subgraph is imported in a scope of its own whose lookups fall back to the
// enclosing graph, so the values it uses from outside are captured as a Relay
// closure captures them. A Loop is
//
//   let %loop = fn (%i: int64, %cond: bool, carried..., scans...) -> (carried..., scans...) {
//     if (%i < M && %cond) { body...; %loop(%i + 1, cond_out, carried_out..., scans + [scan_out]) }
//     else { (carried..., scans...) }
//   };
//
// with each scan output accumulated as a growing tensor (`concatenate` along a new
// axis 0, starting from an empty one), so the loop's results are tensors as ONNX
// defines them. Scan runs the same loop over the scan inputs' sequence axis.
#include <onnx/onnx_pb.h>

#include "compiler/onnx/graph_importer.h"
#include "compiler/onnx/recurrence.h"

namespace kiln::onnx_import {
namespace {

const onnx::GraphProto& graphAttr(NodeContext& c, const char* name) {
  const onnx::AttributeProto* a = c.attr(name);
  if (!a || !a->has_g()) c.fail(std::string("the ") + name + " subgraph is missing");
  return a->g();
}

// The type a subgraph value has, from ONNX's inference or the graph's declaration.
std::optional<Value> declaredType(NodeContext& c, const onnx::ValueInfoProto& info) {
  const onnx::TypeProto* t = c.scope().inferredType(info.name());
  if (!t && info.has_type()) t = &info.type();
  if (!t) return std::nullopt;
  std::string why;
  auto v = valueFromType(*t, why);
  if (!v) c.fail("subgraph value '" + info.name() + "' " + why);
  return v;
}

// The shape two types share: equal static dims stay, others become `?`.
std::vector<int64_t> widen(NodeContext& c, const Value& a, const std::optional<Value>& b) {
  if (!a.shape) c.fail("the rank of '" + a.name + "' is unknown");
  std::vector<int64_t> s = *a.shape;
  if (b && b->shape && b->shape->size() == s.size())
    for (size_t d = 0; d < s.size(); ++d)
      if ((*b->shape)[d] != s[d]) s[d] = -1;
  return s;
}

// A value as a subgraph input: a Relay variable of that type.
Value bound(const std::string& ref, DType dtype, std::vector<int64_t> shape) {
  Value v;
  v.ref = ref;
  v.dtype = dtype;
  v.shape = std::move(shape);
  return v;
}

std::string scalar(NodeContext& c, const std::string& ref, const Value& v) {
  if (!v.shape) c.fail("the rank of '" + v.name + "' is unknown");
  if (v.shape->empty()) return ref;
  return "reshape(" + ref + ", newshape=[])";
}

// The shared loop: `count` (an int64 scalar expression, or "" for none) and `cond`
// bound the iterations; carried values start at `initial`; each iteration's body
// gets (i, cond, carried...) through `makeBodyInputs` and yields (cond_out, carried...,
// scan elements...). Returns the let variable holding the loop's result.
struct LoopSpec {
  std::string count, cond;
  std::vector<Value> initial;           // carried values (ref, type)
  const onnx::GraphProto* body;
  size_t numScans;
  // The body's inputs for iteration variable `i`, cond `cond` and carried params.
  std::function<std::vector<Value>(const std::string& i, const std::string& cond, const std::vector<Value>& carried)> bodyInputs;
  // Index of the body output holding the next cond; -1 for none.
  int condOutput;
  // Where the carried outputs start in the body's outputs.
  size_t carriedOutputs;
};

// A ragged sequence, or an optional holding one.
bool isRagged(const Value& v) {
  return v.kind == Value::Kind::Sequence ? v.ragged : v.kind == Value::Kind::Optional && v.element && isRagged(*v.element);
}

// A body output as the carried value it becomes: an optional carried on (opset 16
// allows an optional in and its content out) holds the output.
Value asCarried(const Value& carried, const Value& out) {
  if (carried.kind != Value::Kind::Optional || out.kind == Value::Kind::Optional) return out;
  Value v;
  v.kind = Value::Kind::Optional;
  v.element = std::make_shared<const Value>(out);
  return v;
}

std::pair<std::string, std::vector<Value>> emitLoop(NodeContext& c, const LoopSpec& spec) {
  ImportState& st = c.scope().state();
  Recurrence r = newRecurrence(st);
  const onnx::GraphProto& g = *spec.body;
  // Carried values' types: the initial value widened by the body's output type.
  for (size_t k = 0; k < spec.initial.size(); ++k) {
    const Value& init = spec.initial[k];
    auto outType = declaredType(c, g.output(static_cast<int>(spec.carriedOutputs + k)));
    if (init.isTensor()) {
      r.carried.push_back(bound("%" + st.freshName("carried"), init.dtype, widen(c, init, outType)));
    } else {
      Value v = init;  // a sequence or optional: its type as known, the rest inferred
      v.ref = "%" + st.freshName("carried");
      r.carried.push_back(v);
    }
    r.carriedInit.push_back(c.scope().refOf(init));
  }
  size_t expected = spec.carriedOutputs + r.carried.size() + spec.numScans;
  // A carried sequence the body makes ragged is carried ragged from the start, and
  // the body imported again over it (each round makes at least one more ragged).
  SubgraphBody body;
  for (bool again = true; again;) {
    body = importSubgraph(c, g, spec.bodyInputs(r.i, r.cond, r.carried));
    if (body.outputs.size() != expected)
      c.fail("the body has " + std::to_string(body.outputs.size()) + " outputs, expected " + std::to_string(expected));
    again = false;
    for (size_t k = 0; k < r.carried.size(); ++k) {
      Value out = asCarried(r.carried[k], body.values[spec.carriedOutputs + k]);
      if (!raggedNeeded(r.carried[k], out) || isRagged(r.carried[k])) continue;
      std::string ref = r.carried[k].ref;
      r.carried[k] = raggedForm(r.carried[k]);
      r.carried[k].ref = ref;
      r.carriedInit[k] = raggedText(st, spec.initial[k], r.carriedInit[k]);
      again = true;
    }
  }
  for (size_t k = 0; k < spec.numScans; ++k) {
    size_t at = spec.carriedOutputs + spec.initial.size() + k;
    const auto& info = g.output(static_cast<int>(at));
    // The element's type: ONNX's, else what the body computed.
    auto elem = declaredType(c, info);
    if (!elem || !elem->staticShape()) elem = body.values[at];
    if (!elem || !elem->staticShape()) c.fail("scan output '" + info.name() + "' needs a static shape");
    r.scans.push_back(scanAccumulator(st, elem->dtype, *elem->shape));
    r.scanElements.push_back(body.outputs[at]);
  }
  r.count = spec.count;
  if (!spec.cond.empty()) r.condInit = spec.cond;
  r.bodyLines = body.lines;
  if (spec.condOutput >= 0)
    r.nextCond = scalar(c, body.outputs[static_cast<size_t>(spec.condOutput)], body.values[static_cast<size_t>(spec.condOutput)]);
  for (size_t k = 0; k < r.carried.size(); ++k) {
    std::string next = body.outputs[spec.carriedOutputs + k];
    const Value& computed = body.values[spec.carriedOutputs + k];
    Value out = asCarried(r.carried[k], computed);
    if (out.kind != computed.kind) next = "Some(" + next + ")";
    r.nextCarried.push_back(raggedNeeded(r.carried[k], out) ? raggedText(st, out, next) : next);
  }
  std::string result = emitRecurrence(c, r);
  std::vector<Value> outs = r.carried;
  outs.insert(outs.end(), r.scans.begin(), r.scans.end());
  return {result, outs};
}

// `unwrap[k]`: output k is carried as an optional but is the optional's content
// (see asCarried); a loop that never ran leaves it empty, a run-time error.
void emitOutputs(NodeContext& c, const std::string& result, std::vector<Value> outs, const std::vector<bool>& unwrap = {}) {
  for (size_t k = 0; k < outs.size(); ++k) {
    std::string e = outs.size() == 1 ? result : result + "." + std::to_string(k);
    bool unwrapped = k < unwrap.size() && unwrap[k] && outs[k].element;
    if (unwrapped) {
      std::string v = "%" + c.scope().state().freshName("v");
      e = c.let("match? (" + e + ") { Some(" + v + ") => " + v + " }");
      outs[k] = *outs[k].element;
    }
    if (!outs[k].isTensor()) c.emitValue(k, e, outs[k]);
    else c.emit(k, outs.size() == 1 && !unwrapped ? "copy(" + result + ")" : e, outs[k].dtype, outs[k].shape);
  }
}

}  // namespace

namespace {

// Scan-9's loop over `scans` (their refs set) carrying `states`: the outputs'
// expressions (final states, then scan outputs reversed and moved as their
// directions and axes say) and types.
std::vector<std::pair<std::string, Value>> scanLoop(NodeContext& c, const onnx::GraphProto& g, const std::vector<Value>& states,
                                                    const std::vector<Value>& scans, const std::vector<int64_t>& inAxes,
                                                    const std::vector<int64_t>& inDirs, const std::vector<int64_t>& outAxes,
                                                    const std::vector<int64_t>& outDirs) {
  size_t numStates = states.size(), numScanOutputs = outAxes.size();
  if (inAxes.size() != scans.size() || inDirs.size() != scans.size() || outDirs.size() != numScanOutputs ||
      static_cast<size_t>(g.output_size()) != numStates + numScanOutputs)
    c.fail("the scan axes and directions must have one entry per scan input and output");
  LoopSpec spec;
  spec.body = &g;
  spec.initial = states;
  std::vector<int64_t> axes;
  for (size_t k = 0; k < scans.size(); ++k) {
    if (!scans[k].shape) c.fail("the rank of scan input '" + scans[k].name + "' is unknown");
    axes.push_back(c.axis(inAxes[k], scans[k].shape->size(), "scan_input_axes"));
  }
  // The sequence length: the first scan input's extent along its axis.
  int64_t len = (*scans[0].shape)[static_cast<size_t>(axes[0])];
  spec.count = len >= 0 ? std::to_string(len) + "i64"
                        : c.let("take(shape_of(" + scans[0].ref + ", dtype=\"int64\"), " + std::to_string(axes[0]) + ")");
  spec.numScans = numScanOutputs;
  spec.condOutput = -1;
  spec.carriedOutputs = 0;
  spec.bodyInputs = [&](const std::string& i, const std::string&, const std::vector<Value>& carried) {
    std::vector<Value> in = carried;
    for (size_t k = 0; k < scans.size(); ++k) {
      size_t ax = static_cast<size_t>(axes[k]);
      std::string idx = inDirs[k] ? "subtract(subtract(" + spec.count + ", " + i + "), 1i64)" : i;
      std::vector<int64_t> elem = *scans[k].shape;
      elem.erase(elem.begin() + static_cast<std::ptrdiff_t>(ax));
      in.push_back(bound("take(" + scans[k].ref + ", " + idx + ", axis=" + std::to_string(ax) + ")", scans[k].dtype, elem));
    }
    return in;
  };
  auto [result, outs] = emitLoop(c, spec);
  std::vector<std::pair<std::string, Value>> exprs;
  for (size_t k = 0; k < outs.size(); ++k) {
    std::string e = outs.size() == 1 ? "copy(" + result + ")" : result + "." + std::to_string(k);
    if (k >= numStates) {
      size_t s = k - numStates;
      if (outDirs[s]) e = "reverse(" + e + ", axis=0)";
      int64_t rank = static_cast<int64_t>(outs[k].shape->size());
      int64_t ax = c.axis(outAxes[s], static_cast<size_t>(rank), "scan_output_axes");
      if (ax != 0) {
        std::vector<int64_t> perm;
        for (int64_t d = 1; d < rank; ++d) perm.push_back(d);
        perm.insert(perm.begin() + ax, 0);
        e = "transpose(" + e + ", axes=" + intList(perm) + ")";
        std::vector<int64_t> shape;
        for (int64_t p : perm) shape.push_back((*outs[k].shape)[static_cast<size_t>(p)]);
        outs[k].shape = shape;
      }
    }
    exprs.emplace_back(e, outs[k]);
  }
  return exprs;
}

}  // namespace

void registerControlFlowConverters(std::map<std::string, Converter>& t) {
  t["If"] = [](NodeContext& c) {
    const onnx::GraphProto &thenG = graphAttr(c, "then_branch"), &elseG = graphAttr(c, "else_branch");
    SubgraphBody a = importSubgraph(c, thenG, {}), b = importSubgraph(c, elseG, {});
    if (a.outputs.size() != b.outputs.size() || a.outputs.size() != c.numOutputs())
      c.fail("the branches must have one output per output of the node");
    // A sequence of one rank in one branch and another in the other: both ragged.
    for (size_t k = 0; k < a.values.size(); ++k) {
      if (!raggedNeeded(a.values[k], b.values[k])) continue;
      ImportState& st = c.scope().state();
      a.outputs[k] = raggedText(st, a.values[k], a.outputs[k]);
      b.outputs[k] = raggedText(st, b.values[k], b.outputs[k]);
      a.values[k] = raggedForm(a.values[k]);
    }
    std::string cond = scalar(c, c.ref(0), c.input(0));
    std::string text = "if (" + cond + ") " + blockText(a.lines, tupleText(a.outputs)) + " else " + blockText(b.lines, tupleText(b.outputs));
    std::string result = c.let(text);
    for (size_t k = 0; k < a.values.size(); ++k) {
      Value w = a.values[k];
      std::string e = a.values.size() == 1 ? result : result + "." + std::to_string(k);
      if (!w.isTensor()) {
        c.emitValue(k, e, w);
        continue;
      }
      w.shape = widen(c, a.values[k], b.values[k]);
      c.emit(k, a.values.size() == 1 ? "copy(" + result + ")" : e, w.dtype, w.shape);
    }
  };
  t["Loop"] = [](NodeContext& c) {
    LoopSpec spec;
    spec.body = &graphAttr(c, "body");
    if (c.hasInput(0)) spec.count = scalar(c, c.ref(0), c.input(0));
    if (c.hasInput(1)) spec.cond = scalar(c, c.ref(1), c.input(1));
    // Each initial value is named (a known one made a weight) before it is copied,
    // so the copy and every other use share one name.
    for (size_t k = 2; k < c.numInputs(); ++k) {
      if (c.hasInput(k)) c.ref(k);
      spec.initial.push_back(c.input(k));
    }
    size_t bodyOutputs = static_cast<size_t>(spec.body->output_size());
    if (bodyOutputs < 1 + spec.initial.size()) c.fail("the body has too few outputs");
    if (static_cast<size_t>(spec.body->input_size()) != 2 + spec.initial.size())
      c.fail("the body must take the iteration number, the condition and each carried value");
    spec.numScans = bodyOutputs - 1 - spec.initial.size();
    spec.condOutput = 0;
    spec.carriedOutputs = 1;
    const onnx::GraphProto& g = *spec.body;
    spec.bodyInputs = [&](const std::string& i, const std::string& cond, const std::vector<Value>& carried) {
      std::vector<Value> in;
      // The body may declare the iteration number and cond as [1] tensors, not scalars.
      auto declared = [&](int k, DType dt) {
        auto v = declaredType(c, g.input(k));
        return v && v->shape && v->shape->size() == 1 ? std::vector<int64_t>{1} : std::vector<int64_t>{};
      };
      std::vector<int64_t> is = declared(0, DType::Int64), cs = declared(1, DType::Bool);
      in.push_back(bound(is.empty() ? i : "reshape(" + i + ", newshape=[1])", DType::Int64, is));
      in.push_back(bound(cs.empty() ? cond : "reshape(" + cond + ", newshape=[1])", DType::Bool, cs));
      in.insert(in.end(), carried.begin(), carried.end());
      return in;
    };
    auto [result, outs] = emitLoop(c, spec);
    std::vector<bool> unwrap;
    for (size_t k = 0; k < spec.initial.size(); ++k)
      unwrap.push_back(outs[k].kind == Value::Kind::Optional && !g.output(static_cast<int>(1 + k)).type().has_optional_type() &&
                       g.output(static_cast<int>(1 + k)).type().value_case() != onnx::TypeProto::VALUE_NOT_SET);
    emitOutputs(c, result, outs, unwrap);
  };
  t["Scan"] = [](NodeContext& c) {
    const onnx::GraphProto& g = graphAttr(c, "body");
    int64_t numScanInputs = c.intAttr("num_scan_inputs", -1);
    if (c.opset() < 9) {
      // Scan-8: a leading batch axis on every state and scan input (scanned along
      // axis 1), and optional sequence_lens first; each batch entry is one Scan-9.
      size_t first = 1;
      int64_t numStates = static_cast<int64_t>(c.numInputs()) - 1 - numScanInputs;
      if (numScanInputs < 1 || numStates < 0) c.fail("num_scan_inputs is out of range");
      const Value& x0 = c.input(first + static_cast<size_t>(numStates));
      if (!x0.staticShape() || x0.shape->size() < 2) c.fail("the scan inputs' shapes must be known");
      int64_t batch = (*x0.shape)[0], steps = (*x0.shape)[1];
      if (batch > 64) c.fail("Scan-8 with a batch of more than 64 is not supported (each entry is a loop of its own)");
      if (c.hasInput(0)) {
        std::vector<int64_t> lens = c.knownInts(0, "sequence_lens");
        for (int64_t l : lens)
          if (l != steps) c.fail("sequence_lens shorter than the sequence are not supported");
      }
      auto dirs = c.intsAttr("directions").value_or(std::vector<int64_t>(static_cast<size_t>(numScanInputs), 0));
      if (dirs.size() != static_cast<size_t>(numScanInputs)) c.fail("directions must have one entry per scan input");
      if (g.output_size() < numStates) c.fail("the body has fewer outputs than there are states");
      size_t numScanOutputs = static_cast<size_t>(g.output_size() - numStates);
      std::vector<std::vector<std::pair<std::string, Value>>> perBatch;
      for (int64_t b = 0; b < batch; ++b) {
        auto slice = [&](size_t input) {
          Value v = c.input(input);
          if (!v.shape || v.shape->empty()) c.fail("every Scan-8 input needs a batch axis");
          std::string e = c.let("take(" + c.ref(input) + ", " + std::to_string(b) + "i64, axis=0)");
          std::vector<int64_t> shape(v.shape->begin() + 1, v.shape->end());
          return bound(e, v.dtype, shape);
        };
        std::vector<Value> states, scans;
        for (int64_t k = 0; k < numStates; ++k) states.push_back(slice(first + static_cast<size_t>(k)));
        for (int64_t k = 0; k < numScanInputs; ++k) scans.push_back(slice(first + static_cast<size_t>(numStates + k)));
        perBatch.push_back(scanLoop(c, g, states, scans, std::vector<int64_t>(static_cast<size_t>(numScanInputs), 0), dirs,
                                    std::vector<int64_t>(numScanOutputs, 0), std::vector<int64_t>(numScanOutputs, 0)));
      }
      for (size_t k = 0; k < perBatch[0].size(); ++k) {
        std::string e;
        for (const auto& outs : perBatch) {
          std::string part = "expand_dims(" + outs[k].first + ", axis=0)";
          e = e.empty() ? part : "concatenate((" + e + ", " + part + "), axis=0)";
        }
        Value v = perBatch[0][k].second;
        std::vector<int64_t> shape = *v.shape;
        shape.insert(shape.begin(), batch);
        c.emit(k, e, v.dtype, shape);
      }
      return;
    }
    int64_t numStates = static_cast<int64_t>(c.numInputs()) - numScanInputs;
    if (numScanInputs < 1 || numStates < 0) c.fail("num_scan_inputs is out of range");
    auto inAxes = c.intsAttr("scan_input_axes").value_or(std::vector<int64_t>(static_cast<size_t>(numScanInputs), 0));
    auto inDirs = c.intsAttr("scan_input_directions").value_or(std::vector<int64_t>(static_cast<size_t>(numScanInputs), 0));
    if (g.output_size() < numStates) c.fail("the body has fewer outputs than there are states");
    size_t numScanOutputs = static_cast<size_t>(g.output_size()) - static_cast<size_t>(numStates);
    auto outAxes = c.intsAttr("scan_output_axes").value_or(std::vector<int64_t>(numScanOutputs, 0));
    auto outDirs = c.intsAttr("scan_output_directions").value_or(std::vector<int64_t>(numScanOutputs, 0));
    std::vector<Value> states, scans;
    for (int64_t k = 0; k < numStates; ++k) {
      c.ref(static_cast<size_t>(k));  // named once, shared by the copy (see Loop)
      states.push_back(c.input(static_cast<size_t>(k)));
    }
    for (int64_t k = 0; k < numScanInputs; ++k) {
      Value x = c.input(static_cast<size_t>(numStates + k));
      x.ref = c.ref(static_cast<size_t>(numStates + k));
      scans.push_back(x);
    }
    auto outs = scanLoop(c, g, states, scans, inAxes, inDirs, outAxes, outDirs);
    for (size_t k = 0; k < outs.size(); ++k) c.emit(k, outs[k].first, outs[k].second.dtype, outs[k].second.shape);
  };
}

}  // namespace kiln::onnx_import
