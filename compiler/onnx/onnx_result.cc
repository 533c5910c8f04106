// An imported program's result as ONNX defines its outputs: ragged sequences' (data, shape) pairs made tensors again.
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/onnx.h"

namespace kiln {
namespace {

// One (flattened data, int64 shape) pair as the tensor it stands for.
Value pairTensor(const Value& pair) {
  if (!pair.isTuple() || pair.fields().size() != 2 || !pair.fields()[0].isTensor() || !pair.fields()[1].isTensor())
    throw Error("a ragged sequence element is not a (data, shape) pair");
  Tensor data = pair.fields()[0].tensor(), shape = pair.fields()[1].tensor();
  if (shape.dtype() != DType::Int64 || shape.rank() != 1 || shape.device().kind != Device::Kind::CPU)
    throw Error("a ragged sequence element's shape is not an int64 vector in host memory");
  const int64_t* dims = shape.data<int64_t>();
  // reshaped refuses negative, overflowing or disagreeing shapes.
  return Value(data.reshaped(std::span<const int64_t>(dims, static_cast<size_t>(shape.shape()[0]))));
}

// A List of pairs as a List of tensors: the cells are rebuilt with their own
// constructor ids, the last (empty) cell reused.
Value raggedList(const Value& list) {
  std::vector<const Value*> cells;
  const Value* at = &list;
  for (; at->isAdt() && at->fields().size() == 2; at = &at->fields()[1]) cells.push_back(at);
  if (!at->isAdt() || !at->fields().empty()) throw Error("a ragged sequence output is not a list");
  Value rebuilt = *at;
  for (size_t k = cells.size(); k-- > 0;) rebuilt = Value::adt(cells[k]->ctor(), {pairTensor(cells[k]->fields()[0]), std::move(rebuilt)});
  return rebuilt;
}

Value outputValue(OnnxOutputForm form, const Value& v) {
  switch (form) {
    case OnnxOutputForm::Direct:
      return v;
    case OnnxOutputForm::RaggedSequence:
      return raggedList(v);
    case OnnxOutputForm::OptionalRaggedSequence:
      // Some holds one field, None none.
      if (!v.isAdt() || v.fields().size() > 1) throw Error("an optional output is not an Option");
      return v.fields().empty() ? v : Value::adt(v.ctor(), {raggedList(v.fields()[0])});
  }
  return v;
}

}  // namespace

Value onnxResult(const OnnxModel& model, const Value& result) {
  size_t n = model.outputs.size();
  if (model.outputForms.size() != n) throw Error("the model's output forms do not match its outputs");
  bool direct = true;
  for (OnnxOutputForm f : model.outputForms) direct = direct && f == OnnxOutputForm::Direct;
  if (direct) return result;
  if (n == 1) return outputValue(model.outputForms[0], result);
  if (!result.isTuple() || result.fields().size() != n)
    throw Error("the result does not hold the model's " + std::to_string(n) + " outputs");
  std::vector<Value> outs;
  for (size_t k = 0; k < n; ++k) outs.push_back(outputValue(model.outputForms[k], result.fields()[k]));
  return Value::tuple(std::move(outs));
}

}  // namespace kiln
