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
// vector along the channels), ReLU, sigmoid, tanh, the add of a tensor of the
// output's shape — as post-ops; an activation or add that follows
// no anchor is a primitive of its own. Everything float32; NCHW/OIHW convolutions.
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
  enum class Kind : uint8_t { Bias, Relu, Sigmoid, Tanh, Add } kind;
  int32_t node;     // the value this post-op produces
  int32_t operand;  // Bias / Add: the other input's value id
};
struct DnnlStep {
  enum class Kind : uint8_t { Dense, MatMul, Conv2d, Eltwise, Binary } kind;
  int32_t anchor;                 // the value of the anchor (or of the lone eltwise/binary node)
  std::vector<DnnlPostOp> post;   // in order
  int32_t result() const { return post.empty() ? anchor : post.back().node; }
};
// Throws kiln::Error naming the node it cannot take.
std::vector<DnnlStep> planDnnl(const FusedFunction& f);

}  // namespace kiln::kernel_ir
