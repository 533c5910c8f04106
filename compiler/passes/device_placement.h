// Device placement: where every value of a lambda-lifted module in A-normal form
// lives and computes, with copies and per-device specializations made explicit.
//
// The whole module is one constraint problem (passes/device_domains.h), solved by
// unification; nothing is visited once and memoized, so a global passed to `map`
// in two places is constrained at both. Constraints:
//   - a kernel's operands and results share a device; a let's variable is its
//     value; a call's arguments and result are the callee's parameters and
//     result (function domains, so globals and closures passed as values are
//     unified with whatever calls them, and with each other);
//   - tuple and ADT values keep all their tensors on one device; pattern
//     variables and fields are on their value's device;
//   - a use of a variable (or literal) whose type holds no function is joined to
//     its definition by a soft edge: a copy may go there;
//   - `on_device(e, device=d)` fixes e's computation to d (constrain_body, on by
//     default) and joins its result softly (or fixes it: constrain_result);
//     `device_copy(e, src_device=s, dst_device=t)` fixes e to s and the result to t;
//   - conditions, and every value all of whose members are scalars, are on the
//     host cpu; `main`'s other parameters are on the default device.
// Where the solution puts the two ends of a soft edge on different devices, a
// `device_copy` is inserted (one per variable and device in a scope). Where a
// reference to a global (a call, or the global passed as a value) needs the
// global on other devices than the global's own solution, the global is cloned,
// its parameters and result pinned to what the reference needs (`@f@cpu:1`),
// the reference retargeted, and the module solved again; recursion and mutual
// recursion stay inside the clones. Rounds are bounded (each global has finitely
// many device signatures); if they run out, the remaining references are
// unified instead (copies, never an error).
//
// Afterwards no `on_device` remains; each binder, parameter and value expression
// of the new module has a device in the plan.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "compiler/ir/module.h"
#include "kiln/tensor.h"

namespace kiln::compiler {

struct DevicePlan {
  Device host;           // cpu: control flow, shapes, scalars
  Device defaultDevice;  // the first of the device list: the program's compute
  std::vector<Device> devices;
  // Variables (binders) and value expressions of the placed module.
  std::unordered_map<const ir::Expr*, Device> of;
  Device deviceOf(const ir::Expr* e) const {
    auto it = of.find(e);
    return it == of.end() ? host : it->second;
  }
};

struct InsertedCopy {
  std::string function;  // the global (or specialization) it is in
  std::string value;     // the variable copied (`%x`), or the literal
  Device src, dst;
  bool operator==(const InsertedCopy& o) const {
    return function == o.function && value == o.value && src == o.src && dst == o.dst;
  }
};

struct Placement {
  std::unique_ptr<ir::Module> module;
  DevicePlan plan;
  std::vector<InsertedCopy> copies;       // inserted by placement (not the program's own device_copy)
  std::vector<std::string> specializations;  // names of the clones made
  int rounds = 0;
};

// `devices`: the default device first; the host cpu is added when absent.
Placement placeDevices(const ir::Module& lifted, std::vector<Device> devices);

}  // namespace kiln::compiler
