// Importing ONNX models: an ONNX file becomes a Kiln program and its weights.
//
// `importOnnx` parses a ModelProto with ONNX's own library, checks it
// (onnx::checker), runs ONNX's shape inference, and converts the graph into a
// program in Kiln's language: `def @main(inputs..., weights...)` in Relay text,
// with the initializers (and constants large enough to be weights) as `params`
// bound to the weight parameters, as TVM's `relay.frontend.from_onnx` returns
// (module, params). The program is plain text a user can read, print with
// `kilnc --emit ir` and parse back; `compileOnnx` compiles it with the weights
// bound as constants, through the same pipeline as any Relay program (fusion,
// placement, memory planning, executables).
//
// Graph inputs keep their ONNX names where those are Relay identifiers; other
// characters become '_' (`inputs` maps each ONNX name to its parameter). Symbolic
// and unknown dimensions become `?`, so one imported program serves every batch size.
//
// Everything read is untrusted: a model Kiln cannot import is a kiln::Error naming
// the node (name, op type, opset) and the reason; no input bytes crash the process.
// Thread-safe: every call works on its own model.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/executable.h"
#include "kiln/tensor.h"
#include "kiln/value.h"

namespace kiln {

// Options of an import. `inputValues` holds values for graph inputs by ONNX name:
// an input the program needs as a constant (a Reshape's shape, a ReduceSum's axes, a
// Resize's scales, fed as graph inputs rather than initializers) is frozen to its
// value there, and the program is specialized to it (as JAX specializes on static
// arguments and TVM's from_onnx on freeze_params); other inputs stay inputs. Without
// a value for such an input the import fails naming it.
//
// `inputShapes` gives graph inputs' shapes by ONNX name, as TVM's from_onnx takes a
// shape dict: they replace what the model declares (a symbolic batch becomes
// static, so kernels are compiled for it; an undeclared rank becomes known). A
// static dimension the model declares must agree. For a sequence input, the shape
// is its elements'.
struct OnnxImportOptions {
  std::map<std::string, Tensor> inputValues;
  std::map<std::string, std::vector<int64_t>> inputShapes;
};

// How the program returns an ONNX output. A Kiln List is typed, all its tensors of
// one rank; an ONNX sequence may mix ranks (a loop that starts from a scalar and
// appends vectors). Such a "ragged" sequence is returned as a List of pairs: each
// tensor's data flattened to one dimension and its shape as an int64 vector.
// `onnxResult` turns those back into tensors.
enum class OnnxOutputForm : uint8_t {
  Direct,                  // a tensor, a List of tensors, an Option, as ONNX defines it
  RaggedSequence,          // a List of (data, shape) pairs
  OptionalRaggedSequence,  // an Option holding such a List
};

struct OnnxModel {
  std::string program;                                    // Relay text of the model
  std::map<std::string, Tensor> params;                   // weights, by @main parameter name
  std::vector<std::pair<std::string, std::string>> inputs;  // (ONNX input name, @main parameter), in order
  std::vector<std::string> outputs;                       // ONNX output names, in result order
  std::vector<OnnxOutputForm> outputForms;                // how each output is returned (one per output)
  std::vector<std::string> frozenInputs;                  // graph inputs specialized to their values (no longer inputs)
  // Where each node's code starts in `program` (1-based line), for error messages.
  std::vector<std::pair<uint32_t, std::string>> nodeLines;
  int64_t opset = 0;                                      // the default domain's opset
  std::string file;                                       // the name errors use
};

// `bytes` holds a serialized ModelProto; `file` names it in messages; external
// data is read relative to `baseDir` (empty: external data is refused).
OnnxModel importOnnx(std::string_view bytes, const std::string& file = "<onnx>", const std::string& baseDir = "");
OnnxModel importOnnxFile(const std::string& path);
OnnxModel importOnnx(std::string_view bytes, const std::string& file, const std::string& baseDir, const OnnxImportOptions& options);
OnnxModel importOnnxFile(const std::string& path, const OnnxImportOptions& options);

// The graph's inputs (those without an initializer), in order: what positional
// inputs refer to.
std::vector<std::string> onnxInputNames(const std::string& path);

// Compiles an imported model with its weights bound (besides options.params).
std::shared_ptr<const Executable> compileOnnx(const OnnxModel& model, CompileOptions options = {});

// The result of running `model`'s program (one value, or a tuple for several
// outputs) as ONNX defines its outputs: each ragged sequence's pairs become tensors
// again (zero-copy reshapes); everything else is returned as it is. Throws
// kiln::Error when the result does not have the model's form.
Value onnxResult(const OnnxModel& model, const Value& result);
// An error from compiling `model.program` that points into it, restated naming the
// ONNX node whose code it is; any other error as it is. compileOnnx does this itself.
Error explainOnnxError(const OnnxModel& model, const Error& e);

// Whether a path names an ONNX model (by its `.onnx` extension).
bool isOnnxPath(const std::string& path);

}  // namespace kiln
