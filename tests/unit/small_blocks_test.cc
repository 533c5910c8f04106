// The per-thread small blocks behind Value's objects and pooled memory's
// reference counts (base/small_blocks.h): live blocks never share bytes, a
// block given back is the next one of its size class taken on that thread, a
// thread keeps at most kMostCached a class, and blocks cross threads freely.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "base/small_blocks.h"
#include "kiln/value.h"
#include "test_skip.h"

using namespace kiln;

namespace {

struct Block {
  unsigned char* p;
  size_t bytes;
};

// Blocks of every size up to the cached limit and some past it, each filled
// with its own byte.
std::vector<Block> fillAll() {
  std::vector<Block> blocks;
  for (size_t bytes = 1; bytes <= small_blocks::kMostBytes + 40; bytes += 7) {
    auto* p = static_cast<unsigned char*>(small_blocks::allocate(bytes));
    REQUIRE(reinterpret_cast<uintptr_t>(p) % 16 == 0);
    std::memset(p, static_cast<int>(blocks.size() % 251), bytes);
    blocks.push_back({p, bytes});
  }
  return blocks;
}

void checkAndRelease(const std::vector<Block>& blocks) {
  for (size_t i = 0; i < blocks.size(); ++i) {
    size_t wrong = 0;
    for (size_t b = 0; b < blocks[i].bytes; ++b) wrong += blocks[i].p[b] != static_cast<unsigned char>(i % 251);
    CHECK(wrong == 0);
    small_blocks::release(blocks[i].p, blocks[i].bytes);
  }
}

}  // namespace

TEST_CASE("small blocks: live blocks keep their bytes, on one thread and given back on another") {
  for (int round = 0; round < 3; ++round) checkAndRelease(fillAll());
  std::vector<Block> made = fillAll();
  std::thread([&] { checkAndRelease(made); }).join();  // given back on a thread that then exits
  std::vector<Block> again = fillAll();
  std::thread([&] {
    std::vector<Block> there = fillAll();
    checkAndRelease(again);
    checkAndRelease(there);
  }).join();
  // Values made on one thread and dropped on another: tensors, tuples, closures.
  std::vector<Value> values;
  for (int i = 0; i < 100; ++i) {
    Tensor t = Tensor::empty(DType::Float32, {1, 3});
    t.data<float>()[2] = static_cast<float>(i);
    values.push_back(Value::tuple({Value(t), Value::closure(7, std::vector<Value>(i % 5, Value(t)))}));
  }
  std::thread([&] {
    for (int i = 0; i < 100; ++i) {
      CHECK(values[i].fields()[0].tensor().data<float>()[2] == static_cast<float>(i));
      CHECK(values[i].fields()[1].fields().size() == static_cast<size_t>(i % 5));
    }
    values.clear();
  }).join();
}

TEST_CASE("small blocks: a block given back is the next of its class taken there, and a thread keeps at most kMostCached") {
  if (!small_blocks::caching()) {
    test::skip("this build's small blocks are plain heap allocations (a sanitizer build)");
    return;
  }
  std::thread([] {
    void* p = small_blocks::allocate(40);
    small_blocks::release(p, 40);
    CHECK(small_blocks::allocate(48) == p);  // 33-48 bytes: one class
    small_blocks::release(p, 48);
    void* q = small_blocks::allocate(24);  // another class: not p
    CHECK(q != p);
    small_blocks::release(q, 24);

    constexpr size_t kMany = small_blocks::kMostCached + 40;
    std::vector<void*> given;
    for (size_t i = 0; i < kMany; ++i) given.push_back(small_blocks::allocate(100));
    for (void* b : given) small_blocks::release(b, 100);
    size_t reused = 0;
    std::vector<void*> taken;
    std::set<void*> all(given.begin(), given.end());
    for (size_t i = 0; i < kMany; ++i) {
      taken.push_back(small_blocks::allocate(100));
      reused += all.count(taken.back());
    }
    // Past the limit blocks went back to the heap, which may hand some back
    // here: at least the cached ones came from the list, in last-in order.
    CHECK(reused >= small_blocks::kMostCached);
    CHECK(taken[0] == given[small_blocks::kMostCached - 1]);
    for (void* b : taken) small_blocks::release(b, 100);
  }).join();
}
