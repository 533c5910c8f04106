// Device domains: the constraint system device placement solves.
//
// Representation: a domain is a node in one union-find forest. A leaf domain
// stands for "the device of a first-order value" (a tensor, or a tuple or ADT
// value: all of its tensors live on one device, as in TVM). A function domain has
// one child per parameter and one for the result, so a function passed as a
// value carries where its parameters and result live, and unifying two function
// domains unifies them child by child, however deep the higher-order chain. A
// leaf unified with a function domain (a type variable instantiated to a
// function type) collapses it: all of the function's leaves join the leaf.
//
// Two kinds of edges connect domains:
//   - hard (unify): the values must be on one device (a kernel's operands and
//     results; a let and its value; a call's arguments and the callee's
//     parameters);
//   - soft: a copy may separate them (a variable and one use of it; an
//     `on_device` body and its result). Solving treats a soft edge as a
//     preference: a free domain takes the device of its nearest fixed domain
//     along soft edges (breadth-first from every fixed domain at once, in the
//     order they were fixed), so copies appear only where two fixed domains meet.
//
// Devices are small integers (indices into the placement's device table); -1 is
// "not yet known". Everything is near-linear: union by rank with path halving,
// one breadth-first pass. Not thread-safe; one per placement run.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kiln::compiler {

class DeviceDomains {
 public:
  int leaf(bool scalar);
  int func(std::span<const int> params, int result);
  size_t size() const { return nodes_.size(); }

  int find(int x);
  bool isFunc(int x) { return nodes_[static_cast<size_t>(find(x))].func; }
  // A function domain's parameter children and result (its root's).
  std::span<const int> params(int f);
  int result(int f);
  // The leaves of a domain, depth-first (a leaf: itself).
  void leaves(int x, std::vector<int>& out);

  void unify(int a, int b);
  // A soft edge between two domains of the same shape (leaves pairwise).
  void soft(int a, int b);

  // Fixing, after every unify: a fixed domain keeps its first device. Returns
  // false when the domain is already fixed to another device. A `source`
  // spreads its device to free domains along soft edges; a requirement that is
  // not (a condition read on the host, a literal made there) only holds itself.
  bool fix(int x, int device, bool source = true);
  bool fixed(int x) { return device_[static_cast<size_t>(find(x))] >= 0; }
  // Fixes every free domain all of whose members are scalars (0-d values drive
  // control flow and live on the host) to `host`, not as sources: a kernel that
  // reads a scalar beside tensors stays with its tensors.
  void fixScalars(int host);
  // Propagates fixed devices along soft edges; what stays free gets `fallback`.
  void solve(int fallback);
  int device(int x) { return device_[static_cast<size_t>(find(x))]; }

 private:
  struct Node {
    int parent;
    uint32_t rank = 0;
    bool func = false;
    bool scalar = false;  // every member is a 0-d value
    uint32_t firstChild = 0, numChildren = 0;  // func: params then result, in children_
  };
  void link(int a, int b);
  std::vector<Node> nodes_;
  std::vector<int> children_;
  std::vector<int> device_;  // per root, after fixing
  std::vector<std::pair<int, int>> soft_;
  std::vector<int> fixOrder_;  // roots in the order they were fixed
  std::vector<std::pair<int, int>> pending_;  // unify worklist
};

}  // namespace kiln::compiler
