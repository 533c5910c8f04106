// Reading and atomically writing cached kernel objects.
#include "jit/disk_cache.h"

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace kiln::jit {

uint64_t hashText(std::string_view s) {
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
// Cache entries are kernels: kilobytes. Anything larger (or not a regular file)
// found under a cache name is ignored rather than read into memory.
constexpr uintmax_t kMaxEntryBytes = uintmax_t(64) << 20;

bool readFile(const std::string& path, std::string& out) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec) || std::filesystem::file_size(path, ec) > kMaxEntryBytes || ec)
    return false;
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

std::optional<std::string> DiskCache::load(uint64_t hash, const std::string& key) const {
  std::string sealed;
  if (!readFile(path(hash, ".kobj"), sealed)) return std::nullopt;
  auto object = unsealObject(sealed, key);
  if (!object) return std::nullopt;
  return std::string(*object);
}

namespace {
constexpr char kSealMagic[8] = {'K', 'I', 'L', 'N', 'O', 'B', 'J', '1'};
constexpr size_t kSealHeader = 8 + 8 + 8 + 8;  // magic, key length, object length, checksum

void putU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t getU64(std::string_view s, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}
uint64_t sealChecksum(std::string_view key, std::string_view object) {
  return hashText(key) ^ (hashText(object) * 0x9e3779b97f4a7c15ull) ^ object.size();
}
}  // namespace

std::string sealObject(const std::string& key, std::string_view object) {
  std::string out(kSealMagic, sizeof kSealMagic);
  putU64(out, key.size());
  putU64(out, object.size());
  putU64(out, sealChecksum(key, object));
  out += key;
  out.append(object.data(), object.size());
  return out;
}

std::optional<std::string_view> unsealObject(std::string_view sealed, const std::string& key) {
  if (sealed.size() < kSealHeader || sealed.compare(0, sizeof kSealMagic, std::string_view(kSealMagic, 8)) != 0)
    return std::nullopt;
  uint64_t keyLen = getU64(sealed, 8), objLen = getU64(sealed, 16), sum = getU64(sealed, 24);
  uint64_t rest = sealed.size() - kSealHeader;
  if (keyLen > rest || objLen != rest - keyLen) return std::nullopt;
  std::string_view storedKey = sealed.substr(kSealHeader, keyLen), object = sealed.substr(kSealHeader + keyLen);
  if (storedKey != key || sealChecksum(storedKey, object) != sum) return std::nullopt;
  return object;
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

void DiskCache::store(uint64_t hash, const std::string& key, std::string_view object) const {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  std::string sealed = sealObject(key, object);
  writeAtomically(path(hash, ".kobj"), sealed.data(), sealed.size());
}

}  // namespace kiln::jit

namespace kiln::jit {

void DiskCache::storePtx(uint64_t hash, const std::string& key, const std::string& ptx) const {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (writeAtomically(path(hash, ".ptx"), ptx.data(), ptx.size())) writeAtomically(path(hash, ".key"), key.data(), key.size());
}

}  // namespace kiln::jit
