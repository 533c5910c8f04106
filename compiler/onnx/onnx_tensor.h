// ONNX tensors and types as Kiln's: element types, TensorProto <-> kiln::Tensor.
//
// A TensorProto is untrusted input: its dims, its byte counts and its external-data
// offsets are checked (non-negative, no overflow, sizes that agree) before any
// memory is allocated or read, and external data must lie inside the model's own
// folder. Every failure is a kiln::Error naming the tensor.
#pragma once

#include <optional>
#include <string>

#include "kiln/dtype.h"
#include "kiln/tensor.h"

namespace onnx {
class TensorProto;
}

namespace kiln::onnx_import {

// Kiln's dtype for an ONNX TensorProto::DataType; nullopt for those Kiln lacks
// (strings, unsigned 32/64-bit, bfloat16, complex).
std::optional<DType> dtypeFromOnnx(int onnxType);
int dtypeToOnnx(DType t);
// "FLOAT", "STRING", ... for messages.
std::string onnxTypeName(int onnxType);

// The tensor's values in Kiln's memory. `baseDir` is the folder external data is
// read from ("" forbids external data).
Tensor tensorFromProto(const onnx::TensorProto& t, const std::string& baseDir);

// The tensor as a TensorProto with raw_data (for tests and tools writing .pb files).
void tensorToProto(const Tensor& t, onnx::TensorProto& out);

}  // namespace kiln::onnx_import
