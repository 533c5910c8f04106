// The tables an executable's functions share while they are emitted
// (compiler/codegen/bytecode_emitter.h): constructors, functions and which of
// them may be forked, strings, constants and shape constants, and the kernel
// table. One per emitBytecode call; not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiler/codegen/bytecode_emitter.h"
#include "kiln/executable.h"

namespace kiln::compiler {

// A type as the executable's function signatures record it.
TypeDesc describeType(const ir::Type* t, int depth = 0);

// A value held in memory (released after its last use); register scalars are not.
bool isHeapType(const ir::Type* t);

class ExecutableBuilder {
 public:
  // Numbers the module's constructors and the functions the memory plan has
  // (the module's, less prelude functions nothing uses), in that order.
  ExecutableBuilder(const ir::Module& m, const EmitOptions& opts, KernelTableBuilder& kernels, const MemoryPlan& memory);

  // Whether calls of global `name` may be forked (bytecode::pureFunctions
  // checks the same of the bytecode when it is loaded).
  bool pure(std::string_view name) const { return pure_.count(name) > 0; }

  Executable::Contents& contents() { return contents_; }
  const ir::Module& module() const { return m_; }
  const EmitOptions& options() const { return opts_; }
  const FunctionMemory& memory(std::string_view function) const { return memory_.of(function); }
  KernelRef kernel(const ir::Function* prim) { return kernels_.kernel(prim); }
  // The kernel table, once every function is emitted.
  void finishKernels() { contents_.kernels.assign(kernels_.kernels().begin(), kernels_.kernels().end()); }

  uint32_t functionId(std::string_view name) const { return functionIds_.at(name); }
  bool hasFunction(std::string_view name) const { return functionIds_.count(name) > 0; }
  const ir::Function* global(std::string_view name) const { return globals_.at(name); }
  uint32_t ctorId(const ir::Constructor* c) const { return ctorIds_.at(c); }

  uint32_t string(const std::string& s) {
    auto [it, fresh] = strings_.emplace(s, static_cast<uint32_t>(contents_.strings.size()));
    if (fresh) contents_.strings.push_back(s);
    return it->second;
  }

  uint32_t constant(const Tensor& t) {
    contents_.constants.push_back(t);
    return static_cast<uint32_t>(contents_.constants.size() - 1);
  }

  uint32_t shapeConstant(std::span<const int64_t> shape) {
    std::vector<int64_t> key(shape.begin(), shape.end());
    auto it = shapeConsts_.find(key);
    if (it != shapeConsts_.end()) return it->second;
    Tensor t = Tensor::empty(DType::Int64, {static_cast<int64_t>(shape.size())});
    if (!shape.empty()) std::memcpy(t.data(), shape.data(), shape.size() * 8);
    uint32_t id = constant(t);
    shapeConsts_.emplace(std::move(key), id);
    return id;
  }

 private:
  // The globals whose calls may run beside other code (`fork`): no reference
  // cells, no calls of closures (unknown functions), no device copies, and
  // calls only of such globals, found as the largest such set (recursion among
  // them stays pure). None when the program runs on a GPU: forks stay on the host.
  void findPureFunctions();

  const ir::Module& m_;
  const EmitOptions& opts_;
  KernelTableBuilder& kernels_;
  const MemoryPlan& memory_;
  Executable::Contents contents_;
  std::unordered_map<const ir::Constructor*, uint32_t> ctorIds_;
  std::unordered_map<std::string_view, uint32_t> functionIds_;
  std::unordered_map<std::string_view, const ir::Function*> globals_;
  std::unordered_set<std::string_view> pure_;
  std::unordered_map<std::string, uint32_t> strings_;
  std::map<std::vector<int64_t>, uint32_t> shapeConsts_;
};

}  // namespace kiln::compiler
