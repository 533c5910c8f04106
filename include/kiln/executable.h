// Executable: a compiled program — bytecode functions, the fused kernels they call
// (as IR, compiled by the JIT on first use), constants and the constructor table —
// and its file format.
//
// Ownership and threads: an Executable is immutable after it is built or loaded,
// except for its kernel table, which fills in on demand under a lock. Share one
// through std::shared_ptr<const Executable> among any number of VMs on any number
// of threads; each kernel compiles once for all of them.
//
// The file (see bytecode/serializer.cc for the exact layout) starts with a magic
// word, a major and minor version and a checksum of everything after the header.
// Loaders accept files of the same major version and any minor version up to their
// own. Constant tensor data is stored 64-byte aligned, so a loaded file is used in
// place (its tensors point into the loaded image). load() verifies every
// instruction before returning, so a corrupt file is a kiln::Error, never a crash.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "kiln/tensor.h"
#include "kiln/value.h"

namespace kiln {

namespace jit {
struct FusedFunction;
class CompiledKernel;
}  // namespace jit
namespace vm {
class ScalarKernel;
}  // namespace vm

// The type of a function parameter or result, as far as the runtime checks it.
struct TypeDesc {
  enum class Kind : uint8_t { Tensor, Tuple, Adt, Func, Any };
  Kind kind = Kind::Any;
  DType dtype = DType::Float32;
  Shape shape;                   // Tensor: -1 for `?`
  std::vector<TypeDesc> fields;  // Tuple fields; Adt type arguments
  std::string name;              // Adt: the type's name

  std::string toString() const;  // Relay spelling: Tensor[(2, ?), float32], List[...]
};

struct BytecodeFunction {
  std::string name;
  uint32_t numParams = 0;
  uint32_t frameSize = 0;  // registers; the parameters are registers 0..numParams-1
  std::vector<uint32_t> code;
  std::vector<std::string> paramNames;  // without `%`
  std::vector<TypeDesc> paramTypes;
  // Where device placement put each parameter; invoke() copies arguments there.
  // Empty (or cpu) means the host.
  std::vector<Device> paramDevices;
  TypeDesc resultType;
};

struct ConstructorInfo {
  std::string name;
  std::string typeName;
  uint32_t arity = 0;
};

// How the VM runs a kernel; derived from its IR when the executable is built or loaded.
enum class KernelKind : uint8_t {
  Compiled,  // JIT-compiled loops, destination passing
  Scalar,    // only element-wise operators on 0-d tensors: evaluated on host scalars
  Dynamic,   // a data-dependent operator (arange, argwhere, dyn.*): run natively
};

struct KernelInfo {
  std::shared_ptr<const jit::FusedFunction> function;
  KernelKind kind = KernelKind::Compiled;
  std::shared_ptr<const vm::ScalarKernel> scalar;  // Scalar kernels: the host evaluator
};

class Executable {
 public:
  static constexpr uint32_t kMajorVersion = 2;
  static constexpr uint32_t kMinorVersion = 0;

  Executable();
  ~Executable();

  std::vector<BytecodeFunction> functions;
  std::vector<KernelInfo> kernels;
  std::vector<Tensor> constants;
  std::vector<ConstructorInfo> constructors;
  std::vector<std::string> strings;
  // The devices it was compiled for, the default (compute) device first; the
  // host cpu is always among them.
  std::vector<Device> devices{Device{}};

  // Fills in each kernel's kind and checks every instruction; throws kiln::Error.
  void finalize();

  const BytecodeFunction* findFunction(std::string_view name) const;
  int64_t functionIndex(std::string_view name) const;  // -1 when absent
  int64_t constructorId(std::string_view name) const;  // -1 when absent
  const std::string& constructorName(uint32_t ctor) const;

  // The compiled kernel `k` for `device`, compiling it on first use.
  const jit::CompiledKernel& compiledKernel(uint32_t k, Device device = {}) const;

  // The file image, and the file itself.
  std::vector<uint8_t> serialize() const;
  void save(const std::string& path) const;
  // Parses and verifies an image. `owner` keeps `bytes` alive; when `bytes` is
  // 64-byte aligned, constant tensors point into it instead of being copied.
  static std::shared_ptr<Executable> fromImage(std::shared_ptr<const void> owner, std::span<const uint8_t> bytes);
  static std::shared_ptr<Executable> fromBytes(std::span<const uint8_t> bytes);  // copies
  // Maps the file (constants are used in place) and verifies it.
  static std::shared_ptr<Executable> load(const std::string& path);
  // Rewrites the header's checksum to match the payload (fuzzers use it to reach
  // the parser and verifier behind the checksum). No-op on too-short images.
  static void resealChecksum(std::vector<uint8_t>& image);
  // True when the bytes start like an executable file (the magic word).
  static bool looksLikeExecutable(std::span<const uint8_t> bytes);

  // Every function's bytecode, one instruction per line.
  std::string disassemble() const;
  std::string disassemble(uint32_t function) const;

  // Prints a value as vmrun does: tensors, (a, b), Cons(1, Nil).
  std::string format(const Value& v, size_t maxElements = 64) const;

 private:
  std::shared_ptr<const void> image_;  // keeps mapped constants alive
  struct KernelSlots;
  std::unique_ptr<KernelSlots> compiled_;
};

}  // namespace kiln
