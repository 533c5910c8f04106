// Executable: a compiled program, as data — bytecode functions, the fused kernels
// they call (as IR; the runtime compiles them), constants, the constructor table
// and the devices it was compiled for — and its file format.
//
// Ownership and threads: an Executable is immutable once built or loaded: every
// accessor is const, and compile(), load() and build() hand out
// std::shared_ptr<const Executable>. Share one among any number of VMs on any
// number of threads. What running it needs besides (compiled kernels, host-scalar
// evaluators) is not here but in the runtime's table for the executable
// (kiln/runtime.h), which the VMs of one Runtime share.
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
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/kernel_kind.h"
#include "kiln/tensor.h"
#include "kiln/value.h"

namespace kiln {

namespace kernel_ir {
struct FusedFunction;
}  // namespace kernel_ir

// The type of a function parameter or result, as far as the runtime checks it.
struct TypeDesc {
  enum class Kind : uint8_t { Tensor, Tuple, Adt, Func, Any, Ref };
  Kind kind = Kind::Any;
  DType dtype = DType::Float32;
  Shape shape;                   // Tensor: -1 for `?`
  std::vector<TypeDesc> fields;  // Tuple fields; Adt type arguments; Ref: the content
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

// One kernel: its IR, and how the VM runs it (decided from the IR when the
// executable is built or loaded; see kiln/kernel_kind.h).
struct KernelInfo {
  std::shared_ptr<const kernel_ir::FusedFunction> function;
  KernelKind kind = KernelKind::Compiled;
};

// Machine code for one kernel made ahead of time (`kilnc --precompile`). Opaque
// to the format: the runtime's kernel cache seals it with the kernel's full key
// (its content, the CPU's model and features, Kiln's code generator and LLVM
// versions) and a checksum, and uses it only when all of them match; otherwise
// it compiles the kernel's IR, which the executable always keeps.
struct PrecompiledKernel {
  uint32_t kernel = 0;  // index into kernels()
  Device device;
  std::string code;
};

class Executable {
 public:
  static constexpr uint32_t kMajorVersion = 2;
  // 2.1: reference cells (the ref opcodes, TypeDesc::Kind::Ref).
  // 2.2: alloc_tensor_own.
  // 2.3: the precompiled section (machine code per kernel), after the functions.
  // 2.4: the library section (which kernels an external library runs), last.
  // 2.5: views (get_field_view; invoke and fork pass arguments as views).
  static constexpr uint32_t kMinorVersion = 5;

  // What an executable is made of, as the compiler emits it and the loader reads it.
  struct Contents {
    std::vector<BytecodeFunction> functions;
    std::vector<std::shared_ptr<const kernel_ir::FusedFunction>> kernels;
    std::vector<Tensor> constants;
    std::vector<ConstructorInfo> constructors;
    std::vector<std::string> strings;
    // The devices it was compiled for, the default (compute) device first; the
    // host cpu is always among them.
    std::vector<Device> devices{Device{}};
    std::vector<PrecompiledKernel> precompiled;
  };

  // Classifies every kernel and verifies every instruction (throws kiln::Error).
  // `image` keeps memory that constants point into alive.
  static std::shared_ptr<const Executable> build(Contents contents, std::shared_ptr<const void> image = nullptr);

  // A copy of the parts, to build a changed executable from (tools, tests).
  Contents contents() const;

  const std::vector<BytecodeFunction>& functions() const { return c_.functions; }
  const std::vector<KernelInfo>& kernels() const { return kernels_; }
  const std::vector<Tensor>& constants() const { return c_.constants; }
  const std::vector<ConstructorInfo>& constructors() const { return c_.constructors; }
  const std::vector<std::string>& strings() const { return c_.strings; }
  const std::vector<Device>& devices() const { return c_.devices; }
  const std::vector<PrecompiledKernel>& precompiled() const { return c_.precompiled; }
  // Kernel `k`'s precompiled code for `device`, or "" (a view into this executable).
  std::string_view precompiledCode(uint32_t k, Device device) const;

  const BytecodeFunction* findFunction(std::string_view name) const;
  int64_t functionIndex(std::string_view name) const;  // -1 when absent
  int64_t constructorId(std::string_view name) const;  // -1 when absent
  const std::string& constructorName(uint32_t ctor) const;

  // The file image, and the file itself.
  std::vector<uint8_t> serialize() const;
  void save(const std::string& path) const;
  // Parses and verifies an image. `owner` keeps `bytes` alive; when `bytes` is
  // 64-byte aligned, constant tensors point into it instead of being copied.
  static std::shared_ptr<const Executable> fromImage(std::shared_ptr<const void> owner, std::span<const uint8_t> bytes);
  static std::shared_ptr<const Executable> fromBytes(std::span<const uint8_t> bytes);  // copies
  // Maps the file (constants are used in place) and verifies it.
  static std::shared_ptr<const Executable> load(const std::string& path);
  // How long load() took (mapping, parsing, verifying); 0 for one built in memory.
  double loadMillis() const { return loadMillis_; }
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
  Executable() = default;
  Contents c_;
  std::vector<KernelInfo> kernels_;
  std::shared_ptr<const void> image_;  // keeps mapped constants alive
  double loadMillis_ = 0;
};

}  // namespace kiln
