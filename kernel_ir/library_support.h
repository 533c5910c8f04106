// External libraries Kiln can hand a kernel to, and what each one runs.
//
// A library kernel is a FusedFunction whose `library` names one of these. The
// compiler asks `unsupported` whether the library takes a partitioned region
// (kept on Kiln's kernels, with the reason as a note, when not); the runtime's
// implementation (jit/library_kernel.h) runs it. A second library is one more
// entry here and one more implementation there (README "Partitioning").
//
// The dnnl plan: a library kernel is cut into steps, each one oneDNN primitive:
// an anchor (nn.dense, nn.matmul of matrices, nn.conv2d) followed by the
// element-wise work its output alone feeds — a bias (add or nn.bias_add of a
// vector along the channels), ReLU, sigmoid, tanh, GELU, the add of a tensor of
// the output's shape — as post-ops; an activation or add that follows no anchor
// is a primitive of its own. GELU is the subgraph TVM's patterns name
// (x * (1 + erf(x / sqrt(2))) * 0.5, or x * 0.7071 for the division), the only
// place literals may appear. Everything float32; NCHW/OIHW convolutions.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernel_ir/fused_function.h"

namespace kiln::kernel_ir {

struct LibrarySupport {
  std::string_view name;
  bool available;  // this Kiln was built with it
  // "" when the library runs `f`, else why not (for a note).
  std::string (*unsupported)(const FusedFunction& f);
  // Which parameters the library reads as weights (reordered once when constant).
  std::vector<uint32_t> (*weightInputs)(const FusedFunction& f);
};

const LibrarySupport* findLibrary(std::string_view name);
std::span<const LibrarySupport> knownLibraries();

// The dnnl plan of `f` (see above).
struct DnnlPostOp {
  enum class Kind : uint8_t { Bias, Relu, Sigmoid, Tanh, Gelu, Add } kind;
  int32_t node;     // the value this post-op produces
  int32_t operand;  // Bias / Add: the other input's value id; a lone activation (Eltwise step): its input
};
struct DnnlStep {
  enum class Kind : uint8_t { Dense, MatMul, Conv2d, Eltwise, Binary } kind;
  // The anchor's value; Eltwise: the first node of the activation; Binary: the add.
  int32_t anchor;
  // In order. Eltwise: one entry, the activation, the value it produces and its input.
  std::vector<DnnlPostOp> post;
  int32_t result() const { return post.empty() ? anchor : post.back().node; }
};
// Throws kiln::Error naming the node it cannot take.
std::vector<DnnlStep> planDnnl(const FusedFunction& f);

}  // namespace kiln::kernel_ir
