// A bounded mutation driver for LLVMFuzzerTestOneInput, for builds without
// libFuzzer (GCC): runs every seed, then byte flips, insertions, truncations,
// word overwrites and splices of one seed's bytes into another for the given
// time. Deterministic for a seed and a number of runs. On a crash the input
// being run is written to ./fuzz-crash.bin, so the failure can be replayed
// (TARGET FILE 0). Each target defines kiln_fuzz_odd_last_byte: whether the
// driver makes every input's last byte odd (the executable target reseals the
// checksum of such inputs, so mutations reach the verifier).
//   TARGET SEED_DIR|FILE SECONDS [RNG_SEED]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" const bool kiln_fuzz_odd_last_byte;

namespace {
const uint8_t* g_current = nullptr;
size_t g_current_size = 0;

// Only async-signal-safe calls: open/write/close, then the default action.
void saveCrashingInput(int sig) {
  int fd = ::open("fuzz-crash.bin", O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    size_t done = 0;
    while (done < g_current_size) {
      ssize_t n = ::write(fd, g_current + done, g_current_size - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::close(fd);
  }
  static const char msg[] = "fuzz target crashed; input saved to fuzz-crash.bin\n";
  (void)!::write(2, msg, sizeof msg - 1);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void run(const std::vector<uint8_t>& x) {
  g_current = x.data();
  g_current_size = x.size();
  LLVMFuzzerTestOneInput(x.data(), x.size());
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s SEED_DIR SECONDS [RNG_SEED]\n", argv[0]);
    return 2;
  }
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, saveCrashingInput);
  // Seeds in name order, so a run does not depend on the directory's order.
  std::vector<std::filesystem::path> paths;
  if (std::filesystem::is_directory(argv[1])) {
    for (const auto& e : std::filesystem::directory_iterator(argv[1])) paths.push_back(e.path());
    std::sort(paths.begin(), paths.end());
  } else {
    paths.emplace_back(argv[1]);
  }
  std::vector<std::vector<uint8_t>> seeds;
  for (const auto& path : paths) {
    std::ifstream f(path, std::ios::binary);
    seeds.emplace_back((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }
  if (seeds.empty()) {
    std::fprintf(stderr, "error: no seeds in %s\n", argv[1]);
    return 2;
  }
  for (auto& s : seeds) run(s);
  std::mt19937_64 rng(argc > 3 ? std::stoull(argv[3]) : 1);
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(std::stoi(argv[2]));
  size_t runs = 0;
  while (std::chrono::steady_clock::now() < end) {
    std::vector<uint8_t> x = seeds[rng() % seeds.size()];
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits && !x.empty(); ++k) {
      size_t at = rng() % x.size();
      switch (rng() % 6) {
        case 0: x[at] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
        case 1: x[at] = static_cast<uint8_t>(rng()); break;
        case 2: x.resize(at); break;
        case 3: x.insert(x.begin() + static_cast<long>(at), static_cast<uint8_t>(rng())); break;
        case 4: {
          // A run of some seed's bytes (tokens, lines, records) spliced in here.
          const std::vector<uint8_t>& from = seeds[rng() % seeds.size()];
          if (from.empty()) break;
          size_t a = rng() % from.size(), len = std::min<size_t>(1 + rng() % 64, from.size() - a);
          x.insert(x.begin() + static_cast<long>(at), from.begin() + static_cast<long>(a), from.begin() + static_cast<long>(a + len));
          break;
        }
        default:
          if (at + 4 <= x.size()) {
            uint32_t w = (rng() % 2) ? static_cast<uint32_t>(rng() % 64) : static_cast<uint32_t>(rng());
            for (int b = 0; b < 4; ++b) x[at + b] = static_cast<uint8_t>(w >> (8 * b));
          }
      }
    }
    if (kiln_fuzz_odd_last_byte && !x.empty()) x.back() |= 1;
    run(x);
    ++runs;
  }
  std::printf("%zu inputs, no crash\n", runs);
  return 0;
}
