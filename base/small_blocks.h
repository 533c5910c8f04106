// SmallBlocks: per-thread free lists of small heap blocks, for the objects a VM
// makes and drops at every step (tensor, tuple and closure objects, and the
// reference counts of pooled memory).
//
// A tree's node or an LSTM step makes a handful of these and drops them soon
// after; through malloc each was an allocation and a free past glibc's
// per-thread cache (seven blocks a size), about 5% of a 64-leaf tree's run.
// Here a block of at most kMostBytes is taken from and given back to the
// calling thread's list for its size class (16-byte steps): a pop and a push.
//
// Ownership and threads: a block may be given back on any thread; it joins that
// thread's list (as glibc's tcache does), and each list holds at most
// kMostCached blocks, past which they go back to the heap: a thread keeps at
// most about 540 KB (a 64-leaf tree's run has about 130 objects live at once). A thread's lists are
// freed when it exits; blocks given back after that, on that thread (by other
// thread-local destructors), go straight to the heap. Under AddressSanitizer
// and ThreadSanitizer every block is a plain heap allocation, so that they see
// each use after free and each race on the block itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>

namespace kiln::small_blocks {

inline constexpr size_t kMostBytes = 256;
inline constexpr size_t kMostCached = 256;

// At least `bytes` (> 0), aligned for any object of at most 16-byte alignment.
// Throws std::bad_alloc.
void* allocate(size_t bytes);
// `p` from allocate(bytes), with the same `bytes`.
void release(void* p, size_t bytes) noexcept;
// False in sanitizer builds, where every block is a plain heap allocation.
bool caching();

// A standard allocator over these blocks: for std::shared_ptr's reference
// counts (its control block is one small allocation per pointer made).
template <class T>
struct Allocator {
  using value_type = T;
  Allocator() = default;
  template <class U>
  Allocator(const Allocator<U>&) noexcept {}  // NOLINT: rebinding is implicit
  T* allocate(size_t n) {
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(small_blocks::allocate(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept { small_blocks::release(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const Allocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace kiln::small_blocks
