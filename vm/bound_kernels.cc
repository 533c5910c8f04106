// BoundKernels: a VM's cached kernel pointers.
#include "vm/bound_kernels.h"

#include "bytecode/opcodes.h"
#include "jit/kernel.h"

namespace kiln::vm {

BoundKernels::BoundKernels(std::shared_ptr<runtime::KernelTable> table) : table_(std::move(table)) {
  size_t n = table_->executable().kernels().size();
  cpu_.assign(n, nullptr);
  prepared_.resize(n);
  for (uint32_t k = 0; k < n; ++k) scalar_.push_back(table_->scalar(k));
}

bool BoundKernels::bound(uint32_t k) const {
  if (k >= cpu_.size()) return false;
  if (cpu_[k]) return true;
  for (const auto& [key, kernel] : other_)
    if (key >> 32 == k) return true;
  return false;
}

const jit::CompiledKernel& BoundKernels::onOtherDevice(uint32_t k, Device device) {
  uint64_t key = static_cast<uint64_t>(k) << 32 | bytecode::encodeDevice(device);
  auto it = other_.find(key);
  if (it != other_.end()) return *it->second;
  const jit::CompiledKernel* kernel = &table_->compiled(k, device);
  other_.emplace(key, kernel);
  return *kernel;
}

void BoundKernels::preparedSlow(uint32_t k, const jit::CompiledKernel& kernel, std::span<const Tensor* const> ins,
                            std::span<const float*> out) {
  const auto& wanted = kernel.preparedInputs();
  std::vector<PreparedSlot>& slots = prepared_[k];
  if (slots.size() != wanted.size()) slots.assign(wanted.size(), {});
  for (size_t i = 0; i < wanted.size() && i < out.size(); ++i) {
    if (wanted[i].input >= ins.size()) {  // a malformed call: the kernel's own check reports it
      out[i] = nullptr;
      continue;
    }
    const Tensor& t = *ins[wanted[i].input];
    if (t.data() != slots[i].data || slots[i].layout != wanted[i].layout || slots[i].param != wanted[i].param)
      slots[i] = {t.data(), table_->prepared(t, wanted[i].layout, wanted[i].param), wanted[i].layout, wanted[i].param};
    out[i] = slots[i].packed;
  }
}

}  // namespace kiln::vm
