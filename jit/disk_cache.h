// The optional on-disk kernel cache: compiled objects keyed by a content hash, so
// a second process skips lowering, optimization and code generation entirely.
//
// GPU kernels are kept as PTX (`<hash>.ptx`); their keys name the GPU
// architecture, and the driver's own cache keeps the machine code it makes.
//
// Enabled by KernelCache::setDiskCacheDir or the KILN_CACHE_DIR environment
// variable. A CPU kernel is one file, `<hash>.kobj`: a header (magic, format,
// key length, object length, a checksum of key and object), the full key text
// (compared on load, so a hash collision can never alias two kernels; the key
// names the CPU's fingerprint, Kiln's code generator version and LLVM's), then
// the relocatable object, which object_loader.h loads without LLVM. A GPU kernel
// is `<hash>.ptx` beside `<hash>.key`. Files are written to a temporary name and
// renamed, so concurrent processes never see a partial file. A damaged, stale or
// mismatching entry is ignored (never run) and rewritten.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::jit {

class DiskCache {
 public:
  explicit DiskCache(std::string dir) : dir_(std::move(dir)) {}
  const std::string& dir() const { return dir_; }

  // The cached object for `key` if its file is whole (checksum) and holds this
  // very key, else nothing.
  std::optional<std::string> load(uint64_t hash, const std::string& key) const;
  // Stores an object; failures (a read-only directory, a full disk) are ignored:
  // the cache is an optimization, never a reason to fail.
  void store(uint64_t hash, const std::string& key, std::string_view object) const;
  // GPU kernels: their PTX text, kept as `<hash>.ptx` beside the same `.key`. A
  // hit must contain every entry point named in `entries`.
  std::optional<std::string> loadPtx(uint64_t hash, const std::string& key, const std::vector<std::string>& entries) const;
  void storePtx(uint64_t hash, const std::string& key, const std::string& ptx) const;

 private:
  std::string path(uint64_t hash, const char* ext) const;
  std::string dir_;
};

uint64_t hashText(std::string_view s);

// A sealed object: what a `.kobj` file and an executable's precompiled section
// hold for one kernel (header, key, object, checksum over all of them).
std::string sealObject(const std::string& key, std::string_view object);
// The object inside `sealed` when it is whole and made for `key`; else nothing.
std::optional<std::string_view> unsealObject(std::string_view sealed, const std::string& key);

}  // namespace kiln::jit
