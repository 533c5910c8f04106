// The dnnl library kernel: a FusedFunction's steps (kernel_ir/library_support.h)
// run as oneDNN primitives, made once per set of shapes.
//
// Products are oneDNN matmuls over the tensors as they lie (a dense weight
// [n, k] is the matmul's [k, n] in column order); convolutions let oneDNN choose
// its blocked layouts and reorder into and out of them, except where an added
// tensor must be read in the plain layout. A weight that is an executable
// constant is reordered into the primitive's layout once and kept with the
// primitive. oneDNN runs its own OpenMP threads: a step large enough to share
// gets as many as Kiln's pool has, a small one runs on the calling thread.
//
// Thread-safety: a kernel's primitives are made once and then executed by
// whichever thread runs the kernel, several at a time. oneDNN's own scratchpad
// (built as Debian's is, without DNNL_ENABLE_CONCURRENT_EXEC) is one buffer
// common to all primitives, safe only for a primitive run on the thread that
// made it: two VMs on two threads then wrote each other's partial sums (a
// dense layer's element read 0). So every primitive and reorder here takes its
// scratchpad from the caller (scratchpad_mode::user), from a buffer per thread.
#include <omp.h>

#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "device/thread_pool.h"
#include "jit/library_kernel.h"
#include "kernel_ir/library_support.h"
#include "kernel_ir/shape_util.h"
#include "kernel_ir/op.h"
#include "kiln/error.h"

namespace kiln::jit {

namespace {

using dnnl::memory;
using kernel_ir::DnnlPostOp;
using kernel_ir::DnnlStep;
using kernel_ir::FusedFunction;
using Tag = memory::format_tag;
constexpr memory::data_type kF32 = memory::data_type::f32;
// Below this many FLOPs (about 10 us on one core here) a step runs on one thread.
constexpr double kParallelFlops = 2e6;

dnnl::engine& cpuEngine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

memory::dims dimsOf(const Shape& s) { return memory::dims(s.begin(), s.end()); }

// Attributes that leave the scratchpad to the caller (see the top of this file).
dnnl::primitive_attr userScratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// The calling thread's scratchpad, at least `d`'s size: kept and grown, so a
// warm kernel allocates nothing. One primitive at a time uses it: a CPU stream
// runs each execute() to its end before the next starts.
memory threadScratchpad(const memory::desc& d) {
  thread_local std::vector<unsigned char> buf;
  size_t bytes = d.get_size();
  if (buf.size() < bytes) buf.resize(bytes);
  return memory(d, cpuEngine(), bytes ? buf.data() : nullptr);
}

// `from` reordered into `to`, with the caller's scratchpad.
void reorderInto(memory& from, memory& to, dnnl::stream& s) {
  dnnl::reorder::primitive_desc pd(from, to, userScratchpad());
  dnnl::reorder(pd).execute(s, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}, {DNNL_ARG_SCRATCHPAD, threadScratchpad(pd.scratchpad_desc())}});
}

Tag plainTag(size_t rank) {
  switch (rank) {
    case 1: return Tag::a;
    case 2: return Tag::ab;
    case 3: return Tag::abc;
    case 4: return Tag::abcd;
    default: return Tag::abcde;
  }
}

memory::desc plain(const Shape& s) { return memory::desc(dimsOf(s), kF32, plainTag(s.size())); }

// `b` broadcast against an output of `out`'s shape, as oneDNN wants it: the
// same rank, 1 where it is broadcast.
memory::desc broadcastDesc(const Shape& b, const Shape& out) {
  Shape full(out.size(), 1);
  for (size_t i = 0; i < b.size(); ++i) full[out.size() - b.size() + i] = b[i];
  return plain(full);
}

dnnl::algorithm eltwiseAlg(DnnlPostOp::Kind k) {
  switch (k) {
    case DnnlPostOp::Kind::Relu: return dnnl::algorithm::eltwise_relu;
    case DnnlPostOp::Kind::Sigmoid: return dnnl::algorithm::eltwise_logistic;
    case DnnlPostOp::Kind::Gelu: return dnnl::algorithm::eltwise_gelu_erf;
    default: return dnnl::algorithm::eltwise_tanh;
  }
}

// One step made for one set of shapes.
struct Made {
  dnnl::primitive prim;
  memory::desc src, weights, dst, bias;             // what the primitive takes
  memory::desc userSrc, userWeights, userDst;       // how Kiln's tensors lie
  std::vector<std::pair<int32_t, memory::desc>> binary;  // Add post-ops: operand value, its desc
  bool hasBias = false;
  bool swapped = false;  // Binary: the operands' order reversed (the broadcast one second)
  double flops = 0;      // the step's work, for how many threads it gets
  memory::desc scratchpad;  // what the primitive needs (threadScratchpad)
  std::mutex mu;
  std::unordered_map<const void*, memory> constWeights;  // constant data -> reordered once
};

class DnnlKernel final : public LibraryKernel {
 public:
  explicit DnnlKernel(const FusedFunction& f)
      : f_(f), steps_(kernel_ir::planDnnl(f)), weights_(kernel_ir::findLibrary("dnnl")->weightInputs(f)) {
    // A convolution's result read only as the data of later convolutions of this
    // kernel stays in the layout oneDNN chose for it: no reorder out and back in.
    keepLayout_.assign(f_.numValues(), false);
    std::vector<int> convData(f_.numValues(), 0), uses(f_.numValues(), 0);
    for (const auto& n : f_.nodes)
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        ++uses[static_cast<size_t>(n.inputs[k])];
        if (k == 0 && !n.isConstant() && n.op->name == "nn.conv2d" && n.inputs[1] != n.inputs[0]) ++convData[static_cast<size_t>(n.inputs[0])];
      }
    for (int32_t o : f_.outputs) ++uses[static_cast<size_t>(o)];
    for (const DnnlStep& st : steps_) {
      size_t r = static_cast<size_t>(st.result());
      keepLayout_[r] = st.kind == DnnlStep::Kind::Conv2d && uses[r] > 0 && uses[r] == convData[r];
    }
  }

  const std::vector<uint32_t>& weightInputs() const override { return weights_; }

  void run(std::span<const Tensor* const> inputs, std::span<const Tensor* const> outputs, const std::vector<Shape>& shapes,
           std::span<const float* const> prepared) const override {
    try {
      int threads = device::currentThreads();
      dnnl::stream stream(cpuEngine());
      // Every value's data: parameters, outputs, and temporaries for the rest;
      // and its layout when that is oneDNN's (empty: plain, as Kiln's tensors lie).
      std::vector<void*> data(f_.numValues(), nullptr);
      std::vector<memory::desc> layout(f_.numValues());
      std::vector<Tensor> temps;
      for (size_t i = 0; i < inputs.size(); ++i) data[i] = inputs[i]->data();
      for (size_t i = 0; i < outputs.size(); ++i) data[static_cast<size_t>(f_.outputs[i])] = outputs[i]->data();
      for (size_t s = 0; s < steps_.size(); ++s) {
        const DnnlStep& st = steps_[s];
        size_t r = static_cast<size_t>(st.result());
        Made& m = made(s, shapes);
        if (keepLayout_[r] && m.dst != m.userDst) {
          layout[r] = m.dst;
          temps.push_back(Tensor::empty(DType::Float32, {static_cast<int64_t>(m.dst.get_size() / sizeof(float)) + 1}));
          data[r] = temps.back().data();
        } else if (!data[r]) {
          temps.push_back(Tensor::empty(DType::Float32, shapes[r]));
          data[r] = temps.back().data();
        }
        // OpenMP's team for work worth sharing; small steps (a batch-1 product, a
        // lone activation) stay on this thread: waking a team costs more than
        // they take, and its spinning threads would contend with Kiln's pool.
        omp_set_num_threads(m.flops >= kParallelFlops ? threads : 1);
        execute(st, m, data, layout, prepared, stream);
      }
      stream.wait();
    } catch (const dnnl::error& e) {
      throw Error("dnnl: kernel " + f_.name + ": " + e.what());
    }
  }

 private:
  // The weight's `prepared` pointer (non-null: an executable constant).
  const float* constantWeight(int32_t w, std::span<const float* const> prepared) const {
    for (size_t i = 0; i < weights_.size() && i < prepared.size(); ++i)
      if (static_cast<int32_t>(weights_[i]) == w) return prepared[i];
    return nullptr;
  }

  Made& made(size_t step, const std::vector<Shape>& shapes) const {
    std::string key = std::to_string(step);
    const DnnlStep& st = steps_[step];
    auto addShape = [&](int32_t v) {
      key += ':';
      for (int64_t d : shapes[static_cast<size_t>(v)]) key += std::to_string(d) + ',';
    };
    const kernel_ir::FusedNode& a = f_.node(st.anchor);
    for (int32_t in : a.inputs) addShape(in);
    for (const DnnlPostOp& p : st.post)
      if (p.operand >= 0) addShape(p.operand);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = made_.find(key);
    if (it != made_.end()) return *it->second;
    auto m = std::make_unique<Made>();
    build(st, shapes, *m);
    return *made_.emplace(key, std::move(m)).first->second;
  }

  void build(const DnnlStep& st, const std::vector<Shape>& shapes, Made& m) const {
    const kernel_ir::FusedNode& a = f_.node(st.anchor);
    auto shapeOf = [&](int32_t v) -> const Shape& { return shapes[static_cast<size_t>(v)]; };
    const Shape& out = shapeOf(st.result());
    dnnl::post_ops po;
    for (const DnnlPostOp& p : st.post) {
      if (p.kind == DnnlPostOp::Kind::Bias) continue;
      if (p.kind == DnnlPostOp::Kind::Add) {
        memory::desc d = st.kind == DnnlStep::Kind::Conv2d ? plain(shapeOf(p.operand))
                                                            : broadcastDesc(shapeOf(p.operand), productShape(out));
        po.append_binary(dnnl::algorithm::binary_add, d);
        m.binary.emplace_back(p.operand, d);
      } else {
        po.append_eltwise(1.f, eltwiseAlg(p.kind), 0.f, 0.f);
      }
    }
    dnnl::primitive_attr attr = userScratchpad();
    attr.set_post_ops(po);
    const DnnlPostOp* bias = !st.post.empty() && st.post[0].kind == DnnlPostOp::Kind::Bias ? &st.post[0] : nullptr;
    switch (st.kind) {
      case DnnlStep::Kind::Dense:
      case DnnlStep::Kind::MatMul: {
        const Shape& x = shapeOf(a.inputs[0]);
        const Shape& w = shapeOf(a.inputs[1]);
        ops::AttrReader at(a.op->name, a.attrs);
        bool dense = st.kind == DnnlStep::Kind::Dense;
        bool ta = !dense && at.getBool("transpose_a", false);
        bool tb = dense || at.getBool("transpose_b", false);
        int64_t k = ta ? x[0] : x.back();
        int64_t rows = 1;
        if (ta) rows = x[1];
        else
          for (size_t i = 0; i + 1 < x.size(); ++i) rows *= x[i];
        int64_t n = tb ? w[0] : w[1];
        m.userSrc = memory::desc({rows, k}, kF32, ta ? Tag::ba : Tag::ab);
        m.userWeights = memory::desc({k, n}, kF32, tb ? Tag::ba : Tag::ab);
        m.userDst = memory::desc({rows, n}, kF32, Tag::ab);
        m.src = m.userSrc;
        m.dst = m.userDst;
        m.weights = memory::desc({k, n}, kF32, Tag::any);
        m.flops = 2.0 * static_cast<double>(rows) * static_cast<double>(k) * static_cast<double>(n);
        if (bias) m.bias = memory::desc({1, n}, kF32, Tag::ab);
        dnnl::matmul::desc d = bias ? dnnl::matmul::desc(m.src, m.weights, m.bias, m.dst) : dnnl::matmul::desc(m.src, m.weights, m.dst);
        dnnl::matmul::primitive_desc pd(d, attr, cpuEngine());
        m.weights = pd.weights_desc();
        m.scratchpad = pd.scratchpad_desc();
        m.prim = dnnl::matmul(pd);
        break;
      }
      case DnnlStep::Kind::Conv2d: {
        const Shape& x = shapeOf(a.inputs[0]);
        const Shape& w = shapeOf(a.inputs[1]);
        ops::AttrReader at(a.op->name, a.attrs);
        ops::Window2d win = ops::windowAttrs(at);
        int64_t groups = at.getInt("groups", 1);
        memory::dims wd = groups == 1 ? dimsOf(w) : memory::dims{groups, w[0] / groups, w[1], w[2], w[3]};
        m.userSrc = plain(x);
        m.userWeights = memory::desc(wd, kF32, groups == 1 ? Tag::oihw : Tag::goihw);
        m.userDst = plain(out);
        // An added tensor is read in the plain layout: keep the output plain then.
        bool plainOut = !m.binary.empty();
        m.src = memory::desc(dimsOf(x), kF32, plainOut ? Tag::nchw : Tag::any);
        m.dst = memory::desc(dimsOf(out), kF32, plainOut ? Tag::nchw : Tag::any);
        m.weights = memory::desc(wd, kF32, Tag::any);
        m.flops = 2.0 * static_cast<double>(ops::numElements(out)) * static_cast<double>(w[1] * w[2] * w[3]);
        if (bias) m.bias = memory::desc({out[1]}, kF32, Tag::a);
        memory::dims strides{win.strides[0], win.strides[1]}, dil{win.dilation[0] - 1, win.dilation[1] - 1};
        memory::dims padL{win.pad[0], win.pad[1]}, padR{win.pad[2], win.pad[3]};
        auto fwd = dnnl::prop_kind::forward_inference;
        auto alg = dnnl::algorithm::convolution_direct;
        dnnl::convolution_forward::desc d =
            bias ? dnnl::convolution_forward::desc(fwd, alg, m.src, m.weights, m.bias, m.dst, strides, dil, padL, padR)
                 : dnnl::convolution_forward::desc(fwd, alg, m.src, m.weights, m.dst, strides, dil, padL, padR);
        dnnl::convolution_forward::primitive_desc pd(d, attr, cpuEngine());
        m.src = pd.src_desc();
        m.weights = pd.weights_desc();
        m.dst = pd.dst_desc();
        m.scratchpad = pd.scratchpad_desc();
        m.prim = dnnl::convolution_forward(pd);
        break;
      }
      case DnnlStep::Kind::Eltwise: {
        m.src = m.dst = m.userSrc = m.userDst = plain(out);
        dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, eltwiseAlg(st.post[0].kind), m.src, 0.f, 0.f);
        dnnl::eltwise_forward::primitive_desc pd(d, userScratchpad(), cpuEngine());
        m.scratchpad = pd.scratchpad_desc();
        m.prim = dnnl::eltwise_forward(pd);
        break;
      }
      case DnnlStep::Kind::Binary: {
        // The full-size operand first (oneDNN broadcasts only the second).
        const Shape& s0 = shapeOf(a.inputs[0]);
        bool swap = s0 != out;
        const Shape& first = swap ? shapeOf(a.inputs[1]) : s0;
        const Shape& second = swap ? s0 : shapeOf(a.inputs[1]);
        if (first != out) throw Error("dnnl: kernel " + f_.name + ": add broadcasts both operands (dnnl broadcasts one)");
        m.src = m.userSrc = plain(out);
        m.weights = m.userWeights = broadcastDesc(second, out);
        m.dst = m.userDst = plain(out);
        m.swapped = swap;
        dnnl::binary::desc d(dnnl::algorithm::binary_add, m.src, m.weights, m.dst);
        dnnl::binary::primitive_desc pd(d, userScratchpad(), cpuEngine());
        m.scratchpad = pd.scratchpad_desc();
        m.prim = dnnl::binary(pd);
        break;
      }
    }
    m.hasBias = bias != nullptr;
  }

  // A product's output as the matmul sees it: leading dimensions folded into rows.
  static Shape productShape(const Shape& out) {
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < out.size(); ++i) rows *= out[i];
    return Shape{rows, out.back()};
  }

  // `user` data as the primitive wants `want`: the data itself, or a reorder into `scratch`.
  static memory input(const memory::desc& user, const memory::desc& want, void* data, dnnl::stream& s,
                      std::vector<memory>& keep) {
    memory u(user, cpuEngine(), data);
    if (user == want) return u;
    memory r(want, cpuEngine());
    reorderInto(u, r, s);
    keep.push_back(r);
    return r;
  }

  void execute(const DnnlStep& st, Made& m, std::vector<void*>& data, const std::vector<memory::desc>& layout,
               std::span<const float* const> prepared, dnnl::stream& s) const {
    const kernel_ir::FusedNode& a = f_.node(st.anchor);
    auto ptr = [&](int32_t v) { return data[static_cast<size_t>(v)]; };
    void* out = ptr(st.result());
    std::vector<memory> keep;
    std::unordered_map<int, memory> args;
    if (st.kind == DnnlStep::Kind::Eltwise) {
      args = {{DNNL_ARG_SRC, memory(m.src, cpuEngine(), ptr(st.post[0].operand))}, {DNNL_ARG_DST, memory(m.dst, cpuEngine(), out)},
              {DNNL_ARG_SCRATCHPAD, threadScratchpad(m.scratchpad)}};
      m.prim.execute(s, args);
      return;
    }
    if (st.kind == DnnlStep::Kind::Binary) {
      int32_t first = m.swapped ? a.inputs[1] : a.inputs[0], second = m.swapped ? a.inputs[0] : a.inputs[1];
      args = {{DNNL_ARG_SRC_0, memory(m.src, cpuEngine(), ptr(first))},
              {DNNL_ARG_SRC_1, memory(m.weights, cpuEngine(), ptr(second))},
              {DNNL_ARG_DST, memory(m.dst, cpuEngine(), out)},
              {DNNL_ARG_SCRATCHPAD, threadScratchpad(m.scratchpad)}};
      m.prim.execute(s, args);
      return;
    }
    const memory::desc& srcLayout = layout[static_cast<size_t>(a.inputs[0])];
    args[DNNL_ARG_SRC] = input(srcLayout.data.ndims ? srcLayout : m.userSrc, m.src, ptr(a.inputs[0]), s, keep);
    int32_t w = a.inputs[1];
    const float* constant = constantWeight(w, prepared);
    if (constant && m.weights != m.userWeights) {
      std::lock_guard<std::mutex> lock(m.mu);
      auto it = m.constWeights.find(constant);
      if (it == m.constWeights.end()) {
        std::vector<memory> once;
        it = m.constWeights.emplace(constant, input(m.userWeights, m.weights, ptr(w), s, once)).first;
        s.wait();
      }
      args[DNNL_ARG_WEIGHTS] = it->second;
    } else {
      args[DNNL_ARG_WEIGHTS] = input(m.userWeights, m.weights, ptr(w), s, keep);
    }
    if (m.hasBias) args[DNNL_ARG_BIAS] = memory(m.bias, cpuEngine(), ptr(st.post[0].operand));
    for (size_t i = 0, b = 0; i < st.post.size(); ++i) {
      if (st.post[i].kind != DnnlPostOp::Kind::Add) continue;
      args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i - (m.hasBias ? 1 : 0))) | DNNL_ARG_SRC_1] =
          memory(m.binary[b].second, cpuEngine(), ptr(m.binary[b].first));
      ++b;
    }
    // Into the output as it must lie, or (kept in oneDNN's layout) as the primitive writes it.
    bool kept = layout[static_cast<size_t>(st.result())].data.ndims != 0;
    bool reorderOut = !kept && m.dst != m.userDst;
    memory dst = kept ? memory(m.dst, cpuEngine(), out) : reorderOut ? memory(m.dst, cpuEngine()) : memory(m.userDst, cpuEngine(), out);
    args[DNNL_ARG_DST] = dst;
    args[DNNL_ARG_SCRATCHPAD] = threadScratchpad(m.scratchpad);
    m.prim.execute(s, args);
    if (reorderOut) {
      memory u(m.userDst, cpuEngine(), out);
      reorderInto(dst, u, s);
    }
    // Reordered inputs must live until the stream has run them.
    if (!keep.empty() || reorderOut) s.wait();
  }

  FusedFunction f_;
  std::vector<DnnlStep> steps_;
  std::vector<bool> keepLayout_;  // per value
  std::vector<uint32_t> weights_;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::unique_ptr<Made>> made_;
};

}  // namespace

std::shared_ptr<const LibraryKernel> makeDnnlKernel(const FusedFunction& f) { return std::make_shared<DnnlKernel>(f); }

}  // namespace kiln::jit
