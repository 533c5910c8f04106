// The optional on-disk kernel cache: compiled objects keyed by a content hash, so
// a second process skips lowering, optimization and code generation entirely.
//
// GPU kernels are kept as PTX (`<hash>.ptx`); their keys name the GPU
// architecture, and the driver's own cache keeps the machine code it makes.
//
// Enabled by KernelCache::setDiskCacheDir or the KILN_CACHE_DIR environment
// variable. Each kernel is two files: `<hash>.o` (the object) and `<hash>.key`
// (the full key text, compared on load, so a hash collision can never alias two
// kernels). Files are written to a temporary name and renamed, so concurrent
// processes never see a partial file. A damaged or mismatching entry is ignored
// and rewritten.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace llvm {
class MemoryBuffer;
class MemoryBufferRef;
}  // namespace llvm

namespace kiln::jit {

class DiskCache {
 public:
  explicit DiskCache(std::string dir) : dir_(std::move(dir)) {}
  const std::string& dir() const { return dir_; }

  // The cached object for `key` if it is a valid object defining `symbol`, else null.
  std::unique_ptr<llvm::MemoryBuffer> load(uint64_t hash, const std::string& key, const std::string& symbol) const;
  // Stores an object; failures (a read-only directory, a full disk) are ignored:
  // the cache is an optimization, never a reason to fail.
  void store(uint64_t hash, const std::string& key, llvm::MemoryBufferRef object) const;
  // GPU kernels: their PTX text, kept as `<hash>.ptx` beside the same `.key`. A
  // hit must contain every entry point named in `entries`.
  std::optional<std::string> loadPtx(uint64_t hash, const std::string& key, const std::vector<std::string>& entries) const;
  void storePtx(uint64_t hash, const std::string& key, const std::string& ptx) const;

 private:
  std::string path(uint64_t hash, const char* ext) const;
  std::string dir_;
};

uint64_t hashText(const std::string& s);

}  // namespace kiln::jit
