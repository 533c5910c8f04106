// BoundKernels: one VM's direct pointers into its Runtime's kernel table, so a
// kernel call on the host finds its machine code with one indexed load (no lock,
// no hash lookup); other devices go through a small map. The table owns the
// kernels; these are borrowed pointers, valid while the VM holds the table.
// Used by one thread at a time, as its VM is.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "jit/kernel.h"
#include "runtime/kernel_table.h"

namespace kiln::vm {

class BoundKernels {
 public:
  explicit BoundKernels(std::shared_ptr<runtime::KernelTable> table);

  // Kernel `k` on `device`, compiled on first use.
  const jit::CompiledKernel& on(uint32_t k, Device device) {
    if (device == Device{}) {
      if (!cpu_[k]) cpu_[k] = &table_->compiled(k);
      return *cpu_[k];
    }
    return onOtherDevice(k, device);
  }
  const kernel_ir::ScalarKernel* scalar(uint32_t k) const { return scalar_[k]; }

  // The prepared (prepacked) forms of `kernel`'s preparedInputs() among `ins`,
  // into `out` (as many as fit; null where an input is not a constant of the executable). An
  // inline cache per kernel and input remembers the last data pointer and its
  // answer, so a weight passed to the same kernel again costs a compare.
  void prepared(uint32_t k, const jit::CompiledKernel& kernel, std::span<const Tensor* const> ins, std::span<const float*> out) {
    // Inline while every input is the one the cache last saw (a loop or a tree
    // passes the same weights call after call); else the general path.
    const auto& wanted = kernel.preparedInputs();
    const std::vector<PreparedSlot>& slots = prepared_[k];
    if (slots.size() == wanted.size() && out.size() == wanted.size()) {
      size_t i = 0;
      for (; i < wanted.size(); ++i) {
        const auto& w = wanted[i];
        if (w.input >= ins.size() || ins[w.input]->data() != slots[i].data || slots[i].layout != w.layout ||
            slots[i].param != w.param)
          break;
        out[i] = slots[i].packed;
      }
      if (i == wanted.size()) return;
    }
    preparedSlow(k, kernel, ins, out);
  }
  // Whether kernel `k` has been bound on any device.
  bool bound(uint32_t k) const;

 private:
  const jit::CompiledKernel& onOtherDevice(uint32_t k, Device device);
  void preparedSlow(uint32_t k, const jit::CompiledKernel& kernel, std::span<const Tensor* const> ins,
                    std::span<const float*> out);
  std::shared_ptr<runtime::KernelTable> table_;
  std::vector<const jit::CompiledKernel*> cpu_;
  std::unordered_map<uint64_t, const jit::CompiledKernel*> other_;  // (kernel << 32 | device)
  std::vector<const kernel_ir::ScalarKernel*> scalar_;
  // A tuned variant of a kernel may want another layout of the same input.
  struct PreparedSlot {
    const void* data = nullptr;
    const float* packed = nullptr;
    loop::PreparedLayout layout = loop::PreparedLayout::GemmB;
    int64_t param = 0;
  };
  std::vector<std::vector<PreparedSlot>> prepared_;  // per kernel, per prepared input
};

}  // namespace kiln::vm
