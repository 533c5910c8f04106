// ScratchArena: per-thread scratch memory for the duration of a call.
//
// Scratch memory of CPU kernel calls (a GEMM's result before its epilogue, a
// convolution's output) and of the VM's batched calls (rows stacked for one
// call, vm/row_batcher.h): a per-thread block reused call after call, so a call
// allocates nothing once warm. Frames nest (stack discipline); a block in use
// is never moved, so a request that does not fit gets null, and the caller
// takes pooled memory instead. Thread-safety: each thread has its own arena.
#pragma once

#include <cstddef>
#include <memory>
#include <new>

namespace kiln::jit {

class ScratchArena {
 public:
  static constexpr size_t kMaxBytes = size_t(16) << 20;  // larger scratch comes from the pool

  class Frame {
   public:
    Frame() : arena_(instance()), mark_(arena_.used_) {}
    ~Frame() { arena_.used_ = mark_; }
    Frame(const Frame&) = delete;
    Frame& operator=(const Frame&) = delete;
    // `bytes` of 64-byte-aligned memory valid until this frame ends, or null.
    void* take(size_t bytes) {
      size_t need = (bytes + 63) / 64 * 64;
      if (need > kMaxBytes || arena_.used_ + need > kMaxBytes) return nullptr;
      if (!arena_.block_) {
        if (arena_.used_ != 0) return nullptr;
        arena_.block_.reset(static_cast<char*>(::operator new(kMaxBytes, std::align_val_t(64))));
      }
      void* p = arena_.block_.get() + arena_.used_;
      arena_.used_ += need;
      return p;
    }

   private:
    ScratchArena& arena_;
    size_t mark_;
  };

 private:
  struct Free {
    void operator()(char* p) const { ::operator delete(p, std::align_val_t(64)); }
  };
  static ScratchArena& instance() {
    thread_local ScratchArena arena;
    return arena;
  }
  std::unique_ptr<char, Free> block_;
  size_t used_ = 0;
};

}  // namespace kiln::jit
