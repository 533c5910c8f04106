// RowBatcher: deferred kernel calls, run level by level in batches over stacked rows.
#include "vm/row_batcher.h"

#include <algorithm>
#include <boost/container/small_vector.hpp>
#include <cstring>
#include <tuple>

#include "jit/kernel.h"
#include "jit/scratch_arena.h"
#include "vm/bound_kernels.h"
#include "vm/memory.h"

namespace kiln::vm {

namespace {

const Tensor& tensorAt(const Value& v) { return v.asTensorObject()->tensor; }

// The tensor object in `v` when it is a host tensor of exactly type `d`, else null.
const TensorObject* fitting(const Value& v, const ops::TensorDesc& d) {
  if (!v.isObject(ObjectKind::Tensor)) return nullptr;
  const TensorObject* o = v.asTensorObject();
  const Tensor& t = o->tensor;
  return t.device() == Device{} && t.dtype() == d.dtype && t.shape() == d.shape ? o : nullptr;
}

}  // namespace

RowBatcher::RowBatcher(runtime::KernelTable& table, BoundKernels& kernels, TensorMemory& memory)
    : table_(table), kernels_(kernels), memory_(memory), states_(table.executable().kernels().size()) {}

RowBatcher::~RowBatcher() = default;

RowBatcher::KernelState& RowBatcher::stateOf(uint32_t k) {
  KernelState& s = states_[k];
  if (s.looked) [[likely]]
    return s;
  s.looked = true;
  s.plan = table_.rowBatchPlan(k);
  if (s.plan) {
    const kernel_ir::FusedFunction& f = *table_.executable().kernels()[k].function;
    bool product = std::any_of(f.nodes.begin(), f.nodes.end(),
                               [](const kernel_ir::FusedNode& n) { return !n.isConstant() && n.op->name == "nn.dense"; });
    uint64_t rowBytes = 0;
    for (size_t i = 0; i < f.params.size(); ++i)
      if (s.plan->rowParam[i])
        rowBytes = std::max(rowBytes, static_cast<uint64_t>(numElements(f.params[i].shape)) * dtypeSize(f.params[i].dtype));
    s.worthIt = product || rowBytes <= kMostRowBytesWithoutWeights;
  }
  return s;
}

bool RowBatcher::deferLooked(uint32_t k, const Value* R, bytecode::RegisterList ins, bytecode::RegisterList outs) {
  KernelState& s = stateOf(k);
  if (!s.worthIt) return false;
  const kernel_ir::FusedFunction& f = *table_.executable().kernels()[k].function;
  if (ins.size != f.params.size() || outs.size != f.outputs.size()) return false;
  const std::vector<bool>& rowParam = s.plan->rowParam;
  uint32_t level = 1;
  uint64_t shared = 0xcbf29ce484222325ull;
  uint64_t queued = 0;  // bit i: input i (of the first 64) is a deferred call's result
  for (uint32_t i = 0; i < ins.size; ++i) {
    const TensorObject* o = fitting(R[ins[i]], f.params[i]);
    if (!o) return false;  // the kernel's own check reports what is wrong, now
    if (levelCount_) {
      uint32_t l = levelOf(o);
      if (l && i < 64) queued |= uint64_t{1} << i;
      level = std::max(level, l + 1);
    }
    if (!rowParam[i]) shared = (shared ^ reinterpret_cast<uintptr_t>(o->tensor.data())) * 0x100000001b3ull;
  }
  uint64_t bytes = 0;
  for (uint32_t j = 0; j < outs.size; ++j) {
    const TensorObject* o = fitting(R[outs[j]], f.typeOf(f.outputs[j]));
    // Written later, an output must be memory no one else can see meanwhile,
    // and no operand of this or another deferred call.
    if (!o || o->tensor.memoryUseCount() != 1 || (levelCount_ && levelOf(o))) return false;
    for (uint32_t i = 0; i < ins.size; ++i)
      if (R[ins[i]].asTensorObject() == o) return false;
    bytes += o->tensor.nbytes();
  }
  // The call is recorded last: a failure part way (out of memory) leaves no
  // call with operands missing.
  uint32_t first = static_cast<uint32_t>(operands_.size());
  for (uint32_t i = 0; i < ins.size; ++i) {
    const Value& v = R[ins[i]];
    if (rowParam[i]) {
      if (queued >> i & 1) operands_.emplace_back().view(v);  // its producer's output slot owns it
      else operands_.push_back(v);
      continue;
    }
    auto held = std::find_if(kept_.begin(), kept_.end(), [&](const Value& k) { return k.asTensorObject() == v.asTensorObject(); });
    if (held == kept_.end()) {
      kept_.push_back(v);
      held = kept_.end() - 1;
    }
    operands_.emplace_back().view(*held);
  }
  for (uint32_t j = 0; j < outs.size; ++j) {
    operands_.push_back(R[outs[j]]);
    setLevel(R[outs[j]].asTensorObject(), level);
  }
  calls_.push_back(Call{k, level, first, shared});
  heldBytes_ += bytes;
  if (calls_.size() >= kMostCalls || heldBytes_ >= kMostBytes) flush();
  return true;
}

void RowBatcher::flush() {
  if (calls_.empty()) return;
  struct Forget {
    RowBatcher& b;
    ~Forget() { b.drop(); }
  } forget{*this};
  // By level first, a counting sort (levels are 1 + the depth of the deferred
  // dataflow, at most the number of calls): a level reads only results of lower
  // ones. Then, within a level, calls of one kernel on the same shared inputs
  // side by side, in the order they were made.
  std::vector<const Call*>& order = order_;
  order.resize(calls_.size());
  uint32_t deepest = 0;
  for (const Call& c : calls_) deepest = std::max(deepest, c.level);
  std::vector<uint32_t>& starts = levelStarts_;
  starts.assign(deepest + 2, 0);
  for (const Call& c : calls_) ++starts[c.level + 1];
  for (uint32_t l = 1; l <= deepest + 1; ++l) starts[l] += starts[l - 1];
  for (const Call& c : calls_) order[starts[c.level]++] = &c;  // starts[l] now ends level l
  auto byGroup = [](const Call* a, const Call* b) { return std::tie(a->kernel, a->shared) < std::tie(b->kernel, b->shared); };
  for (uint32_t l = 1, begin = 0; l <= deepest; begin = starts[l++]) {
    auto first = order.begin() + begin, last = order.begin() + starts[l];
    if (!std::is_sorted(first, last, byGroup)) std::stable_sort(first, last, byGroup);
  }
  auto sameShared = [this](const Call& a, const Call& b) {
    const std::vector<bool>& rowParam = states_[a.kernel].plan->rowParam;
    for (size_t i = 0; i < rowParam.size(); ++i)
      if (!rowParam[i] && tensorAt(operands_[a.first + i]).data() != tensorAt(operands_[b.first + i]).data()) return false;
    return true;
  };
  for (size_t i = 0; i < order.size();) {
    const Call& c = *order[i];
    size_t j = i + 1;
    while (j < order.size() && order[j]->level == c.level && order[j]->kernel == c.kernel && order[j]->shared == c.shared &&
           sameShared(c, *order[j]))
      ++j;
    KernelState& s = states_[c.kernel];
    s.flushedCalls += static_cast<uint32_t>(j - i);
    if (j - i > 1 && !s.twinLooked) {
      s.twinLooked = true;
      s.twin = table_.rowBatchedTwin(c.kernel);
    }
    if (j - i == 1 || !s.twin) {
      for (size_t m = i; m < j; ++m) runOne(*order[m]);
    } else {
      runBatch(&order[i], j - i);
      s.flushedBatched += static_cast<uint32_t>(j - i);
    }
    i = j;
  }
  // A kernel whose calls keep finding no partner is run as called for a while.
  for (const Call& c : calls_) {
    KernelState& s = states_[c.kernel];
    if (!s.flushedCalls) continue;  // seen already
    s.singleFlushes = s.flushedBatched ? 0 : s.singleFlushes + 1;
    if (s.singleFlushes >= kSingleFlushes) s.backOff = kBackOffCalls;
    s.flushedCalls = s.flushedBatched = 0;
  }
}

void RowBatcher::drop() noexcept {
  for (const Call& c : calls_) states_[c.kernel].flushedCalls = states_[c.kernel].flushedBatched = 0;
  calls_.clear();
  operands_.clear();  // views of kept_ first
  kept_.clear();
  if (levelCount_) std::fill(levels_.begin(), levels_.end(), LevelSlot{});
  levelCount_ = 0;
  heldBytes_ = 0;
}

namespace {
size_t slotOf(const void* object, size_t slots) {
  return static_cast<size_t>((reinterpret_cast<uintptr_t>(object) >> 4) * 0x9e3779b97f4a7c15ull >> 20) & (slots - 1);
}
}  // namespace

uint32_t RowBatcher::levelOf(const void* object) const {
  if (levels_.empty()) return 0;
  for (size_t i = slotOf(object, levels_.size());; i = (i + 1) & (levels_.size() - 1)) {
    if (levels_[i].object == object) return levels_[i].level;
    if (!levels_[i].object) return 0;
  }
}

void RowBatcher::setLevel(const void* object, uint32_t level) {
  if (2 * (levelCount_ + 1) > levels_.size()) {
    std::vector<LevelSlot> old = std::move(levels_);
    levels_.assign(std::max<size_t>(64, old.size() * 2), LevelSlot{});
    levelCount_ = 0;
    for (const LevelSlot& s : old)
      if (s.object) setLevel(s.object, s.level);
  }
  size_t i = slotOf(object, levels_.size());
  while (levels_[i].object && levels_[i].object != object) i = (i + 1) & (levels_.size() - 1);
  if (!levels_[i].object) ++levelCount_;
  levels_[i] = {object, level};
}

void RowBatcher::runOne(const Call& c) {
  const kernel_ir::FusedFunction& f = *table_.executable().kernels()[c.kernel].function;
  size_t nIn = f.params.size(), nOut = f.outputs.size();
  boost::container::small_vector<const Tensor*, 16> refs(nIn + nOut);
  for (size_t i = 0; i < nIn + nOut; ++i) refs[i] = &tensorAt(operands_[c.first + i]);
  const jit::CompiledKernel& kernel = kernels_.on(c.kernel, Device{});
  const float* prepared[8];
  size_t numPrepared = std::min<size_t>(kernel.preparedInputs().size(), 8);
  if (numPrepared)
    kernels_.prepared(c.kernel, kernel, std::span<const Tensor* const>(refs.data(), nIn), std::span<const float*>(prepared, numPrepared));
  kernel.run(jit::CompiledKernel::TensorRefs(refs.data(), nIn), jit::CompiledKernel::TensorRefs(refs.data() + nIn, nOut),
             std::span<const float* const>(prepared, numPrepared));
}

void RowBatcher::runBatch(const Call* const* calls, size_t n) {
  const Call& c0 = *calls[0];
  const KernelState& s = states_[c0.kernel];
  const kernel_ir::FusedFunction& f = s.plan->twin;
  size_t nIn = f.params.size(), nOut = f.outputs.size();
  // Rows stacked in order of the calls: call m's rows are row m of every
  // stacked input and output.
  // The stacked tensors live for this call: in the thread's scratch arena when
  // they fit (no pool, no reference count: a view owning nothing), else pooled.
  boost::container::small_vector<Tensor, 16> stacked;
  stacked.reserve(nIn + nOut);  // pointers into it are taken as it fills
  boost::container::small_vector<const Tensor*, 16> refs(nIn + nOut);
  jit::ScratchArena::Frame scratch;
  auto stack = [&](size_t operand) {
    const Tensor& first = tensorAt(operands_[c0.first + operand]);
    Shape shape = first.shape();
    shape[0] = static_cast<int64_t>(n);
    if (void* p = scratch.take(first.nbytes() * n))
      stacked.push_back(Tensor::view(first.dtype(), dims(shape), std::shared_ptr<void>(std::shared_ptr<void>(), p)));
    else
      stacked.push_back(memory_.tensor(first.dtype(), dims(shape), Device{}));
    return &stacked.back();
  };
  for (size_t i = 0; i < nIn; ++i) {
    if (!s.plan->rowParam[i]) {
      refs[i] = &tensorAt(operands_[c0.first + i]);
      continue;
    }
    Tensor* t = stack(i);
    size_t rowBytes = tensorAt(operands_[c0.first + i]).nbytes();
    auto* dst = static_cast<char*>(t->data());
    for (size_t m = 0; m < n; ++m) std::memcpy(dst + m * rowBytes, tensorAt(operands_[calls[m]->first + i]).data(), rowBytes);
    refs[i] = t;
  }
  for (size_t j = 0; j < nOut; ++j) refs[nIn + j] = stack(nIn + j);
  const jit::CompiledKernel& twin = *s.twin;
  // Through the VM's cache of packed weights, as a single call's: the table's
  // lookup takes its lock and hashes, and both sides of a fork batch at once.
  // The twin shares its kernel's slots: it reads the same weights in the same
  // layouts (a tuned twin that wanted others would refill them, still correct).
  const float* prepared[8];
  size_t numPrepared = std::min<size_t>(twin.preparedInputs().size(), 8);
  if (numPrepared)
    kernels_.prepared(c0.kernel, twin, std::span<const Tensor* const>(refs.data(), nIn), std::span<const float*>(prepared, numPrepared));
  twin.run(jit::CompiledKernel::TensorRefs(refs.data(), nIn), jit::CompiledKernel::TensorRefs(refs.data() + nIn, nOut),
           std::span<const float* const>(prepared, numPrepared));
  for (size_t j = 0; j < nOut; ++j) {
    const auto* src = static_cast<const char*>(refs[nIn + j]->data());
    size_t rowBytes = tensorAt(operands_[c0.first + nIn + j]).nbytes();
    for (size_t m = 0; m < n; ++m) std::memcpy(tensorAt(operands_[calls[m]->first + nIn + j]).data(), src + m * rowBytes, rowBytes);
  }
  ++batches_;
  batchedCalls_ += n;
}

}  // namespace kiln::vm
