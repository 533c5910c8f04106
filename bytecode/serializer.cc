// The executable file format: writing, and reading with every length and index
// checked (the verifier then checks the instructions).
//
// Layout (little-endian):
//   header, 32 bytes: magic "KILNEXE\0", u32 major, u32 minor, u64 payload bytes,
//                     u64 checksum of the payload (64-bit FNV-1a over 8-byte words)
//   payload: strings, devices, constructors, kernels, constants, functions,
//   (2.3) precompiled kernels and (2.4) the external library of each library
//   kernel (kernel index, name), in that order. Devices are u32 words (kind << 16 | index); a function record
//   carries each parameter's device after its type.
//   A constant's data starts at a 64-byte aligned file offset and is padded to a
//   multiple of 64 bytes, so a mapped file serves tensors in place.
// Minor versions only append sections at the end of the payload or add
// instructions (2.5: get_field_view and view arguments); a loader reads
// every minor version up to its own and refuses a newer one and another major.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>

#include "bytecode/opcodes.h"
#include "kernel_ir/fused_function.h"
#include "ops/registry.h"
#include "kiln/error.h"
#include "kiln/executable.h"

namespace kiln {

namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'E', 'X', 'E', '\0'};
constexpr size_t kHeaderBytes = 32;
constexpr int kMaxDepth = 64;

uint64_t checksum(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

class Writer {
 public:
  std::vector<uint8_t> out;
  void u8(uint8_t v) { out.push_back(v); }
  void u32(uint32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void i64(int64_t v) { raw(&v, 8); }
  void f64(double v) { raw(&v, 8); }
  void raw(const void* p, size_t n) {
    auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  void align64() { out.resize((out.size() + 63) / 64 * 64, 0); }
};

class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  size_t pos() const { return at_; }
  size_t remaining() const { return n_ - at_; }
  void need(size_t k) const {
    if (k > n_ - at_) throw Error("invalid executable: truncated file");
  }
  uint8_t u8() { need(1); return p_[at_++]; }
  uint32_t u32() { uint32_t v; get(&v, 4); return v; }
  uint64_t u64() { uint64_t v; get(&v, 8); return v; }
  int64_t i64() { int64_t v; get(&v, 8); return v; }
  double f64() { double v; get(&v, 8); return v; }
  void get(void* v, size_t k) {
    if (k == 0) return;  // v may be the null data() of an empty vector
    need(k);
    std::memcpy(v, p_ + at_, k);
    at_ += k;
  }
  // A count of items each at least `minBytes` long: bounded by what is left.
  uint32_t count(size_t minBytes = 1) {
    uint32_t c = u32();
    if (static_cast<uint64_t>(c) * std::max<size_t>(minBytes, 1) > remaining())
      throw Error("invalid executable: a count exceeds the file size");
    return c;
  }
  std::string str() {
    uint32_t k = count();
    std::string s(reinterpret_cast<const char*>(p_ + at_), k);
    at_ += k;
    return s;
  }
  const uint8_t* skip(size_t k) {
    need(k);
    const uint8_t* r = p_ + at_;
    at_ += k;
    return r;
  }
  void align64(size_t base) {
    size_t abs = base + at_;
    size_t pad = (64 - abs % 64) % 64;
    skip(pad);
  }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t at_ = 0;
};

DType readDType(Reader& r) {
  uint8_t d = r.u8();
  if (d >= kNumDTypes) throw Error("invalid executable: bad dtype");
  return static_cast<DType>(d);
}

Device readDevice(Reader& r) {
  uint32_t v = r.u32();
  if (!bytecode::validDeviceWord(v)) throw Error("invalid executable: bad device");
  return bytecode::decodeDevice(v);
}

void writeDesc(Writer& w, const ops::TensorDesc& d) {
  w.u8(static_cast<uint8_t>(d.dtype));
  w.u32(static_cast<uint32_t>(d.shape.size()));
  for (int64_t x : d.shape) w.i64(x);
}

ops::TensorDesc readDesc(Reader& r) {
  ops::TensorDesc d;
  d.dtype = readDType(r);
  uint32_t rank = r.count(8);
  if (rank > 16) throw Error("invalid executable: rank too large");
  for (uint32_t i = 0; i < rank; ++i) {
    int64_t x = r.i64();
    if (x < ops::kAnyDim) throw Error("invalid executable: bad dimension");
    d.shape.push_back(x);
  }
  if (!ops::shapeInBounds(std::span<const int64_t>(d.shape.data(), d.shape.size())))
    throw Error("invalid executable: a kernel tensor type has more than 2^40 elements");
  return d;
}

void writeAttr(Writer& w, const ops::AttrValue& a) {
  w.u8(static_cast<uint8_t>(a.kind));
  switch (a.kind) {
    case ops::AttrValue::Kind::None: break;
    case ops::AttrValue::Kind::Bool: w.u8(a.b); break;
    case ops::AttrValue::Kind::Int: w.i64(a.i); break;
    case ops::AttrValue::Kind::Float: w.f64(a.f); break;
    case ops::AttrValue::Kind::String: w.str(a.s); break;
    case ops::AttrValue::Kind::List:
      w.u32(static_cast<uint32_t>(a.list.size()));
      for (const auto& x : a.list) writeAttr(w, x);
      break;
  }
}

ops::AttrValue readAttr(Reader& r, int depth) {
  if (depth > kMaxDepth) throw Error("invalid executable: attribute nesting too deep");
  uint8_t k = r.u8();
  switch (k) {
    case 0: return ops::AttrValue::none();
    case 1: return ops::AttrValue::ofBool(r.u8() != 0);
    case 2: return ops::AttrValue::ofInt(r.i64());
    case 3: return ops::AttrValue::ofFloat(r.f64());
    case 4: return ops::AttrValue::ofString(r.str());
    case 5: {
      uint32_t n = r.count();
      std::vector<ops::AttrValue> l;
      for (uint32_t i = 0; i < n; ++i) l.push_back(readAttr(r, depth + 1));
      return ops::AttrValue::ofList(std::move(l));
    }
    default: throw Error("invalid executable: bad attribute kind");
  }
}

void writeType(Writer& w, const TypeDesc& t) {
  w.u8(static_cast<uint8_t>(t.kind));
  w.u8(static_cast<uint8_t>(t.dtype));
  w.u32(static_cast<uint32_t>(t.shape.size()));
  for (int64_t d : t.shape) w.i64(d);
  w.str(t.name);
  w.u32(static_cast<uint32_t>(t.fields.size()));
  for (const auto& f : t.fields) writeType(w, f);
}

TypeDesc readType(Reader& r, int depth) {
  if (depth > kMaxDepth) throw Error("invalid executable: type nesting too deep");
  TypeDesc t;
  uint8_t k = r.u8();
  if (k > static_cast<uint8_t>(TypeDesc::Kind::Ref)) throw Error("invalid executable: bad type kind");
  t.kind = static_cast<TypeDesc::Kind>(k);
  t.dtype = readDType(r);
  uint32_t rank = r.count(8);
  if (rank > 16) throw Error("invalid executable: rank too large");
  for (uint32_t i = 0; i < rank; ++i) t.shape.push_back(r.i64());
  t.name = r.str();
  uint32_t n = r.count();
  for (uint32_t i = 0; i < n; ++i) t.fields.push_back(readType(r, depth + 1));
  return t;
}

void writeKernel(Writer& w, const kernel_ir::FusedFunction& f) {
  w.str(f.name);
  w.u32(static_cast<uint32_t>(f.params.size()));
  for (const auto& p : f.params) writeDesc(w, p);
  w.u32(static_cast<uint32_t>(f.nodes.size()));
  for (const auto& n : f.nodes) {
    w.str(n.op ? n.op->name : "");
    w.u32(static_cast<uint32_t>(n.inputs.size()));
    for (int32_t i : n.inputs) w.u32(static_cast<uint32_t>(i));
    w.u32(static_cast<uint32_t>(n.attrs.items().size()));
    for (const auto& [name, v] : n.attrs.items()) {
      w.str(name);
      writeAttr(w, v);
    }
    w.u32(static_cast<uint32_t>(n.field));
    writeDesc(w, n.type);
    w.f64(n.floatValue);
    w.i64(n.intValue);
  }
  w.u32(static_cast<uint32_t>(f.outputs.size()));
  for (int32_t o : f.outputs) w.u32(static_cast<uint32_t>(o));
}

std::shared_ptr<kernel_ir::FusedFunction> readKernel(Reader& r) {
  auto f = std::make_shared<kernel_ir::FusedFunction>();
  f->name = r.str();
  uint32_t np = r.count(5);
  for (uint32_t i = 0; i < np; ++i) f->params.push_back(readDesc(r));
  uint32_t nn = r.count(8);
  for (uint32_t i = 0; i < nn; ++i) {
    kernel_ir::FusedNode n;
    std::string op = r.str();
    if (!op.empty()) {
      n.op = ops::findOp(op);
      if (!n.op) throw Error("invalid executable: unknown operator '" + op + "'");
    }
    uint32_t ni = r.count(4);
    for (uint32_t k = 0; k < ni; ++k) n.inputs.push_back(static_cast<int32_t>(r.u32()));
    uint32_t na = r.count(5);
    for (uint32_t k = 0; k < na; ++k) {
      std::string name = r.str();
      n.attrs.set(std::move(name), readAttr(r, 0));
    }
    n.field = static_cast<int32_t>(r.u32());
    n.type = readDesc(r);
    n.floatValue = r.f64();
    n.intValue = r.i64();
    f->nodes.push_back(std::move(n));
  }
  uint32_t no = r.count(4);
  for (uint32_t i = 0; i < no; ++i) f->outputs.push_back(static_cast<int32_t>(r.u32()));
  // Ids must be in range before anything indexes with them.
  int64_t numValues = static_cast<int64_t>(f->params.size() + f->nodes.size());
  for (size_t i = 0; i < f->nodes.size(); ++i)
    for (int32_t in : f->nodes[i].inputs)
      if (in < 0 || in >= static_cast<int64_t>(f->params.size() + i)) throw Error("invalid executable: kernel value id out of range");
  for (int32_t o : f->outputs)
    if (o < 0 || o >= numValues) throw Error("invalid executable: kernel output id out of range");
  return f;
}

}  // namespace

std::vector<uint8_t> Executable::serialize() const {
  Writer w;
  w.raw(kMagic, 8);
  w.u32(kMajorVersion);
  w.u32(kMinorVersion);
  w.u64(0);  // payload size, patched below
  w.u64(0);  // checksum, patched below
  w.u32(static_cast<uint32_t>(c_.strings.size()));
  for (const auto& s : c_.strings) w.str(s);
  w.u32(static_cast<uint32_t>(c_.devices.size()));
  for (Device d : c_.devices) w.u32(bytecode::encodeDevice(d));
  w.u32(static_cast<uint32_t>(c_.constructors.size()));
  for (const auto& c : c_.constructors) {
    w.str(c.name);
    w.str(c.typeName);
    w.u32(c.arity);
  }
  w.u32(static_cast<uint32_t>(kernels_.size()));
  for (const auto& k : kernels_) writeKernel(w, *k.function);
  w.u32(static_cast<uint32_t>(c_.constants.size()));
  for (const Tensor& t : c_.constants) {
    w.u8(static_cast<uint8_t>(t.dtype()));
    w.u32(static_cast<uint32_t>(t.rank()));
    for (int64_t d : t.shape()) w.i64(d);
    w.align64();
    w.raw(t.data(), t.nbytes());
    w.align64();
  }
  w.u32(static_cast<uint32_t>(c_.functions.size()));
  for (const auto& f : c_.functions) {
    w.str(f.name);
    w.u32(f.numParams);
    w.u32(f.frameSize);
    for (uint32_t i = 0; i < f.numParams; ++i) {
      w.str(f.paramNames[i]);
      writeType(w, f.paramTypes[i]);
      w.u32(bytecode::encodeDevice(i < f.paramDevices.size() ? f.paramDevices[i] : Device{}));
    }
    writeType(w, f.resultType);
    w.u32(static_cast<uint32_t>(f.code.size()));
    w.raw(f.code.data(), f.code.size() * 4);
  }
  w.u32(static_cast<uint32_t>(c_.precompiled.size()));
  for (const PrecompiledKernel& p : c_.precompiled) {
    w.u32(p.kernel);
    w.u32(bytecode::encodeDevice(p.device));
    w.u64(p.code.size());
    w.raw(p.code.data(), p.code.size());
  }
  uint32_t libraryKernels = 0;
  for (const auto& k : kernels_) libraryKernels += !k.function->library.empty();
  w.u32(libraryKernels);
  for (uint32_t k = 0; k < kernels_.size(); ++k)
    if (!kernels_[k].function->library.empty()) {
      w.u32(k);
      w.str(kernels_[k].function->library);
    }
  uint64_t payload = w.out.size() - kHeaderBytes;
  uint64_t sum = checksum(w.out.data() + kHeaderBytes, payload);
  std::memcpy(w.out.data() + 16, &payload, 8);
  std::memcpy(w.out.data() + 24, &sum, 8);
  return w.out;
}

void Executable::save(const std::string& path) const {
  std::vector<uint8_t> bytes = serialize();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw Error("cannot write '" + path + "'");
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw Error("cannot write '" + path + "'");
}

void Executable::resealChecksum(std::vector<uint8_t>& image) {
  if (image.size() < kHeaderBytes) return;
  uint64_t sum = checksum(image.data() + kHeaderBytes, image.size() - kHeaderBytes);
  std::memcpy(image.data() + 24, &sum, 8);
}

bool Executable::looksLikeExecutable(std::span<const uint8_t> bytes) {
  return bytes.size() >= 8 && std::memcmp(bytes.data(), kMagic, 8) == 0;
}

std::shared_ptr<const Executable> Executable::fromBytes(std::span<const uint8_t> bytes) {
  size_t n = std::max<size_t>(bytes.size(), 1);
  std::shared_ptr<uint8_t> copy(static_cast<uint8_t*>(::operator new(n, std::align_val_t(64))),
                                [](uint8_t* p) { ::operator delete(p, std::align_val_t(64)); });
  if (!bytes.empty()) std::memcpy(copy.get(), bytes.data(), bytes.size());
  return fromImage(copy, {copy.get(), bytes.size()});
}

std::shared_ptr<const Executable> Executable::fromImage(std::shared_ptr<const void> owner, std::span<const uint8_t> bytes) {
  if (reinterpret_cast<uintptr_t>(bytes.data()) % 64 != 0) return fromBytes(bytes);
  if (!looksLikeExecutable(bytes)) throw Error("not a Kiln executable (bad magic)");
  if (bytes.size() < kHeaderBytes) throw Error("invalid executable: truncated header");
  uint32_t major, minor;
  uint64_t payload, sum;
  std::memcpy(&major, bytes.data() + 8, 4);
  std::memcpy(&minor, bytes.data() + 12, 4);
  std::memcpy(&payload, bytes.data() + 16, 8);
  std::memcpy(&sum, bytes.data() + 24, 8);
  if (major != kMajorVersion)
    throw Error("executable has format version " + std::to_string(major) + "." + std::to_string(minor) +
                "; this Kiln reads version " + std::to_string(kMajorVersion) + ".x");
  // kiln/executable.h: any minor version up to this loader's own (a newer one may
  // mean something this loader would misread).
  if (minor > kMinorVersion)
    throw Error("executable has format version " + std::to_string(major) + "." + std::to_string(minor) +
                "; this Kiln reads versions up to " + std::to_string(kMajorVersion) + "." + std::to_string(kMinorVersion));
  if (payload != bytes.size() - kHeaderBytes) throw Error("invalid executable: truncated or padded file");
  if (checksum(bytes.data() + kHeaderBytes, payload) != sum) throw Error("invalid executable: checksum mismatch");

  Contents contents;
  Reader r(bytes.data() + kHeaderBytes, payload);
  uint32_t ns = r.count(4);
  for (uint32_t i = 0; i < ns; ++i) contents.strings.push_back(r.str());
  uint32_t nd = r.count(4);
  if (nd == 0 || nd > 64) throw Error("invalid executable: bad device list");
  contents.devices.clear();
  for (uint32_t i = 0; i < nd; ++i) contents.devices.push_back(readDevice(r));
  uint32_t nc = r.count(12);
  for (uint32_t i = 0; i < nc; ++i) {
    ConstructorInfo c;
    c.name = r.str();
    c.typeName = r.str();
    c.arity = r.u32();
    contents.constructors.push_back(std::move(c));
  }
  uint32_t nk = r.count(16);
  std::vector<std::shared_ptr<kernel_ir::FusedFunction>> kernels;  // still open for the library section
  for (uint32_t i = 0; i < nk; ++i) {
    kernels.push_back(readKernel(r));
    contents.kernels.push_back(kernels.back());
  }
  uint32_t nt = r.count(5);
  for (uint32_t i = 0; i < nt; ++i) {
    DType dt = readDType(r);
    uint32_t rank = r.count(8);
    if (rank > 16) throw Error("invalid executable: rank too large");
    Shape shape;
    int64_t elems = 1;
    for (uint32_t k = 0; k < rank; ++k) {
      int64_t d = r.i64();
      if (d < 0 || (d > 0 && elems > (int64_t(1) << 48) / d)) throw Error("invalid executable: bad constant shape");
      elems *= d;
      shape.push_back(d);
    }
    r.align64(kHeaderBytes);
    size_t nbytes = static_cast<size_t>(elems) * dtypeSize(dt);
    size_t padded = (nbytes + 63) / 64 * 64;
    r.need(padded);
    const uint8_t* data = r.skip(padded);
    if (padded < 64) {
      // Kernels may read a whole 64-byte line: a tiny constant gets its own buffer.
      Tensor t = Tensor::empty(dt, shape);
      std::memcpy(t.data(), data, nbytes);
      contents.constants.push_back(t);
    } else {
      std::shared_ptr<void> alias(std::const_pointer_cast<void>(owner), const_cast<uint8_t*>(data));
      contents.constants.push_back(Tensor::view(dt, dims(shape), alias));
    }
  }
  uint32_t nf = r.count(20);
  for (uint32_t i = 0; i < nf; ++i) {
    BytecodeFunction f;
    f.name = r.str();
    f.numParams = r.u32();
    f.frameSize = r.u32();
    if (f.numParams > r.remaining()) throw Error("invalid executable: parameter count exceeds the file");
    for (uint32_t p = 0; p < f.numParams; ++p) {
      f.paramNames.push_back(r.str());
      f.paramTypes.push_back(readType(r, 0));
      f.paramDevices.push_back(readDevice(r));
    }
    f.resultType = readType(r, 0);
    uint32_t words = r.count(4);
    f.code.resize(words);
    r.get(f.code.data(), static_cast<size_t>(words) * 4);
    contents.functions.push_back(std::move(f));
  }
  if (minor >= 3) {
    uint32_t np = r.count(16);
    for (uint32_t i = 0; i < np; ++i) {
      PrecompiledKernel p;
      p.kernel = r.u32();
      if (p.kernel >= nk) throw Error("invalid executable: precompiled code for a kernel that does not exist");
      p.device = readDevice(r);
      uint64_t bytes = r.u64();
      if (bytes > r.remaining()) throw Error("invalid executable: precompiled code exceeds the file");
      const uint8_t* code = r.skip(static_cast<size_t>(bytes));
      p.code.assign(reinterpret_cast<const char*>(code), static_cast<size_t>(bytes));
      contents.precompiled.push_back(std::move(p));
    }
  }
  if (minor >= 4) {
    uint32_t nl = r.count(8);
    for (uint32_t i = 0; i < nl; ++i) {
      uint32_t k = r.u32();
      if (k >= nk) throw Error("invalid executable: a library for a kernel that does not exist");
      std::string lib = r.str();
      if (lib.empty() || lib.size() > 64 || !kernels[k]->library.empty())
        throw Error("invalid executable: bad library name for kernel " + std::to_string(k));
      kernels[k]->library = std::move(lib);
    }
  }
  // A file has exactly the sections of its version: nothing may follow.
  if (r.remaining() != 0) throw Error("invalid executable: bytes after the last section");
  return build(std::move(contents), std::move(owner));
}

std::shared_ptr<const Executable> Executable::load(const std::string& path) {
  auto t0 = std::chrono::steady_clock::now();
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error("cannot open '" + path + "'");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
    bool dir = S_ISDIR(st.st_mode);
    ::close(fd);
    throw Error("'" + path + "' " + (dir ? "is a directory" : "is empty or unreadable"));
  }
  size_t size = static_cast<size_t>(st.st_size);
  // Private, writable mapping: pages are shared until someone writes a constant.
  // Populated at once: the checksum reads every page anyway, and one call costs
  // less than a page fault per page.
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) throw Error("cannot map '" + path + "'");
  std::shared_ptr<const void> owner(p, [size](const void* q) { ::munmap(const_cast<void*>(q), size); });
  try {
    std::shared_ptr<const Executable> exe = fromImage(owner, {static_cast<const uint8_t*>(p), size});
    // Not yet shared with anyone: the one write after construction.
    const_cast<Executable&>(*exe).loadMillis_ =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return exe;
  } catch (const Error& e) {
    throw Error(path + ": " + e.message());
  }
}

}  // namespace kiln
