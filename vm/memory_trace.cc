// Liveness lower bound from a trace of tensor births and reads (see memory_trace.h).
#include "vm/memory_trace.h"

#include <algorithm>
#include <unordered_set>

namespace kiln::vm {

void MemoryTrace::clear() {
  lives_.clear();
  byData_.clear();
  clock_ = 0;
}

void MemoryTrace::birth(const Tensor& t) {
  ++clock_;
  byData_[t.data()] = static_cast<uint32_t>(lives_.size());
  // Whole 64-byte lines: kernels may read a tensor to the end of its last line
  // (the pool's contract, include/kiln/memory.h), so no manager can hold less.
  lives_.push_back(Life{(t.nbytes() + 63) / 64 * 64, t.device(), clock_, clock_});
}

void MemoryTrace::read(const Tensor& t) {
  ++clock_;
  auto it = byData_.find(t.data());
  if (it != byData_.end()) lives_[it->second].lastRead = clock_;
}

void MemoryTrace::finish(const Value& result) {
  ++clock_;
  std::vector<const Value*> stack{&result};
  std::unordered_set<const RefObject*> seenRefs;  // cells may close cycles
  while (!stack.empty()) {
    const Value* v = stack.back();
    stack.pop_back();
    if (v->isObject(ObjectKind::Tensor)) {
      auto it = byData_.find(v->asTensorObject()->tensor.data());
      if (it != byData_.end()) lives_[it->second].lastRead = clock_;
    } else if (v->isObject(ObjectKind::Adt)) {
      const AdtObject* a = v->asAdt();
      for (uint32_t i = 0; i < a->size; ++i) stack.push_back(&a->fields()[i]);
    } else if (v->isClosure()) {
      const ClosureObject* c = v->asClosure();
      for (uint32_t i = 0; i < c->size; ++i) stack.push_back(&c->captured()[i]);
    } else if (v->isRef() && seenRefs.insert(v->asRef()).second) {
      stack.push_back(&v->asRef()->content);
    }
  }
}

std::vector<std::pair<Device, uint64_t>> MemoryTrace::lowerBound() const {
  std::vector<std::pair<Device, uint64_t>> out;
  std::vector<Device> devices;
  for (const Life& l : lives_)
    if (std::find(devices.begin(), devices.end(), l.device) == devices.end()) devices.push_back(l.device);
  for (Device d : devices) {
    // +bytes at birth, -bytes just after the last read; a sweep over time.
    std::vector<std::pair<uint64_t, int64_t>> events;
    for (const Life& l : lives_)
      if (l.device == d) {
        events.emplace_back(2 * l.born, static_cast<int64_t>(l.bytes));
        events.emplace_back(2 * l.lastRead + 1, -static_cast<int64_t>(l.bytes));
      }
    std::sort(events.begin(), events.end());
    int64_t now = 0, peak = 0;
    for (auto& [t, delta] : events) {
      now += delta;
      peak = std::max(peak, now);
    }
    out.emplace_back(d, static_cast<uint64_t>(peak));
  }
  return out;
}

}  // namespace kiln::vm
