// Turning an ONNX graph into a Kiln program: values, nodes, and the Relay text they become.
//
// Representation: the importer writes the program as Relay text, Kiln's program
// language, one `let` per ONNX node output, so the imported module is exactly what
// `kilnc --emit ir` prints and parses back. Each ONNX value is a `Value`: the Relay
// expression that names it (a `%t7` let variable, a `%weight` parameter of @main or a
// scalar literal), its element type, its shape as far as it is known (-1 for a `?`
// dimension; no shape when even the rank is unknown) and, when the importer knows
// its contents (an initializer, a Constant node, a shape of static dimensions), the
// tensor itself. Operators whose ONNX inputs are attributes in Kiln (Reshape's
// shape, Slice's bounds, ...) read those contents; a known tensor used as a tensor
// becomes a weight: a parameter of @main bound to it, as TVM's frontend returns
// (module, params).
//
// Shapes come from ONNX's own shape inference, run over the model before import;
// converters compute them where inference leaves them out.
//
// Scopes: a subgraph (If's branches, Loop's body) gets an importer of its own whose
// lookups fall back to the enclosing graph's values, as closures capture theirs.
// Not thread-safe; one import is one thread's work.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/tensor.h"

namespace onnx {
class GraphProto;
class NodeProto;
class AttributeProto;
class TypeProto;
class ValueInfoProto;
}  // namespace onnx

namespace kiln::onnx_import {

// A converter needs the value of a graph input as a constant (Reshape's shape,
// ReduceSum's axes, Resize's scales fed as inputs): importing again with that
// input's value (OnnxImportOptions::inputValues) specializes the program to it.
class ConstantInputNeeded : public Error {
 public:
  ConstantInputNeeded(const std::string& message, std::string input) : Error(message), input_(std::move(input)) {}
  ConstantInputNeeded(const std::string& file, const std::string& message, std::string input)
      : Error(file, SourceLoc{}, message), input_(std::move(input)) {}
  const std::string& input() const { return input_; }

 private:
  std::string input_;
};

struct Value {
  // Tensor values are tensors; an ONNX sequence is a prelude List of its elements,
  // an optional an Option. For those two, `element` describes what they hold and
  // dtype/shape are unused.
  enum class Kind : uint8_t { Tensor, Sequence, Optional };
  std::string ref;  // Relay expression; empty until a known tensor is first used as a tensor
  DType dtype = DType::Float32;
  std::optional<std::vector<int64_t>> shape;  // -1: a `?` dimension
  std::optional<Tensor> known;                // contents known at import
  std::string name;                           // the ONNX name
  Kind kind = Kind::Tensor;
  std::shared_ptr<const Value> element;       // a sequence's or optional's element, when known
  bool graphInput = false;                    // an input of the model's graph (a parameter of @main)
  // A sequence whose elements differ in rank (ONNX allows it, a Kiln List is typed):
  // each element is held as a pair (its data flattened, its shape as int64), a
  // `List[(Tensor[(?), dtype], Tensor[(?), int64])]`; `element` is unused.
  bool ragged = false;
  // A sequence element declared `shape {}`, which the importer reads as an unknown
  // rank (exporters write it for elements of any rank): where nothing else tells
  // the rank (converting such a sequence to ragged form), the declaration is taken.
  bool declaredScalar = false;

  bool isTensor() const { return kind == Kind::Tensor; }
  bool staticShape() const;
};

// The Relay type of a value, or "" when not all of it is known (a tensor of
// unknown rank somewhere): such values go unannotated and Kiln's type inference
// finds their types from their uses.
std::string typeText(const Value& v);

// A weight: a parameter of @main and the tensor bound to it.
struct Weight {
  std::string param;
  Tensor tensor;
};

// State every scope of one import shares: names in use, the weights made so far.
struct ImportState {
  std::unordered_map<std::string, int> namesUsed;
  std::vector<Weight> weights;
  std::string baseDir;  // the model's folder, for external data
  int64_t opset = 0;    // the default domain's opset
  std::map<std::string, std::string> helpers;  // global functions the program needs, by name (sequence operations)
  std::unordered_map<std::string, const onnx::TypeProto*> inferred;  // value_info by name, all scopes
  // A fresh Relay identifier based on `hint`, unique in the whole program.
  std::string freshName(const std::string& hint);
};

class GraphScope;
class NodeContext;
using Converter = std::function<void(NodeContext&)>;

// What a converter sees of one node.
class NodeContext {
 public:
  NodeContext(GraphScope& scope, const onnx::NodeProto& node) : scope_(scope), node_(node) {}

  const onnx::NodeProto& node() const { return node_; }
  int64_t opset() const;
  GraphScope& scope() { return scope_; }

  size_t numInputs() const;
  bool hasInput(size_t i) const;  // present and not the empty name
  const Value& input(size_t i) const;
  // The input as a Relay expression (making a weight of a known tensor if needed).
  std::string ref(size_t i) const;
  // A known input's contents, or an error naming the input when it is computed.
  const Tensor& knownInput(size_t i, const char* what) const;
  std::vector<int64_t> knownInts(size_t i, const char* what) const;
  size_t numOutputs() const;
  bool hasOutput(size_t i) const;

  const onnx::AttributeProto* attr(const char* name) const;
  int64_t intAttr(const char* name, int64_t dflt) const;
  float floatAttr(const char* name, float dflt) const;
  std::string stringAttr(const char* name, const std::string& dflt) const;
  std::optional<std::vector<int64_t>> intsAttr(const char* name) const;
  std::optional<std::vector<float>> floatsAttr(const char* name) const;

  // Binds output `i` to `expr` (a `let`); its type is ONNX's inferred one, else
  // `dtype` and `shape`.
  void emit(size_t i, const std::string& expr, DType dtype, std::optional<std::vector<int64_t>> shape);
  // Binds output `i` to `expr` of any kind (sequences, optionals); `type` carries
  // what is known of it.
  void emitValue(size_t i, const std::string& expr, Value type);
  // Binds output `i` to a value known at import.
  void emitKnown(size_t i, Tensor t);
  // Binds output `i` to an existing value (Identity and friends).
  void alias(size_t i, const Value& v);
  // A tensor the converter computed at import, as a Relay expression (a weight, or
  // a literal for a scalar); `name` names the weight.
  std::string constant(Tensor t, const std::string& name);
  // Binds `expr` to a fresh variable and returns it (an intermediate of a node).
  std::string let(const std::string& expr);

  [[noreturn]] void fail(const std::string& why) const;
  // elementCount, or a failure saying the sizes overflow.
  int64_t product(const std::vector<int64_t>& dims) const;
  // An integer attribute or input entry used in size arithmetic: |v| <= 2^40.
  int64_t bounded(int64_t v, const char* what) const;
  // The axis normalized to [0, rank), or a failure naming the attribute.
  int64_t axis(int64_t a, size_t rank, const char* what = "axis") const;
  // A Relay literal of `dtype`, or a weight where text cannot hold the value.
  std::string literal(double v, DType dtype);

 private:
  GraphScope& scope_;
  const onnx::NodeProto& node_;
};

class GraphScope {
 public:
  GraphScope(ImportState& state, GraphScope* parent) : state_(state), parent_(parent) {}

  ImportState& state() { return state_; }
  // The value an ONNX name refers to here or in an enclosing scope.
  const Value* find(const std::string& name) const;
  Value& define(const std::string& name, Value v);
  // The Relay expression for a value (a known tensor becomes a weight on first use).
  std::string refOf(const Value& v);
  void line(std::string text) {
    lines_.push_back(std::move(text));
    lineNodes_.push_back(currentNode_);
  }
  const std::vector<std::string>& lines() const { return lines_; }
  // For each line, the node whose import wrote it ("node 'n' (Op, opset 13)").
  const std::vector<std::string>& lineNodes() const { return lineNodes_; }
  // Imports every node of `g` in order.
  void importNodes(const onnx::GraphProto& g);
  // The type ONNX inferred for `name`, when it did.
  const onnx::TypeProto* inferredType(const std::string& name) const;

 private:
  ImportState& state_;
  GraphScope* parent_;
  std::unordered_map<std::string, Value> values_;
  std::vector<std::string> lines_, lineNodes_;
  std::string currentNode_;
};

// `def @main(params...) { lines... result }`, the result a tuple when there are several.
std::string mainFunctionText(const std::vector<std::string>& params, const std::vector<std::string>& lines,
                             const std::vector<std::string>& results);
// A weight's parameter declaration: `%w: Tensor[(3, 4), float32]`.
std::string weightParamText(const Weight& w);

// Ragged sequences (Value::ragged). `raggedNeeded`: whether values `a` and `b`
// (sequences, or optionals holding them) can only share a type in ragged form.
bool raggedNeeded(const Value& a, const Value& b);
// The ragged form of `v`'s type, and `expr` (a value of type `v`) converted to it,
// as text without lets (it may sit inside a branch's block or a call).
Value raggedForm(const Value& v);
std::string raggedText(ImportState& st, const Value& v, const std::string& expr);
// `v` (bound to `ref`) as the ragged form of its kind: a sequence's elements, or an
// optional's sequence, become (data, shape) pairs; already ragged stays as it is.
std::pair<std::string, Value> asRagged(NodeContext& c, const Value& v, const std::string& ref);
// A tensor expression as one element of a ragged sequence.
std::string raggedItem(NodeContext& c, const std::string& tensor);

// Import-time evaluation: a node whose inputs are all known (shape arithmetic,
// mostly) runs once through Kiln itself, as TVM's frontend folds with infer_value,
// and its outputs become known values. Nullopt when the node is not worth it or
// cannot be run (then it is imported as usual). Outputs must be small and of
// static shape by ONNX's inference, so folding never allocates much.
std::optional<std::vector<Tensor>> evaluateKnownNode(GraphScope& scope, const onnx::NodeProto& node, const Converter& convert);

// Relay text for a tensor type: `Tensor[(?, 3), float32]`.
std::string tensorTypeText(DType dtype, const std::vector<int64_t>& shape);
// A value's type from an ONNX TypeProto (tensors, sequences, optionals); nullopt
// when it holds something Kiln lacks (`why` says what).
std::optional<Value> valueFromType(const onnx::TypeProto& t, std::string& why);
// Every dimension the importer takes from a model is at most this (Kiln's own
// limit); a product of dimensions is computed with elementCount, never bare.
inline constexpr int64_t kMaxImportDim = int64_t(1) << 40;
// The product of known dimensions, or nullopt when it passes 2^62.
std::optional<int64_t> elementCount(const std::vector<int64_t>& dims);

// A float attribute value: `0.01f`.
std::string floatText(double v);
// `[1, 2, 3]`
std::string intList(const std::vector<int64_t>& v);

// Helpers the convolution and pooling converters share: per-axis attributes
// (`dflt` for absent, each at least 1) and (begin, end) pads from `pads` or `auto_pad`.
std::vector<int64_t> spatialAttr(NodeContext& c, const char* name, size_t n, int64_t dflt);
std::vector<std::pair<int64_t, int64_t>> spatialPads(NodeContext& c, const std::vector<int64_t>& in, const std::vector<int64_t>& kernel,
                                                     const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations);
// 3-D convolution and pooling, as 2-D ones over depth slices (convert_volume.cc).
void importConv3d(NodeContext& c);
void importPool3d(NodeContext& c, bool isMax);

// The converters, by ONNX op type (default domain).
const Converter* findConverter(const std::string& opType);

// How errors name a node: its name, or, unnamed, its first named output.
std::string nodeName(const onnx::NodeProto& node);
// "node 'name' (OpType, opset N)": what an error about the node starts with.
std::string describeNode(const onnx::NodeProto& node, int64_t opset);
void registerElementwiseConverters(std::map<std::string, Converter>& table);
void registerTensorConverters(std::map<std::string, Converter>& table);
void registerNNConverters(std::map<std::string, Converter>& table);
void registerControlFlowConverters(std::map<std::string, Converter>& table);
void registerLossConverters(std::map<std::string, Converter>& table);
void registerRecurrentConverters(std::map<std::string, Converter>& table);
void registerSequenceConverters(std::map<std::string, Converter>& table);
void registerResizeConverters(std::map<std::string, Converter>& table);
void registerQuantizeConverters(std::map<std::string, Converter>& table);
void registerEinsumConverters(std::map<std::string, Converter>& table);
void registerLayoutConverters(std::map<std::string, Converter>& table);

}  // namespace kiln::onnx_import
