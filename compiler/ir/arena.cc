// The IR arena's chunk management.
#include "compiler/ir/arena.h"

#include <algorithm>
#include <cstdint>

namespace kiln::ir {

Arena::~Arena() {
  for (auto it = destructors_.rbegin(); it != destructors_.rend(); ++it) it->destroy(it->object);
}

void* Arena::allocate(size_t size, size_t align) {
  auto aligned = [&](std::byte* p) {
    auto v = reinterpret_cast<uintptr_t>(p);
    return reinterpret_cast<std::byte*>((v + align - 1) & ~(uintptr_t(align) - 1));
  };
  std::byte* p = cur_ ? aligned(cur_) : nullptr;
  if (!p || p + size > end_) {
    size_t chunk = std::max(nextChunk_, size + align);
    chunks_.emplace_back(new std::byte[chunk]);
    cur_ = chunks_.back().get();
    end_ = cur_ + chunk;
    nextChunk_ = std::min<size_t>(nextChunk_ * 2, 8 << 20);
    p = aligned(cur_);
  }
  cur_ = p + size;
  bytes_ += size;
  return p;
}

std::string_view Arena::str(std::string_view s) {
  if (s.empty()) return {};
  char* p = static_cast<char*>(allocate(s.size(), 1));
  std::memcpy(p, s.data(), s.size());
  return {p, s.size()};
}

}  // namespace kiln::ir
