// Compiles and runs three kernels with the disk cache in $KILN_CACHE_DIR, printing
// for each where its machine code came from and a checksum of its result; the test
// script runs it several times, damaging the cache in between.
//
// `disk_cache_probe --foreign FILE...` instead rewrites each cached kernel file as
// a perfectly sealed entry whose key names another CPU (another fingerprint): what
// a cache directory shared with a different machine holds. `--sealed-garbage
// FILE...` seals garbage under the right key: the checksum holds, the object does
// not load. Both must be recompiled, never run.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "compiler/frontend.h"
#include "compiler/passes/to_fused_function.h"
#include "jit/codegen_backend.h"
#include "jit/disk_cache.h"
#include "jit/host_cpu.h"
#include "jit/kernel.h"

namespace {
// The key and object of a sealed file (the format of jit/disk_cache.cc).
bool readSealed(const char* path, std::string& key, std::string& object) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  if (s.size() < 32) return false;
  uint64_t keyLen, objLen;
  std::memcpy(&keyLen, s.data() + 8, 8);
  std::memcpy(&objLen, s.data() + 16, 8);
  if (keyLen + objLen + 32 != s.size()) return false;
  key = s.substr(32, keyLen);
  object = s.substr(32 + keyLen);
  return true;
}
enum class Rewrite { Foreign, Stale, Garbage };
int rewrite(int argc, char** argv, Rewrite how) {
  for (int i = 2; i < argc; ++i) {
    std::string key, object;
    if (!readSealed(argv[i], key, object)) return std::fprintf(stderr, "%s: not a sealed kernel\n", argv[i]), 1;
    if (how == Rewrite::Foreign) {
      size_t at = key.find(kiln::jit::hostCpuFingerprint());
      if (at == std::string::npos) return std::fprintf(stderr, "%s: key without this CPU\n", argv[i]), 1;
      key.replace(at, kiln::jit::hostCpuFingerprint().size(), "x86_64|OtherVendor|f1m1s1|0.0.0|xcr0=0");
    } else if (how == Rewrite::Stale) {
      size_t at = key.rfind("|codegen");
      if (at == std::string::npos) return std::fprintf(stderr, "%s: key without a code generator version\n", argv[i]), 1;
      key = key.substr(0, at) + "|codegen0";
    } else {
      object = "\x7f" "ELF garbage that is no object at all";
    }
    std::string sealed = kiln::jit::sealObject(key, object);
    std::ofstream(argv[i], std::ios::binary | std::ios::trunc).write(sealed.data(), static_cast<std::streamsize>(sealed.size()));
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--foreign") == 0) return rewrite(argc, argv, Rewrite::Foreign);
  if (argc > 1 && std::strcmp(argv[1], "--stale") == 0) return rewrite(argc, argv, Rewrite::Stale);
  if (argc > 1 && std::strcmp(argv[1], "--sealed-garbage") == 0) return rewrite(argc, argv, Rewrite::Garbage);
  const char* programs[] = {
      "def @main(%x: Tensor[(?, 64), float32]) { tanh(%x * 2f + 1f) }",
      "def @main(%x: Tensor[(?, 64), float32]) { nn.softmax(%x) }",
      "def @main(%x: Tensor[(?, 64), float32]) { sum(exp(%x), axis=[1]) }",
  };
  for (const char* src : programs) {
    auto m = kiln::compiler::loadProgram(src, "probe.relay");
    auto f = kiln::compiler::toFusedFunction(m->findFunction("main")->fn, "probe");
    auto t0 = std::chrono::steady_clock::now();
    auto k = kiln::jit::KernelCache::global().get(f);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    kiln::Tensor x = kiln::Tensor::empty(kiln::DType::Float32, {3, 64});
    for (int i = 0; i < 192; ++i) x.data<float>()[i] = static_cast<float>(i % 17) * 0.1f - 0.8f;
    std::vector<kiln::Tensor> in{x};
    auto out = (*k)(in);
    double sum = 0;
    for (int64_t i = 0; i < out[0].numel(); ++i) sum += out[0].data<float>()[i];
    std::printf("%s %.6f %.3f\n", k->fromDiskCache() ? "disk" : "compiled", sum, ms);
  }
  // Whether this process loaded LLVM: a run served from the cache must not.
  std::printf("codegen %s\n", kiln::jit::codegenBackendLoaded() ? "loaded" : "not-loaded");
  return 0;
}
