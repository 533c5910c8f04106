// VirtualMachine: construction, argument checking, invocation and profiling.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "bytecode/opcodes.h"
#include "device/thread_pool.h"
#include "kiln/error.h"
#include "kiln/vm.h"
#include "vm/bound_kernels.h"
#include "vm/fork.h"
#include "vm/gpu_streams.h"
#include "vm/memory.h"
#include "vm/memory_trace.h"
#include "vm/row_batcher.h"
#include "vm/run_deadlines.h"

namespace kiln {

VirtualMachine::VirtualMachine(std::shared_ptr<const Executable> exe, VMOptions options)
    : exe_(std::move(exe)), options_(options), memory_(std::make_unique<vm::TensorMemory>(
          options_.pools ? options_.pools : std::make_shared<MemoryPools>(options_.memoryLimit))) {
  if (!exe_) throw Error("VirtualMachine needs an executable");
  if (options_.timeLimit > VMOptions::kMaxTimeLimit) throw Error("VMOptions::timeLimit: more than a year");
  runtime_ = options_.runtime ? options_.runtime : Runtime::processDefault();
  device::ThreadPool* pool = runtime_->threadPool();
  forksPossible_ = pool && pool->size() >= 2;
  auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<runtime::KernelTable> table = runtime_->kernelTable(exe_);
  kernels_ = std::make_unique<vm::BoundKernels>(table);
  if (options_.rowBatching) batcher_ = std::make_unique<vm::RowBatcher>(*table, *kernels_, *memory_);
  kernelsMillis_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  streams_ = std::make_unique<vm::GpuStreams>();
  for (const Tensor& t : exe_->constants()) constants_.emplace_back(t);
  profile_.resize(exe_->kernels().size());
  epoch_ = std::chrono::steady_clock::now();
}

VirtualMachine::~VirtualMachine() = default;

void VirtualMachine::stopped(uint8_t why) const {
  if (why == kStopTimeLimit) {
    auto micros = std::chrono::duration_cast<std::chrono::microseconds>(options_.timeLimit).count();
    throw Error("the run took longer than its time limit (VMOptions::timeLimit, " + std::to_string(micros / 1000) + "." +
                std::to_string(micros % 1000 / 100) + " ms) and was stopped");
  }
  throw Error("the run was stopped (VirtualMachine::requestStop)");
}

uint64_t VirtualMachine::nowNanos() const {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - epoch_).count());
}

void VirtualMachine::enableProfiling(bool trace) {
  profiling_ = true;
  tracing_ = trace;
}

void VirtualMachine::enableShapeRecording() {
  profiling_ = true;
  recordingShapes_ = true;
}

VMMemoryStats VirtualMachine::memoryStats() const {
  VMMemoryStats s = memory_->stats();
  if (!fork_ || !fork_->child) return s;
  VMMemoryStats c = fork_->child->memoryStats();
  s.allocations += c.allocations;
  s.bytesAllocated += c.bytesAllocated;
  if (fork_->child->memory_->pools() == memory_->pools()) return s;  // the same pools: counted once
  for (const PoolStats& p : c.pools) {
    auto mine = std::find_if(s.pools.begin(), s.pools.end(), [&](const PoolStats& q) { return q.device == p.device; });
    if (mine == s.pools.end()) {
      s.pools.push_back(p);
      continue;
    }
    mine->bytesInUse += p.bytesInUse;
    mine->bytesCached += p.bytesCached;
    mine->peakBytesInUse += p.peakBytesInUse;
    mine->peakBytesReserved += p.peakBytesReserved;
    mine->hits += p.hits;
    mine->misses += p.misses;
    mine->releases += p.releases;
  }
  return s;
}

Value VirtualMachine::copyTo(const Value& v, Device device) {
  auto scopes = streams_->enterAll();
  if (device == Device{} && v.isObject(ObjectKind::Tensor) && v.asTensorObject()->tensor.rank() == 0)
    return Value(memory_->copyTo(v.asTensorObject()->tensor, device));
  return memory_->copyValue(v, device);
}

void VirtualMachine::enableMemoryTrace() {
  if (!memoryTrace_) memoryTrace_ = std::make_unique<vm::MemoryTrace>();
}

std::vector<std::pair<Device, uint64_t>> VirtualMachine::livenessLowerBound() const {
  return memoryTrace_ ? memoryTrace_->lowerBound() : std::vector<std::pair<Device, uint64_t>>{};
}

namespace {

// Why `v` does not fit `t`, or "" when it does. ADT values are checked at the top
// level only (a list's cells are not walked).
std::string mismatch(const Executable& exe, const TypeDesc& t, const Value& v) {
  switch (t.kind) {
    case TypeDesc::Kind::Any: return "";
    case TypeDesc::Kind::Tensor: {
      if (!v.isTensor()) return "got " + v.describe();
      DType dt = v.isScalar() ? v.dtype() : v.asTensorObject()->tensor.dtype();
      Shape shape = v.isScalar() ? Shape{} : v.asTensorObject()->tensor.shape();
      if (dt != t.dtype) return "dtype " + std::string(dtypeName(dt)) + " where " + std::string(dtypeName(t.dtype)) + " is expected";
      if (shape.size() != t.shape.size())
        return "rank " + std::to_string(shape.size()) + " (shape " + (shape.empty() ? "()" : shapeString(shape)) +
               ") where rank " + std::to_string(t.shape.size()) + " is expected";
      for (size_t d = 0; d < shape.size(); ++d)
        if (t.shape[d] >= 0 && t.shape[d] != shape[d])
          return "shape " + shapeString(shape) + " where dimension " + std::to_string(d) + " must be " + std::to_string(t.shape[d]);
      if (!v.isScalar() && v.asTensorObject()->tensor.device().kind != Device::Kind::CPU) return "a tensor on " + v.asTensorObject()->tensor.device().toString();
      return "";
    }
    case TypeDesc::Kind::Tuple: {
      if (!v.isTuple()) return "got " + v.describe();
      auto fs = v.fields();
      if (fs.size() != t.fields.size()) return "a tuple of " + std::to_string(fs.size()) + " where " + std::to_string(t.fields.size()) + " fields are expected";
      for (size_t i = 0; i < fs.size(); ++i) {
        std::string m = mismatch(exe, t.fields[i], fs[i]);
        if (!m.empty()) return "field " + std::to_string(i) + ": " + m;
      }
      return "";
    }
    case TypeDesc::Kind::Adt: {
      if (!v.isAdt()) return "got " + v.describe();
      uint32_t c = v.ctor();
      if (c >= exe.constructors().size() || exe.constructors()[c].typeName != t.name) return "a value of another type";
      return "";
    }
    case TypeDesc::Kind::Func: return v.isClosure() ? "" : "got " + v.describe();
    case TypeDesc::Kind::Ref: return v.isRef() ? "" : "got " + v.describe();
  }
  return "";
}

}  // namespace

void VirtualMachine::checkArgs(const BytecodeFunction& f, std::span<const Value> args) const {
  if (args.size() != f.numParams)
    throw Error("@" + f.name + " takes " + std::to_string(f.numParams) + " argument" + (f.numParams == 1 ? "" : "s") +
                ", got " + std::to_string(args.size()));
  for (size_t i = 0; i < args.size(); ++i) {
    std::string m = mismatch(*exe_, f.paramTypes[i], args[i]);
    if (!m.empty())
      throw Error("argument '" + f.paramNames[i] + "' of @" + f.name + " (" + f.paramTypes[i].toString() + "): " + m);
  }
}

void VirtualMachine::checkArguments(std::string_view function, std::span<const Value> args) const {
  const BytecodeFunction* f = exe_->findFunction(function);
  if (!f) throw Error("no function named '" + std::string(function) + "' in the executable");
  checkArgs(*f, args);
}

// A fork's calls count with its forking VM's.
uint64_t VirtualMachine::rowBatchedCalls() const {
  return (batcher_ ? batcher_->batchedCalls() : 0) + (fork_ && fork_->child ? fork_->child->rowBatchedCalls() : 0);
}
uint64_t VirtualMachine::rowBatches() const {
  return (batcher_ ? batcher_->batches() : 0) + (fork_ && fork_->child ? fork_->child->rowBatches() : 0);
}

void VirtualMachine::resetStacks() {
  if (batcher_) batcher_->drop();
  frames_.clear();
  for (Value& v : regs_) v = Value();
}

bool VirtualMachine::kernelCompiled(uint32_t k) const { return kernels_->bound(k); }

const Value& VirtualMachine::constantOn(uint32_t index, uint32_t encodedDevice) {
  uint64_t key = static_cast<uint64_t>(index) << 32 | encodedDevice;
  auto it = deviceConstants_.find(key);
  if (it != deviceConstants_.end()) return it->second;
  return deviceConstants_.emplace(key, memory_->copyValue(constants_[index], bytecode::decodeDevice(encodedDevice))).first->second;
}

Value VirtualMachine::invoke(std::string_view function, std::span<const Value> args) {
  int64_t fi = exe_->functionIndex(function);
  if (fi < 0) throw Error("no function named '" + std::string(function) + "' in the executable");
  const BytecodeFunction& f = exe_->functions()[static_cast<size_t>(fi)];
  checkArgs(f, args);
  // A stop requested before this run began was for none that still runs.
  stop_.store(0, std::memory_order_relaxed);
  std::optional<vm::RunDeadline> deadline;
  if (options_.timeLimit.count() > 0) deadline.emplace(options_.timeLimit, &stop_, kStopTimeLimit);
  uint64_t t0 = tracing_ || firstRunMillis_ < 0 ? nowNanos() : 0;
  // GPU work of this invocation goes to this VM's streams, parallel loops to
  // its Runtime's pool.
  auto scopes = streams_->enter(exe_->devices());
  device::ThreadPoolScope pool(runtime_->threadPool());
  try {
    if (memoryTrace_) memoryTrace_->clear();
    // Arguments go to the devices placement chose for the parameters: a tensor
    // elsewhere is copied; tuples and ADT values are copied whole when the
    // parameter is off the host (values made by the caller are on the host).
    std::vector<Value> placed;
    for (size_t i = 0; i < f.paramDevices.size() && i < args.size(); ++i) {
      Device want = f.paramDevices[i];
      const Value& a = args[i];
      bool move = a.isObject(ObjectKind::Tensor) ? !(a.asTensorObject()->tensor.device() == want)
                                                 : !(want == Device{}) && (a.isScalar() || a.isObject(ObjectKind::Adt));
      if (!move) continue;
      if (placed.empty()) placed.assign(args.begin(), args.end());
      placed[i] = memory_->copyValue(a, want);
    }
    if (!placed.empty()) args = placed;
    Value r = run(static_cast<uint32_t>(fi), args);
    if (!streams_->empty()) streams_->finish(false, profile_);
    if (tracing_) trace_.push_back({"@" + f.name, t0, nowNanos() - t0});
    if (firstRunMillis_ < 0) firstRunMillis_ = static_cast<double>(nowNanos() - t0) / 1e6;
    return r;
  } catch (const Error& e) {
    // Name the function that failed (the innermost frame), then leave the VM clean.
    std::string where = frames_.empty() ? f.name : exe_->functions()[frames_.back().function].name;
    resetStacks();
    streams_->finish(true, profile_);
    // A fork in flight failed too: its error comes first (its call comes first).
    std::exception_ptr forked = fork_ ? std::exchange(fork_->abandonedError, nullptr) : nullptr;
    try {
      if (forked) std::rethrow_exception(forked);
    } catch (const ForkedError& fe) {
      throw Error("in @" + fe.where + ": " + fe.message());
    }
    if (auto* fe = dynamic_cast<const ForkedError*>(&e)) where = fe->where;
    throw Error("in @" + where + ": " + e.message());
  } catch (const std::bad_alloc&) {
    resetStacks();
    streams_->finish(true, profile_);
    if (fork_) fork_->abandonedError = nullptr;
    throw Error("out of memory");
  }
}

}  // namespace kiln
