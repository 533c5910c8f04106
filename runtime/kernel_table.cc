// KernelTable: compiled kernels per (kernel, device) and host-scalar evaluators.
#include "runtime/kernel_table.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>

#include "bytecode/opcodes.h"
#include "device/thread_pool.h"
#include "jit/conv2d.h"
#include "jit/gemm.h"
#include "jit/kernel.h"
#include "kernel_ir/scalar_kernel.h"
#include "kiln/error.h"

namespace kiln::runtime {

KernelTable::KernelTable(std::shared_ptr<const Executable> exe, std::shared_ptr<jit::KernelCache> cache,
                         std::shared_ptr<MemoryPools> pools)
    : exe_(std::move(exe)), cache_(std::move(cache)), pools_(std::move(pools)) {
  for (size_t c = 0; c < exe_->constants().size(); ++c) {
    const Tensor& t = exe_->constants()[c];
    if (t.dtype() == DType::Float32 && (t.shape().size() == 2 || t.shape().size() == 4) && t.device() == Device{} &&
        t.numel() > 0)
      weightConstants_.emplace(t.data(), static_cast<uint32_t>(c));
  }
  for (const KernelInfo& k : exe_->kernels()) {
    std::unique_ptr<const kernel_ir::ScalarKernel> s;
    if (k.kind == KernelKind::Scalar) {
      s = kernel_ir::ScalarKernel::tryBuild(*k.function);
      // The kind was decided by the same builder (kernel_ir/kernel_kind.cc).
      if (!s) throw Error("internal: kernel " + k.function->name + " is classified scalar but has no host evaluator");
    }
    scalar_.push_back(std::move(s));
  }
}

KernelTable::~KernelTable() = default;

const jit::CompiledKernel& KernelTable::compiled(uint32_t k, Device device) {
  if (k >= exe_->kernels().size()) throw Error("kernel index out of range");
  uint64_t key = static_cast<uint64_t>(k) << 32 | bytecode::encodeDevice(device);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = compiled_.find(key);
    if (it != compiled_.end()) return *it->second;
  }
  // The cache compiles each kernel once even when many threads ask at once.
  auto kernel = cache_->get(*exe_->kernels()[k].function, device, false, exe_->precompiledCode(k, device));
  std::lock_guard<std::mutex> lock(mu_);
  return *compiled_.emplace(key, std::move(kernel)).first->second;
}

KernelTable::RowBatching& KernelTable::rowBatchingLocked(uint32_t k) {
  std::unique_ptr<RowBatching>& r = rowBatching_[k];
  if (!r) {
    r = std::make_unique<RowBatching>();
    const KernelInfo& info = exe_->kernels()[k];
    if (info.kind == KernelKind::Compiled) r->plan = kernel_ir::rowBatchPlan(*info.function);
  }
  return *r;
}

const kernel_ir::RowBatchPlan* KernelTable::rowBatchPlan(uint32_t k) {
  if (k >= exe_->kernels().size()) throw Error("kernel index out of range");
  std::lock_guard<std::mutex> lock(mu_);
  RowBatching& r = rowBatchingLocked(k);
  return r.plan ? &*r.plan : nullptr;
}

const jit::CompiledKernel* KernelTable::rowBatchedTwin(uint32_t k) {
  const kernel_ir::RowBatchPlan* plan = rowBatchPlan(k);
  if (!plan) return nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    RowBatching& r = rowBatchingLocked(k);
    if (r.twinTried) return r.twin.get();
  }
  // Outside the lock, as compiled() does; the cache compiles it once.
  std::shared_ptr<const jit::CompiledKernel> twin;
  try {
    twin = cache_->get(plan->twin, Device{});
  } catch (const Error&) {
    // The calls run one by one; the kernel itself reports its own errors.
  }
  std::lock_guard<std::mutex> lock(mu_);
  RowBatching& r = rowBatchingLocked(k);
  if (!r.twinTried) {
    r.twinTried = true;
    r.twin = std::move(twin);
  }
  return r.twin.get();
}

namespace {
struct CompileAllJob {
  KernelTable* table;
  const std::vector<uint32_t>* kernels;
  Device device;
};
void compileSome(void* const* buffers, const int64_t*, int64_t begin, int64_t end) {
  auto* job = static_cast<CompileAllJob*>(buffers[0]);
  for (int64_t i = begin; i < end; ++i) {
    try {
      job->table->compiled((*job->kernels)[static_cast<size_t>(i)], job->device);
    } catch (const std::exception&) {
      // Reported again, to the caller that needs the kernel, at its first call.
    }
  }
}
}  // namespace

double KernelTable::compileAll(device::ThreadPool* pool) {
  auto t0 = std::chrono::steady_clock::now();
  Device device = exe_->devices().front();
  if (device.kind != Device::Kind::CPU) return 0;
  std::vector<uint32_t> kernels;
  for (uint32_t k = 0; k < exe_->kernels().size(); ++k)
    if (exe_->kernels()[k].kind == KernelKind::Compiled) kernels.push_back(k);
  if (kernels.empty()) return 0;
  // Largest first (by operator count, a proxy for compile time), so that the
  // threads finish together instead of one starting the biggest kernel last.
  std::stable_sort(kernels.begin(), kernels.end(), [&](uint32_t a, uint32_t b) {
    return exe_->kernels()[a].function->nodes.size() > exe_->kernels()[b].function->nodes.size();
  });
  CompileAllJob job{this, &kernels, device};
  void* buffers[1] = {&job};
  if (kernels.size() == 1) {  // nothing to share: no need to start a pool
    compileSome(buffers, nullptr, 0, 1);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  // One kernel per piece; `work` large enough that the pool always shares it out.
  int64_t n = static_cast<int64_t>(kernels.size());
  if (pool) pool->parallelFor(n, int64_t(1) << 40, compileSome, buffers, nullptr);
  else device::parallelFor(n, int64_t(1) << 40, compileSome, buffers, nullptr);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}


const float* KernelTable::prepared(const Tensor& t, loop::PreparedLayout layout, int64_t param) {
  preparedLookups_.fetch_add(1, std::memory_order_relaxed);
  auto found = weightConstants_.find(t.data());
  if (found == weightConstants_.end()) return nullptr;
  const Tensor& c = exe_->constants()[found->second];
  if (t.shape() != c.shape() || t.dtype() != c.dtype()) return nullptr;
  // A library keeps its own form of a constant: it only needs to know it is one.
  if (layout == loop::PreparedLayout::Constant) return c.data<float>();
  PreparedKey key{found->second, layout, param};
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = prepared_.find(key); it != prepared_.end()) return it->second.data<float>();
  // Packing under the lock: it happens once per weight and layout, and
  // concurrent first calls must not pack (and hold) two copies.
  MemoryPools& pools = pools_ ? *pools_ : MemoryPools::processDefault();
  Tensor packed = packWeight(c, layout, param, pools.forDevice(Device{}));
  if (!packed.defined()) return nullptr;
  preparedStats_.count++;
  preparedStats_.bytes += packed.nbytes();
  return prepared_.emplace(key, std::move(packed)).first->second.data<float>();
}

Tensor packWeight(const Tensor& c, loop::PreparedLayout layout, int64_t param, PooledAllocator& pool) {
  // The packed form's two sizes and float count (-1: the constant does not fit the layout).
  const Shape& s = c.shape();
  // GemmB's param: bit 0 transB, bits 1-2 the micro-kernel tile (loop::Schedule::gemmTile).
  bool gemm = layout == loop::PreparedLayout::GemmB, transB = (param & 1) != 0;
  int tile = static_cast<int>(param >> 1);
  if (gemm && (param < 0 || tile >= jit::kGemmTiles)) return Tensor();
  int64_t floats = -1, d0 = 0, d1 = 0;  // GemmB: k, n; ConvFilter: filters, weights per filter
  if (c.dtype() != DType::Float32 || layout == loop::PreparedLayout::Constant) return Tensor();
  if (gemm && s.size() == 2) {
    d0 = transB ? s[1] : s[0];
    d1 = transB ? s[0] : s[1];
    floats = jit::packedBFloats(d0, d1, tile);
  }
  // ConvFilter: the groups, and the Winograd form wanted too (3x3 filters of
  // one group; others take the plain packing); other bits are refused.
  int64_t groups = param & 0xFFFFFFFF, form = param >> loop::kConvFilterWinogradShift;
  bool winograd = !gemm && loop::isWinogradForm(form) && groups == 1 && s.size() == 4 && s[2] == 3 && s[3] == 3;
  if (!gemm && s.size() == 4 && param >= 0 && (form == 0 || loop::isWinogradForm(form))) {
    d0 = s[0];
    d1 = s[1] * s[2] * s[3];
    floats = winograd ? jit::packedConvFilterWithWinogradFloats(d0, s[1], form) : jit::packedConvFilterFloats(d0, d1, groups);
  }
  if (floats < 0) return Tensor();
  std::array<int64_t, 1> shape{floats};
  Tensor packed = allocateTensor(pool, DType::Float32, shape);
  if (gemm) jit::packGemmB(c.data<float>(), s[1], transB, d0, d1, packed.data<float>(), tile);
  else if (winograd) jit::packConvFilterWithWinograd(c.data<float>(), d0, s[1], form, packed.data<float>());
  else jit::packConvFilter(c.data<float>(), d0, d1, groups, packed.data<float>());
  return packed;
}

KernelTable::PreparedStats KernelTable::preparedStats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PreparedStats s = preparedStats_;
  s.lookups = preparedLookups_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace kiln::runtime
