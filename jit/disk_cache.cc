// Reading and atomically writing cached kernel objects.
#include "jit/disk_cache.h"

#include <llvm/Object/ObjectFile.h>
#include <llvm/Support/MemoryBuffer.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace kiln::jit {

uint64_t hashText(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 33);
}

std::string DiskCache::path(uint64_t hash, const char* ext) const {
  char name[40];
  std::snprintf(name, sizeof name, "%016llx%s", static_cast<unsigned long long>(hash), ext);
  return (std::filesystem::path(dir_) / name).string();
}

namespace {
bool readFile(const std::string& path, std::string& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  return true;
}
}  // namespace

std::optional<std::string> DiskCache::loadPtx(uint64_t hash, const std::string& key,
                                              const std::vector<std::string>& entries) const {
  std::string storedKey, ptx;
  if (!readFile(path(hash, ".key"), storedKey) || storedKey != key || !readFile(path(hash, ".ptx"), ptx)) return std::nullopt;
  for (const std::string& e : entries)
    if (ptx.find(".entry " + e + "(") == std::string::npos) return std::nullopt;
  return ptx;
}

std::unique_ptr<llvm::MemoryBuffer> DiskCache::load(uint64_t hash, const std::string& key, const std::string& symbol) const {
  std::ifstream k(path(hash, ".key"), std::ios::binary);
  if (!k) return nullptr;
  std::stringstream ss;
  ss << k.rdbuf();
  if (ss.str() != key) return nullptr;
  auto buf = llvm::MemoryBuffer::getFile(path(hash, ".o"), /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!buf) return nullptr;
  // Only a well-formed object that defines the expected entry point is a hit.
  auto obj = llvm::object::ObjectFile::createObjectFile((*buf)->getMemBufferRef());
  if (!obj) {
    llvm::consumeError(obj.takeError());
    return nullptr;
  }
  bool found = false;
  for (const llvm::object::SymbolRef& sym : (*obj)->symbols()) {
    auto name = sym.getName();
    if (!name) {
      llvm::consumeError(name.takeError());
      continue;
    }
    found |= *name == symbol;
  }
  if (!found) return nullptr;
  return std::move(*buf);
}

namespace {
bool writeAtomically(const std::string& target, const char* data, size_t size) {
  static std::atomic<uint64_t> counter{0};
  std::string tmp = target + ".tmp" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return false;
    out.write(data, static_cast<std::streamsize>(size));
    if (!out) return false;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, target, ec);
  if (ec) std::filesystem::remove(tmp, ec);
  return !ec;
}
}  // namespace

void DiskCache::store(uint64_t hash, const std::string& key, llvm::MemoryBufferRef object) const {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  // The object first: a key without its object is never taken for a hit.
  if (writeAtomically(path(hash, ".o"), object.getBufferStart(), object.getBufferSize()))
    writeAtomically(path(hash, ".key"), key.data(), key.size());
}

}  // namespace kiln::jit

namespace kiln::jit {

void DiskCache::storePtx(uint64_t hash, const std::string& key, const std::string& ptx) const {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (writeAtomically(path(hash, ".ptx"), ptx.data(), ptx.size())) writeAtomically(path(hash, ".key"), key.data(), key.size());
}

}  // namespace kiln::jit
