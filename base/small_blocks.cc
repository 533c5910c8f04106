// SmallBlocks: per-thread free lists of small heap blocks.
#include "base/small_blocks.h"

#include <cstdint>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KILN_SMALL_BLOCKS_BYPASS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KILN_SMALL_BLOCKS_BYPASS 1
#endif
#endif

namespace kiln::small_blocks {

#if defined(KILN_SMALL_BLOCKS_BYPASS)

void* allocate(size_t bytes) { return ::operator new(bytes); }
void release(void* p, size_t) noexcept { ::operator delete(p); }
bool caching() { return false; }

#else

namespace {

constexpr size_t kClasses = kMostBytes / 16;

size_t classOf(size_t bytes) { return (bytes - 1) / 16; }

// A cached block's first word links it to the next one of its class.
struct Lists {
  void* head[kClasses] = {};
  uint32_t count[kClasses] = {};
  ~Lists() {
    for (void*& h : head)
      while (h) {
        void* next = *static_cast<void**>(h);
        ::operator delete(h);
        h = next;
      }
  }
};

// Plain pointers in TLS (the library's static TLS block is small: the Python
// module dlopens it), made on a thread's first use.
thread_local Lists* tlLists = nullptr;
thread_local bool tlExited = false;  // the thread's lists were freed: use the heap

struct ListsOwner {
  ~ListsOwner() {
    delete tlLists;
    tlLists = nullptr;
    tlExited = true;
  }
};

[[gnu::noinline]] Lists* makeLists() {
  if (tlExited) return nullptr;
  static thread_local ListsOwner owner;  // frees the lists when the thread exits
  (void)owner;
  tlLists = new Lists;
  return tlLists;
}

}  // namespace

void* allocate(size_t bytes) {
  if (bytes > kMostBytes) return ::operator new(bytes);
  size_t c = classOf(bytes);
  Lists* l = tlLists;
  if (!l) [[unlikely]]
    l = makeLists();
  if (l && l->head[c]) {
    void* p = l->head[c];
    l->head[c] = *static_cast<void**>(p);
    --l->count[c];
    return p;
  }
  return ::operator new((c + 1) * 16);
}

void release(void* p, size_t bytes) noexcept {
  if (bytes > kMostBytes) {
    ::operator delete(p);
    return;
  }
  size_t c = classOf(bytes);
  Lists* l = tlLists;
  if (!l && !tlExited) {
    try {
      l = makeLists();
    } catch (...) {
      l = nullptr;
    }
  }
  if (!l || l->count[c] >= kMostCached) {
    ::operator delete(p);
    return;
  }
  *static_cast<void**>(p) = l->head[c];
  l->head[c] = p;
  ++l->count[c];
}

bool caching() { return true; }

#endif

}  // namespace kiln::small_blocks
