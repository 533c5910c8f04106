// KernelTableBuilder: primitive functions to deduplicated, named, classified kernels.
#include "compiler/passes/kernel_table_builder.h"

#include "compiler/passes/to_fused_function.h"
#include "kernel_ir/kernel_kind.h"

namespace kiln::compiler {

namespace {

bool isReshapeOnly(const kernel_ir::FusedFunction& f) {
  if (f.params.size() != 1 || f.nodes.size() != 1 || f.outputs.size() != 1) return false;
  const kernel_ir::FusedNode& n = f.nodes[0];
  if (n.isConstant()) return false;
  const std::string& op = n.op->name;
  return (op == "reshape" || op == "squeeze" || op == "expand_dims") && n.inputs.size() == 1 && n.inputs[0] == 0 &&
         f.outputs[0] == 1;
}

}  // namespace

KernelRef KernelTableBuilder::kernel(const ir::Function* prim) {
  if (auto it = byNode_.find(prim); it != byNode_.end()) return it->second;
  auto f = std::make_shared<kernel_ir::FusedFunction>(toFusedFunction(prim, "kernel", m_.file()));
  // Named after its first few operators: fused_nn_dense_nn_bias_add.
  std::string ops;
  int n = 0;
  for (const auto& node : f->nodes) {
    if (node.isConstant() || n == 4) continue;
    std::string name = node.op->name;
    for (char& c : name)
      if (c == '.') c = '_';
    ops += (n++ ? "_" : "") + name;
  }
  uint64_t hash = f->contentHash();
  KernelRef ref;
  if (auto it = byHash_.find(hash); it != byHash_.end()) {
    ref = it->second;
  } else {
    // A library's kernel is named as its region is (`dnnl_main_0`), for profiles.
    const ops::AttrValue* sym = prim->attrs ? prim->attrs->find("global_symbol") : nullptr;
    f->name = !f->library.empty() && sym && sym->kind == ops::AttrValue::Kind::String ? sym->s
                                                                                       : "fused_" + (ops.empty() ? std::string("const") : ops);
    if (!names_.insert(f->name).second) f->name += "_" + std::to_string(kernels_.size());
    KernelKind k = kernel_ir::kernelKind(*f);
    CallKind kind = k == KernelKind::Library   ? CallKind::Compiled  // the same call as compiled code
                    : k == KernelKind::Dynamic ? CallKind::Dynamic
                    : k == KernelKind::Scalar ? CallKind::Scalar
                    : isReshapeOnly(*f)       ? CallKind::Reshape
                                              : CallKind::Compiled;
    ref = KernelRef{static_cast<uint32_t>(kernels_.size()), kind, f.get()};
    kernels_.push_back(f);
    byHash_.emplace(hash, ref);
  }
  byNode_.emplace(prim, ref);
  return ref;
}

CallKind KernelTableBuilder::kindAt(const KernelRef& k, Device device) {
  return k.kind == CallKind::Scalar && !(device == Device{}) ? CallKind::Compiled : k.kind;
}

}  // namespace kiln::compiler
