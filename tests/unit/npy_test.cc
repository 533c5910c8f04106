// .npy/.npz readers on hostile bytes: every mutation of a valid archive either
// parses or is a kiln::Error; nothing is read out of bounds (the sanitizer build
// runs this too) and nothing is allocated from a header the bytes cannot back.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/npy.h"

namespace {

std::vector<uint8_t> validArchive() {
  kiln::Tensor a = kiln::Tensor::empty(kiln::DType::Float32, {3, 5});
  for (int i = 0; i < 15; ++i) a.data<float>()[i] = static_cast<float>(i);
  kiln::Tensor b = kiln::Tensor::empty(kiln::DType::Int64, {4});
  for (int i = 0; i < 4; ++i) b.data<int64_t>()[i] = i * 7;
  std::string path = "/tmp/kiln_npy_test_" + std::to_string(::getpid()) + ".npz";
  kiln::writeNpz(path, {{"a", a}, {"b", b}});
  FILE* f = std::fopen(path.c_str(), "rb");
  std::vector<uint8_t> bytes;
  for (int c; (c = std::fgetc(f)) != EOF;) bytes.push_back(static_cast<uint8_t>(c));
  std::fclose(f);
  std::remove(path.c_str());
  return bytes;
}

void put32(std::vector<uint8_t>& b, size_t at, uint32_t v) { std::memcpy(b.data() + at, &v, 4); }

void append(std::vector<uint8_t>& b, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// One entry whose central-directory sizes and offset are saturated, the real
// values in a zip64 extra field (as numpy writes entries over 4 GiB). Returns
// the archive and where the extra field's three 64-bit values start.
std::vector<uint8_t> zip64Archive(size_t& extraValues) {
  kiln::Tensor t = kiln::Tensor::empty(kiln::DType::Float32, {2});
  t.data<float>()[0] = 1.5f;
  t.data<float>()[1] = -2.0f;
  std::vector<uint8_t> data = kiln::encodeNpy(t);
  std::string name = "w.npy";
  std::vector<uint8_t> b;
  append(b, 0x04034b50, 4);
  for (int i = 0; i < 13; ++i) append(b, 0, 2);  // version .. sizes: unused by the reader
  b.resize(26);
  append(b, name.size(), 2);
  append(b, 0, 2);
  b.insert(b.end(), name.begin(), name.end());
  b.insert(b.end(), data.begin(), data.end());
  size_t cd = b.size();
  append(b, 0x02014b50, 4);
  append(b, 20, 2);
  append(b, 45, 2);
  append(b, 0, 2);  // flags
  append(b, 0, 2);  // method: stored
  append(b, 0, 4);  // time, date
  append(b, 0, 4);  // crc
  append(b, 0xFFFFFFFFu, 4);  // csize
  append(b, 0xFFFFFFFFu, 4);  // usize
  append(b, name.size(), 2);
  append(b, 28, 2);  // extra length
  append(b, 0, 2);   // comment
  append(b, 0, 2);   // disk
  append(b, 0, 2);   // internal attributes
  append(b, 0, 4);   // external attributes
  append(b, 0xFFFFFFFFu, 4);  // local header offset
  b.insert(b.end(), name.begin(), name.end());
  append(b, 1, 2);
  append(b, 24, 2);
  extraValues = b.size();
  append(b, data.size(), 8);  // usize
  append(b, data.size(), 8);  // csize
  append(b, 0, 8);            // local header offset
  size_t cdSize = b.size() - cd;
  append(b, 0x06054b50, 4);
  append(b, 0, 4);
  append(b, 1, 2);
  append(b, 1, 2);
  append(b, cdSize, 4);
  append(b, cd, 4);
  append(b, 0, 2);
  return b;
}

}  // namespace

TEST_CASE("npz: the archive round-trips") {
  auto bytes = validArchive();
  auto m = kiln::parseNpz(bytes.data(), bytes.size(), "t.npz");
  REQUIRE(m.size() == 2);
  CHECK(m.at("a").data<float>()[14] == 14.0f);
  CHECK(m.at("b").data<int64_t>()[3] == 21);
}

TEST_CASE("npz: saturated and wrapping offsets and sizes are refused, never followed") {
  auto valid = validArchive();
  // Every 32-bit word of the archive set to values that saturate, wrap or point past the end.
  const uint32_t evil[] = {0xFFFFFFFFu, 0xFFFFFFF0u, 0x80000000u, static_cast<uint32_t>(valid.size()), 0};
  int refused = 0, parsed = 0;
  for (size_t at = 0; at + 4 <= valid.size(); ++at) {
    for (uint32_t v : evil) {
      auto b = valid;
      put32(b, at, v);
      try {
        kiln::parseNpz(b.data(), b.size(), "t.npz");
        ++parsed;
      } catch (const kiln::Error&) {
        ++refused;
      }
    }
  }
  CHECK(refused > 0);
  CHECK(parsed > 0);  // words inside the arrays' data change values, not structure
}

TEST_CASE("npz: random byte mutations parse or are errors") {
  auto valid = validArchive();
  std::mt19937 rng(7);
  for (int i = 0; i < 5000; ++i) {
    auto b = valid;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] = static_cast<uint8_t>(rng());
    if (rng() % 8 == 0) b.resize(rng() % b.size());
    try {
      kiln::parseNpz(b.data(), b.size(), "t.npz");
    } catch (const kiln::Error&) {
    }
  }
}

TEST_CASE("npy: a header that claims more data than the bytes hold is refused before allocating") {
  std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000), }";
  h.append(64 - (10 + h.size() + 1) % 64, ' ');
  h += '\n';
  std::string head = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(h.size() & 0xFF) + static_cast<char>(h.size() >> 8);
  std::string file = head + h + std::string(16, '\0');
  std::vector<uint8_t> b(file.begin(), file.end());
  CHECK_THROWS_WITH_AS(kiln::parseNpy(b.data(), b.size(), "x.npy"), doctest::Contains("array data is truncated"), kiln::Error);
}

TEST_CASE("npz: zip64 sizes and offsets that wrap around are refused") {
  size_t at = 0;
  auto valid = zip64Archive(at);
  auto m = kiln::parseNpz(valid.data(), valid.size(), "z.npz");
  REQUIRE(m.count("w"));
  CHECK(m.at("w").data<float>()[1] == -2.0f);
  const uint64_t wraps[] = {~uint64_t(0), ~uint64_t(0) - 7, uint64_t(1) << 63, valid.size()};
  for (int field = 0; field < 3; ++field) {
    for (uint64_t v : wraps) {
      auto b = valid;
      std::memcpy(b.data() + at + 8 * field, &v, 8);
      if (field < 2) std::memcpy(b.data() + at + 8 * (1 - field), &v, 8);  // sizes agree, so only bounds can refuse them
      CAPTURE(field);
      CAPTURE(v);
      CHECK_THROWS_AS(kiln::parseNpz(b.data(), b.size(), "z.npz"), kiln::Error);
    }
  }
}

TEST_CASE("npy: every dtype round-trips through its numpy descr (uint16 as <u2)") {
  for (int i = 0; i < kiln::kNumDTypes; ++i) {
    auto dt = static_cast<kiln::DType>(i);
    CAPTURE(kiln::dtypeName(dt));
    kiln::Tensor t = kiln::Tensor::empty(dt, {3});
    for (size_t b = 0; b < 3 * kiln::dtypeSize(dt); ++b) static_cast<uint8_t*>(t.data())[b] = static_cast<uint8_t>(b % 2);
    std::vector<uint8_t> bytes = kiln::encodeNpy(t);
    kiln::Tensor back = kiln::parseNpy(bytes.data(), bytes.size(), "t.npy");
    CHECK(back.dtype() == dt);
    CHECK(std::memcmp(back.data(), t.data(), 3 * kiln::dtypeSize(dt)) == 0);
  }
  std::vector<uint8_t> u2 = kiln::encodeNpy(kiln::Tensor::empty(kiln::DType::UInt16, {1}));
  CHECK(std::string(u2.begin(), u2.end()).find("'descr': '<u2'") != std::string::npos);
}
