// A bounded mutation driver for LLVMFuzzerTestOneInput, for builds without
// libFuzzer (GCC): runs every seed, then byte flips, insertions, truncations and
// word overwrites of the seeds for the given time. Deterministic for a seed.
//   executable_fuzz SEED_DIR SECONDS [RNG_SEED]
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: executable_fuzz SEED_DIR SECONDS [RNG_SEED]\n");
    return 2;
  }
  std::vector<std::vector<uint8_t>> seeds;
  for (const auto& e : std::filesystem::directory_iterator(argv[1])) {
    std::ifstream f(e.path(), std::ios::binary);
    seeds.emplace_back((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }
  if (seeds.empty()) {
    std::fprintf(stderr, "error: no seeds in %s\n", argv[1]);
    return 2;
  }
  for (auto& s : seeds) LLVMFuzzerTestOneInput(s.data(), s.size());
  std::mt19937_64 rng(argc > 3 ? std::stoull(argv[3]) : 1);
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(std::stoi(argv[2]));
  size_t runs = 0;
  while (std::chrono::steady_clock::now() < end) {
    std::vector<uint8_t> x = seeds[rng() % seeds.size()];
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits && !x.empty(); ++k) {
      size_t at = rng() % x.size();
      switch (rng() % 5) {
        case 0: x[at] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
        case 1: x[at] = static_cast<uint8_t>(rng()); break;
        case 2: x.resize(at); break;
        case 3: x.insert(x.begin() + static_cast<long>(at), static_cast<uint8_t>(rng())); break;
        default:
          if (at + 4 <= x.size()) {
            uint32_t w = (rng() % 2) ? static_cast<uint32_t>(rng() % 64) : static_cast<uint32_t>(rng());
            for (int b = 0; b < 4; ++b) x[at + b] = static_cast<uint8_t>(w >> (8 * b));
          }
      }
    }
    if (!x.empty()) x.back() |= 1;  // odd last byte: reseal the checksum
    LLVMFuzzerTestOneInput(x.data(), x.size());
    ++runs;
  }
  std::printf("%zu inputs, no crash\n", runs);
  return 0;
}
