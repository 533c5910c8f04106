// .npy / .npz reading and writing.
#include "kiln/npy.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/read_file.h"
#include "kiln/error.h"

namespace kiln {

namespace {

const char* descrOf(DType t) {
  switch (t) {
    case DType::Float16: return "<f2";
    case DType::Float32: return "<f4";
    case DType::Float64: return "<f8";
    case DType::Int8: return "|i1";
    case DType::Int16: return "<i2";
    case DType::Int32: return "<i4";
    case DType::Int64: return "<i8";
    case DType::UInt8: return "|u1";
    case DType::UInt16: return "<u2";
    case DType::Bool: return "|b1";
  }
  return "";
}

std::optional<DType> dtypeOfDescr(std::string d) {
  if (d.size() == 3 && d[0] == '=') d[0] = '<';
  for (int i = 0; i < kNumDTypes; ++i) {
    std::string want = descrOf(static_cast<DType>(i));
    if (d == want) return static_cast<DType>(i);
    if (want[0] == '|' && d.size() == 3 && (d[0] == '<' || d[0] == '>') && d.substr(1) == want.substr(1)) return static_cast<DType>(i);
  }
  return std::nullopt;
}

// The value of `key` in numpy's header dict, as raw text.
std::string headerField(const std::string& h, const std::string& key) {
  size_t k = h.find("'" + key + "'");
  if (k == std::string::npos) return "";
  size_t colon = h.find(':', k);
  if (colon == std::string::npos) return "";
  size_t start = h.find_first_not_of(' ', colon + 1);
  if (start == std::string::npos) return "";
  if (h[start] == '(') return h.substr(start, h.find(')', start) - start + 1);
  size_t end = h.find_first_of(",}", start);
  return h.substr(start, end - start);
}

// Whether [offset, offset + length) lies inside a buffer of `size` bytes, for
// offsets and lengths read from a file (any value, so no addition may wrap).
bool within(uint64_t offset, uint64_t length, uint64_t size) { return offset <= size && length <= size - offset; }

uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }
uint32_t le32(const uint8_t* p) { return p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24; }
uint64_t le64(const uint8_t* p) { return le32(p) | static_cast<uint64_t>(le32(p + 4)) << 32; }

}  // namespace

Tensor parseNpy(const uint8_t* data, size_t size, const std::string& what) {
  if (size < 10 || std::memcmp(data, "\x93NUMPY", 6) != 0) throw Error(what + " is not a .npy array");
  uint8_t major = data[6];
  size_t hlen, off;
  if (major == 1) {
    hlen = le16(data + 8);
    off = 10;
  } else {
    if (size < 12) throw Error(what + ": truncated .npy header");
    hlen = le32(data + 8);
    off = 12;
  }
  if (!within(off, hlen, size)) throw Error(what + ": truncated .npy header");
  std::string h(reinterpret_cast<const char*>(data + off), hlen);
  std::string descr = headerField(h, "descr");
  if (descr.size() >= 2) descr = descr.substr(1, descr.size() - 2);
  auto dt = dtypeOfDescr(descr);
  if (!dt) throw Error(what + ": unsupported array type '" + descr + "'");
  if (headerField(h, "fortran_order").rfind("True", 0) == 0) throw Error(what + ": Fortran-order arrays are not supported");
  std::string shapeText = headerField(h, "shape");
  auto badShape = [&](const std::string& why) {
    return Error(what + ": bad shape " + shapeText.substr(0, 80) + (shapeText.size() > 80 ? "..." : "") + ": " + why);
  };
  Shape shape;
  // The data's size from the header, checked for overflow, before anything is allocated.
  uint64_t bytes = dtypeSize(*dt);
  for (size_t i = 1; i + 1 < shapeText.size();) {
    size_t j = shapeText.find_first_of(",)", i);
    std::string part = shapeText.substr(i, j - i);
    size_t a = part.find_first_not_of(' ');
    if (a != std::string::npos) {
      part = part.substr(a, part.find_last_not_of(" L") + 1 - a);
      if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos) throw badShape("not a list of sizes");
      if (part.size() > 18) throw badShape("a dimension is too large");
      int64_t d = std::stoll(part);
      if (shape.size() == 32) throw badShape("more than 32 dimensions");
      if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) throw badShape("more bytes than memory can hold");
      shape.push_back(d);
    }
    if (j == std::string::npos) break;
    i = j + 1;
  }
  if (!within(off + hlen, bytes, size))
    throw Error(what + ": array data is truncated (the header declares " + std::to_string(bytes) + " bytes, the file holds " +
                std::to_string(size - off - hlen) + ")");
  Tensor t = Tensor::empty(*dt, shape);
  if (bytes) std::memcpy(t.data(), data + off + hlen, bytes);
  return t;
}

Tensor readNpy(const std::string& path) {
  std::vector<uint8_t> b = readFileBytes(path);
  return parseNpy(b.data(), b.size(), path);
}

std::map<std::string, Tensor> readNpz(const std::string& path) {
  std::vector<uint8_t> b = readFileBytes(path);
  return parseNpz(b.data(), b.size(), path);
}

std::map<std::string, Tensor> parseNpz(const uint8_t* p, size_t n, const std::string& path) {
  // End of central directory: the last "PK\5\6" within the final 64 KiB + 22 bytes.
  size_t eocd = std::string::npos;
  for (size_t i = n >= 22 ? n - 22 : 0; n >= 22; --i) {
    if (le32(p + i) == 0x06054b50) {
      eocd = i;
      break;
    }
    if (i == 0 || n - i > 65557) break;
  }
  if (eocd == std::string::npos) throw Error("'" + path + "' is not an .npz (zip) archive");
  uint64_t count = le16(p + eocd + 10), cdOffset = le32(p + eocd + 16);
  if (cdOffset == 0xFFFFFFFFu || count == 0xFFFF) {
    // Zip64: the locator sits just before the end record.
    if (eocd < 20 || le32(p + eocd - 20) != 0x07064b50) throw Error(path + ": bad zip64 archive");
    uint64_t rec = le64(p + eocd - 20 + 8);
    if (!within(rec, 56, n) || le32(p + rec) != 0x06064b50) throw Error(path + ": bad zip64 archive");
    count = le64(p + rec + 32);
    cdOffset = le64(p + rec + 48);
  }
  std::map<std::string, Tensor> out;
  uint64_t at = cdOffset;
  for (uint64_t e = 0; e < count; ++e) {
    if (!within(at, 46, n) || le32(p + at) != 0x02014b50) throw Error(path + ": corrupt zip directory");
    uint16_t method = le16(p + at + 10);
    uint64_t csize = le32(p + at + 20), usize = le32(p + at + 24);
    uint16_t nameLen = le16(p + at + 28), extraLen = le16(p + at + 30), commentLen = le16(p + at + 32);
    uint64_t local = le32(p + at + 42);
    if (!within(at + 46, uint64_t(nameLen) + extraLen, n)) throw Error(path + ": corrupt zip directory");
    std::string name(reinterpret_cast<const char*>(p + at + 46), nameLen);
    // Zip64 extra field: the 64-bit values replace whichever 32-bit ones are saturated.
    // A field's declared length is trusted only as far as the extra area goes.
    uint64_t extraEnd = at + 46 + nameLen + extraLen;
    for (uint64_t x = at + 46 + nameLen; x + 4 <= extraEnd;) {
      uint16_t id = le16(p + x), len = le16(p + x + 2);
      uint64_t fieldEnd = std::min<uint64_t>(x + 4 + len, extraEnd);
      if (id == 1) {
        uint64_t q = x + 4;
        if (usize == 0xFFFFFFFFu && q + 8 <= fieldEnd) usize = le64(p + q), q += 8;
        if (csize == 0xFFFFFFFFu && q + 8 <= fieldEnd) csize = le64(p + q), q += 8;
        if (local == 0xFFFFFFFFu && q + 8 <= fieldEnd) local = le64(p + q);
      }
      x += 4 + len;
    }
    at += 46 + nameLen + extraLen + commentLen;
    if (method != 0) throw Error(path + ": entry '" + name + "' is compressed; save weights with numpy.savez, not savez_compressed");
    if (!within(local, 30, n) || le32(p + local) != 0x04034b50) throw Error(path + ": corrupt zip entry '" + name + "'");
    uint64_t data = local + 30 + le16(p + local + 26) + le16(p + local + 28);
    if (!within(data, csize, n) || csize != usize) throw Error(path + ": truncated zip entry '" + name + "'");
    if (name.size() > 4 && name.substr(name.size() - 4) == ".npy") name.resize(name.size() - 4);
    out[name] = parseNpy(p + data, csize, path + ":" + name);
  }
  return out;
}

std::vector<uint8_t> encodeNpy(const Tensor& t) {
  if (t.defined() && t.device().kind != Device::Kind::CPU)
    throw Error("a tensor on " + t.device().toString() + " cannot be written as .npy; copy it to the host first");
  std::string shape = "(";
  for (size_t i = 0; i < t.rank(); ++i) shape += std::to_string(t.shape()[i]) + (t.rank() == 1 ? "," : i + 1 < t.rank() ? ", " : "");
  shape += ")";
  std::string h = "{'descr': '" + std::string(descrOf(t.dtype())) + "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + h.size() + 1;
  h.append((64 - total % 64) % 64, ' ');
  h += '\n';
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<uint8_t>(h.size() & 0xFF), static_cast<uint8_t>(h.size() >> 8)};
  out.insert(out.end(), h.begin(), h.end());
  const uint8_t* d = static_cast<const uint8_t*>(t.data());
  out.insert(out.end(), d, d + t.nbytes());
  return out;
}

void writeNpy(const std::string& path, const Tensor& t) {
  std::vector<uint8_t> b = encodeNpy(t);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!f) throw Error("cannot write '" + path + "'");
}

namespace {
uint32_t crc32(const uint8_t* p, size_t n) {
  static uint32_t table[256];
  static bool init = [] {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    return true;
  }();
  (void)init;
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}
void put16(std::vector<uint8_t>& o, uint32_t v) { o.push_back(v & 0xFF); o.push_back((v >> 8) & 0xFF); }
void put32(std::vector<uint8_t>& o, uint32_t v) { put16(o, v & 0xFFFF); put16(o, v >> 16); }
}  // namespace

void writeNpz(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& arrays) {
  std::vector<uint8_t> out, dir;
  for (const auto& [key, t] : arrays) {
    std::string name = key + ".npy";
    std::vector<uint8_t> data = encodeNpy(t);
    if (data.size() >= 0xFFFFFFFFu || out.size() >= 0xFFFFFFFFu) throw Error("cannot write '" + path + "': arrays over 4 GiB");
    uint32_t crc = crc32(data.data(), data.size()), size = static_cast<uint32_t>(data.size());
    uint32_t offset = static_cast<uint32_t>(out.size());
    put32(out, 0x04034b50); put16(out, 20); put16(out, 0); put16(out, 0); put16(out, 0); put16(out, 0x21);
    put32(out, crc); put32(out, size); put32(out, size); put16(out, static_cast<uint32_t>(name.size())); put16(out, 0);
    out.insert(out.end(), name.begin(), name.end());
    out.insert(out.end(), data.begin(), data.end());
    put32(dir, 0x02014b50); put16(dir, 20); put16(dir, 20); put16(dir, 0); put16(dir, 0); put16(dir, 0); put16(dir, 0x21);
    put32(dir, crc); put32(dir, size); put32(dir, size); put16(dir, static_cast<uint32_t>(name.size()));
    put16(dir, 0); put16(dir, 0); put16(dir, 0); put16(dir, 0); put32(dir, 0); put32(dir, offset);
    dir.insert(dir.end(), name.begin(), name.end());
  }
  uint32_t dirOffset = static_cast<uint32_t>(out.size());
  out.insert(out.end(), dir.begin(), dir.end());
  put32(out, 0x06054b50); put16(out, 0); put16(out, 0);
  put16(out, static_cast<uint32_t>(arrays.size())); put16(out, static_cast<uint32_t>(arrays.size()));
  put32(out, static_cast<uint32_t>(dir.size())); put32(out, dirOffset); put16(out, 0);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
  if (!f) throw Error("cannot write '" + path + "'");
}

}  // namespace kiln
