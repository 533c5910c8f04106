// Graph scopes and node contexts: ONNX values become Relay lets, weights and literals.
#include "compiler/onnx/graph_importer.h"

#include <cinttypes>
#include <algorithm>
#include <cmath>
#include <cstdio>

#include <onnx/onnx_pb.h>

#include "compiler/onnx/onnx_tensor.h"
#include "kiln/error.h"

namespace kiln::onnx_import {

bool Value::staticShape() const {
  if (!shape) return false;
  for (int64_t d : *shape)
    if (d < 0) return false;
  return true;
}

std::string ImportState::freshName(const std::string& hint) {
  // Relay identifiers: [A-Za-z_][A-Za-z0-9_]*; anything else in an ONNX name becomes '_'.
  std::string base;
  for (char c : hint) base += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  if (base.empty() || std::isdigit(static_cast<unsigned char>(base[0]))) base = "v" + base;
  if (base.size() > 64) base.resize(64);
  int& n = namesUsed[base];
  std::string name = n == 0 ? base : base + "_" + std::to_string(n);
  ++n;
  // A suffixed name may itself be some other hint's base; keep going until it is new.
  while (n > 1 && namesUsed.count(name)) name = base + "_" + std::to_string(n++);
  if (name != base) namesUsed[name] = 1;
  return name;
}

std::string intList(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::optional<int64_t> elementCount(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims)
    if (d < 0 || __builtin_mul_overflow(n, d, &n) || n > (int64_t(1) << 62)) return std::nullopt;
  return n;
}

std::string floatText(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return std::string(buf) + "f";
}

std::string mainFunctionText(const std::vector<std::string>& params, const std::vector<std::string>& lines,
                             const std::vector<std::string>& results) {
  std::string text = "def @main(";
  for (size_t i = 0; i < params.size(); ++i) text += (i ? ", " : "") + params[i];
  text += ") {\n";
  for (const std::string& l : lines) text += "  " + l + "\n";
  text += "  ";
  if (results.size() == 1) {
    text += results[0];
  } else {
    text += "(";
    for (size_t i = 0; i < results.size(); ++i) text += (i ? ", " : "") + results[i];
    text += ")";
  }
  return text + "\n}\n";
}

std::string weightParamText(const Weight& w) {
  return "%" + w.param + ": " + tensorTypeText(w.tensor.dtype(), std::vector<int64_t>(w.tensor.shape().begin(), w.tensor.shape().end()));
}

std::string tensorTypeText(DType dtype, const std::vector<int64_t>& shape) {
  std::string s = "Tensor[(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + (shape[i] < 0 ? std::string("?") : std::to_string(shape[i]));
  if (shape.size() == 1) s += ",";
  return s + "), " + std::string(dtypeName(dtype)) + "]";
}

std::string typeText(const Value& v) {
  if (v.kind == Value::Kind::Tensor) return v.shape ? tensorTypeText(v.dtype, *v.shape) : "";
  if (v.ragged) return "List[(" + tensorTypeText(v.dtype, {-1}) + ", " + tensorTypeText(DType::Int64, {-1}) + ")]";
  std::string inner = v.element ? typeText(*v.element) : "";
  if (inner.empty()) return "";
  return (v.kind == Value::Kind::Sequence ? "List[" : "Option[") + inner + "]";
}

std::optional<Value> valueFromType(const onnx::TypeProto& t, std::string& why) {
  if (t.has_sequence_type() || t.has_optional_type()) {
    bool seq = t.has_sequence_type();
    const onnx::TypeProto& inner = seq ? t.sequence_type().elem_type() : t.optional_type().elem_type();
    Value v;
    v.kind = seq ? Value::Kind::Sequence : Value::Kind::Optional;
    if (inner.value_case() != onnx::TypeProto::VALUE_NOT_SET) {
      auto e = valueFromType(inner, why);
      if (!e) return std::nullopt;
      // A sequence's elements often differ in their dimensions: the declared rank
      // stays, the dimensions become `?`. A declared rank of 0 is read as unknown,
      // as exporters (and ONNX's own loop13_seq test) write `shape {}` for elements
      // that are not scalars; Kiln's inference then finds the type from the uses.
      if (seq && e->isTensor() && e->shape) {
        if (e->shape->empty()) {
          e->shape.reset();
          e->declaredScalar = true;
        }
        else std::fill(e->shape->begin(), e->shape->end(), -1);
      }
      v.element = std::make_shared<const Value>(*e);
      if (e->isTensor()) v.dtype = e->dtype;
    }
    return v;
  }
  if (!t.has_tensor_type()) {
    why = "is not a tensor, sequence or optional";
    return std::nullopt;
  }
  const auto& tt = t.tensor_type();
  auto dtype = dtypeFromOnnx(tt.elem_type());
  if (!dtype) {
    why = "has element type " + onnxTypeName(tt.elem_type()) + ", which Kiln does not support";
    return std::nullopt;
  }
  Value v;
  v.dtype = *dtype;
  if (tt.has_shape()) {
    std::vector<int64_t> shape;
    for (const auto& d : tt.shape().dim()) {
      if (d.has_dim_value() && d.dim_value() > kMaxImportDim) {
        why = "has a dimension of " + std::to_string(d.dim_value()) + ", more than 2^40";
        return std::nullopt;
      }
      shape.push_back(d.has_dim_value() && d.dim_value() >= 0 ? d.dim_value() : -1);
    }
    v.shape = std::move(shape);
  }
  return v;
}

// ---- GraphScope ----

const Value* GraphScope::find(const std::string& name) const {
  for (const GraphScope* s = this; s; s = s->parent_) {
    auto it = s->values_.find(name);
    if (it != s->values_.end()) return &it->second;
  }
  return nullptr;
}

Value& GraphScope::define(const std::string& name, Value v) {
  v.name = name;
  return values_[name] = std::move(v);
}

std::string GraphScope::refOf(const Value& cv) {
  auto& v = const_cast<Value&>(cv);  // values are owned by scopes; only the lazily made ref changes
  if (!v.ref.empty()) return v.ref;
  if (!v.known) throw Error("ONNX value '" + v.name + "' has no definition");
  const Tensor& t = *v.known;
  if (t.rank() == 0) {
    int64_t i = 0;
    double f = 0;
    readScalar(t.data(), t.dtype(), i, f);
    NodeContext none(*this, onnx::NodeProto::default_instance());
    std::string lit = none.literal(isFloat(t.dtype()) ? f : static_cast<double>(i), t.dtype());
    if (!lit.empty() && lit[0] != '%') return v.ref = lit;
  }
  std::string param = state_.freshName(v.name.empty() ? "const" : v.name);
  state_.weights.push_back(Weight{param, t});
  return v.ref = "%" + param;
}

const onnx::TypeProto* GraphScope::inferredType(const std::string& name) const {
  auto it = state_.inferred.find(name);
  return it == state_.inferred.end() ? nullptr : it->second;
}

void GraphScope::importNodes(const onnx::GraphProto& g) {
  for (const auto& node : g.node()) {
    NodeContext ctx(*this, node);
    currentNode_ = describeNode(node, state_.opset);
    if (!node.domain().empty() && node.domain() != "ai.onnx") ctx.fail("the operator domain '" + node.domain() + "' is not supported");
    const Converter* convert = findConverter(node.op_type());
    if (!convert) ctx.fail("the operator is not supported");
    for (size_t i = 0; i < ctx.numInputs(); ++i)
      if (ctx.hasInput(i) && !find(node.input(static_cast<int>(i))))
        ctx.fail("input '" + node.input(static_cast<int>(i)) + "' is not defined before the node");
    if (auto known = evaluateKnownNode(*this, node, *convert)) {
      for (size_t i = 0; i < known->size(); ++i) ctx.emitKnown(i, std::move((*known)[i]));
      continue;
    }
    try {
      (*convert)(ctx);
    } catch (const Error& e) {
      // Errors from shared helpers (tensor reading) gain the node's name here.
      if (e.message().rfind("node ", 0) == 0) throw;
      ctx.fail(e.message());
    }
  }
}

// ---- NodeContext ----

int64_t NodeContext::opset() const { return scope_.state().opset; }
size_t NodeContext::numInputs() const { return static_cast<size_t>(node_.input_size()); }
bool NodeContext::hasInput(size_t i) const { return i < numInputs() && !node_.input(static_cast<int>(i)).empty(); }
size_t NodeContext::numOutputs() const { return static_cast<size_t>(node_.output_size()); }
bool NodeContext::hasOutput(size_t i) const { return i < numOutputs() && !node_.output(static_cast<int>(i)).empty(); }

const Value& NodeContext::input(size_t i) const {
  if (!hasInput(i)) fail("input " + std::to_string(i) + " is required");
  const Value* v = scope_.find(node_.input(static_cast<int>(i)));
  if (!v) fail("input '" + node_.input(static_cast<int>(i)) + "' is not defined");
  return *v;
}

std::string NodeContext::ref(size_t i) const { return scope_.refOf(input(i)); }

const Tensor& NodeContext::knownInput(size_t i, const char* what) const {
  const Value& v = input(i);
  if (!v.known && v.graphInput) {
    try {
      fail(std::string(what) + " must be a constant, but is the graph input '" + v.name +
           "' (give its value with the inputs, or to kilnc with --params, to specialize the program to it)");
    } catch (const Error& e) {
      throw ConstantInputNeeded(e.message(), v.name);
    }
  }
  if (!v.known) fail(std::string(what) + " must be a constant (an initializer or a Constant node), not a computed value");
  return *v.known;
}

std::vector<int64_t> NodeContext::knownInts(size_t i, const char* what) const {
  const Tensor& t = knownInput(i, what);
  if (!isInt(t.dtype())) fail(std::string(what) + " must hold integers");
  if (t.rank() > 1) fail(std::string(what) + " must be a scalar or a list");
  std::vector<int64_t> out(static_cast<size_t>(t.numel()));
  for (size_t k = 0; k < out.size(); ++k) {
    double f;
    readScalar(static_cast<const char*>(t.data()) + k * dtypeSize(t.dtype()), t.dtype(), out[k], f);
  }
  return out;
}

const onnx::AttributeProto* NodeContext::attr(const char* name) const {
  for (const auto& a : node_.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

int64_t NodeContext::intAttr(const char* name, int64_t dflt) const {
  const auto* a = attr(name);
  if (!a) return dflt;
  if (a->type() != onnx::AttributeProto::INT) fail(std::string("attribute ") + name + " must be an integer");
  return a->i();
}

float NodeContext::floatAttr(const char* name, float dflt) const {
  const auto* a = attr(name);
  if (!a) return dflt;
  if (a->type() == onnx::AttributeProto::INT) return static_cast<float>(a->i());
  if (a->type() != onnx::AttributeProto::FLOAT) fail(std::string("attribute ") + name + " must be a float");
  return a->f();
}

std::string NodeContext::stringAttr(const char* name, const std::string& dflt) const {
  const auto* a = attr(name);
  if (!a) return dflt;
  if (a->type() != onnx::AttributeProto::STRING) fail(std::string("attribute ") + name + " must be a string");
  return a->s();
}

std::optional<std::vector<int64_t>> NodeContext::intsAttr(const char* name) const {
  const auto* a = attr(name);
  if (!a) return std::nullopt;
  if (a->type() != onnx::AttributeProto::INTS) fail(std::string("attribute ") + name + " must be a list of integers");
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

std::optional<std::vector<float>> NodeContext::floatsAttr(const char* name) const {
  const auto* a = attr(name);
  if (!a) return std::nullopt;
  if (a->type() != onnx::AttributeProto::FLOATS) fail(std::string("attribute ") + name + " must be a list of floats");
  return std::vector<float>(a->floats().begin(), a->floats().end());
}

void NodeContext::emit(size_t i, const std::string& expr, DType dtype, std::optional<std::vector<int64_t>> shape) {
  if (!hasOutput(i)) return;
  const std::string& name = node_.output(static_cast<int>(i));
  Value v;
  v.dtype = dtype;
  v.shape = std::move(shape);
  if (const onnx::TypeProto* t = scope_.inferredType(name)) {
    std::string why;
    auto inferred = valueFromType(*t, why);
    if (inferred && inferred->isTensor()) {
      // ONNX's inference is the authority on rank; a converter may know more dimensions.
      if (inferred->shape && (!v.shape || v.shape->size() != inferred->shape->size())) v.shape = inferred->shape;
      else if (inferred->shape)
        for (size_t d = 0; d < v.shape->size(); ++d)
          if ((*v.shape)[d] < 0) (*v.shape)[d] = (*inferred->shape)[d];
      v.dtype = inferred->dtype;
    }
  }
  std::string var = scope_.state().freshName("t");
  scope_.line("let %" + var + " = " + expr + ";");
  v.ref = "%" + var;
  scope_.define(name, std::move(v));
}

void NodeContext::emitValue(size_t i, const std::string& expr, Value type) {
  if (!hasOutput(i)) return;
  if (type.isTensor()) return emit(i, expr, type.dtype, type.shape);
  std::string var = scope_.state().freshName("t");
  scope_.line("let %" + var + " = " + expr + ";");
  type.ref = "%" + var;
  type.known.reset();
  scope_.define(node_.output(static_cast<int>(i)), std::move(type));
}

void NodeContext::emitKnown(size_t i, Tensor t) {
  if (!hasOutput(i)) return;
  Value v;
  v.dtype = t.dtype();
  v.shape = std::vector<int64_t>(t.shape().begin(), t.shape().end());
  v.known = std::move(t);
  scope_.define(node_.output(static_cast<int>(i)), std::move(v));
}

void NodeContext::alias(size_t i, const Value& from) {
  if (!hasOutput(i)) return;
  Value v = from;
  scope_.define(node_.output(static_cast<int>(i)), std::move(v));
}

std::string NodeContext::constant(Tensor t, const std::string& name) {
  Value v;
  v.dtype = t.dtype();
  v.shape = std::vector<int64_t>(t.shape().begin(), t.shape().end());
  v.known = std::move(t);
  v.name = name;
  return scope_.refOf(v);
}

std::string NodeContext::let(const std::string& expr) {
  std::string var = scope_.state().freshName("t");
  scope_.line("let %" + var + " = " + expr + ";");
  return "%" + var;
}

std::string nodeName(const onnx::NodeProto& node) {
  std::string name = node.name();
  for (int k = 0; name.empty() && k < node.output_size(); ++k) name = node.output(k);
  return name;
}

std::string describeNode(const onnx::NodeProto& node, int64_t opset) {
  return "node '" + nodeName(node) + "' (" + node.op_type() + ", opset " + std::to_string(opset) + ")";
}

void NodeContext::fail(const std::string& why) const { throw Error(describeNode(node_, opset()) + ": " + why); }

int64_t NodeContext::product(const std::vector<int64_t>& dims) const {
  auto n = elementCount(dims);
  if (!n) fail("the sizes " + intList(dims) + " have more elements than memory can hold");
  return *n;
}

int64_t NodeContext::bounded(int64_t v, const char* what) const {
  if (v > kMaxImportDim || v < -kMaxImportDim) fail(std::string(what) + " " + std::to_string(v) + " is out of range (|v| <= 2^40)");
  return v;
}

int64_t NodeContext::axis(int64_t a, size_t rank, const char* what) const {
  int64_t r = static_cast<int64_t>(rank);
  if (a < -r || a >= r) fail(std::string(what) + " " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
  return a < 0 ? a + r : a;
}

std::string NodeContext::literal(double v, DType dtype) {
  char buf[64];
  switch (dtype) {
    case DType::Float32:
    case DType::Float64:
    case DType::Float16: {
      if (std::isfinite(v)) {
        std::snprintf(buf, sizeof buf, dtype == DType::Float64 ? "%.17g" : "%.9g", v);
        std::string s = buf;
        return s + (dtype == DType::Float32 ? "f" : dtype == DType::Float64 ? "f64" : "f16");
      }
      break;
    }
    case DType::Int32: return std::to_string(static_cast<int32_t>(v));
    case DType::Int64: std::snprintf(buf, sizeof buf, "%" PRId64 "i64", static_cast<int64_t>(v)); return buf;
    case DType::Int8: return std::to_string(static_cast<int>(v)) + "i8";
    case DType::Int16: return std::to_string(static_cast<int>(v)) + "i16";
    case DType::UInt8: return std::to_string(static_cast<int>(v)) + "u8";
    case DType::Bool: return v != 0 ? "True" : "False";
    default: break;
  }
  // No literal spells it (a non-finite float, a dtype without a suffix): a 0-d weight.
  Tensor t = Tensor::empty(dtype, std::span<const int64_t>{});
  writeScalar(t.data(), dtype, static_cast<int64_t>(v), v);
  std::string param = scope_.state().freshName("const");
  scope_.state().weights.push_back(Weight{param, t});
  return "%" + param;
}

// ---- the converter table ----

const Converter* findConverter(const std::string& opType) {
  static const std::map<std::string, Converter> table = [] {
    std::map<std::string, Converter> t;
    registerElementwiseConverters(t);
    registerTensorConverters(t);
    registerNNConverters(t);
    registerControlFlowConverters(t);
    registerLossConverters(t);
    registerRecurrentConverters(t);
    registerSequenceConverters(t);
    registerResizeConverters(t);
    registerQuantizeConverters(t);
    registerEinsumConverters(t);
    registerLayoutConverters(t);
    return t;
  }();
  auto it = table.find(opType);
  return it == table.end() ? nullptr : &it->second;
}

}  // namespace kiln::onnx_import
