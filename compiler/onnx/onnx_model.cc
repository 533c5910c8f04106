// The ONNX entry points: parse, check and infer with ONNX's library, then import the graph.
#include <algorithm>
#include <cctype>
#include <climits>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string_view>
#include <unordered_set>

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>
#include <onnx/version_converter/convert.h>

#include "base/read_file.h"
#include "compiler/onnx/graph_importer.h"
#include "compiler/onnx/onnx_tensor.h"
#include "kiln/error.h"
#include "kiln/onnx.h"

namespace kiln {
namespace {

using namespace onnx_import;

constexpr int64_t kMinOpset = 7, kMaxOpset = 17;
// Initializers up to this size stay in the model for ONNX's shape inference to read
// (shapes, axes, scales); larger ones are weights.
constexpr size_t kKeepInlineBytes = 4096;

void collectInferred(const onnx::GraphProto& g, ImportState& state) {
  auto add = [&](const onnx::ValueInfoProto& v) {
    if (v.has_type()) state.inferred[v.name()] = &v.type();
  };
  for (const auto& v : g.value_info()) add(v);
  for (const auto& v : g.output()) add(v);
  for (const auto& n : g.node())
    for (const auto& a : n.attribute()) {
      if (a.has_g()) collectInferred(a.g(), state);
      for (const auto& sub : a.graphs()) collectInferred(sub, state);
    }
}

// ONNX 1.12's shape inference trusts some attributes the checker lets through
// (it divides by a stride of 0, for one); those are refused before it runs.
void guardInference(const onnx::GraphProto& g, const std::function<Error(const std::string&)>& fail) {
  static const std::set<std::string> strided = {"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MaxPool", "AveragePool",
                                                "LpPool", "MaxUnpool", "MaxRoiPool", "GlobalLpPool", "Col2Im"};
  static const std::set<std::string> blocked = {"SpaceToDepth", "DepthToSpace"};
  for (const auto& n : g.node()) {
    for (const auto& a : n.attribute()) {
      if (a.has_g()) guardInference(a.g(), fail);
      for (const auto& sub : a.graphs()) guardInference(sub, fail);
      auto where = [&] { return "node '" + (n.name().empty() ? (n.output_size() ? n.output(0) : "?") : n.name()) + "' (" + n.op_type() + "): "; };
      bool positiveInts = (strided.count(n.op_type()) && (a.name() == "strides" || a.name() == "dilations" || a.name() == "kernel_shape")) ||
                          (blocked.count(n.op_type()) && a.name() == "blocksize") || a.name() == "group";
      if (!positiveInts) continue;
      if (a.type() == onnx::AttributeProto::INT && a.i() <= 0) throw fail(where() + "attribute " + a.name() + " must be positive");
      for (int64_t v : a.ints())
        if (v <= 0) throw fail(where() + "attribute " + a.name() + " must be positive");
      if (a.type() == onnx::AttributeProto::INTS && a.ints_size() > 8) throw fail(where() + "attribute " + a.name() + " has too many entries");
    }
  }
}

// ONNX 1.12's Einsum inference counts labels in an array indexed from 'a', so an
// upper-case label writes before it and corrupts the heap (`i,U`: a crash the
// ONNX fuzzer found). Labels are only names once the output is explicit, so each
// equation with upper-case labels is rewritten, before inference and before the
// importer reads it: its implicit output made explicit (the labels used once, in
// ASCII order, as the importer orders them), then each upper-case label renamed
// to a lower-case one the equation does not use.
void lowerEinsumLabels(onnx::GraphProto& g, const std::function<Error(const std::string&)>& fail) {
  for (auto& n : *g.mutable_node()) {
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) lowerEinsumLabels(*a.mutable_g(), fail);
      for (auto& sub : *a.mutable_graphs()) lowerEinsumLabels(sub, fail);
    }
    if (n.op_type() != "Einsum") continue;
    for (auto& a : *n.mutable_attribute()) {
      if (a.name() != "equation") continue;
      std::string eq;
      for (char ch : a.s())
        if (ch != ' ') eq += ch;
      if (std::none_of(eq.begin(), eq.end(), [](char ch) { return ch >= 'A' && ch <= 'Z'; })) continue;
      std::string where = "node '" + nodeName(n) + "' (Einsum): ";
      if (eq.find("...") != std::string::npos) throw fail(where + "ellipses in the equation are not supported");
      if (eq.find("->") == std::string::npos) {
        std::string out;
        for (char l = 'A'; l <= 'z'; ++l)
          if (std::isalpha(static_cast<unsigned char>(l)) && std::count(eq.begin(), eq.end(), l) == 1) out += l;
        eq += "->" + out;
      }
      std::string unused;
      for (char l = 'a'; l <= 'z'; ++l)
        if (eq.find(l) == std::string::npos) unused += l;
      std::map<char, char> rename;
      for (char& ch : eq) {
        if (ch < 'A' || ch > 'Z') continue;
        if (!rename.count(ch)) {
          if (rename.size() == unused.size()) throw fail(where + "the equation uses more than 26 distinct labels");
          char to = unused[rename.size()];
          rename[ch] = to;
        }
        ch = rename[ch];
      }
      a.set_s(eq);
    }
  }
}

// Every operator the model uses is one Kiln imports, in a domain it knows,
// checked before ONNX's shape inference runs: the inference functions of
// operators nothing here converts are the ones least exercised, and ONNX 1.12's
// read past their inputs' ranks (MaxUnpool's reads dimension 1 of its indices
// whatever their rank: a crash the ONNX fuzzer found). The message is the one the
// importer gives for such a node.
void guardSupported(const onnx::GraphProto& g, int64_t opset) {
  for (const auto& n : g.node()) {
    for (const auto& a : n.attribute()) {
      if (a.has_g()) guardSupported(a.g(), opset);
      for (const auto& sub : a.graphs()) guardSupported(sub, opset);
    }
    std::string where = describeNode(n, opset) + ": ";
    if (!n.domain().empty() && n.domain() != "ai.onnx") throw Error(where + "the operator domain '" + n.domain() + "' is not supported");
    if (!findConverter(n.op_type())) throw Error(where + "the operator is not supported");
  }
}

// Operators whose ONNX 1.12 inference trusts its inputs' ranks and reads
// dimensions past them, taking the process down: LayerNormalization reads
// dimension -1 when its axis is below -rank (axis -2 on a vector, any axis on a
// scalar) and it has its Mean or InvStdDev output; Conv and ConvTranspose take
// the kernel's size from the weight's dimensions 2.. and index it by the input's
// spatial dimensions (ConvTranspose of a 4-d input by a 2-d weight: a crash the
// ONNX fuzzer found, as were the others). Their inputs' ranks are known only
// after inference, so inference first runs on a copy in which each such node is
// an Identity of its first input per output (their outputs have its rank), and
// the nodes' ranks and axes are then checked.
bool trustsRanks(const onnx::NodeProto& n) {
  const std::string& op = n.op_type();
  return op == "LayerNormalization" || op == "Conv" || op == "ConvTranspose";
}

// The ranks of every value `probe` declares or inference found, in every graph
// (values are named once in a model).
void collectRanks(const onnx::GraphProto& g, std::map<std::string, int64_t>& ranks) {
  auto note = [&](const onnx::ValueInfoProto& v) {
    if (v.has_type() && v.type().has_tensor_type() && v.type().tensor_type().has_shape())
      ranks[v.name()] = v.type().tensor_type().shape().dim_size();
  };
  for (const auto& v : g.input()) note(v);
  for (const auto& v : g.value_info()) note(v);
  for (const auto& v : g.output()) note(v);
  for (const auto& t : g.initializer()) ranks[t.name()] = t.dims_size();
  for (const auto& n : g.node())
    for (const auto& a : n.attribute()) {
      if (a.has_g()) collectRanks(a.g(), ranks);
      for (const auto& sub : a.graphs()) collectRanks(sub, ranks);
    }
}

// The copy's nodes that trust ranks become Identity nodes (see trustsRanks).
void neutralizeRankTrust(onnx::GraphProto& g) {
  onnx::GraphProto out;
  for (auto& n : *g.mutable_node()) {
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) neutralizeRankTrust(*a.mutable_g());
      for (auto& sub : *a.mutable_graphs()) neutralizeRankTrust(sub);
    }
    if (!trustsRanks(n)) {
      *out.add_node() = n;
      continue;
    }
    if (n.input_size() == 0 || n.input(0).empty()) continue;
    for (const auto& o : n.output()) {
      if (o.empty()) continue;
      onnx::NodeProto* id = out.add_node();
      id->set_op_type("Identity");
      id->add_input(n.input(0));
      id->add_output(o);
    }
  }
  g.mutable_node()->Swap(out.mutable_node());
}

void checkRankTrust(const onnx::GraphProto& g, const std::map<std::string, int64_t>& ranks,
                    const std::function<Error(const std::string&)>& fail) {
  auto rankOf = [&](const onnx::NodeProto& n, int i) -> int64_t {
    if (n.input_size() <= i) return -1;
    auto it = ranks.find(n.input(i));
    return it == ranks.end() ? -1 : it->second;
  };
  for (const auto& n : g.node()) {
    for (const auto& a : n.attribute()) {
      if (a.has_g()) checkRankTrust(a.g(), ranks, fail);
      for (const auto& sub : a.graphs()) checkRankTrust(sub, ranks, fail);
    }
    if (!trustsRanks(n)) continue;
    std::string where = "node '" + nodeName(n) + "' (" + n.op_type() + "): ";
    int64_t x = rankOf(n, 0);
    if (n.op_type() == "LayerNormalization") {
      int64_t axis = -1;
      for (const auto& a : n.attribute())
        if (a.name() == "axis") axis = a.i();
      if (x >= 0 && (axis < -x || axis >= x))
        throw fail(where + "axis " + std::to_string(axis) + " is out of range for an input of rank " + std::to_string(x));
      continue;
    }
    int64_t w = rankOf(n, 1);
    if (x >= 0 && x < 3) throw fail(where + "the input has rank " + std::to_string(x) + "; a convolution's has 3 or more (N, C, spatial...)");
    if (x >= 0 && w >= 0 && w != x)
      throw fail(where + "the weight has rank " + std::to_string(w) + ", the input rank " + std::to_string(x) + "; they must be equal");
  }
}

void guardRankTrust(const onnx::ModelProto& model, const std::function<Error(const std::string&)>& fail) {
  std::function<bool(const onnx::GraphProto&)> any = [&](const onnx::GraphProto& g) {
    for (const auto& n : g.node()) {
      if (trustsRanks(n)) return true;
      for (const auto& a : n.attribute())
        if ((a.has_g() && any(a.g())) || std::any_of(a.graphs().begin(), a.graphs().end(), any)) return true;
    }
    return false;
  };
  if (!any(model.graph())) return;
  onnx::ModelProto probe = model;
  neutralizeRankTrust(*probe.mutable_graph());
  try {
    onnx::shape_inference::InferShapes(probe);
  } catch (const std::exception&) {
    // The model's own inference reports it; the declared shapes, and what was
    // inferred before the failure, are still checked.
  }
  std::map<std::string, int64_t> ranks;
  collectRanks(probe.graph(), ranks);
  checkRankTrust(model.graph(), ranks, fail);
}

// Every value is defined once, before use, and every graph output is defined:
// ONNX 1.12's checker leaves the last to others, and its IR import (which the
// version converter uses) dereferences an undefined output.
void checkDefinitions(const onnx::GraphProto& g, std::set<std::string> defined, const std::function<Error(const std::string&)>& fail) {
  auto define = [&](const std::string& name, const char* what) {
    if (name.empty()) return;
    if (!defined.insert(name).second) throw fail(std::string(what) + " '" + name + "' is defined twice");
  };
  for (const auto& in : g.input()) define(in.name(), "graph input");
  for (const auto& init : g.initializer())
    if (!defined.count(init.name())) define(init.name(), "initializer");
  for (const auto& n : g.node()) {
    for (const auto& in : n.input())
      if (!in.empty() && !defined.count(in)) throw fail("node '" + n.name() + "' (" + n.op_type() + ") reads '" + in + "', which nothing defines before it");
    for (const auto& a : n.attribute()) {
      if (a.has_g()) checkDefinitions(a.g(), defined, fail);
      for (const auto& sub : a.graphs()) checkDefinitions(sub, defined, fail);
    }
    for (const auto& out : n.output()) define(out, "value");
  }
  for (const auto& out : g.output())
    if (!defined.count(out.name())) throw fail("graph output '" + out.name() + "' is not computed by any node");
}

// Shapes the caller gives for graph inputs (OnnxImportOptions::inputShapes) replace
// the declared ones before anything reads them; a static declared dimension must agree.
void applyInputShapes(onnx::ModelProto& model, const std::map<std::string, std::vector<int64_t>>& shapes,
                      const std::function<Error(const std::string&)>& fail) {
  for (auto& in : *model.mutable_graph()->mutable_input()) {
    auto it = shapes.find(in.name());
    if (it == shapes.end()) continue;
    onnx::TypeProto* type = in.mutable_type();
    bool sequence = type->has_sequence_type();
    if (sequence) type = type->mutable_sequence_type()->mutable_elem_type();
    if (!type->has_tensor_type()) throw fail("a shape is given for graph input '" + in.name() + "', which holds no tensors");
    auto* shape = type->mutable_tensor_type()->mutable_shape();
    // A sequence's declared element rank may be 0 for "unknown" (see valueFromType).
    bool declared = type->tensor_type().has_shape() && !(sequence && shape->dim_size() == 0);
    if (declared && shape->dim_size() != static_cast<int>(it->second.size()))
      throw fail("graph input '" + in.name() + "' has rank " + std::to_string(shape->dim_size()) + ", but a shape of rank " +
                 std::to_string(it->second.size()) + " is given");
    for (size_t d = 0; d < it->second.size(); ++d) {
      int64_t given = it->second[d];
      if (given < 0) throw fail("the shape given for graph input '" + in.name() + "' has a negative dimension");
      if (declared && shape->dim(static_cast<int>(d)).has_dim_value() && shape->dim(static_cast<int>(d)).dim_value() != given)
        throw fail("graph input '" + in.name() + "' declares dimension " + std::to_string(d) + " as " +
                   std::to_string(shape->dim(static_cast<int>(d)).dim_value()) + ", but " + std::to_string(given) + " is given");
    }
    shape->clear_dim();
    for (int64_t d : it->second) shape->add_dim()->set_dim_value(d);
  }
}

OnnxModel importModel(onnx::ModelProto& model, const std::string& file, const std::string& baseDir,
                      const std::map<std::string, Tensor>& frozen, const OnnxImportOptions& options) {
  auto fail = [&](const std::string& why) { return Error(file, SourceLoc{}, why); };
  applyInputShapes(model, options.inputShapes, fail);
  // Frozen inputs become initializers before anything reads the graph, so ONNX's
  // shape inference sees their values too.
  std::vector<std::string> frozenNames;
  if (!frozen.empty()) {
    auto* inputs = model.mutable_graph()->mutable_input();
    for (int k = inputs->size() - 1; k >= 0; --k) {
      auto it = frozen.find(inputs->Get(k).name());
      if (it == frozen.end()) continue;
      onnx::TensorProto* t = model.mutable_graph()->add_initializer();
      tensorToProto(it->second, *t);
      t->set_name(it->first);
      frozenNames.insert(frozenNames.begin(), it->first);
      inputs->DeleteSubrange(k, 1);
    }
  }
  // Large initializers (weights) become Kiln tensors first, and the model keeps a
  // one-byte placeholder for each: ONNX's checker and shape inference need only their
  // types and shapes, and would otherwise copy 50 MB of weights around; external data
  // is read (and its location checked) here, relative to the model's folder, where
  // ONNX's checker would look in the working folder.
  std::map<std::string, Tensor> converted;
  try {
    for (auto& init : *model.mutable_graph()->mutable_initializer()) {
      bool external = init.data_location() == onnx::TensorProto::EXTERNAL;
      if (!external && init.raw_data().size() < kKeepInlineBytes) continue;
      converted[init.name()] = tensorFromProto(init, baseDir);
      init.clear_external_data();
      init.set_data_location(onnx::TensorProto::DEFAULT);
      init.set_raw_data(std::string(1, '\0'));  // proto3 counts empty bytes as absent
    }
  } catch (const Error& e) {
    throw fail(e.message());
  }
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    throw fail(std::string("the model is not valid ONNX: ") + e.what());
  }
  checkDefinitions(model.graph(), {}, fail);
  ImportState state;
  state.baseDir = baseDir;
  for (const auto& op : model.opset_import())
    if (op.domain().empty() || op.domain() == "ai.onnx") state.opset = op.version();
  lowerEinsumLabels(*model.mutable_graph(), fail);
  try {
    guardSupported(model.graph(), state.opset);
  } catch (const Error& e) {
    throw fail(e.message());
  }
  // Models of opsets 1 to 6 are converted to opset 7 by ONNX's version converter
  // (the operators' old broadcasting and consumed_inputs attributes go with it).
  if (state.opset >= 1 && state.opset < kMinOpset) {
    guardInference(model.graph(), fail);
    guardRankTrust(model, fail);
    try {
      // The converter's adapters read input shapes; inference gives them.
      onnx::shape_inference::InferShapes(model);
      model = onnx::version_conversion::ConvertVersion(model, static_cast<int>(kMinOpset));
      state.opset = kMinOpset;
    } catch (const std::exception& e) {
      throw fail("opset " + std::to_string(state.opset) + " could not be converted to opset " + std::to_string(kMinOpset) + ": " + e.what());
    }
  }
  if (state.opset < kMinOpset || state.opset > kMaxOpset)
    throw fail("opset " + std::to_string(state.opset) + " is not supported (Kiln imports opsets " + std::to_string(kMinOpset) + " to " +
               std::to_string(kMaxOpset) + ")");
  guardInference(model.graph(), fail);
  guardRankTrust(model, fail);
  try {
    onnx::shape_inference::InferShapes(model);
  } catch (const std::exception& e) {
    throw fail(std::string("ONNX shape inference failed: ") + e.what());
  }
  const onnx::GraphProto& g = model.graph();
  collectInferred(g, state);

  OnnxModel out;
  out.file = file;
  out.frozenInputs = frozenNames;
  out.opset = state.opset;
  GraphScope scope(state, nullptr);
  std::vector<std::string> params;
  try {
    for (const auto& init : g.initializer()) {
      onnx_import::Value v;
      auto done = converted.find(init.name());
      v.known = done != converted.end() ? done->second : tensorFromProto(init, baseDir);
      v.dtype = v.known->dtype();
      v.shape = std::vector<int64_t>(v.known->shape().begin(), v.known->shape().end());
      scope.define(init.name(), std::move(v));
    }
  } catch (const Error& e) {
    throw fail(e.message());
  }
  for (const auto& in : g.input()) {
    if (scope.find(in.name())) continue;  // an initializer also listed as an input (IR version < 4)
    std::string why;
    auto v = valueFromType(in.type(), why);
    if (!v) throw fail("graph input '" + in.name() + "' " + why);
    if (v->isTensor() && !v->shape) throw fail("graph input '" + in.name() + "' has no shape (its rank must be known)");
    std::string param = state.freshName(in.name());
    v->ref = "%" + param;
    v->graphInput = true;
    std::string type = typeText(*v);
    params.push_back("%" + param + (type.empty() ? "" : ": " + type));
    out.inputs.emplace_back(in.name(), param);
    scope.define(in.name(), std::move(*v));
  }
  std::vector<std::string> results;
  try {
    scope.importNodes(g);
    for (const auto& o : g.output()) {
      const onnx_import::Value* v = scope.find(o.name());
      if (!v) throw Error("graph output '" + o.name() + "' is not computed by any node");
      results.push_back(scope.refOf(*v));
      out.outputs.push_back(o.name());
      bool optionalRagged = v->kind == onnx_import::Value::Kind::Optional && v->element && v->element->ragged;
      out.outputForms.push_back(v->ragged ? OnnxOutputForm::RaggedSequence
                                : optionalRagged ? OnnxOutputForm::OptionalRaggedSequence
                                                 : OnnxOutputForm::Direct);
    }
  } catch (const ConstantInputNeeded& e) {
    throw ConstantInputNeeded(file, e.message(), e.input());
  } catch (const Error& e) {
    throw fail(e.message());
  }
  if (results.empty()) throw fail("the graph has no outputs");
  // Every `%name` the program's body mentions.
  std::unordered_set<std::string_view> mentioned;
  auto collect = [&](const std::string& text) {
    for (size_t at = text.find('%'); at != std::string::npos; at = text.find('%', at + 1)) {
      size_t end = at + 1;
      while (end < text.size() && (std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '_' || text[end] == '.')) ++end;
      std::string_view name(text.data() + at, end - at);
      if (size_t dot = name.find('.'); dot != std::string_view::npos) name = name.substr(0, dot);  // %t.0
      mentioned.insert(name);
    }
  };
  for (const std::string& l : scope.lines()) collect(l);
  for (const std::string& r : results) collect(r);
  // An input whose type is not wholly declared takes it from its uses; with none,
  // nothing can say what it holds.
  for (size_t k = 0; k < out.inputs.size(); ++k) {
    const std::string& p = params[k];
    if (p.find(':') == std::string::npos && !mentioned.count(p))
      throw fail("graph input '" + out.inputs[k].first + "' does not declare the rank of what it holds, and no node uses it to tell");
  }
  // Weights no line uses (those of a loop body imported again, see emitLoop) are left out.
  for (const Weight& w : state.weights) {
    if (!mentioned.count("%" + w.param)) continue;
    params.push_back(weightParamText(w));
    out.params[w.param] = w.tensor;
  }
  std::string text;
  for (const auto& [name, def] : state.helpers) text += def + "\n";
  // Lines of @main's body start after the helpers and the `def @main(...) {` line.
  uint32_t line = static_cast<uint32_t>(std::count(text.begin(), text.end(), '\n')) + 2;
  for (size_t k = 0; k < scope.lines().size(); ++k) {
    out.nodeLines.emplace_back(line, scope.lineNodes()[k]);
    line += static_cast<uint32_t>(std::count(scope.lines()[k].begin(), scope.lines()[k].end(), '\n')) + 1;
  }
  text += mainFunctionText(params, scope.lines(), results);
  out.program = std::move(text);
  return out;
}

}  // namespace

static OnnxModel importOnnxChecked(std::string_view bytes, const std::string& file, const std::string& baseDir,
                                   const OnnxImportOptions& options);

// The model's sizes are checked before they are used; a model that still asks for
// more memory than there is (a huge graph) is an error, not an abort.
OnnxModel importOnnx(std::string_view bytes, const std::string& file, const std::string& baseDir, const OnnxImportOptions& options) {
  try {
    return importOnnxChecked(bytes, file, baseDir, options);
  } catch (const std::bad_alloc&) {
    throw Error(file, SourceLoc{}, "importing the model needs more memory than there is");
  } catch (const std::length_error&) {
    throw Error(file, SourceLoc{}, "importing the model needs more memory than there is");
  }
}

static OnnxModel importOnnxChecked(std::string_view bytes, const std::string& file, const std::string& baseDir,
                                   const OnnxImportOptions& options) {
  onnx::ModelProto model;
  if (bytes.size() > static_cast<size_t>(INT_MAX)) throw Error(file, SourceLoc{}, "the model is larger than 2 GiB (protobuf's limit)");
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    throw Error(file, SourceLoc{}, "not an ONNX model (the protobuf does not parse)");
  // Inputs the program needs as constants are frozen to the values given, one at a
  // time as the import finds them (each at most once, so this ends). importModel
  // changes the model it is given, so each retry parses the bytes again.
  std::map<std::string, Tensor> frozen;
  for (;;) {
    try {
      return importModel(model, file, baseDir, frozen, options);
    } catch (const ConstantInputNeeded& e) {
      auto it = options.inputValues.find(e.input());
      if (it == options.inputValues.end() || frozen.count(e.input())) throw;
      frozen.emplace(it->first, it->second);
      model.Clear();
      model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
    }
  }
}

OnnxModel importOnnx(std::string_view bytes, const std::string& file, const std::string& baseDir) {
  return importOnnx(bytes, file, baseDir, OnnxImportOptions{});
}

OnnxModel importOnnxFile(const std::string& path, const OnnxImportOptions& options) {
  // Parsed in place from the mapping: the weights are copied out once (by the parse).
  MappedFile file(path);
  std::string dir = std::filesystem::path(path).parent_path().string();
  return importOnnx(std::string_view(file.data(), file.size()), path, dir.empty() ? "." : dir, options);
}

OnnxModel importOnnxFile(const std::string& path) { return importOnnxFile(path, OnnxImportOptions{}); }

std::vector<std::string> onnxInputNames(const std::string& path) {
  // Parsed in place from a mapping, as importOnnxFile does: no copy of the file first.
  MappedFile bytes(path);
  onnx::ModelProto model;
  if (bytes.size() > static_cast<size_t>(INT_MAX) || !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    throw Error(path, SourceLoc{}, "not an ONNX model (the protobuf does not parse)");
  std::set<std::string> inits;
  for (const auto& i : model.graph().initializer()) inits.insert(i.name());
  std::vector<std::string> names;
  for (const auto& i : model.graph().input())
    if (!inits.count(i.name())) names.push_back(i.name());
  return names;
}

std::shared_ptr<const Executable> compileOnnx(const OnnxModel& model, CompileOptions options) {
  for (const auto& [name, t] : model.params) options.params.emplace(name, t);
  try {
    return compile(model.program, model.file, options);
  } catch (const Error& e) {
    throw explainOnnxError(model, e);
  }
}

Error explainOnnxError(const OnnxModel& model, const Error& e) {
  if (!e.loc().known() || e.file() != model.file) return e;
  const std::string* node = nullptr;
  for (const auto& [line, desc] : model.nodeLines)
    if (line <= e.loc().line && !desc.empty()) node = &desc;
  std::string where = " (at line " + std::to_string(e.loc().line) + " of the imported program)";
  return Error(model.file, SourceLoc{}, (node ? *node + ": " : std::string()) + e.message() + where);
}

bool isOnnxPath(const std::string& path) {
  return path.size() >= 5 && path.compare(path.size() - 5, 5, ".onnx") == 0;
}

}  // namespace kiln
