// Executable: building (kernel kinds, verification), lookups and value printing.
#include "kiln/executable.h"

#include <unordered_set>

#include "bytecode/opcodes.h"
#include "bytecode/verifier.h"
#include "kernel_ir/kernel_kind.h"
#include "kiln/error.h"
#include "kernel_ir/shape_util.h"

namespace kiln {

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
    case Kind::Ref: return "ref(" + (fields.empty() ? std::string("_") : fields[0].toString()) + ")";
  }
  return "_";
}

std::shared_ptr<const Executable> Executable::build(Contents contents, std::shared_ptr<const void> image) {
  // make_shared cannot reach the private constructor.
  std::shared_ptr<Executable> exe(new Executable);
  exe->c_ = std::move(contents);
  exe->image_ = std::move(image);
  for (auto& f : exe->c_.kernels) exe->kernels_.push_back(KernelInfo{std::move(f), KernelKind::Compiled});
  exe->c_.kernels.clear();
  // Kernel IR is checked before it is classified: classification lowers it,
  // and lowering trusts types.
  bytecode::verifyKernels(*exe);
  for (const PrecompiledKernel& p : exe->c_.precompiled)
    if (p.kernel >= exe->kernels_.size()) throw Error("invalid executable: precompiled code for a kernel that does not exist");
  for (auto& k : exe->kernels_) k.kind = kernel_ir::kernelKind(*k.function);
  bytecode::verify(*exe);
  return exe;
}

std::string_view Executable::precompiledCode(uint32_t k, Device device) const {
  for (const PrecompiledKernel& p : c_.precompiled)
    if (p.kernel == k && p.device == device) return p.code;
  return {};
}

Executable::Contents Executable::contents() const {
  Contents c = c_;
  for (const KernelInfo& k : kernels_) c.kernels.push_back(k.function);
  return c;
}

const BytecodeFunction* Executable::findFunction(std::string_view name) const {
  int64_t i = functionIndex(name);
  return i < 0 ? nullptr : &c_.functions[static_cast<size_t>(i)];
}

int64_t Executable::functionIndex(std::string_view name) const {
  for (size_t i = 0; i < c_.functions.size(); ++i)
    if (c_.functions[i].name == name) return static_cast<int64_t>(i);
  return -1;
}

int64_t Executable::constructorId(std::string_view name) const {
  for (size_t i = 0; i < c_.constructors.size(); ++i)
    if (c_.constructors[i].name == name) return static_cast<int64_t>(i);
  return -1;
}

const std::string& Executable::constructorName(uint32_t ctor) const {
  static const std::string tuple = "(tuple)", unknown = "?";
  if (ctor == kTupleCtor) return tuple;
  return ctor < c_.constructors.size() ? c_.constructors[ctor].name : unknown;
}

std::string Executable::format(const Value& v, size_t maxElements) const {
  // Iterative over ADT nesting, so a list of a million cells prints without recursion.
  std::string out;
  struct Item {
    const Value* v;
    uint32_t next;
  };
  std::vector<Item> stack{{&v, 0}};
  std::unordered_set<const RefObject*> open;  // cells being printed: one met again closes a cycle
  while (!stack.empty()) {
    Item& it = stack.back();
    const Value& x = *it.v;
    if (x.isRef()) {
      const RefObject* r = x.asRef();
      if (it.next == 0 && !open.insert(r).second) {
        out += "ref(...)";
        stack.pop_back();
      } else if (it.next == 0) {
        out += "ref(";
        it.next = 1;
        stack.push_back({&r->content, 0});
      } else {
        out += ")";
        open.erase(r);
        stack.pop_back();
      }
      continue;
    }
    if (it.next == 0 && !x.isObject(ObjectKind::Adt) && !x.isClosure()) {
      if (x.isTensor()) out += x.tensor().toString(maxElements);
      else out += "<" + x.describe() + ">";
      stack.pop_back();
      continue;
    }
    if (x.isClosure()) {
      out += "<closure " + (x.asClosure()->function < c_.functions.size() ? c_.functions[x.asClosure()->function].name : "?") + ">";
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
