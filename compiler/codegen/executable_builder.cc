// The executable's shared tables while its functions are emitted (executable_builder.h).
#include "compiler/codegen/executable_builder.h"

#include <cstring>

#include "compiler/ir/visit.h"

namespace kiln::compiler {

using namespace kiln::ir;

TypeDesc describeType(const Type* t, int depth) {
  TypeDesc d;
  if (!t || depth > 32) return d;
  switch (t->kind) {
    case TypeKind::Tensor: {
      auto* tt = static_cast<const TensorType*>(t);
      d.kind = TypeDesc::Kind::Tensor;
      d.dtype = tt->dtype;
      d.shape.assign(tt->shape.begin(), tt->shape.end());
      break;
    }
    case TypeKind::Tuple:
      d.kind = TypeDesc::Kind::Tuple;
      for (const Type* f : static_cast<const TupleType*>(t)->fields) d.fields.push_back(describeType(f, depth + 1));
      break;
    case TypeKind::Adt: {
      auto* a = static_cast<const AdtType*>(t);
      d.kind = isRefType(a) ? TypeDesc::Kind::Ref : TypeDesc::Kind::Adt;
      d.name = std::string(a->def->name);
      for (const Type* f : a->args) d.fields.push_back(describeType(f, depth + 1));
      break;
    }
    case TypeKind::Func: d.kind = TypeDesc::Kind::Func; break;
    default: break;
  }
  return d;
}

// A value held in memory (released after its last use); register scalars are not.
bool isHeapType(const Type* t) {
  if (auto* tt = asTensor(t)) return tt->rank() > 0;
  return t != nullptr;
}

ExecutableBuilder::ExecutableBuilder(const Module& m, const EmitOptions& opts, KernelTableBuilder& kernels,
                                     const MemoryPlan& memory)
    : m_(m), opts_(opts), kernels_(kernels), memory_(memory) {
  for (const auto& td : m.typeDefs())
    for (const Constructor* c : td.def->ctors) {
      ctorIds_[c] = static_cast<uint32_t>(contents_.constructors.size());
      contents_.constructors.push_back({std::string(c->name), std::string(td.def->name), static_cast<uint32_t>(c->fields.size())});
    }
  for (const FunctionMemory& f : memory.functions) {
    functionIds_[f.name] = static_cast<uint32_t>(contents_.functions.size());
    contents_.functions.emplace_back();
  }
  for (const auto& g : m.functions())
    if (functionIds_.count(g.var->name)) globals_[g.var->name] = g.fn;
  findPureFunctions();
}

// The largest set of globals that touch no reference cell, call no closure and
// no device copy, and call only globals of the set (recursion among them stays
// pure); none when the program runs on a GPU.
void ExecutableBuilder::findPureFunctions() {
  if (opts_.devices)
    for (const Device& d : opts_.devices->devices)
      if (!(d == Device{})) return;
  std::unordered_map<std::string_view, std::vector<std::string_view>> calls;
  for (const auto& [name, fn] : globals_) {
    bool ok = true;
    std::vector<const Expr*> stack{fn->body};
    while (ok && !stack.empty()) {
      const Expr* e = stack.back();
      stack.pop_back();
      if (e->kind == ExprKind::RefOp) ok = false;
      if (e->kind == ExprKind::Call) {
        const Expr* callee = static_cast<const Call*>(e)->callee;
        if (callee->kind == ExprKind::Var) ok = false;
        if (callee->kind == ExprKind::GlobalVar) calls[name].push_back(static_cast<const GlobalVar*>(callee)->name);
        if (opCall(e, "device_copy")) ok = false;
      }
      forEachChild(e, [&](const Expr* c) { stack.push_back(c); });
    }
    if (ok) pure_.insert(name);
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (auto it = pure_.begin(); it != pure_.end();) {
      bool keep = true;
      for (std::string_view c : calls[*it]) keep = keep && pure_.count(c) > 0;
      if (keep) {
        ++it;
      } else {
        it = pure_.erase(it);
        changed = true;
      }
    }
  }
}

}  // namespace kiln::compiler
