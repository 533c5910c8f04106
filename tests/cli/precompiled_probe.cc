// Executables that carry precompiled machine code (kilnc --precompile), through the
// public API. One mode per process, since loaded kernels are process-wide:
//   make OUT        compile a three-kernel program, precompile it, save it
//   run EXE         load, run, print where the kernels came from and the result
//   damage EXE OUT  flip a byte in every precompiled object (the seal's checksum fails)
//   foreign EXE OUT re-seal every object under a key naming another CPU
//   garbage EXE OUT seal garbage under the right key (the checksum holds; the loader refuses it)
//   hostile EXE     lying precompiled sections in the file: each must be refused
// precompiled_test.sh drives it.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "jit/disk_cache.h"
#include "jit/host_cpu.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "kernel_ir/fused_function.h"
#include "kiln/executable.h"
#include "kiln/runtime.h"
#include "kiln/vm.h"

namespace {
constexpr const char* kProgram = R"(
def @main(%x: Tensor[(4, 33), float32], %w: Tensor[(7, 33), float32]) {
  let %y = nn.dense(tanh(%x * 1.75f), %w, units=7);
  nn.softmax(%y + 0.5f) * 3f
}
)";

kiln::Tensor ramp(kiln::Shape shape, float scale) {
  kiln::Tensor t = kiln::Tensor::empty(kiln::DType::Float32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i % 13) * scale - 0.3f;
  return t;
}

int run(const std::string& path) {
  auto exe = kiln::Executable::load(path);
  auto rt = kiln::Runtime::create({});
  kiln::VMOptions o;
  o.runtime = rt;
  kiln::VirtualMachine vm(exe, o);
  kiln::Value r = vm.invoke("main", {kiln::Value(ramp({4, 33}, 0.05f)), kiln::Value(ramp({7, 33}, 0.02f))});
  double sum = 0;
  for (int64_t i = 0; i < r.tensor().numel(); ++i) sum += r.tensor().data<float>()[i] * (i + 1);
  kiln::RuntimeStats s = rt->stats();
  std::printf("precompiled %llu codegen %llu llvm %s result %.5f\n", static_cast<unsigned long long>(s.precompiledHits),
              static_cast<unsigned long long>(s.codegenCompiles), s.codegenLoaded ? "loaded" : "not-loaded", sum);
  return 0;
}

// Rewrites every precompiled kernel's sealed code of `in` with `change(sealed, key,
// object)` and saves the executable (a valid file: the damage is in the code only).
template <class F>
int rewrite(const std::string& in, const std::string& out, F change) {
  auto exe = kiln::Executable::load(in);
  kiln::Executable::Contents c = exe->contents();
  if (c.precompiled.empty()) return std::fprintf(stderr, "%s has no precompiled code\n", in.c_str()), 1;
  for (kiln::PrecompiledKernel& p : c.precompiled) {
    uint64_t keyLen, objLen;
    std::memcpy(&keyLen, p.code.data() + 8, 8);
    std::memcpy(&objLen, p.code.data() + 16, 8);
    std::string key = p.code.substr(32, keyLen), object = p.code.substr(32 + keyLen);
    p.code = change(p.code, key, object);
  }
  kiln::Executable::build(std::move(c))->save(out);
  return 0;
}

int hostile(const std::string& path) {
  auto exe = kiln::Executable::load(path);
  std::vector<uint8_t> image = exe->serialize();
  // The section is the payload's tail but for the library section after it:
  // u32 count, then per kernel u32 kernel, u32 device, u64 length, the bytes.
  size_t tail = 4;
  for (const auto& p : exe->precompiled()) tail += 16 + p.code.size();
  tail += 4;  // the library section: no library kernels here
  for (const auto& k : exe->kernels())
    if (!k.function->library.empty()) return std::fprintf(stderr, "%s has library kernels\n", path.c_str()), 1;
  size_t first = image.size() - tail + 4;
  int refused = 0, cases = 0;
  auto expectRefused = [&](const char* what, std::vector<uint8_t> bad) {
    ++cases;
    kiln::Executable::resealChecksum(bad);
    try {
      kiln::Executable::fromBytes(bad);
      std::printf("accepted: %s\n", what);
    } catch (const kiln::Error& e) {
      std::printf("refused: %s: %s\n", what, e.what());
      ++refused;
    }
  };
  std::vector<uint8_t> bad = image;
  uint32_t kernel = 999;
  std::memcpy(bad.data() + first, &kernel, 4);
  expectRefused("a kernel index past the kernels", bad);
  bad = image;
  uint64_t huge = ~uint64_t(0) - 8;
  std::memcpy(bad.data() + first + 8, &huge, 8);
  expectRefused("a length past the file", bad);
  bad = image;
  uint32_t count = 0x40000000;
  std::memcpy(bad.data() + first - 4, &count, 4);
  expectRefused("a count past the file", bad);
  bad = image;
  uint32_t device = 0xffffffff;
  std::memcpy(bad.data() + first + 4, &device, 4);
  expectRefused("a device that does not exist", bad);
  bad.assign(image.begin(), image.end() - 3);
  uint64_t payload = bad.size() - 32;
  std::memcpy(bad.data() + 16, &payload, 8);
  expectRefused("a truncated section", bad);
  return refused == cases ? 0 : 1;
}
}  // namespace

int main(int argc, char** argv) {
  try {
    std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "make" && argc == 3) {
      auto exe = kiln::compile(kProgram, "probe.relay");
      kiln::Runtime::create({})->precompile(exe)->save(argv[2]);
      return 0;
    }
    if (mode == "run" && argc == 3) return run(argv[2]);
    if (mode == "damage" && argc == 4)
      return rewrite(argv[2], argv[3], [](std::string sealed, const std::string&, const std::string& object) {
        size_t at = sealed.size() - object.size() / 2;  // inside the object, under the seal
        sealed[at] = static_cast<char>(sealed[at] ^ 0x5a);
        return sealed;
      });
    if (mode == "foreign" && argc == 4)
      return rewrite(argv[2], argv[3], [](const std::string&, std::string key, const std::string& object) {
        const std::string& me = kiln::jit::hostCpuFingerprint();
        key.replace(key.find(me), me.size(), "x86_64|OtherVendor|f1m1s1|0.0.0|xcr0=0");
        return kiln::jit::sealObject(key, object);
      });
    if (mode == "garbage" && argc == 4)
      return rewrite(argv[2], argv[3], [](const std::string&, const std::string& key, const std::string&) {
        return kiln::jit::sealObject(key, "\x7f" "ELF\x02\x01\x01 and then nothing an object has");
      });
    if (mode == "hostile" && argc == 3) return hostile(argv[2]);
    std::fprintf(stderr, "usage: precompiled_probe make OUT | run EXE | damage EXE OUT | foreign EXE OUT | hostile EXE\n");
    return 2;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
