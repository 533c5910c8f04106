// ManifestMemory: each kernel call's output memory, and storage planning.
#include "compiler/passes/manifest_memory.h"

#include <algorithm>

#include "compiler/ir/visit.h"
#include "compiler/passes/lambda_lift.h"
#include "kiln/error.h"
#include "kiln/memory.h"

namespace kiln::compiler {

using namespace kiln::ir;

namespace {

class FunctionPlanner {
 public:
  FunctionPlanner(const GlobalFunction& g, KernelTableBuilder& kernels, const ManifestOptions& options, FunctionMemory& out)
      : g_(g), kernels_(kernels), options_(options), out_(out) {}

  void run() {
    collectVarUses();
    const Function* fn = g_.fn;
    const Expr* body = capturedCount(fn) ? static_cast<const Function*>(fn->body)->body : fn->body;
    walk(body);
  }

 private:
  Device deviceOf(const Expr* e) const { return options_.devices ? options_.devices->deviceOf(e) : Device{}; }

  // The variables read anywhere, and (when planning) those read only as kernel
  // operands (never stored, passed, returned or reshaped). This walk is also the
  // first to meet every kernel call, which fixes the kernels' numbering.
  void collectVarUses() {
    std::unordered_map<const Var*, uint32_t> all, asKernelOperand;
    std::vector<const Expr*> stack{g_.fn->body};
    while (!stack.empty()) {
      const Expr* e = stack.back();
      stack.pop_back();
      if (e->kind == ExprKind::Var) all[static_cast<const Var*>(e)]++;
      if (e->kind == ExprKind::Call) {
        auto* c = static_cast<const Call*>(e);
        if (c->callee->kind == ExprKind::Function && kernels_.kernel(static_cast<const Function*>(c->callee)).kind != CallKind::Reshape)
          for (const Expr* a : c->args)
            if (a->kind == ExprKind::Var) asKernelOperand[static_cast<const Var*>(a)]++;
      }
      forEachChild(e, [&](const Expr* c) { stack.push_back(c); });
    }
    for (auto& [v, n] : all) {
      out_.used.insert(v);
      if (options_.planMemory && asKernelOperand[v] == n) kernelOnly_.insert(v);
    }
  }

  // Visits the body in program order: each block (a function body, an arm, a
  // let-valued let) is planned when reached, and each kernel call decided.
  void walk(const Expr* body) {
    struct Item {
      const Expr* e;
      bool head;  // starts a block
    };
    std::vector<Item> stack{{body, true}};
    while (!stack.empty()) {
      Item it = stack.back();
      stack.pop_back();
      if (it.head) planBlock(it.e);
      const Expr* e = it.e;
      const Var* boundTo = nullptr;
      const Expr* value = e;
      if (e->kind == ExprKind::Let) {
        auto* l = static_cast<const Let*>(e);
        stack.push_back({l->body, false});  // the rest of the block, after the value's arms
        boundTo = l->var;
        value = l->value;
        if (value->kind == ExprKind::Let) {
          stack.push_back({value, true});
          continue;
        }
      }
      switch (value->kind) {
        case ExprKind::Call: {
          auto* c = static_cast<const Call*>(value);
          if (c->callee->kind == ExprKind::Function) decide(c, boundTo, e);
          break;
        }
        case ExprKind::If: {
          auto* i = static_cast<const If*>(value);
          stack.push_back({i->elseBranch, true});
          stack.push_back({i->thenBranch, true});
          break;
        }
        case ExprKind::Match: {
          auto* m = static_cast<const Match*>(value);
          for (size_t k = m->clauses.size(); k-- > 0;) stack.push_back({m->clauses[k].body, true});
          break;
        }
        default: break;
      }
    }
  }

  void decide(const Call* c, const Var* boundTo, const Expr* owner) {
    KernelCallMemory m;
    m.call = c;
    m.boundTo = boundTo;
    m.kernel = kernels_.kernel(static_cast<const Function*>(c->callee));
    m.device = deviceOf(c);
    m.kind = KernelTableBuilder::kindAt(m.kernel, m.device);
    if (m.kind == CallKind::Compiled) {
      bool anyDynamic = false;
      for (int32_t o : m.kernel.fn->outputs)
        for (int64_t d : m.kernel.fn->typeOf(o).shape) anyDynamic |= d == ops::kAnyDim;
      auto p = planned_.find(owner);
      if (anyDynamic) {
        m.source = OutputMemory::ShapeFunction;
      } else if (boundTo && p != planned_.end()) {
        m.source = OutputMemory::Arena;
        m.slot = p->second;
      } else {
        m.source = OutputMemory::Static;
      }
    }
    out_.calls.emplace(c, m);
    out_.order.push_back(c);
  }

  // Whether evaluating a let's value may allocate tensor memory.
  bool mayAllocate(const Let* l) {
    const Expr* v = l->value;
    if (v->kind == ExprKind::If || v->kind == ExprKind::Match || v->kind == ExprKind::Let) return true;
    if (v->kind != ExprKind::Call) return false;
    auto* c = static_cast<const Call*>(v);
    switch (c->callee->kind) {
      case ExprKind::Function: {
        CallKind k = KernelTableBuilder::kindAt(kernels_.kernel(static_cast<const Function*>(c->callee)), deviceOf(c));
        return k == CallKind::Compiled || k == CallKind::Dynamic;
      }
      case ExprKind::Ctor: return false;
      default: return true;  // calls, closures, device copies
    }
  }

  // The static output size of a let's single-output kernel, or 0.
  uint64_t staticOutputBytes(const Let* l) {
    if (l->value->kind != ExprKind::Call) return 0;
    auto* c = static_cast<const Call*>(l->value);
    if (c->callee->kind != ExprKind::Function) return 0;
    auto* prim = static_cast<const Function*>(c->callee);
    KernelRef k = kernels_.kernel(prim);
    if (KernelTableBuilder::kindAt(k, deviceOf(c)) != CallKind::Compiled || k.fn->outputs.size() != 1 || asTuple(prim->body->type))
      return 0;
    const ops::TensorDesc& t = k.fn->typeOf(k.fn->outputs[0]);
    for (int64_t d : t.shape)
      if (d == ops::kAnyDim) return 0;
    uint64_t bytes = static_cast<uint64_t>(kiln::numElements(std::span<const int64_t>(t.shape.data(), t.shape.size()))) * dtypeSize(t.dtype);
    return std::max<uint64_t>((bytes + 63) / 64 * 64, 64);
  }

  static uint64_t pooled(uint64_t bytes) { return PooledAllocator::classBytes(PooledAllocator::classOf(bytes)); }

  // Plans one block (a let chain). Members are static kernel outputs that only
  // kernels read, dead before the next allocation of unknown size (a call, a
  // branch, a dynamic shape: a barrier). Between barriers every allocation's size
  // is known, so the pool-only footprint can be simulated let by let; the run's
  // members are packed into one arena by offset (first fit, largest first, clear
  // of every member whose lifetime overlaps) when the arena does not raise the
  // run's peak over that simulation by more than 1/32. Otherwise members of one
  // size class reuse a storage whenever its previous occupant died just before
  // with no allocation in between (a ping-pong that never raises the peak).
  void planBlock(const Expr* e) {
    if (!options_.planMemory) return;
    std::vector<const Let*> lets;
    for (const Expr* x = e; x->kind == ExprKind::Let; x = static_cast<const Let*>(x)->body) lets.push_back(static_cast<const Let*>(x));
    if (lets.size() < 2) return;
    blockLets_ = lets;
    const Expr* tail = e;
    while (tail->kind == ExprKind::Let) tail = static_cast<const Let*>(tail)->body;
    // Where each variable is last read in this block: a let index, or lets.size() for the tail.
    std::unordered_map<const Var*, size_t> lastRead;
    auto reads = [&](const Expr* root, size_t at) {
      std::vector<const Expr*> stack{root};
      while (!stack.empty()) {
        const Expr* x = stack.back();
        stack.pop_back();
        if (x->kind == ExprKind::Var) lastRead[static_cast<const Var*>(x)] = at;
        if (x->kind == ExprKind::Function) continue;
        forEachChild(x, [&](const Expr* c) { stack.push_back(c); });
      }
    };
    for (size_t i = 0; i < lets.size(); ++i) reads(lets[i]->value, i);
    reads(tail, lets.size());

    size_t n = lets.size();
    std::vector<uint64_t> bytes(n);
    std::vector<size_t> end(n);
    std::vector<bool> member(n), barrier(n), allocates(n);
    for (size_t i = 0; i < n; ++i) {
      bytes[i] = staticOutputBytes(lets[i]);
      allocates[i] = mayAllocate(lets[i]);
      barrier[i] = allocates[i] && bytes[i] == 0;
      auto it = lastRead.find(lets[i]->var);
      end[i] = it == lastRead.end() ? i : it->second;
      member[i] = bytes[i] > 0 && kernelOnly_.count(lets[i]->var);
    }
    for (size_t a = 0; a < n;) {
      size_t b = a;
      while (b < n && !barrier[b]) ++b;
      // Storage is shared only among tensors on one device: members by device,
      // devices in order of first appearance.
      std::vector<std::pair<Device, std::vector<size_t>>> byDevice;
      for (size_t i = a; i < b; ++i) {
        if (!member[i] || end[i] >= b) continue;
        Device d = deviceOf(lets[i]->value);
        auto it = std::find_if(byDevice.begin(), byDevice.end(), [&](const auto& g) { return g.first == d; });
        if (it == byDevice.end()) it = byDevice.insert(byDevice.end(), {d, {}});
        it->second.push_back(i);
      }
      for (const auto& [d, ms] : byDevice) {
        arenaDevice_ = d;
        if (ms.size() >= 2 && !planArena(a, b, ms, bytes, end)) planTokens(ms, bytes, end, allocates);
      }
      a = b + 1;
    }
  }

  // One arena for the run [a, b); false (nothing planned) when it would raise the run's peak.
  bool planArena(size_t a, size_t b, const std::vector<size_t>& ms, const std::vector<uint64_t>& bytes, const std::vector<size_t>& end) {
    std::vector<size_t> bySize = ms;
    std::stable_sort(bySize.begin(), bySize.end(), [&](size_t x, size_t y) { return bytes[x] > bytes[y]; });
    std::unordered_map<size_t, uint64_t> offset;
    uint64_t arena = 0;
    for (size_t i : bySize) {
      // Lifetimes [i, end[i]] overlap when neither ends before the other starts.
      std::vector<std::pair<uint64_t, uint64_t>> taken;
      for (auto& [j, off] : offset)
        if (!(end[j] < i || end[i] < j)) taken.emplace_back(off, off + bytes[j]);
      std::sort(taken.begin(), taken.end());
      uint64_t at = 0;
      for (auto& [lo, hi] : taken) {
        if (at + bytes[i] <= lo) break;
        at = std::max(at, hi);
      }
      offset[i] = at;
      arena = std::max(arena, at + bytes[i]);
    }
    // Simulate the run: the pool alone holds each live member in its own block;
    // the plan holds the arena from the first member's birth to the last death.
    // Other static outputs born in the run count the same in both.
    size_t first = ms.front(), last = 0;
    for (size_t i : ms) last = std::max(last, end[i]);
    uint64_t poolPeak = 0, planPeak = 0, others = 0;
    for (size_t t = a; t < b; ++t) {
      if (bytes[t] && std::find(ms.begin(), ms.end(), t) == ms.end()) others += pooled(bytes[t]);
      uint64_t live = 0;
      for (size_t i : ms)
        if (i <= t && t <= end[i]) live += pooled(bytes[i]);
      poolPeak = std::max(poolPeak, others + live);
      planPeak = std::max(planPeak, others + (first <= t && t <= last ? pooled(arena) : 0));
    }
    // A little slack (1/32, less than the pool's own size-class rounding) buys
    // one storage for the whole run where the arena outlives a member briefly.
    if (planPeak > poolPeak + poolPeak / 32) return false;
    addArena(arena, ms, [&](size_t i) { return offset[i]; });
    return true;
  }

  void planTokens(const std::vector<size_t>& ms, const std::vector<uint64_t>& bytes, const std::vector<size_t>& end,
                  const std::vector<bool>& allocates) {
    struct Token {
      uint32_t sizeClass;
      uint64_t bytes = 0;
      size_t lastEnd;
      std::vector<size_t> members;
    };
    std::vector<Token> tokens;
    for (size_t i : ms) {
      uint32_t cls = PooledAllocator::classOf(bytes[i]);
      Token* best = nullptr;
      for (Token& tk : tokens) {
        if (tk.sizeClass != cls || tk.lastEnd >= i) continue;
        bool idleAllocation = false;  // would the storage sit idle while something else is allocated?
        for (size_t j = tk.lastEnd + 1; j < i; ++j) idleAllocation |= allocates[j];
        if (!idleAllocation && (!best || tk.lastEnd > best->lastEnd)) best = &tk;
      }
      if (!best) best = &tokens.emplace_back(Token{cls, 0, 0, {}});
      best->bytes = std::max(best->bytes, bytes[i]);
      best->lastEnd = end[i];
      best->members.push_back(i);
    }
    for (const Token& tk : tokens)
      if (tk.members.size() >= 2) addArena(tk.bytes, tk.members, [](size_t) { return uint64_t(0); });
  }

  template <class OffsetOf>
  void addArena(uint64_t arenaBytes, const std::vector<size_t>& members, OffsetOf offsetOf) {
    uint32_t id = static_cast<uint32_t>(out_.arenas.size());
    out_.arenas.push_back(Arena{arenaBytes, arenaDevice_});
    for (size_t m = 0; m < members.size(); ++m)
      planned_[blockLets_[members[m]]] = ArenaSlot{id, offsetOf(members[m]), m == 0, m + 1 == members.size()};
  }

  const GlobalFunction& g_;
  KernelTableBuilder& kernels_;
  const ManifestOptions& options_;
  FunctionMemory& out_;
  std::unordered_set<const Var*> kernelOnly_;
  std::unordered_map<const Expr*, ArenaSlot> planned_;  // keyed by the Let whose value is planned
  std::vector<const Let*> blockLets_;                    // the block being planned
  Device arenaDevice_;                                   // of the arenas being planned
};

std::string describe(const KernelCallMemory& m, const std::vector<Arena>& arenas) {
  const kernel_ir::FusedFunction& f = *m.kernel.fn;
  std::string s = (m.boundTo ? "%" + std::string(m.boundTo->name) : std::string("(result)")) + " = k" +
                  std::to_string(m.kernel.index) + " " + f.name + " on " + m.device.toString() + ": ";
  auto outputBytes = [&](size_t i) {
    const ops::TensorDesc& t = f.typeOf(f.outputs[i]);
    return static_cast<uint64_t>(kiln::numElements(std::span<const int64_t>(t.shape.data(), t.shape.size()))) * dtypeSize(t.dtype);
  };
  switch (m.kind) {
    case CallKind::Scalar: return s + "host scalars in registers, no memory";
    case CallKind::Dynamic: return s + "data-dependent: the kernel allocates its output at its true extent";
    case CallKind::Reshape: return s + "a view of its input, no memory";
    case CallKind::Compiled: break;
  }
  switch (m.source) {
    case OutputMemory::Arena: {
      const Arena& a = arenas[m.slot.arena];
      s += "arena " + std::to_string(m.slot.arena) + " at " + std::to_string(m.slot.offset);
      if (m.slot.first) s += " (allocates its " + std::to_string(a.bytes) + " bytes)";
      if (m.slot.last) s += " (last placed: the arena is given up)";
      return s;
    }
    case OutputMemory::Static: {
      s += "own storage of ";
      for (size_t i = 0; i < f.outputs.size(); ++i) s += (i ? " + " : "") + std::to_string(outputBytes(i));
      return s + " bytes";
    }
    case OutputMemory::ShapeFunction: return s + "storage sized at run time by the kernel's shape function";
    case OutputMemory::None: break;
  }
  return s;
}

}  // namespace

// Every function of the program itself, and the prelude functions they reach:
// an executable carries no unused prelude code.
std::unordered_set<std::string_view> reachableGlobals(const Module& m) {
  std::unordered_map<std::string_view, const Function*> byName;
  std::vector<std::string_view> work;
  std::unordered_set<std::string_view> kept;
  for (const auto& g : m.functions()) {
    byName[g.var->name] = g.fn;
    if (!g.fromPrelude && !g.lifted && kept.insert(g.var->name).second) work.push_back(g.var->name);
  }
  while (!work.empty()) {
    const Function* fn = byName.at(work.back());
    work.pop_back();
    std::vector<const Expr*> stack{fn->body};
    while (!stack.empty()) {
      const Expr* e = stack.back();
      stack.pop_back();
      if (e->kind == ExprKind::GlobalVar) {
        std::string_view name = static_cast<const GlobalVar*>(e)->name;
        if (byName.count(name) && kept.insert(name).second) work.push_back(name);
      }
      if (e->kind == ExprKind::Function && isPrimitiveFunction(static_cast<const Function*>(e))) continue;
      forEachChild(e, [&](const Expr* c) { stack.push_back(c); });
    }
  }
  return kept;
}

MemoryPlan manifestMemory(const Module& lifted, KernelTableBuilder& kernels, const ManifestOptions& options) {
  MemoryPlan plan;
  auto kept = reachableGlobals(lifted);
  for (const auto& g : lifted.functions()) {
    if (!kept.count(g.var->name)) continue;
    FunctionMemory& fm = plan.functions.emplace_back();
    fm.name = std::string(g.var->name);
    FunctionPlanner(g, kernels, options, fm).run();
  }
  return plan;
}

const FunctionMemory& MemoryPlan::of(std::string_view function) const {
  for (const FunctionMemory& f : functions)
    if (f.name == function) return f;
  throw Error("internal: no memory plan for @" + std::string(function));
}

std::string MemoryPlan::toString() const {
  std::string out;
  for (const FunctionMemory& f : functions) {
    if (f.order.empty()) continue;
    out += "// @" + f.name + ": " + std::to_string(f.order.size()) + " kernel call" + (f.order.size() == 1 ? "" : "s") +
           ", " + std::to_string(f.arenas.size()) + " shared arena" + (f.arenas.size() == 1 ? "" : "s") + "\n";
    for (size_t a = 0; a < f.arenas.size(); ++a)
      out += "//   arena " + std::to_string(a) + ": " + std::to_string(f.arenas[a].bytes) + " bytes on " +
             f.arenas[a].device.toString() + "\n";
    for (const ir::Call* c : f.order) out += "//   " + describe(f.calls.at(c), f.arenas) + "\n";
  }
  return out;
}

}  // namespace kiln::compiler
