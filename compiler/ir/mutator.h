// ExprMutator: the base of every IR rewrite. visit() returns the rewritten
// expression; the default rebuilds a node only when a child changed, so an
// unchanged subtree is shared, never copied. Results are memoized per node within
// one mutator (the IR is a DAG: a shared subexpression is rewritten once). Let
// chains are walked with a loop. Checked types are carried over to rebuilt nodes.
#pragma once

#include <span>
#include <unordered_map>
#include <vector>

#include "compiler/ir/expr.h"

namespace kiln::ir {

class ExprMutator {
 public:
  explicit ExprMutator(Arena& arena) : b_(arena) {}
  virtual ~ExprMutator() = default;

  const Expr* mutate(const Expr* e);

 protected:
  // Override to rewrite; call the base for the default (children first).
  virtual const Expr* visit(const Expr* e);
  virtual const Pattern* visitPattern(const Pattern* p) { return p; }
  // Mutates each of `in` into `out`; whether any changed.
  bool mutateAll(std::span<const Expr* const> in, std::vector<const Expr*>& out);

  Builder& builder() { return b_; }
  // Copies the checked type of `from` to a rebuilt node.
  template <class T>
  const T* typed(T* node, const Expr* from) {
    node->type = from->type;
    return node;
  }

 private:
  const Expr* visitLet(const Let* let);

  Builder b_;
  std::unordered_map<const Expr*, const Expr*> memo_;
};

}  // namespace kiln::ir
