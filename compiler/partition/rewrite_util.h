// Node-building steps the partitioning passes share: typed functions and calls
// for a group, a group's body over its parameters, let chains less the bindings
// a group took over, and a module rebuilt function by function.
#pragma once

#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "compiler/ir/module.h"

namespace kiln::partition {

// The group rooted at `root` with each input replaced (`params`: original
// expression -> parameter) and each variable in `absorbed` replaced by its
// bound value (itself rebuilt the same way). Types are carried over.
const ir::Expr* substituteGroup(ir::Builder& b, const ir::Expr* root,
                                const std::unordered_map<const ir::Expr*, const ir::Expr*>& params,
                                const std::unordered_map<const ir::Var*, const ir::Expr*>& absorbed);

// `fn (params) { body }` with attributes, typed params -> body's type.
ir::Function* makeFunction(ir::Builder& b, const std::vector<const ir::Var*>& params, const ir::Expr* body,
                           const ops::AttrMap* attrs, SourceLoc loc);
// `callee(args)` with `like`'s type and location.
const ir::Call* makeCall(ir::Builder& b, const ir::Expr* callee, const std::vector<const ir::Expr*>& args,
                         const ir::Expr* like);
// `fn` with another body; everything else (parameters, attributes, type) kept.
const ir::Function* withBody(ir::Builder b, const ir::Function* fn, const ir::Expr* body);

// A let chain from `let`, every value and the final body passed through
// `mutate`, the bindings of variables `skip` names left out.
const ir::Expr* rebuildLetChain(ir::Builder& b, const ir::Let* let, const std::function<bool(const ir::Var*)>& skip,
                                const std::function<const ir::Expr*(const ir::Expr*)>& mutate);

// A new module over the same arena: the type definitions, then each function
// as `f` returns it; `f` may add functions of its own to `out` first.
std::unique_ptr<ir::Module> rebuildModule(
    const ir::Module& m, const std::function<const ir::Function*(const ir::GlobalFunction&, ir::Module& out)>& f);
inline std::unique_ptr<ir::Module> rebuildModule(const ir::Module& m,
                                                 const std::function<const ir::Function*(const ir::GlobalFunction&)>& f) {
  return rebuildModule(m, [&](const ir::GlobalFunction& g, ir::Module&) { return f(g); });
}

}  // namespace kiln::partition
