// annotateTargets and mergeCompilerRegions: which library each call goes to, and
// which calls go to it together (TVM's AnnotateTarget and MergeCompilerRegions).
//
// Annotation: a call belongs to the first library (in the order given) that
// supports it: a composite call `library.name` to its library, any other call to
// the library whose `supports` pattern matches it there (its arguments are
// wildcards to the pattern: the rule is about this call). Calls of constructors
// and of kernels, calls whose types mention a type parameter (a polymorphic
// function's body: a library function is monomorphic), and calls in prelude
// functions are never annotated; a supported call left out is noted.
//
// Regions: an annotated call x joins the region of the calls that use it when
// every use of x is an argument of a member of that one region — written in
// place, or through the variable of a `let` (or graph binding) the region then
// takes over — and all of them go to the same library, are operators or
// composites (no effects: moving one changes nothing that can be observed), and
// lie in x's scope (dataflow.h). Chains, diamonds and residual connections thus
// become one region. A region has one output, its root (the one member used
// outside it); every other member is used only inside, so no path leaves the
// region and comes back (no cycle with the code around it), and every value it
// needs from outside is an input. A value also used outside stays an input of
// the regions that use it (a region is not split into several outputs). Calls of
// functions (a global, a closure) are regions of one call, evaluated where they
// were, so effects keep their order; a variable binding a region's result is
// never part of a region: later code and other regions use it through the variable.
//
// The plan refers to the nodes of the module it was made for.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "compiler/ir/module.h"
#include "compiler/partition/pattern.h"

namespace kiln::partition {

struct Region {
  std::string library;
  std::string function;  // the global function it lies in
  const ir::Call* root;
  std::vector<const ir::Call*> members;  // in evaluation order, root last
};

struct RegionPlan {
  std::vector<std::string> libraries;
  std::unordered_map<const ir::Call*, std::string> library;  // every annotated call
  std::unordered_map<const ir::Call*, int> regionOf;          // after merging
  std::vector<Region> regions;
  std::unordered_map<const ir::Var*, const ir::Expr*> absorbed;  // lets taken over by a region -> bound value
  std::vector<std::string> notes;                                // supported calls left to Kiln, and why

  // `dnnl` or `dnnl region 3` for a call, "" for others (kilnc --emit annotated / regions).
  std::string describe(const ir::Expr* e) const;
};

RegionPlan annotateTargets(const ir::Module& m, const PatternTable& table, const std::vector<std::string>& libraries);
void mergeCompilerRegions(const ir::Module& m, RegionPlan& plan);

}  // namespace kiln::partition
