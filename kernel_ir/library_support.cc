// The external libraries' table and the dnnl plan.
#include "kernel_ir/library_support.h"

#include <array>
#include <cmath>

#include "kiln/error.h"
#include "kernel_ir/shape_util.h"

namespace kiln::kernel_ir {

namespace {

bool isAnchor(const std::string& op) {
  return op == "nn.dense" || op == "nn.matmul" || op == "nn.conv2d";
}
bool isEltwise(const std::string& op) { return op == "nn.relu" || op == "sigmoid" || op == "tanh"; }

DnnlPostOp::Kind eltwiseKind(const std::string& op) {
  return op == "nn.relu" ? DnnlPostOp::Kind::Relu : op == "sigmoid" ? DnnlPostOp::Kind::Sigmoid : DnnlPostOp::Kind::Tanh;
}

// `b` is a vector along the output's channel axis: the last axis of a product,
// axis 1 of an NCHW convolution.
bool isChannelVector(const ops::TensorDesc& out, const ops::TensorDesc& b, bool conv) {
  size_t channel = conv ? 1 : out.shape.size() - 1;
  if (out.shape[channel] == ops::kAnyDim) return false;
  int64_t nonOne = 0, at = -1;
  for (size_t i = 0; i < b.shape.size(); ++i)
    if (b.shape[i] != 1) ++nonOne, at = static_cast<int64_t>(i);
  if (nonOne != 1 || b.shape[static_cast<size_t>(at)] != out.shape[channel]) return false;
  // Aligned to the right (numpy broadcasting): its axis must land on the channel axis.
  return static_cast<int64_t>(out.shape.size()) - static_cast<int64_t>(b.shape.size()) + at == static_cast<int64_t>(channel);
}

bool near(const FusedNode& n, double want) { return n.isConstant() && std::fabs(n.floatValue - want) < 1e-4 * std::fabs(want); }

// Where each value is used.
using Consumers = std::vector<std::vector<int32_t>>;

// The other operand of binary node `n` when one of its operands is `v`.
int32_t otherOperand(const FusedNode& n, int32_t v) {
  if (n.inputs.size() != 2) return -1;
  return n.inputs[0] == v ? n.inputs[1] : n.inputs[1] == v ? n.inputs[0] : -1;
}

// GELU of `x`: x / sqrt(2) (or x * 0.7071) -> erf -> + 1 -> x * that -> * 0.5,
// every intermediate used once. Returns the value of the final multiply and the
// nodes (and literals) it consists of, or -1.
int32_t matchGelu(const FusedFunction& f, int32_t x, const Consumers& uses, const std::vector<bool>& isOutput,
                  std::vector<int32_t>& parts) {
  auto only = [&](int32_t v) -> int32_t {
    return uses[static_cast<size_t>(v)].size() == 1 && !isOutput[static_cast<size_t>(v)] ? uses[static_cast<size_t>(v)][0] : -1;
  };
  auto op = [&](int32_t v, const char* name) { return v >= 0 && !f.isParam(v) && !f.node(v).isConstant() && f.node(v).op->name == name; };
  const auto& xs = uses[static_cast<size_t>(x)];
  if (xs.size() != 2) return -1;
  for (int k = 0; k < 2; ++k) {
    int32_t scale = xs[static_cast<size_t>(k)], mul = xs[static_cast<size_t>(1 - k)];
    int32_t c1 = op(scale, "divide") && f.node(scale).inputs[0] == x ? f.node(scale).inputs[1]
                 : op(scale, "multiply")                              ? otherOperand(f.node(scale), x)
                                                                      : -1;
    if (c1 < 0 || f.isParam(c1) || !near(f.node(c1), op(scale, "divide") ? std::sqrt(2.0) : std::sqrt(0.5))) continue;
    int32_t erf = only(scale);
    if (!op(erf, "erf")) continue;
    int32_t plus = only(erf);
    int32_t one = op(plus, "add") ? otherOperand(f.node(plus), erf) : -1;
    if (one < 0 || f.isParam(one) || !near(f.node(one), 1.0)) continue;
    if (!op(mul, "multiply") || otherOperand(f.node(mul), x) != plus || only(plus) != mul) continue;
    int32_t half = only(mul);
    int32_t c3 = op(half, "multiply") ? otherOperand(f.node(half), mul) : -1;
    if (c3 < 0 || f.isParam(c3) || !near(f.node(c3), 0.5)) continue;
    parts = {scale, c1, erf, plus, one, mul, half, c3};
    return half;
  }
  return -1;
}

void requireF32(const FusedFunction& f, const ops::TensorDesc& t, const std::string& what) {
  if (t.dtype != DType::Float32) throw Error("dnnl runs float32 only; " + what + " of " + f.name + " is " + std::string(dtypeName(t.dtype)));
  // oneDNN's memory has 1 to 12 dimensions; Kiln keeps scalars on the host.
  if (t.shape.empty() || t.shape.size() > 5)
    throw Error("dnnl takes tensors of rank 1 to 5; " + what + " of " + f.name + " has rank " + std::to_string(t.shape.size()));
}

void checkAnchorAttrs(const FusedNode& n) {
  static const ops::AttrMap none;
  ops::AttrReader a(n.op->name, n.attrs);
  if (auto od = a.getDType("out_dtype"); od && *od != DType::Float32) throw Error("dnnl: " + n.op->name + " with out_dtype " + std::string(dtypeName(*od)));
  if (n.op->name == "nn.conv2d") {
    if (a.getString("data_layout", "NCHW") != "NCHW" || a.getString("kernel_layout", "OIHW") != "OIHW")
      throw Error("dnnl: nn.conv2d in a layout other than NCHW/OIHW");
  }
}

}  // namespace

std::vector<DnnlStep> planDnnl(const FusedFunction& f) {
  for (size_t i = 0; i < f.params.size(); ++i) requireF32(f, f.params[i], "parameter " + std::to_string(i));
  size_t np = f.params.size();
  std::vector<int> uses(f.numValues(), 0);
  std::vector<int32_t> consumer(f.numValues(), -1);
  Consumers consumers(f.numValues());
  std::vector<bool> isOutput(f.numValues(), false);
  for (size_t i = 0; i < f.nodes.size(); ++i)
    for (int32_t in : f.nodes[i].inputs) {
      ++uses[static_cast<size_t>(in)];
      consumer[static_cast<size_t>(in)] = static_cast<int32_t>(np + i);
      consumers[static_cast<size_t>(in)].push_back(static_cast<int32_t>(np + i));
    }
  for (int32_t o : f.outputs) {
    ++uses[static_cast<size_t>(o)];
    isOutput[static_cast<size_t>(o)] = true;
    if (f.isParam(o)) throw Error("dnnl: " + f.name + " returns a parameter unchanged");
  }
  std::vector<bool> taken(f.numValues(), false);
  auto takeAll = [&](const std::vector<int32_t>& parts) {
    for (int32_t p : parts) taken[static_cast<size_t>(p)] = true;
  };
  std::vector<DnnlStep> steps;
  for (size_t i = 0; i < f.nodes.size(); ++i) {
    int32_t v = static_cast<int32_t>(np + i);
    if (taken[static_cast<size_t>(v)]) continue;
    const FusedNode& n = f.nodes[i];
    if (n.isConstant()) continue;  // a GELU's literal (checked below)
    requireF32(f, n.type, n.op->name);
    const std::string& op = n.op->name;
    if (isAnchor(op)) {
      checkAnchorAttrs(n);
      DnnlStep s{op == "nn.dense" ? DnnlStep::Kind::Dense : op == "nn.matmul" ? DnnlStep::Kind::MatMul : DnnlStep::Kind::Conv2d, v, {}};
      if (s.kind == DnnlStep::Kind::MatMul && f.typeOf(n.inputs[0]).shape.size() != 2)
        throw Error("dnnl: nn.matmul of a rank-" + std::to_string(f.typeOf(n.inputs[0]).shape.size()) + " tensor (2 only)");
      bool conv = s.kind == DnnlStep::Kind::Conv2d;
      // Follow the chain of element-wise work that only this result feeds.
      int32_t cur = v;
      bool biased = false;
      for (;;) {
        std::vector<int32_t> gelu;
        int32_t g = isOutput[static_cast<size_t>(cur)] ? -1 : matchGelu(f, cur, consumers, isOutput, gelu);
        if (g >= 0) {
          s.post.push_back({DnnlPostOp::Kind::Gelu, g, -1});
          takeAll(gelu);
          cur = g;
          continue;
        }
        if (uses[static_cast<size_t>(cur)] != 1 || isOutput[static_cast<size_t>(cur)]) break;
        int32_t c = consumer[static_cast<size_t>(cur)];
        const FusedNode& cn = f.node(c);
        if (cn.isConstant() || cn.type.dtype != DType::Float32) break;
        const std::string& cop = cn.op->name;
        if (isEltwise(cop)) {
          s.post.push_back({eltwiseKind(cop), c, -1});
        } else if (cop == "add" || cop == "nn.bias_add") {
          int32_t other = cn.inputs[0] == cur ? cn.inputs[1] : cn.inputs[0];
          // The operand must exist when the step runs: a parameter, or made by an
          // earlier step (steps run in the order of their anchors).
          if (other == cur || (!f.isParam(other) && other > v)) break;
          const ops::TensorDesc& ot = f.typeOf(other);
          if (ot.dtype != DType::Float32) break;
          const ops::TensorDesc& out = f.typeOf(cur);
          int64_t rank = static_cast<int64_t>(out.shape.size()), channel = conv ? 1 : rank - 1;
          int64_t axis = ops::AttrReader(cop, cn.attrs).getInt("axis", 1);
          if (axis < 0) axis += rank;
          // nn.bias_add names its axis; add broadcasts from the right.
          bool channelVector = cop == "nn.bias_add" ? ot.shape.size() == 1 && axis == channel && out.shape[static_cast<size_t>(channel)] != ops::kAnyDim &&
                                                          ot.shape[0] == out.shape[static_cast<size_t>(channel)]
                                                    : isChannelVector(out, ot, conv);
          if (channelVector && !biased && s.post.empty()) {
            s.post.push_back({DnnlPostOp::Kind::Bias, c, other});
            biased = true;
          } else if (cop == "add" && ot.shape == out.shape) {
            s.post.push_back({DnnlPostOp::Kind::Add, c, other});
          } else {
            break;
          }
        } else {
          break;
        }
        taken[static_cast<size_t>(c)] = true;
        cur = c;
      }
      steps.push_back(std::move(s));
    } else if (isEltwise(op)) {
      steps.push_back({DnnlStep::Kind::Eltwise, v, {{eltwiseKind(op), v, n.inputs[0]}}});
    } else if (std::vector<int32_t> gelu; (op == "divide" || op == "multiply") &&
                                          matchGelu(f, n.inputs[0], consumers, isOutput, gelu) >= 0 && gelu[0] == v) {
      steps.push_back({DnnlStep::Kind::Eltwise, v, {{DnnlPostOp::Kind::Gelu, gelu[6], n.inputs[0]}}});
      takeAll(gelu);
    } else if (std::vector<int32_t> gelu2; op == "multiply" && n.inputs.size() == 2 &&
                                           matchGelu(f, n.inputs[1], consumers, isOutput, gelu2) >= 0 && gelu2[0] == v) {
      steps.push_back({DnnlStep::Kind::Eltwise, v, {{DnnlPostOp::Kind::Gelu, gelu2[6], n.inputs[1]}}});
      takeAll(gelu2);
    } else if (op == "add") {
      const ops::TensorDesc& a = f.typeOf(n.inputs[0]);
      const ops::TensorDesc& b = f.typeOf(n.inputs[1]);
      if (a.dtype != DType::Float32 || b.dtype != DType::Float32) throw Error("dnnl runs float32 only");
      steps.push_back({DnnlStep::Kind::Binary, v, {}});
    } else {
      throw Error("dnnl does not run " + op + " (in " + f.name + ")");
    }
  }
  for (size_t i = 0; i < f.nodes.size(); ++i)
    if (f.nodes[i].isConstant() && !taken[np + i])
      throw Error("dnnl: " + f.name + " has a literal operand (dnnl takes tensors)");
  return steps;
}

namespace {

std::string dnnlUnsupported(const FusedFunction& f) {
  try {
    planDnnl(f);
  } catch (const Error& e) {
    return e.message();
  } catch (const ops::OpError& e) {
    return std::string("dnnl: ") + e.what();
  }
  return "";
}

std::vector<uint32_t> dnnlWeights(const FusedFunction& f) {
  std::vector<uint32_t> out;
  for (const DnnlStep& s : planDnnl(f)) {
    if (s.kind == DnnlStep::Kind::Eltwise || s.kind == DnnlStep::Kind::Binary) continue;
    int32_t w = f.node(s.anchor).inputs[1];
    if (f.isParam(w)) out.push_back(static_cast<uint32_t>(w));
  }
  return out;
}

#ifdef KILN_HAVE_DNNL
constexpr bool kDnnl = true;
#else
constexpr bool kDnnl = false;
#endif

const std::array<LibrarySupport, 1> kLibraries = {{{"dnnl", kDnnl, dnnlUnsupported, dnnlWeights}}};

}  // namespace

const LibrarySupport* findLibrary(std::string_view name) {
  for (const LibrarySupport& l : kLibraries)
    if (l.name == name) return &l;
  return nullptr;
}

std::span<const LibrarySupport> knownLibraries() { return kLibraries; }

}  // namespace kiln::kernel_ir
