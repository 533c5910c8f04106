// ONNX sequences and optionals: sequences are the prelude's List, optionals its Option.
//
// Positions are int32 (the prelude's @nth and @length count in int32) and may be
// negative, counting from the end. Insertion and erasure at a position use two
// small generic helpers the importer adds to the program when it needs them.
#include <onnx/onnx_pb.h>

#include <set>
#include <tuple>

#include "compiler/onnx/graph_importer.h"
#include "compiler/onnx/onnx_tensor.h"
#include "compiler/onnx/recurrence.h"

namespace kiln::onnx_import {
namespace {

const char* kInsertHelper =
    "def @onnx_seq_insert[A](%xs: List[A], %p: int32, %v: A) -> List[A] {\n"
    "  if (%p <= 0) { Cons(%v, %xs) } else {\n"
    "    match (%xs) {\n"
    "      Cons(%h, %t) => Cons(%h, @onnx_seq_insert(%t, %p - 1, %v)),\n"
    "      Nil => Cons(%v, Nil),\n"
    "    }\n"
    "  }\n"
    "}\n";
const char* kEraseHelper =
    "def @onnx_seq_erase[A](%xs: List[A], %p: int32) -> List[A] {\n"
    "  match (%xs) {\n"
    "    Cons(%h, %t) => if (%p <= 0) { %t } else { Cons(%h, @onnx_seq_erase(%t, %p - 1)) },\n"
    "    Nil => Nil,\n"
    "  }\n"
    "}\n";

Value sequenceOf(std::shared_ptr<const Value> element) {
  Value v;
  v.kind = Value::Kind::Sequence;
  if (element) v.dtype = element->dtype;
  v.element = std::move(element);
  return v;
}

// The element type two element types share: the dims they agree on, `?` elsewhere;
// the rank unknown when the ranks differ.
std::shared_ptr<const Value> mergeElements(const std::shared_ptr<const Value>& a, const Value& b) {
  Value e;
  e.dtype = b.dtype;
  e.kind = b.kind;
  e.element = b.element;
  if (!a) {
    e.shape = b.shape;
  } else if (a->shape && b.shape && a->shape->size() == b.shape->size()) {
    std::vector<int64_t> s = *a->shape;
    for (size_t d = 0; d < s.size(); ++d)
      if (s[d] != (*b.shape)[d]) s[d] = -1;
    e.shape = s;
  }
  return std::make_shared<const Value>(e);
}

const Value& needSequence(NodeContext& c, size_t i) {
  const Value& s = c.input(i);
  if (s.kind != Value::Kind::Sequence) c.fail("input " + std::to_string(i) + " must be a sequence");
  return s;
}

// A position input as an int32 scalar, negative ones counted from the end of `seq`.
std::string position(NodeContext& c, size_t i, const std::string& seq) {
  const Value& p = c.input(i);
  std::string e = c.ref(i);
  if (p.shape && !p.shape->empty()) e = "reshape(" + e + ", newshape=[])";
  std::string pos = c.let("cast(" + e + ", dtype=\"int32\")");
  return c.let("if (less(" + pos + ", 0)) { add(" + pos + ", @length(" + seq + ")) } else { " + pos + " }");
}

Value elementValue(const Value& seq) {
  Value v;
  if (seq.element) v = *seq.element;
  v.ref.clear();
  v.known.reset();
  return v;
}

// The element pair of a ragged sequence for a tensor named `t` (a variable).
std::string pairOf(const std::string& t) { return "(reshape(" + t + ", newshape=[-1]), shape_of(" + t + ", dtype=\"int64\"))"; }

}  // namespace

std::string raggedText(ImportState& st, const Value& v, const std::string& expr) {
  if (v.kind == Value::Kind::Optional) {
    if (!v.element) return expr;
    std::string s = "%" + st.freshName("s");
    return "match (" + expr + ") { Some(" + s + ") => Some(" + raggedText(st, *v.element, s) + "), None => None }";
  }
  if (v.kind != Value::Kind::Sequence || v.ragged) return expr;
  std::string e = "%" + st.freshName("e"), type = v.element ? typeText(*v.element) : "";
  if (type.empty() && v.element && v.element->isTensor() && v.element->declaredScalar) type = tensorTypeText(v.element->dtype, {});
  return "@map(fn (" + e + (type.empty() ? "" : ": " + type) + ") { " + pairOf(e) + " }, " + expr + ")";
}

Value raggedForm(const Value& v) {
  Value r = v;
  r.ref.clear();
  r.known.reset();
  if (v.kind == Value::Kind::Optional && v.element) r.element = std::make_shared<const Value>(raggedForm(*v.element));
  if (v.kind == Value::Kind::Sequence) {
    r.ragged = true;
    r.element.reset();
  }
  return r;
}

bool raggedNeeded(const Value& a, const Value& b) {
  if (a.kind != b.kind || a.isTensor()) return false;
  if (a.kind == Value::Kind::Optional) return a.element && b.element && raggedNeeded(*a.element, *b.element);
  if (a.ragged || b.ragged) return a.ragged != b.ragged;
  const Value *x = a.element.get(), *y = b.element.get();
  return x && y && x->isTensor() && y->isTensor() && x->shape && y->shape && x->shape->size() != y->shape->size();
}

std::pair<std::string, Value> asRagged(NodeContext& c, const Value& v, const std::string& ref) {
  if (v.kind == Value::Kind::Sequence && !v.ragged && v.element && !v.element->isTensor())
    c.fail("a sequence of sequences or optionals whose elements differ in rank is not supported");
  std::string text = raggedText(c.scope().state(), v, ref);
  return {text == ref ? ref : c.let(text), raggedForm(v)};
}

std::string raggedItem(NodeContext& c, const std::string& tensor) { return pairOf(c.let(tensor)); }

void registerSequenceConverters(std::map<std::string, Converter>& t) {
  t["SequenceEmpty"] = [](NodeContext& c) {
    Value e;
    auto dt = dtypeFromOnnx(static_cast<int>(c.intAttr("dtype", 1)));
    if (!dt) c.fail("the element type is not supported");
    e.dtype = *dt;
    c.emitValue(0, "Nil", sequenceOf(std::make_shared<const Value>(e)));
  };
  t["SequenceConstruct"] = [](NodeContext& c) {
    if (c.numInputs() == 0) c.fail("needs at least one input");
    // Elements of different ranks make a ragged sequence.
    std::set<size_t> ranks;
    for (size_t i = 0; i < c.numInputs(); ++i)
      if (c.input(i).shape) ranks.insert(c.input(i).shape->size());
    bool ragged = ranks.size() > 1;
    std::string e = "Nil";
    std::shared_ptr<const Value> elem;
    for (size_t i = c.numInputs(); i-- > 0;) {
      e = "Cons(" + (ragged ? raggedItem(c, c.ref(i)) : c.ref(i)) + ", " + e + ")";
      elem = mergeElements(elem, c.input(i));
    }
    c.emitValue(0, e, ragged ? raggedForm(sequenceOf(elem)) : sequenceOf(elem));
  };
  t["SequenceInsert"] = [](NodeContext& c) {
    const Value& s = needSequence(c, 0);
    const Value& v0 = c.input(1);
    // A tensor of another rank than the sequence's makes it ragged.
    bool ragged = s.ragged || (s.element && s.element->shape && v0.shape && s.element->shape->size() != v0.shape->size());
    std::string seq = c.ref(0), v = c.ref(1);
    Value type = sequenceOf(mergeElements(s.element && s.element->shape ? s.element : nullptr, v0));
    if (ragged) {
      std::tie(seq, type) = asRagged(c, s, seq);
      v = raggedItem(c, v);
    }
    std::string e;
    if (c.hasInput(2)) {
      c.scope().state().helpers["onnx_seq_insert"] = kInsertHelper;
      e = "@onnx_seq_insert(" + seq + ", " + position(c, 2, seq) + ", " + v + ")";
    } else {
      e = "@concat(" + seq + ", Cons(" + v + ", Nil))";
    }
    c.emitValue(0, e, type);
  };
  t["SequenceAt"] = [](NodeContext& c) {
    const Value& s = needSequence(c, 0);
    std::string seq = c.ref(0);
    std::string at = "@nth(" + seq + ", " + position(c, 1, seq) + ")";
    if (!s.ragged) return c.emitValue(0, at, elementValue(s));
    // A ragged element is reshaped back: its rank must come from ONNX's inference.
    std::string why;
    const onnx::TypeProto* t = c.scope().inferredType(c.node().output(0));
    std::optional<Value> out = t ? valueFromType(*t, why) : std::nullopt;
    if (!out || !out->isTensor() || !out->shape)
      c.fail("the sequence's elements differ in rank, and the rank of the one taken is not known");
    std::string pair = c.let(at), rank = std::to_string(out->shape->size());
    c.emit(0, "dyn.reshape(" + pair + ".0, reshape(" + pair + ".1, newshape=[" + rank + "]), allowzero=True)", s.dtype,
           std::vector<int64_t>(out->shape->size(), -1));
  };
  t["SequenceErase"] = [](NodeContext& c) {
    const Value& s = needSequence(c, 0);
    std::string seq = c.ref(0);
    c.scope().state().helpers["onnx_seq_erase"] = kEraseHelper;
    std::string pos = c.hasInput(1) ? position(c, 1, seq) : "subtract(@length(" + seq + "), 1)";
    c.emitValue(0, "@onnx_seq_erase(" + seq + ", " + pos + ")", s);
  };
  t["SequenceLength"] = [](NodeContext& c) {
    needSequence(c, 0);
    c.emit(0, "cast(@length(" + c.ref(0) + "), dtype=\"int64\")", DType::Int64, std::vector<int64_t>{});
  };
  t["ConcatFromSequence"] = [](NodeContext& c) {
    const Value& s = needSequence(c, 0);
    if (s.ragged) c.fail("the sequence's elements differ in rank; they cannot be concatenated");
    if (!s.element || !s.element->shape) c.fail("the elements' rank must be known");
    const auto& es = *s.element->shape;
    bool newAxis = c.intAttr("new_axis", 0) != 0;
    int64_t axis = c.axis(c.intAttr("axis", 0), es.size() + (newAxis ? 1 : 0));
    std::vector<int64_t> acc = es;
    if (newAxis) acc.insert(acc.begin() + axis, 1);
    acc[static_cast<size_t>(axis)] = -1;
    std::string seq = c.ref(0), ax = std::to_string(axis);
    if (newAxis) {
      // Typed both ways, so the kernel's types are exactly its rule's.
      std::vector<int64_t> grown = es;
      grown.insert(grown.begin() + axis, 1);
      seq = c.let("@map(fn (%e: " + tensorTypeText(s.element->dtype, es) + ") -> " + tensorTypeText(s.element->dtype, grown) +
                  " { expand_dims(%e, axis=" + ax + ") }, " + seq + ")");
    }
    std::string accType = tensorTypeText(s.element->dtype, acc);
    // Folded from the first element; the accumulator's axis grows, so it is `?`.
    std::string first = c.let("@hd(" + seq + ")");
    std::string e = "@foldl(fn (%acc: " + accType + ", %e) -> " + accType + " { concatenate((%acc, %e), axis=" + ax + ") }, " + first + ", @tl(" + seq + "))";
    c.emit(0, e, s.element->dtype, acc);
  };
  t["SplitToSequence"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    if (!x.shape) c.fail("the input's rank must be known");
    const auto& s = *x.shape;
    int64_t axis = c.axis(c.intAttr("axis", 0), s.size());
    int64_t n = s[static_cast<size_t>(axis)];
    // Many one-element chunks: a loop rather than a list written out.
    if ((n < 0 || n > 256) && !c.hasInput(1)) {
      // An unknown extent: one element per position, gathered by a loop.
      bool keepDims = c.intAttr("keepdims", 1) != 0;
      ImportState& st = c.scope().state();
      Recurrence r = newRecurrence(st);
      std::string rx = c.ref(0), ax = std::to_string(axis);
      r.count = c.let("take(shape_of(" + rx + ", dtype=\"int64\"), " + ax + ")");
      std::vector<int64_t> shape = s;
      std::string part = "take(" + rx + ", " + r.i + ", axis=" + ax + ")";
      if (keepDims) {
        part = "expand_dims(" + part + ", axis=" + ax + ")";
        shape[static_cast<size_t>(axis)] = 1;
      } else {
        shape.erase(shape.begin() + axis);
      }
      Value elem;
      elem.dtype = x.dtype;
      elem.shape = shape;
      Value acc = sequenceOf(std::make_shared<const Value>(elem));
      acc.ref = "%" + st.freshName("parts");
      r.carried.push_back(acc);
      r.carriedInit.push_back("Nil");
      r.nextCarried.push_back("@concat(" + acc.ref + ", Cons(" + part + ", Nil))");
      std::string result = emitRecurrence(c, r);
      acc.ref.clear();
      c.emitValue(0, result, acc);
      return;
    }
    std::vector<int64_t> sizes;
    bool keep = true;
    if (!c.hasInput(1)) {
      sizes.assign(static_cast<size_t>(n), 1);
      keep = c.intAttr("keepdims", 1) != 0;
    } else {
      std::vector<int64_t> split = c.knownInts(1, "split");
      if (c.input(1).known->rank() == 0) {
        if (n < 0) c.fail("splitting into equal chunks needs the split axis's extent to be known");
        if (split[0] < 1) c.fail("split must be positive");
        if (n / split[0] > 4096) c.fail("splitting into more than 4096 chunks is not supported");
        for (int64_t at = 0; at < n; at += split[0]) sizes.push_back(std::min(split[0], n - at));
      } else {
        if (split.size() > 4096) c.fail("splitting into more than 4096 chunks is not supported");
        sizes = split;
      }
    }
    std::string rx = c.ref(0), e = "Nil";
    Value elem;
    elem.dtype = x.dtype;
    std::shared_ptr<const Value> merged;
    int64_t end = 0;
    for (int64_t sz : sizes) {
      if (sz < 0) c.fail("split sizes must not be negative");
      if (__builtin_add_overflow(end, c.bounded(sz, "split"), &end)) c.fail("the split sizes overflow");
    }
    // A `?` extent: the sizes are taken as given (the last chunk ends at their sum).
    if (n >= 0 && end != n) c.fail("the split sizes do not add up to the axis's extent");
    for (size_t k = sizes.size(); k-- > 0;) {
      end -= sizes[k];
      std::string part = "strided_slice(" + rx + ", begin=[" + std::to_string(end) + "], end=[" + std::to_string(end + sizes[k]) +
                         "], axes=[" + std::to_string(axis) + "])";
      std::vector<int64_t> shape = s;
      shape[static_cast<size_t>(axis)] = sizes[k];
      if (!keep) {
        part = "squeeze(" + part + ", axis=[" + std::to_string(axis) + "])";
        shape.erase(shape.begin() + axis);
      }
      elem.shape = shape;
      merged = mergeElements(merged, elem);
      e = "Cons(" + part + ", " + e + ")";
    }
    c.emitValue(0, e, sequenceOf(merged));
  };
  t["SequenceMap"] = [](NodeContext& c) {
    // A loop over the first sequence's positions: the body sees each sequence
    // input's element there (and the tensor inputs whole), and every output
    // sequence grows by the body's output.
    needSequence(c, 0);
    const onnx::AttributeProto* a = c.attr("body");
    if (!a || !a->has_g()) c.fail("the body subgraph is missing");
    ImportState& st = c.scope().state();
    Recurrence r = newRecurrence(st);
    r.count = c.let("cast(@length(" + c.ref(0) + "), dtype=\"int64\")");
    std::string at = "cast(" + r.i + ", dtype=\"int32\")";
    std::vector<Value> inputs;
    for (size_t k = 0; k < c.numInputs(); ++k) {
      const Value& in = c.input(k);
      if (in.kind == Value::Kind::Sequence) {
        if (in.ragged) c.fail("input " + std::to_string(k) + "'s elements differ in rank; mapping over it is not supported");
        Value e = elementValue(in);
        e.ref = "@nth(" + c.ref(k) + ", " + at + ")";
        inputs.push_back(e);
      } else {
        inputs.push_back(in);
      }
    }
    SubgraphBody body = importSubgraph(c, a->g(), inputs);
    if (body.outputs.size() != c.numOutputs()) c.fail("the body must have one output per output sequence");
    for (size_t k = 0; k < body.outputs.size(); ++k) {
      Value elem = body.values[k];
      elem.ref.clear();
      elem.known.reset();
      Value acc = sequenceOf(std::make_shared<const Value>(elem));
      acc.ref = "%" + st.freshName("mapped");
      r.carried.push_back(acc);
      r.carriedInit.push_back("Nil");
      r.nextCarried.push_back("@concat(" + acc.ref + ", Cons(" + body.outputs[k] + ", Nil))");
    }
    r.bodyLines = body.lines;
    std::string result = emitRecurrence(c, r);
    for (size_t k = 0; k < r.carried.size(); ++k) {
      Value out = r.carried[k];
      out.ref.clear();
      c.emitValue(k, r.carried.size() == 1 ? result : result + "." + std::to_string(k), out);
    }
  };
  t["Optional"] = [](NodeContext& c) {
    Value v;
    v.kind = Value::Kind::Optional;
    if (c.hasInput(0)) {
      Value inner = c.input(0);
      inner.ref.clear();
      inner.known.reset();
      v.element = std::make_shared<const Value>(inner);
      c.emitValue(0, "Some(" + c.ref(0) + ")", v);
      return;
    }
    const onnx::AttributeProto* type = c.attr("type");
    if (!type || !type->has_tp()) c.fail("an empty optional needs its type attribute");
    std::string why;
    auto inner = valueFromType(type->tp(), why);
    if (!inner) c.fail("the optional's type " + why);
    v.element = std::make_shared<const Value>(*inner);
    c.emitValue(0, "None", v);
  };
  t["OptionalHasElement"] = [](NodeContext& c) {
    const Value& o = c.input(0);
    if (o.kind != Value::Kind::Optional) c.fail("the input must be an optional");
    c.emit(0, "match (" + c.ref(0) + ") { Some(_) => True, None => False }", DType::Bool, std::vector<int64_t>{});
  };
  t["OptionalGetElement"] = [](NodeContext& c) {
    const Value& o = c.input(0);
    if (o.kind != Value::Kind::Optional) return c.alias(0, o);
    std::string v = "%" + c.scope().state().freshName("some");
    Value inner = o.element ? *o.element : Value{};
    c.emitValue(0, "match? (" + c.ref(0) + ") { Some(" + v + ") => " + v + " }", inner);
  };
}

}  // namespace kiln::onnx_import
