// Finding and opening the code generator library on first use.
#include "jit/codegen_backend.h"

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

#include "kiln/error.h"

namespace kiln::jit {

namespace {

std::atomic<CodegenBackend*> gBackend{nullptr};
std::atomic<double> gLoadMillis{0};

// The directory of the library (or executable) this code is linked into.
std::string ownDirectory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ownDirectory), &info) == 0 || !info.dli_fname) return "";
  std::error_code ec;
  auto p = std::filesystem::canonical(info.dli_fname, ec);
  return ec ? "" : p.parent_path().string();
}

std::vector<std::string> candidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("KILN_CODEGEN_LIBRARY"); env && *env) {
    out.emplace_back(env);
    return out;  // an explicit choice is the only one tried
  }
  std::string dir = ownDirectory();
  if (!dir.empty()) out.push_back(dir + "/libkiln_codegen.so");
#ifdef KILN_CODEGEN_INSTALL_PATH
  out.emplace_back(KILN_CODEGEN_INSTALL_PATH);
#endif
  return out;
}

CodegenBackend* open() {
  auto t0 = std::chrono::steady_clock::now();
  std::string tried;
  for (const std::string& path : candidates()) {
    void* handle = dlopen(path.c_str(), RTLD_LAZY | RTLD_LOCAL);
    if (!handle) {
      const char* why = dlerror();
      tried += "\n  " + path + ": " + (why ? why : "cannot be opened");
      continue;
    }
    auto factory = reinterpret_cast<CodegenBackend* (*)(int)>(dlsym(handle, "kiln_codegen_backend"));
    CodegenBackend* backend = factory ? factory(kCodegenAbiVersion) : nullptr;
    if (!backend) {
      tried += "\n  " + path + ": not a code generator of this build of Kiln";
      continue;  // the handle stays open: closing a library that ran initializers is not worth the risk
    }
    gLoadMillis = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return backend;
  }
  throw Error("cannot load Kiln's code generator (libkiln_codegen.so) to compile a kernel; tried:" + tried +
              "\n  (set KILN_CODEGEN_LIBRARY to its path)");
}

}  // namespace

CodegenBackend& codegenBackend() {
  if (CodegenBackend* b = gBackend.load(std::memory_order_acquire)) return *b;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (CodegenBackend* b = gBackend.load(std::memory_order_acquire)) return *b;
  CodegenBackend* b = open();  // throws: a later call tries again
  gBackend.store(b, std::memory_order_release);
  return *b;
}

bool codegenBackendLoaded() { return gBackend.load(std::memory_order_acquire) != nullptr; }
double codegenBackendLoadMillis() { return gLoadMillis.load(); }

}  // namespace kiln::jit
