// Executable: lookups, kernel kinds, the shared kernel table and value printing.
#include "kiln/executable.h"

#include <mutex>
#include <unordered_map>

#include "bytecode/opcodes.h"
#include "bytecode/verifier.h"
#include "jit/kernel.h"
#include "kiln/error.h"
#include "ops/shape_util.h"
#include "vm/dynamic_ops.h"
#include "vm/scalar_kernel.h"

namespace kiln {

// Compiled kernels per (kernel, device), filled on first use. Every VM sharing the
// executable reads the same slots.
struct Executable::KernelSlots {
  std::mutex mu;
  std::unordered_map<uint64_t, std::shared_ptr<const jit::CompiledKernel>> compiled;
};

Executable::Executable() : compiled_(std::make_unique<KernelSlots>()) {}
Executable::~Executable() = default;

std::string TypeDesc::toString() const {
  switch (kind) {
    case Kind::Tensor: {
      std::string s = "Tensor[(";
      for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + ops::dimToString(shape[i]);
      if (shape.size() == 1) s += ",";
      return s + "), " + std::string(dtypeName(dtype)) + "]";
    }
    case Kind::Tuple: {
      std::string s = "(";
      for (size_t i = 0; i < fields.size(); ++i) s += (i ? ", " : "") + fields[i].toString();
      return s + (fields.size() == 1 ? ",)" : ")");
    }
    case Kind::Adt: {
      std::string s = name;
      if (!fields.empty()) {
        s += "[";
        for (size_t i = 0; i < fields.size(); ++i) s += (i ? ", " : "") + fields[i].toString();
        s += "]";
      }
      return s;
    }
    case Kind::Func: return "fn";
    case Kind::Any: return "_";
  }
  return "_";
}

void Executable::finalize() {
  bytecode::verifyKernels(*this);
  for (auto& k : kernels) {
    k.scalar = nullptr;
    if (vm::isDynamicKernel(*k.function)) k.kind = KernelKind::Dynamic;
    else if ((k.scalar = vm::ScalarKernel::tryBuild(*k.function))) k.kind = KernelKind::Scalar;
    else k.kind = KernelKind::Compiled;
  }
  bytecode::verify(*this);
}

const BytecodeFunction* Executable::findFunction(std::string_view name) const {
  int64_t i = functionIndex(name);
  return i < 0 ? nullptr : &functions[static_cast<size_t>(i)];
}

int64_t Executable::functionIndex(std::string_view name) const {
  for (size_t i = 0; i < functions.size(); ++i)
    if (functions[i].name == name) return static_cast<int64_t>(i);
  return -1;
}

int64_t Executable::constructorId(std::string_view name) const {
  for (size_t i = 0; i < constructors.size(); ++i)
    if (constructors[i].name == name) return static_cast<int64_t>(i);
  return -1;
}

const std::string& Executable::constructorName(uint32_t ctor) const {
  static const std::string tuple = "(tuple)", unknown = "?";
  if (ctor == kTupleCtor) return tuple;
  return ctor < constructors.size() ? constructors[ctor].name : unknown;
}

const jit::CompiledKernel& Executable::compiledKernel(uint32_t k, Device device) const {
  if (k >= kernels.size()) throw Error("kernel index out of range");
  uint64_t key = static_cast<uint64_t>(k) << 32 | bytecode::encodeDevice(device);
  {
    std::lock_guard<std::mutex> lock(compiled_->mu);
    auto it = compiled_->compiled.find(key);
    if (it != compiled_->compiled.end()) return *it->second;
  }
  // The global cache compiles each kernel once even when many threads ask at once.
  auto kernel = jit::KernelCache::global().get(*kernels[k].function, device);
  std::lock_guard<std::mutex> lock(compiled_->mu);
  return *compiled_->compiled.emplace(key, std::move(kernel)).first->second;
}

std::string Executable::format(const Value& v, size_t maxElements) const {
  // Iterative over ADT nesting, so a list of a million cells prints without recursion.
  std::string out;
  struct Item {
    const Value* v;
    uint32_t next;
  };
  std::vector<Item> stack{{&v, 0}};
  while (!stack.empty()) {
    Item& it = stack.back();
    const Value& x = *it.v;
    if (it.next == 0 && !x.isObject(ObjectKind::Adt) && !x.isClosure()) {
      if (x.isTensor()) out += x.tensor().toString(maxElements);
      else out += "<" + x.describe() + ">";
      stack.pop_back();
      continue;
    }
    if (x.isClosure()) {
      out += "<closure " + (x.asClosure()->function < functions.size() ? functions[x.asClosure()->function].name : "?") + ">";
      stack.pop_back();
      continue;
    }
    const AdtObject* a = x.asAdt();
    bool tuple = a->ctor == kTupleCtor;
    if (it.next == 0) {
      out += tuple ? "(" : constructorName(a->ctor);
      if (!tuple && a->size == 0) {
        stack.pop_back();
        continue;
      }
      if (!tuple) out += "(";
    }
    if (it.next < a->size) {
      if (it.next) out += ", ";
      const Value* child = &a->fields()[it.next++];
      stack.push_back({child, 0});
      continue;
    }
    out += (tuple && a->size == 1) ? ",)" : ")";
    stack.pop_back();
  }
  return out;
}

}  // namespace kiln
