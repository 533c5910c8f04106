// Arena: the bump allocator that owns every IR node of a compilation.
//
// IR nodes are immutable after construction and are shared freely between the
// modules that successive passes produce, so they are never freed one by one:
// the arena frees them all at once when the last module that uses it goes away.
// This makes building a node a pointer bump, keeps deep trees (10^5 chained lets)
// free of recursive destructors, and lets passes share unchanged subtrees.
//
// Nodes are trivially destructible; the few objects that own heap memory
// (attribute maps, tensor constants) are made with `own`, which records a
// destructor to run when the arena dies. An arena is not thread-safe: one thread
// builds a module at a time.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace kiln::ir {

class Arena {
 public:
  Arena() = default;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena();

  void* allocate(size_t size, size_t align);

  template <class T, class... Args>
  T* make(Args&&... args) {
    static_assert(std::is_trivially_destructible_v<T>, "arena nodes must be trivially destructible; use own()");
    return new (allocate(sizeof(T), alignof(T))) T(std::forward<Args>(args)...);
  }

  // An object with a destructor, destroyed with the arena.
  template <class T, class... Args>
  T* own(Args&&... args) {
    T* p = new (allocate(sizeof(T), alignof(T))) T(std::forward<Args>(args)...);
    if constexpr (!std::is_trivially_destructible_v<T>)
      destructors_.push_back({p, [](void* q) { static_cast<T*>(q)->~T(); }});
    return p;
  }

  template <class T>
  std::span<const T> copy(std::span<const T> items) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (items.empty()) return {};
    T* p = static_cast<T*>(allocate(sizeof(T) * items.size(), alignof(T)));
    std::memcpy(static_cast<void*>(p), items.data(), sizeof(T) * items.size());
    return {p, items.size()};
  }
  template <class T>
  std::span<const T> copy(const std::vector<T>& items) {
    return copy(std::span<const T>(items));
  }

  std::string_view str(std::string_view s);

  size_t bytesAllocated() const { return bytes_; }

 private:
  struct Destructor {
    void* object;
    void (*destroy)(void*);
  };
  std::vector<std::unique_ptr<std::byte[]>> chunks_;
  std::byte* cur_ = nullptr;
  std::byte* end_ = nullptr;
  size_t nextChunk_ = 64 * 1024;
  size_t bytes_ = 0;
  std::vector<Destructor> destructors_;
};

}  // namespace kiln::ir
