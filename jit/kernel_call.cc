// CompiledKernel's calls: checking the operands against the kernel's types and
// shapes, and running its machine code (or its GPU launches, or its library).
#include <algorithm>
#include <iterator>
#include <memory>
#include <mutex>
#include <new>
#include <optional>

#include "device/cuda_driver.h"
#include "jit/gpu_plan.h"
#include "jit/kernel.h"
#include "jit/library_kernel.h"
#include "kernel_ir/fused_function.h"
#include "kernel_ir/shape_util.h"
#include "jit/scratch_arena.h"
#include "kiln/error.h"

namespace kiln::jit {

using device::CudaStream;
using device::streamFor;
using kernel_ir::computeShapes;

namespace {

// Bytes of scratch buffer `decl` for a call with these value shapes (and their
// flat array, the kernel's shape arguments), or nothing when the size overflows.
std::optional<uint64_t> scratchBytes(const loop::BufferDecl& decl, const std::vector<Shape>& shapes, const int64_t* shapeArray) {
  uint64_t n = 1;
  bool sized = true;
  auto times = [&](int64_t f) { sized = sized && f >= 0 && !__builtin_mul_overflow(n, static_cast<uint64_t>(f), &n); };
  if (decl.scratchValue >= 0) {
    for (int64_t d : shapes[static_cast<size_t>(decl.scratchValue)]) times(d);
  } else {
    for (int64_t f : decl.scratchSize) times(f >= 0 ? f : shapeArray[-f - 1]);
  }
  times(static_cast<int64_t>(dtypeSize(decl.dtype)));
  if (!sized) return std::nullopt;
  return n;
}

}  // namespace

const std::vector<Shape>& CompiledKernel::checkedShapes(TensorRefs inputs, std::vector<Shape>& storage) const {
  if (staticShapes_) {
    // Every shape is fixed: check the inputs and reuse the shapes computed once.
    bool match = inputs.size() == f_.params.size();
    for (size_t i = 0; match && i < inputs.size(); ++i) {
      const Tensor& t = *inputs[i];
      match = t.defined() && t.dtype() == f_.params[i].dtype && t.device() == device_ && t.rank() == f_.params[i].rank() &&
              std::equal(t.shape().begin(), t.shape().end(), f_.params[i].shape.begin());
    }
    if (match) return *staticShapes_;
    storage = shapesFor(inputs);  // the general path, with its precise errors
    return storage;
  }
  // `?` dimensions: a loop calls a kernel with the same input shapes again and
  // again, and inferring every value's shape each time (allocating as it goes)
  // cost microseconds a call. Each thread keeps the shapes of recent inputs in
  // a small direct-mapped memo, keyed by the kernel's serial and the inputs'
  // dtype, device and dimensions, and placed by a hash of that whole key: a
  // kernel called with a few shapes by turns (a batched twin over a tree's
  // levels: 32, 16, 8 ... rows) keeps an entry for each. An entry is made only
  // after shapesFor has checked those inputs. The reference returned is valid
  // until this thread's next call here, which the caller does not make before
  // it is done with it (launch calls no other kernel's checks).
  struct Memo {
    uint64_t serial = 0;
    boost::container::small_vector<int64_t, 40> key;
    std::vector<Shape> shapes;
  };
  // On the heap, a pointer in TLS: the library's static TLS block is small (the
  // Python module dlopens it) and the entries would not fit there.
  constexpr size_t kMemoEntries = 64;
  thread_local std::unique_ptr<std::array<Memo, kMemoEntries>> memo;
  if (!memo) memo = std::make_unique<std::array<Memo, kMemoEntries>>();
  boost::container::small_vector<int64_t, 40> key;
  uint64_t h = serial_ * 0x9e3779b97f4a7c15ull;
  auto add = [&](int64_t v) {
    key.push_back(v);
    h = (h ^ static_cast<uint64_t>(v)) * 0x100000001b3ull;
  };
  for (const Tensor* t : inputs) {
    if (!t->defined()) return storage = shapesFor(inputs);
    add(static_cast<int64_t>(t->dtype()) << 32 | static_cast<int64_t>(t->rank()));
    add(static_cast<int64_t>(t->device().kind) << 32 | static_cast<int64_t>(t->device().index));
    for (int64_t d : t->shape()) add(d);
  }
  Memo& m = (*memo)[(h >> 32) % kMemoEntries];
  if (m.serial == serial_ && std::equal(key.begin(), key.end(), m.key.begin(), m.key.end())) return m.shapes;
  std::vector<Shape> shapes = shapesFor(inputs);  // throws for bad inputs: nothing is remembered
  m.serial = serial_;
  m.key.assign(key.begin(), key.end());
  m.shapes = std::move(shapes);
  return m.shapes;
}

const CompiledKernel& CompiledKernel::tunedVariantFor(TensorRefs inputs) const {
  if (inputs.size() != f_.params.size()) return *this;  // the call's own check reports it
  // The inputs' shapes, flattened with each rank first: a loop calls a kernel
  // with the same shapes again and again, and then only these are compared.
  boost::container::small_vector<int64_t, 32> dims;
  for (const Tensor* t : inputs) {
    if (!t->defined()) return *this;
    dims.push_back(static_cast<int64_t>(t->rank()));
    dims.insert(dims.end(), t->shape().begin(), t->shape().end());
  }
  std::lock_guard<std::mutex> lock(variants_->mu);
  Variants& vs = *variants_;
  if (vs.last && std::equal(dims.begin(), dims.end(), vs.lastDims.begin(), vs.lastDims.end())) return *vs.last;
  std::vector<Shape> shapes;
  for (const Tensor* t : inputs) shapes.push_back(t->shape());
  std::optional<loop::Schedule> s = tuned_->lookup(task_, shapes);
  const CompiledKernel* chosen = this;
  if (s && !(*s == schedule_)) {
    std::shared_ptr<const CompiledKernel>& v = vs.bySchedule[s->toString()];
    if (!v) v = std::make_shared<const CompiledKernel>(f_, device_, false, disk_, std::string_view(), *s);
    chosen = v.get();
  }
  vs.lastDims.assign(dims.begin(), dims.end());
  vs.last = chosen;
  return *chosen;
}

std::vector<Shape> CompiledKernel::shapesFor(TensorRefs inputs) const {
  if (inputs.size() != f_.params.size())
    throw Error("kernel " + f_.name + " takes " + std::to_string(f_.params.size()) + " input(s), but " +
                std::to_string(inputs.size()) + " were given");
  std::vector<Shape> paramShapes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = *inputs[i];
    if (!t.defined()) throw Error("kernel " + f_.name + ": input " + std::to_string(i) + " is undefined");
    if (t.dtype() != f_.params[i].dtype)
      throw Error("kernel " + f_.name + ": input " + std::to_string(i) + " has dtype " + std::string(dtypeName(t.dtype())) +
                  " but the kernel expects " + ops::descToString(f_.params[i]));
    if (!(t.device() == device_))
      throw Error("kernel " + f_.name + ": input " + std::to_string(i) + " is on " + t.device().toString() +
                  " but the kernel runs on " + device_.toString());
    paramShapes.push_back(t.shape());
  }
  return computeShapes(f_, paramShapes);
}

void CompiledKernel::launch(TensorRefs inputs, TensorRefs outputs,
                            const std::vector<Shape>& shapes, std::span<const float* const> prepared) const {
  if (library_) {
    library_->run(inputs, outputs, shapes, prepared);
    return;
  }
  // Small fixed-size arrays cover almost every kernel without a heap allocation;
  // a kernel of static shapes passes the shape array it flattened once.
  boost::container::small_vector<int64_t, 64> flat;
  bool fixed = staticShapes_ && &shapes == &*staticShapes_;
  if (!fixed)
    for (const Shape& s : shapes) flat.insert(flat.end(), s.begin(), s.end());
  const int64_t* shapeArray = fixed ? staticFlat_.data() : flat.data();
  // The kernel's arguments, in loops_.buffers order; on the stack for up to 16
  // (small_vector's push_back was an out-of-line call per buffer, and a tree
  // node's kernel call makes several).
  size_t numBuffers = std::max(loops_.buffers.size(), inputs.size() + outputs.size());
  void* onStack[16];
  std::unique_ptr<void*[]> onHeap;
  void** buffers = onStack;
  if (numBuffers > std::size(onStack)) {
    onHeap = std::make_unique<void*[]>(numBuffers);
    buffers = onHeap.get();
  }
  size_t nextBuffer = 0;
  for (const Tensor* t : inputs) buffers[nextBuffer++] = t->data();
  for (const Tensor* t : outputs) buffers[nextBuffer++] = t->data();
  // Scratch buffers (values kept in memory inside the kernel, e.g. a GEMM result
  // before its epilogue) live for this call.
  boost::container::small_vector<Tensor, 2> scratch;
  std::optional<ScratchArena::Frame> arena;  // CPU scratch for this call, from the thread's arena
  size_t nextPrepared = 0;
  for (size_t b = inputs.size() + outputs.size(); b < loops_.buffers.size(); ++b) {
    const loop::BufferDecl& decl = loops_.buffers[b];
    if (decl.isPrepared()) {
      // In preparedInputs() order; the GEMM reads B itself when none is given.
      const float* p = nextPrepared < prepared.size() ? prepared[nextPrepared] : nullptr;
      ++nextPrepared;
      buffers[nextBuffer++] = const_cast<float*>(p);
      continue;
    }
    std::optional<uint64_t> bytes = scratchBytes(decl, shapes, shapeArray);
    if (!bytes) throw Error("kernel " + f_.name + ": its scratch buffer's size overflows");
    if (!gpu_ && !arena) arena.emplace();
    if (void* p = gpu_ ? nullptr : arena->take(*bytes)) {
      buffers[nextBuffer++] = p;
      continue;
    }
    scratch.push_back(Tensor::empty(decl.dtype, {static_cast<int64_t>(*bytes / dtypeSize(decl.dtype))}, device_));
    buffers[nextBuffer++] = scratch.back().data();
  }
  if (gpu_) {
    bool synchronous = false;
    CudaStream& stream = streamFor(device_, synchronous);
    gpu_->run(buffers, shapeArray, fixed ? staticFlat_.size() : flat.size(), stream);
    // Scratch blocks go back to the pool tagged with this stream, so no other
    // stream reuses them before these launches have run.
    if (synchronous) stream.synchronize();
    return;
  }
  entry_(buffers, shapeArray);
}

namespace {
// Pointers to each tensor of a span, for the reference-based interface.
boost::container::small_vector<const Tensor*, 16> refsOf(std::span<const Tensor> ts) {
  boost::container::small_vector<const Tensor*, 16> refs;
  for (const Tensor& t : ts) refs.push_back(&t);
  return refs;
}
}  // namespace

std::vector<Tensor> CompiledKernel::operator()(std::span<const Tensor> inputs) const {
  auto in = refsOf(inputs);
  TensorRefs ins(in.data(), in.size());
  std::vector<Shape> storage;
  const std::vector<Shape>& shapes = checkedShapes(ins, storage);
  std::vector<Tensor> outputs;
  for (int32_t o : f_.outputs) outputs.push_back(Tensor::empty(f_.typeOf(o).dtype, shapes[static_cast<size_t>(o)], device_));
  auto out = refsOf(outputs);
  launch(ins, TensorRefs(out.data(), out.size()), shapes, {});
  return outputs;
}

std::vector<Shape> CompiledKernel::shapesFor(std::span<const Tensor> inputs) const {
  auto in = refsOf(inputs);
  return shapesFor(TensorRefs(in.data(), in.size()));
}

void CompiledKernel::run(std::span<const Tensor> inputs, std::span<const Tensor> outputs,
                         std::span<const float* const> prepared) const {
  auto in = refsOf(inputs), out = refsOf(outputs);
  run(TensorRefs(in.data(), in.size()), TensorRefs(out.data(), out.size()), prepared);
}

void CompiledKernel::runChecked(TensorRefs inputs, TensorRefs outputs, std::span<const float* const> prepared) const {
  std::vector<Shape> storage;
  const std::vector<Shape>& shapes = checkedShapes(inputs, storage);
  if (outputs.size() != f_.outputs.size())
    throw Error("kernel " + f_.name + " has " + std::to_string(f_.outputs.size()) + " output(s), but " +
                std::to_string(outputs.size()) + " were given");
  for (size_t i = 0; i < outputs.size(); ++i) {
    int32_t o = f_.outputs[i];
    const Tensor& t = *outputs[i];
    const Shape& want = shapes[static_cast<size_t>(o)];
    if (!t.defined() || t.dtype() != f_.typeOf(o).dtype || t.shape() != want || !(t.device() == device_))
      throw Error("kernel " + f_.name + ": output " + std::to_string(i) + " must be " + shapeString(want) + "x" +
                  std::string(dtypeShortName(f_.typeOf(o).dtype)) + " on " + device_.toString());
  }
  launch(inputs, outputs, shapes, prepared);
}

void CompiledKernel::planStaticCall() {
  if (!entry_ || gpu_ || library_) return;
  size_t operands = f_.params.size() + f_.outputs.size();
  if (std::max(loops_.buffers.size(), operands) > kStaticCallBuffers) return;
  StaticCall c;
  c.numInputs = static_cast<uint32_t>(f_.params.size());
  auto add = [&c](DType dtype, std::span<const int64_t> shape) {
    c.operands.push_back({dtype, static_cast<uint32_t>(shape.size()), static_cast<uint32_t>(c.dims.size())});
    c.dims.insert(c.dims.end(), shape.begin(), shape.end());
  };
  for (const auto& p : f_.params) add(p.dtype, std::span<const int64_t>(p.shape.data(), p.shape.size()));
  for (int32_t o : f_.outputs) add(f_.typeOf(o).dtype, dims((*staticShapes_)[static_cast<size_t>(o)]));
  int32_t nextPrepared = 0;
  for (size_t b = operands; b < loops_.buffers.size(); ++b) {
    const loop::BufferDecl& decl = loops_.buffers[b];
    if (decl.isPrepared()) {
      c.extras.push_back({nextPrepared++, 0});
      continue;
    }
    // As launch sizes it: a size that overflows is left to the general path (its error).
    std::optional<uint64_t> bytes = scratchBytes(decl, *staticShapes_, staticFlat_.data());
    if (!bytes) return;
    c.extras.push_back({-1, *bytes});
  }
  staticCall_ = std::move(c);
}

bool CompiledKernel::runStatic(TensorRefs inputs, TensorRefs outputs, std::span<const float* const> prepared) const {
  const StaticCall& c = *staticCall_;
  if (inputs.size() != c.numInputs || inputs.size() + outputs.size() != c.operands.size()) return false;
  void* buffers[kStaticCallBuffers];
  for (size_t i = 0; i < c.operands.size(); ++i) {
    const Tensor& t = i < c.numInputs ? *inputs[i] : *outputs[i - c.numInputs];
    const StaticCall::Operand& op = c.operands[i];
    if (!t.defined() || t.dtype() != op.dtype || t.rank() != op.rank || !(t.device() == device_)) return false;
    const int64_t* want = c.dims.data() + op.dims;
    const int64_t* have = t.shape().data();
    for (uint32_t d = 0; d < op.rank; ++d)
      if (have[d] != want[d]) return false;
    buffers[i] = t.data();
  }
  std::optional<ScratchArena::Frame> arena;
  size_t b = c.operands.size();
  for (const StaticCall::Extra& e : c.extras) {
    if (e.prepared >= 0) {
      // The GEMM reads B itself when no packed form is given.
      buffers[b++] = static_cast<size_t>(e.prepared) < prepared.size() ? const_cast<float*>(prepared[e.prepared]) : nullptr;
      continue;
    }
    if (!arena) arena.emplace();
    void* p = arena->take(e.scratchBytes);
    if (!p) return false;  // scratch past the arena's: the general path takes it from the pool
    buffers[b++] = p;
  }
  entry_(buffers, staticFlat_.data());
  return true;
}

}  // namespace kiln::jit
