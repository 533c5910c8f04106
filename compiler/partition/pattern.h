// Patterns over the IR: what a group of operators must look like for a library
// to take it (TVM's dataflow patterns, for Kiln's expressions).
//
// Representation: a pattern is a DAG of immutable PatternNodes owned by the
// PatternArena that built them. A node used in two places of one pattern must
// match the same expression in both (`add(%x, %x)` with one `%x`), as in TVM.
// Kinds:
//   Wildcard        any expression; the group's input (a composite's parameter)
//   Op(name)        the operator `name` (a callee)
//   AnyCallee       a callee that is not an operator or constructor: a global,
//                   a variable, a closure, a function literal
//   Global(name)    the global function `@name` (a callee)
//   Call(callee, args, rest)  a call; `rest`: more arguments may follow (`...`);
//                   the two operands of a commutative operator (add, multiply,
//                   maximum, minimum, logical and/or) match in either order
//   Alt(a, b)       a, else b (`a | b`); `optional` is Alt(op(x), x)
//   Tuple(fields), TupleGet(tuple, index; -1 any)
//   Constant        a literal
//   Attrs(inner, map)  inner, and the call (operator attributes or call-site
//                   attributes) or function carries every key with that value
//   Type(inner, dtype, dims, exact)  inner, and its checked type is a tensor of
//                   that dtype (none given: any) and rank, each dim equal
//                   (`?` in the pattern: any dim when !exact, `?` only when exact)
//   Check(inner, fn)  inner, and a C++ predicate over the expression holds
//
// Matching looks through variables: where a pattern wants a call and finds a
// variable, `resolve` (given by the caller) may return the value bound to it (a
// single-use let in the same scope, see dataflow.h); the call then belongs to the
// group and its binding is dropped when the group is rewritten.
//
// Thread-safety: nodes are immutable; one PatternArena per pattern table, read
// by any number of threads once built.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "compiler/ir/expr.h"
#include "kernel_ir/attrs.h"

namespace kiln::partition {

enum class PatKind : uint8_t { Wildcard, Op, AnyCallee, Global, Call, Alt, Tuple, TupleGet, Constant, Attrs, Type, Check };

struct PatternNode;
using PatternCheck = std::function<bool(const ir::Expr*)>;

struct PatternNode {
  PatKind kind;
  std::string name;                          // Op, Global
  std::vector<const PatternNode*> children;  // Call: callee, args...; Alt: a, b; Tuple: fields; others: inner
  bool restArgs = false;                     // Call: `...` after the arguments
  int64_t index = -1;                        // TupleGet
  ops::AttrMap attrs;                        // Attrs
  std::optional<DType> dtype;                // Type: nullopt, any
  std::vector<int64_t> dims;                 // Type: kAnyDim for `?`
  bool rankKnown = false, exact = false;     // Type
  PatternCheck check;                        // Check
};

// Builds and owns pattern nodes (stable addresses).
class PatternArena {
 public:
  const PatternNode* wildcard();
  const PatternNode* op(std::string name);  // the operator must exist (throws kiln::Error otherwise)
  const PatternNode* anyCallee();
  const PatternNode* global(std::string name);
  const PatternNode* call(const PatternNode* callee, std::vector<const PatternNode*> args, bool restArgs = false);
  // Shorthand: a call of operator `name`.
  const PatternNode* opCall(std::string name, std::vector<const PatternNode*> args);
  const PatternNode* alt(const PatternNode* a, const PatternNode* b);
  // `wrap(x)` or x: TVM's `x.optional(wrap)`.
  const PatternNode* optional(const PatternNode* x, const std::function<const PatternNode*(const PatternNode*)>& wrap);
  const PatternNode* tuple(std::vector<const PatternNode*> fields);
  const PatternNode* tupleGet(const PatternNode* t, int64_t index);
  const PatternNode* constant();
  const PatternNode* hasAttrs(const PatternNode* inner, ops::AttrMap attrs);
  const PatternNode* hasType(const PatternNode* inner, std::optional<DType> dtype, std::vector<int64_t> dims, bool exact);
  const PatternNode* hasDType(const PatternNode* inner, DType dtype);
  const PatternNode* check(const PatternNode* inner, PatternCheck fn);

 private:
  PatternNode* make(PatKind k);
  std::deque<PatternNode> nodes_;
};

// A successful match of a pattern at `root`.
struct PatternMatch {
  const ir::Expr* root = nullptr;
  // The expressions matched by wildcards, in order of first appearance
  // (left-to-right, depth-first: the order the program evaluates them).
  std::vector<const ir::Expr*> inputs;
  // The calls, tuples and projections inside the group, root included.
  std::vector<const ir::Expr*> interior;
  // Variables looked through (their let bindings move into the group).
  std::vector<const ir::Var*> absorbed;
  // What each pattern node matched (for callers that name parts of a pattern).
  std::unordered_map<const PatternNode*, const ir::Expr*> bound;
};

// The value behind a variable the matcher may look through, or null.
using VarResolver = std::function<const ir::Expr*(const ir::Var*)>;

// Matches `p` at `e`. A node inside the group other than the root must be usable
// by the group alone: `interiorOk(node)` (single use, same scope) is asked of every
// interior call/tuple, and the group fails when it says no.
bool matchPattern(const PatternNode* p, const ir::Expr* e, const VarResolver& resolve,
                  const std::function<bool(const ir::Expr*)>& interiorOk, PatternMatch& out);

// `nn.conv2d_nn.relu_`: the operators of a match in evaluation order, each
// followed by `_`, as TVM's PartitionedFromPattern attribute names them.
std::string partitionedFromPattern(const PatternMatch& m);

// A pattern table: composite patterns in priority order and the calls each
// library supports. Read from text (pattern_text.cc) or built in C++.
struct CompositePattern {
  std::string name;  // `library.what`, e.g. "dnnl.conv2d_bias_relu"
  const PatternNode* pattern;
};

struct SupportRule {
  std::string library;
  const PatternNode* pattern;  // matched at a call (its arguments are the region's business)
};

struct PatternTable {
  std::shared_ptr<PatternArena> arena = std::make_shared<PatternArena>();
  std::vector<CompositePattern> composites;
  std::vector<SupportRule> supports;
  std::vector<std::shared_ptr<PatternArena>> appended;  // arenas of appended tables, kept alive

  // Appends another table's entries (its nodes stay owned by its arena).
  void append(const PatternTable& other);
  // The libraries named by supports rules or composite prefixes, in order of first mention.
  std::vector<std::string> libraries() const;
};

// Reads a pattern file (syntax in README "Partitioning"). Errors are
// kiln::Errors naming file:line:col.
PatternTable parsePatternTable(std::string_view text, const std::string& file);

}  // namespace kiln::partition
