// Bytecode emission (see bytecode_emitter.h for the contract).
#include "compiler/codegen/bytecode_emitter.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "bytecode/instruction_writer.h"
#include "bytecode/opcodes.h"
#include "compiler/ir/visit.h"
#include "compiler/passes/lambda_lift.h"
#include "compiler/passes/liveness.h"
#include "compiler/passes/to_fused_function.h"
#include "kernel_ir/fused_function.h"
#include "kiln/error.h"
#include "kiln/memory.h"
#include "kernel_ir/kernel_kind.h"

namespace kiln::compiler {

using namespace kiln::ir;
using bytecode::Opcode;

namespace {

constexpr uint32_t kCpu = 0;  // device operand: cpu:0, the host


TypeDesc describeType(const Type* t, int depth = 0) {
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
      d.kind = TypeDesc::Kind::Adt;
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

bool isReshapeOnly(const kernel_ir::FusedFunction& f) {
  if (f.params.size() != 1 || f.nodes.size() != 1 || f.outputs.size() != 1) return false;
  const kernel_ir::FusedNode& n = f.nodes[0];
  if (n.isConstant()) return false;
  const std::string& op = n.op->name;
  return (op == "reshape" || op == "squeeze" || op == "expand_dims") && n.inputs.size() == 1 && n.inputs[0] == 0 &&
         f.outputs[0] == 1;
}

enum class CallKind { Compiled, Scalar, Dynamic, Reshape };

// Tables shared by every function of the executable.
class ExecutableBuilder {
 public:
  // `kept`: the globals to emit (the module's, less prelude functions nothing uses).
  ExecutableBuilder(const Module& m, const EmitOptions& opts, const std::unordered_set<std::string_view>& kept)
      : m_(m), opts_(opts) {
    for (const auto& td : m.typeDefs())
      for (const Constructor* c : td.def->ctors) {
        ctorIds_[c] = static_cast<uint32_t>(contents_.constructors.size());
        contents_.constructors.push_back({std::string(c->name), std::string(td.def->name), static_cast<uint32_t>(c->fields.size())});
      }
    for (const auto& g : m.functions()) {
      if (!kept.count(g.var->name)) continue;
      functionIds_[g.var->name] = static_cast<uint32_t>(contents_.functions.size());
      contents_.functions.emplace_back();
      globals_[g.var->name] = g.fn;
    }
  }

  Executable::Contents& contents() { return contents_; }
  const Module& module() const { return m_; }
  const EmitOptions& options() const { return opts_; }

  uint32_t functionId(std::string_view name) const { return functionIds_.at(name); }
  const Function* global(std::string_view name) const { return globals_.at(name); }
  uint32_t ctorId(const Constructor* c) const { return ctorIds_.at(c); }

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

  struct KernelRef {
    uint32_t index;
    CallKind kind;
    const kernel_ir::FusedFunction* fn;
  };

  KernelRef kernel(const Function* prim) {
    if (auto it = byNode_.find(prim); it != byNode_.end()) return it->second;
    auto f = std::make_shared<kernel_ir::FusedFunction>(toFusedFunction(prim, "kernel", m_.file()));
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
      f->name = "fused_" + (ops.empty() ? std::string("const") : ops);
      if (!kernelNames_.insert(f->name).second) f->name += "_" + std::to_string(contents_.kernels.size());
      KernelKind k = kernel_ir::kernelKind(*f);
      CallKind kind = k == KernelKind::Dynamic ? CallKind::Dynamic
                      : k == KernelKind::Scalar ? CallKind::Scalar
                      : isReshapeOnly(*f)       ? CallKind::Reshape
                                                : CallKind::Compiled;
      ref = KernelRef{static_cast<uint32_t>(contents_.kernels.size()), kind, f.get()};
      contents_.kernels.push_back(f);
      byHash_.emplace(hash, ref);
    }
    byNode_.emplace(prim, ref);
    return ref;
  }

 private:
  const Module& m_;
  const EmitOptions& opts_;
  Executable::Contents contents_;
  std::unordered_map<const Constructor*, uint32_t> ctorIds_;
  std::unordered_map<std::string_view, uint32_t> functionIds_;
  std::unordered_map<std::string_view, const Function*> globals_;
  std::unordered_map<std::string, uint32_t> strings_;
  std::map<std::vector<int64_t>, uint32_t> shapeConsts_;
  std::unordered_map<const Function*, KernelRef> byNode_;
  std::unordered_map<uint64_t, KernelRef> byHash_;
  std::unordered_set<std::string> kernelNames_;
};

// Registers: a variable's value lives in one register from its definition to
// its last use (liveness.h); aliases (`let x = y`, a variable pattern over the
// scrutinee) share the register, which is released when its last name dies.
// Temporaries (materialized constants and globals, kernel shapes and storage)
// die at the instruction that consumes them. At a branch the register state is
// saved, and each arm starts from it: an arm never sees registers freed by its
// sibling.
class FunctionEmitter {
 public:
  FunctionEmitter(ExecutableBuilder& eb, const GlobalFunction& g) : eb_(eb), g_(g) {}

  BytecodeFunction run() {
    BytecodeFunction out;
    out.name = std::string(g_.var->name);
    const Function* fn = g_.fn;
    std::vector<const Var*> params(fn->params.begin(), fn->params.end());
    const Expr* body = fn->body;
    const Type* result = asFunc(fn->type) ? asFunc(fn->type)->result : body->type;
    if (capturedCount(fn)) {
      auto* inner = static_cast<const Function*>(fn->body);
      params.insert(params.end(), inner->params.begin(), inner->params.end());
      body = inner->body;
      result = asFunc(inner->type) ? asFunc(inner->type)->result : body->type;
    }
    live_ = analyzeLiveness(body);
    collectVarUses();

    // `main`'s parameters named in the params file become constants.
    std::vector<std::pair<const Var*, uint32_t>> bound;
    const auto& weights = eb_.options().params;
    std::vector<std::pair<const Var*, uint32_t>> paramRegs;
    for (const Var* p : params) {
      auto it = out.name == "main" ? weights.find(std::string(p->name)) : weights.end();
      if (it != weights.end()) {
        checkWeight(p, it->second);
        bound.emplace_back(p, eb_.constant(it->second));
        continue;
      }
      uint32_t r = newReg();
      paramRegs.emplace_back(p, r);
      out.paramNames.push_back(std::string(p->name));
      out.paramTypes.push_back(describeType(p->type));
      out.paramDevices.push_back(deviceOf(p));
    }
    out.numParams = static_cast<uint32_t>(out.paramNames.size());
    for (auto& [p, c] : bound) {
      uint32_t r = newReg();
      emit(Opcode::LoadConst, {r, c, bytecode::encodeDevice(deviceOf(p))});
      paramRegs.emplace_back(p, r);
    }
    for (auto& [p, r] : paramRegs) {
      bindVar(p, r);
      if (!std::binary_search(live_.liveIn.begin(), live_.liveIn.end(), p)) kill(p);
    }
    out.resultType = describeType(result);
    emitTail(body, functionEnd());
    out.code = code_.take();
    out.frameSize = std::max<uint32_t>(frameSize_, 1);
    return out;
  }

 private:
  // ---- devices (passes/device_placement.h) ----
  Device deviceOf(const Expr* e) const { return eb_.options().devices ? eb_.options().devices->deviceOf(e) : Device{}; }
  static bool onHost(Device d) { return d == Device{}; }
  // A host-scalar kernel placed off the host runs compiled, on tensors there.
  CallKind kindAt(const ExecutableBuilder::KernelRef& k, Device d) const {
    return k.kind == CallKind::Scalar && !onHost(d) ? CallKind::Compiled : k.kind;
  }
  // Heap values are released after their last use; 0-d values off the host are
  // tensors there, not register scalars.
  bool isHeapValue(const Var* v) const {
    if (isHeapType(v->type)) return true;
    return asTensor(v->type) && !onHost(deviceOf(v));
  }

  // ---- registers ----
  struct RegisterState {
    std::vector<uint32_t> free, refs;
    std::vector<bool> heap;
  };
  RegisterState save() const { return {free_, refs_, heap_}; }
  void restore(const RegisterState& s) {
    free_ = s.free;
    refs_ = s.refs;
    heap_ = s.heap;
    refs_.resize(next_, 0);
    heap_.resize(next_, false);
  }

  uint32_t newReg() {
    uint32_t r;
    if (!free_.empty()) {
      r = free_.back();
      free_.pop_back();
    } else {
      r = next_++;
      frameSize_ = std::max(frameSize_, next_);
      refs_.resize(next_, 0);
      heap_.resize(next_, false);
    }
    refs_[r] = 0;
    heap_[r] = false;
    return r;
  }

  // A register holding a temporary, given back by dropReg().
  uint32_t temp(bool heap = true) {
    uint32_t r = newReg();
    refs_[r] = 1;
    heap_[r] = heap;
    return r;
  }

  void bindVar(const Var* v, uint32_t r) {
    regOf_[v] = r;
    refs_[r]++;
    heap_[r] = heap_[r] || isHeapValue(v);
  }

  // One holder of `r` is gone; with the last, the value is released (unless an
  // instruction moved it out) and the register reused.
  void dropReg(uint32_t r, bool moved = false) {
    if (refs_[r] == 0 || --refs_[r] > 0) return;
    if (heap_[r] && !moved) emit(Opcode::Release, {r});
    free_.push_back(r);
  }

  void kill(const Var* v, bool moved = false) { dropReg(regOf_.at(v), moved); }

  uint32_t regOfVar(const Var* v, SourceLoc loc) const {
    auto it = regOf_.find(v);
    if (it == regOf_.end()) throw Error(eb_.module().file(), loc, "internal: unbound variable %" + std::string(v->name));
    return it->second;
  }

  // The operands of one consuming instruction: registers of its atoms, and the
  // temporaries it materialized; finish() retires what dies there.
  struct Operands {
    std::vector<uint32_t> regs;
    std::vector<uint32_t> temps;
  };

  uint32_t atom(const Expr* e, Operands& ops) {
    uint32_t r;
    if (e->kind == ExprKind::Var) {
      r = regOfVar(static_cast<const Var*>(e), e->loc);
    } else {
      r = temp(false);
      emitValue(e, r, LivenessPoint{e, -2});
      heap_[r] = isHeapType(e->type) || e->kind == ExprKind::GlobalVar || e->kind == ExprKind::Ctor;
      ops.temps.push_back(r);
    }
    ops.regs.push_back(r);
    return r;
  }

  std::vector<uint32_t> atoms(std::span<const Expr* const> es, Operands& ops) {
    std::vector<uint32_t> rs;
    for (const Expr* e : es) rs.push_back(atom(e, ops));
    return rs;
  }

  // Registers whose value dies at `at` and has no other holder: an `M` list may
  // move them out (see mark()).
  std::vector<uint32_t> movable(LivenessPoint at, const Operands& ops) const {
    std::vector<uint32_t> rs(ops.temps);
    for (const Var* v : live_.diesAt(at)) {
      uint32_t r = regOf_.at(v);
      if (refs_[r] == 1) rs.push_back(r);
    }
    return rs;
  }

  // Sets the move bit on the last occurrence in `list` of each register in
  // `movable` (earlier occurrences must still copy). Returns those moved.
  static std::vector<uint32_t> mark(std::vector<uint32_t>& list, const std::vector<uint32_t>& movable) {
    std::vector<uint32_t> moved;
    for (size_t i = list.size(); i-- > 0;) {
      uint32_t r = list[i];
      if (std::find(movable.begin(), movable.end(), r) == movable.end()) continue;
      if (std::find(moved.begin(), moved.end(), r) != moved.end()) continue;
      moved.push_back(r);
      list[i] = r | bytecode::kMoveBit;
    }
    return moved;
  }

  void finish(LivenessPoint at, const Operands& ops, const std::vector<uint32_t>& moved = {}) {
    auto wasMoved = [&](uint32_t r) { return std::find(moved.begin(), moved.end(), r) != moved.end(); };
    for (const Var* v : live_.diesAt(at)) kill(v, wasMoved(regOf_.at(v)));
    for (uint32_t t : ops.temps) dropReg(t, wasMoved(t));
  }

  // ---- instruction encoding ----
  // bytecode::InstructionWriter lays operands out as opcodes.def says and checks
  // each instruction against its row.
  using Word = uint64_t;
  using Part = bytecode::InstructionWriter::Arg;
  void emit(Opcode op, std::initializer_list<Word> operands) { code_.emitWords(op, operands); }
  static Part one(uint32_t w) { return bytecode::InstructionWriter::word(w); }
  static Part list(const std::vector<uint32_t>& ws) { return bytecode::InstructionWriter::regs(ws); }
  void emitParts(Opcode op, std::initializer_list<Part> parts) { code_.emit(op, parts); }
  uint32_t here() const { return code_.size(); }
  // A jump target written as kLater is patched when the target is known.
  static constexpr Word kLater = 0;
  // Emits a jump; returns the word of its J operand (found through the table) to patch.
  uint32_t emitJump(Opcode op, std::initializer_list<Word> operands) {
    uint32_t at = code_.emitWords(op, operands);
    return code_.jumpWords(at).at(0);
  }
  void patch(uint32_t at) { code_[at] = here(); }

  // ---- storage planning (see bytecode_emitter.h) ----
  struct Planned {
    uint32_t arena;
    uint64_t offset;
    bool first, last;  // in program order: allocates the arena / gives up its register
  };

  // Whether evaluating a let's value may allocate tensor memory.
  bool mayAllocate(const Let* l) {
    const Expr* v = l->value;
    if (v->kind == ExprKind::If || v->kind == ExprKind::Match || v->kind == ExprKind::Let) return true;
    if (v->kind != ExprKind::Call) return false;
    auto* c = static_cast<const Call*>(v);
    switch (c->callee->kind) {
      case ExprKind::Function: {
        CallKind k = kindAt(eb_.kernel(static_cast<const Function*>(c->callee)), deviceOf(c));
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
    auto k = eb_.kernel(prim);
    if (kindAt(k, deviceOf(c)) != CallKind::Compiled || k.fn->outputs.size() != 1 || asTuple(prim->body->type)) return 0;
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
  // run's peak over that simulation by more than 1/32. Otherwise members of one size class reuse a
  // storage whenever its previous occupant died just before with no allocation
  // in between (a ping-pong that never raises the peak).
  void planBlock(const Expr* e) {
    if (!eb_.options().planMemory) return;
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
    uint32_t id = static_cast<uint32_t>(arenaBytes_.size());
    arenaBytes_.push_back(arenaBytes);
    arenaDevices_.push_back(arenaDevice_);
    arenaReg_.push_back(0);
    for (size_t m = 0; m < members.size(); ++m)
      planned_[blockLets_[members[m]]] = Planned{id, offsetOf(members[m]), m == 0, m + 1 == members.size()};
  }

  // ---- blocks ----
  void emitLets(const Expr*& e) {
    planBlock(e);
    while (e->kind == ExprKind::Let) {
      auto* l = static_cast<const Let*>(e);
      if (l->value->kind == ExprKind::Var) {
        // An alias shares the register.
        bindVar(l->var, regOfVar(static_cast<const Var*>(l->value), l->value->loc));
        finish(letPoint(l), {});
      } else {
        uint32_t r = newReg();
        emitValue(l->value, r, letPoint(l));
        bindVar(l->var, r);
      }
      if (!usedVars_.count(l->var)) kill(l->var);
      e = l->body;
    }
  }

  // One walk over the body: the variables used at all, and (when planning) those
  // read only as kernel operands (never stored, passed, returned or reshaped).
  void collectVarUses() {
    bool planning = eb_.options().planMemory;
    std::unordered_map<const Var*, uint32_t> all, asKernelOperand;
    std::vector<const Expr*> stack{g_.fn->body};
    while (!stack.empty()) {
      const Expr* e = stack.back();
      stack.pop_back();
      if (e->kind == ExprKind::Var) all[static_cast<const Var*>(e)]++;
      if (planning && e->kind == ExprKind::Call) {
        auto* c = static_cast<const Call*>(e);
        if (c->callee->kind == ExprKind::Function && eb_.kernel(static_cast<const Function*>(c->callee)).kind != CallKind::Reshape)
          for (const Expr* a : c->args)
            if (a->kind == ExprKind::Var) asKernelOperand[static_cast<const Var*>(a)]++;
      }
      forEachChild(e, [&](const Expr* c) { stack.push_back(c); });
    }
    for (auto& [v, n] : all) {
      usedVars_.insert(v);
      if (planning && asKernelOperand[v] == n) kernelOnly_.insert(v);
    }
  }

  // A block in tail position: it ends the function (ret or a tail call).
  void emitTail(const Expr* e, LivenessPoint end) {
    emitLets(e);
    switch (e->kind) {
      case ExprKind::If: emitIf(static_cast<const If*>(e), 0, true); return;
      case ExprKind::Match: emitMatch(static_cast<const Match*>(e), 0, true); return;
      case ExprKind::Call:
        if (emitCallTail(static_cast<const Call*>(e))) return;
        break;
      default: break;
    }
    uint32_t r;
    if (e->kind == ExprKind::Var) {
      r = regOfVar(static_cast<const Var*>(e), e->loc);
    } else {
      r = newReg();
      emitValue(e, r, end);
    }
    emit(Opcode::Ret, {r});
  }

  // A block whose value goes to `dst`, then control continues after it.
  void emitBlockInto(const Expr* e, uint32_t dst, LivenessPoint end) {
    emitLets(e);
    emitValue(e, dst, end);
  }

  // Tail calls of functions and closures; false for other calls. Everything in
  // the frame dies here, so every argument register is moved.
  bool emitCallTail(const Call* c) {
    Operands ops;
    if (c->callee->kind == ExprKind::GlobalVar) {
      std::string_view name = static_cast<const GlobalVar*>(c->callee)->name;
      const Function* g = eb_.global(name);
      size_t cap = capturedCount(g);
      if (cap && c->args.size() == cap) return false;  // builds a closure
      auto args = atoms(c->args, ops);
      mark(args, args);
      emitParts(Opcode::TailCall, {one(eb_.functionId(name)), list(args)});
      return true;
    }
    if (c->callee->kind == ExprKind::Var) {
      uint32_t f = atom(c->callee, ops);
      auto args = atoms(c->args, ops);
      std::vector<uint32_t> movable;
      for (uint32_t r : args)
        if (r != f) movable.push_back(r);
      mark(args, movable);
      emitParts(Opcode::TailCallClosure, {one(f), list(args)});
      return true;
    }
    return false;
  }

  // ---- values ----
  // Emits `e` (an A-normal-form value) into `dst`; `at` is its liveness point.
  void emitValue(const Expr* e, uint32_t dst, LivenessPoint at) {
    switch (e->kind) {
      case ExprKind::Var: {
        Operands ops;
        uint32_t r = atom(e, ops);
        emit(Opcode::Move, {dst, r});
        finish(at, ops);
        return;
      }
      case ExprKind::Constant: {
        auto* c = static_cast<const Constant*>(e);
        uint64_t bits;
        if (isFloat(c->dtype)) std::memcpy(&bits, &c->floatValue, 8);
        else bits = static_cast<uint64_t>(c->intValue);
        emit(Opcode::LoadImm, {dst, static_cast<uint32_t>(c->dtype), bits});
        return;
      }
      case ExprKind::GlobalVar: {
        std::string_view name = static_cast<const GlobalVar*>(e)->name;
        emitParts(Opcode::AllocClosure, {one(dst), one(eb_.functionId(name)), list({})});
        return;
      }
      case ExprKind::Ctor: {
        auto* c = static_cast<const CtorRef*>(e);
        if (!c->ctor->fields.empty())
          throw Error(eb_.module().file(), e->loc, "internal: constructor " + std::string(c->ctor->name) + " used as a value");
        emitParts(Opcode::AllocAdt, {one(dst), one(eb_.ctorId(c->ctor)), list({})});
        return;
      }
      case ExprKind::Tuple: {
        Operands ops;
        auto rs = atoms(static_cast<const Tuple*>(e)->fields, ops);
        auto moved = mark(rs, movable(at, ops));
        emitParts(Opcode::AllocTuple, {one(dst), list(rs)});
        finish(at, ops, moved);
        return;
      }
      case ExprKind::TupleGet: {
        auto* g = static_cast<const TupleGet*>(e);
        Operands ops;
        uint32_t t = atom(g->tuple, ops);
        emit(Opcode::GetField, {dst, t, g->index});
        finish(at, ops);
        return;
      }
      case ExprKind::Call: emitCall(static_cast<const Call*>(e), dst, at); return;
      case ExprKind::If: emitIf(static_cast<const If*>(e), dst, false); return;
      case ExprKind::Match: emitMatch(static_cast<const Match*>(e), dst, false); return;
      case ExprKind::Let: emitBlockInto(e, dst, at); return;
      default:
        throw Error(eb_.module().file(), e->loc, "internal: unexpected expression in bytecode emission");
    }
  }

  // Releases what dies on entry to an arm; `also` are registers the test read.
  void enterArm(LivenessPoint arm, const std::vector<uint32_t>& also) {
    for (uint32_t r : also) dropReg(r);
    for (const Var* v : live_.deadOnEntryTo(arm)) kill(v);
  }

  void emitIf(const If* i, uint32_t dst, bool tail) {
    Operands ops;
    uint32_t c = atom(i->cond, ops);
    uint32_t toElse = emitJump(Opcode::BranchIfNot, {c, kLater});
    // What dies at the test is released at the start of both arms.
    std::vector<uint32_t> tested(ops.temps);
    for (const Var* v : live_.diesAt(testPoint(i))) tested.push_back(regOf_.at(v));
    RegisterState before = save();
    enterArm(armPoint(i, 0), tested);
    uint32_t toEnd = 0;
    if (tail) {
      emitTail(i->thenBranch, armPoint(i, 0));
    } else {
      emitBlockInto(i->thenBranch, dst, armPoint(i, 0));
      toEnd = emitJump(Opcode::Goto, {kLater});
    }
    restore(before);
    patch(toElse);
    enterArm(armPoint(i, 1), tested);
    if (tail) {
      emitTail(i->elseBranch, armPoint(i, 1));
    } else {
      emitBlockInto(i->elseBranch, dst, armPoint(i, 1));
      patch(toEnd);
    }
  }

  void emitCall(const Call* c, uint32_t dst, LivenessPoint at) {
    const Expr* callee = c->callee;
    Operands ops;
    switch (callee->kind) {
      case ExprKind::Function: emitKernelCall(c, dst, at); return;
      case ExprKind::GlobalVar: {
        std::string_view name = static_cast<const GlobalVar*>(callee)->name;
        const Function* g = eb_.global(name);
        size_t cap = capturedCount(g);
        auto args = atoms(c->args, ops);
        auto moved = mark(args, movable(at, ops));
        Opcode op = cap && args.size() == cap ? Opcode::AllocClosure : Opcode::Invoke;
        emitParts(op, {one(dst), one(eb_.functionId(name)), list(args)});
        finish(at, ops, moved);
        return;
      }
      case ExprKind::Ctor: {
        auto args = atoms(c->args, ops);
        auto moved = mark(args, movable(at, ops));
        emitParts(Opcode::AllocAdt, {one(dst), one(eb_.ctorId(static_cast<const CtorRef*>(callee)->ctor)), list(args)});
        finish(at, ops, moved);
        return;
      }
      case ExprKind::Var: {
        uint32_t f = atom(callee, ops);
        auto args = atoms(c->args, ops);
        std::vector<uint32_t> canMove;
        for (uint32_t r : movable(at, ops))
          if (r != f) canMove.push_back(r);
        auto moved = mark(args, canMove);
        emitParts(Opcode::InvokeClosure, {one(dst), one(f), list(args)});
        finish(at, ops, moved);
        return;
      }
      case ExprKind::Op: {
        const ops::OpDef* op = static_cast<const OpRef*>(callee)->op;
        uint32_t x = atom(c->args[0], ops);
        if (op->name == "device_copy") {
          ops::AttrReader attrs(op->name, *c->attrs);
          Device src = Device::parse(attrs.getString("src_device", "cpu"));
          Device dstDev = Device::parse(attrs.getString("dst_device", "cpu"));
          emit(Opcode::DeviceCopy, {dst, x, bytecode::encodeDevice(src), bytecode::encodeDevice(dstDev)});
        } else {
          emit(Opcode::Move, {dst, x});  // on_device: placement is decided by the device pass
        }
        finish(at, ops);
        return;
      }
      default: throw Error(eb_.module().file(), c->loc, "internal: unexpected callee in bytecode emission");
    }
  }

  void emitKernelCall(const Call* call, uint32_t dst, LivenessPoint at) {
    auto* prim = static_cast<const Function*>(call->callee);
    std::span<const Expr* const> argExprs = call->args;
    auto k = eb_.kernel(prim);
    Device device = deviceOf(call);
    uint32_t dev = bytecode::encodeDevice(device);
    CallKind kind = kindAt(k, device);
    const kernel_ir::FusedFunction& f = *k.fn;
    Operands ops;
    auto ins = atoms(argExprs, ops);
    size_t nout = f.outputs.size();
    bool tuple = asTuple(prim->body->type) != nullptr;
    std::vector<uint32_t> outs;
    if (!tuple && nout == 1) {
      outs.push_back(dst);
    } else {
      for (size_t i = 0; i < nout; ++i) outs.push_back(temp());
    }
    switch (kind) {
      case CallKind::Scalar: emitParts(Opcode::InvokeScalar, {one(k.index), list(ins), list(outs)}); break;
      case CallKind::Dynamic:
        emitParts(Opcode::InvokeDynamic, {one(k.index), list(ins), list(outs)});
        // It runs where its operands are; one with none makes its result on the host.
        if (ins.empty() && !onHost(device)) emit(Opcode::DeviceCopy, {outs[0], outs[0], kCpu, dev});
        break;
      case CallKind::Reshape: {
        const ops::TensorDesc& t = f.typeOf(f.outputs[0]);
        uint32_t shape = temp();
        bool dynamic = std::find(t.shape.begin(), t.shape.end(), ops::kAnyDim) != t.shape.end();
        if (dynamic) emitParts(Opcode::ShapeFunc, {one(k.index), list(ins), list({shape})});
        else emit(Opcode::LoadConst, {shape, eb_.shapeConstant(std::span<const int64_t>(t.shape.data(), t.shape.size())), kCpu});
        emit(Opcode::Reshape, {outs[0], ins[0], shape});
        dropReg(shape);
        break;
      }
      case CallKind::Compiled: {
        bool anyDynamic = false;
        for (int32_t o : f.outputs)
          for (int64_t d : f.typeOf(o).shape) anyDynamic |= d == ops::kAnyDim;
        std::vector<uint32_t> shapes;
        if (anyDynamic) {
          for (size_t i = 0; i < nout; ++i) shapes.push_back(temp());
          emitParts(Opcode::ShapeFunc, {one(k.index), list(ins), list(shapes)});
        }
        auto plan = planned_.find(at.owner);
        if (at.slot == 0 && plan != planned_.end() && !anyDynamic) {
          const Planned& p = plan->second;
          const ops::TensorDesc& t = f.typeOf(f.outputs[0]);
          if (p.first) {
            arenaReg_[p.arena] = temp();
            emit(Opcode::AllocStorage, {arenaReg_[p.arena], arenaBytes_[p.arena], 64, bytecode::encodeDevice(arenaDevices_[p.arena])});
          }
          emit(Opcode::AllocTensor, {outs[0], arenaReg_[p.arena], p.offset,
                                     eb_.shapeConstant(std::span<const int64_t>(t.shape.data(), t.shape.size())),
                                     static_cast<uint32_t>(t.dtype)});
          if (p.last) dropReg(arenaReg_[p.arena]);
          emitParts(Opcode::InvokeKernel, {one(k.index), list(ins), list(outs)});
          break;
        }
        uint32_t storage = temp();
        for (size_t i = 0; i < nout; ++i) {
          const ops::TensorDesc& t = f.typeOf(f.outputs[i]);
          uint32_t dt = static_cast<uint32_t>(t.dtype);
          if (anyDynamic) {
            emit(Opcode::AllocStorageDyn, {storage, shapes[i], dt, dev});
            emit(Opcode::AllocTensorReg, {outs[i], storage, 0, shapes[i], dt});
          } else {
            uint64_t bytes = static_cast<uint64_t>(kiln::numElements(std::span<const int64_t>(t.shape.data(), t.shape.size()))) * dtypeSize(t.dtype);
            emit(Opcode::AllocStorage, {storage, bytes, 64, dev});
            emit(Opcode::AllocTensor, {outs[i], storage, 0, eb_.shapeConstant(std::span<const int64_t>(t.shape.data(), t.shape.size())), dt});
          }
        }
        dropReg(storage);
        for (uint32_t s : shapes) dropReg(s);
        emitParts(Opcode::InvokeKernel, {one(k.index), list(ins), list(outs)});
        break;
      }
    }
    finish(at, ops);
    if (tuple || nout != 1) {
      std::vector<uint32_t> fields = outs;
      mark(fields, outs);
      emitParts(Opcode::AllocTuple, {one(dst), list(fields)});
      for (uint32_t o : outs) dropReg(o, true);
    }
  }

  // ---- match ----
  // Emits the tests of `p` against the value in `v`; failing tests jump to a
  // location recorded in `fails`. Binds pattern variables; `loaded` collects
  // every register the tests fill.
  void emitPattern(const Pattern* p, uint32_t v, std::vector<uint32_t>& fails, std::vector<uint32_t>& temps,
                   std::vector<uint32_t>& loaded) {
    switch (p->kind) {
      case PatternKind::Wildcard: return;
      case PatternKind::Var: {
        const Var* x = static_cast<const PatternVar*>(p)->var;
        bindVar(x, v);  // shares the register holding the matched value
        return;
      }
      case PatternKind::Ctor: {
        auto* c = static_cast<const PatternCtor*>(p);
        fails.push_back(emitJump(Opcode::BranchIfNotCtor, {v, eb_.ctorId(c->ctor), kLater}));
        fieldPatterns(c->args, v, fails, temps, loaded);
        return;
      }
      case PatternKind::Tuple: fieldPatterns(static_cast<const PatternTuple*>(p)->fields, v, fails, temps, loaded); return;
    }
  }

  void fieldPatterns(std::span<const Pattern* const> ps, uint32_t v, std::vector<uint32_t>& fails, std::vector<uint32_t>& temps,
                     std::vector<uint32_t>& loaded) {
    for (size_t i = 0; i < ps.size(); ++i) {
      const Pattern* p = ps[i];
      if (p->kind == PatternKind::Wildcard) continue;
      if (p->kind == PatternKind::Var && !usedVar(static_cast<const PatternVar*>(p)->var)) continue;
      uint32_t r = newReg();
      emit(Opcode::GetField, {r, v, static_cast<uint32_t>(i)});
      loaded.push_back(r);
      if (p->kind == PatternKind::Var) {
        bindVar(static_cast<const PatternVar*>(p)->var, r);
        heap_[r] = true;
      } else {
        refs_[r] = 1;
        heap_[r] = true;
        temps.push_back(r);
        emitPattern(p, r, fails, temps, loaded);
      }
    }
  }

  bool usedVar(const Var* v) const { return usedVars_.count(v) > 0; }

  void emitMatch(const Match* m, uint32_t dst, bool tail) {
    Operands ops;
    uint32_t s = atom(m->scrutinee, ops);
    // The scrutinee stays live through every clause's tests; it dies on entry
    // to an arm that does not use it.
    RegisterState before = save();
    std::vector<uint32_t> ends;
    for (size_t k = 0; k < m->clauses.size(); ++k) {
      const Clause& c = m->clauses[k];
      restore(before);
      std::vector<uint32_t> fails, temps, loaded;
      emitPattern(c.pattern, s, fails, temps, loaded);
      std::vector<uint32_t> entry = temps;
      entry.insert(entry.end(), ops.temps.begin(), ops.temps.end());
      enterArm(armPoint(m, static_cast<int>(k)), entry);
      if (tail) {
        emitTail(c.body, armPoint(m, static_cast<int>(k)));
      } else {
        emitBlockInto(c.body, dst, armPoint(m, static_cast<int>(k)));
        ends.push_back(emitJump(Opcode::Goto, {kLater}));
      }
      for (uint32_t f : fails) patch(f);
      // A failed test may leave fields loaded: drop them before the next clause.
      for (uint32_t r : loaded) emit(Opcode::Release, {r});
    }
    std::string where = (g_.fromPrelude ? std::string("<prelude>") : eb_.module().file()) + ":" + std::to_string(m->loc.line) + ":" + std::to_string(m->loc.col);
    emit(Opcode::Fatal, {eb_.string(std::string(m->complete ? "match" : "match?") + " at " + where +
                                    ": no clause matches the value")});
    for (uint32_t e : ends) patch(e);
  }

  void checkWeight(const Var* p, const Tensor& t) {
    const TensorType* tt = asTensor(p->type);
    bool ok = tt && tt->dtype == t.dtype() && tt->rank() == t.rank();
    for (size_t d = 0; ok && d < t.rank(); ++d) ok = tt->shape[d] == kAnyDim || tt->shape[d] == t.shape()[d];
    if (!ok)
      throw Error("weight '" + std::string(p->name) + "' has shape " + shapeString(t.shape()) + " and dtype " +
                  std::string(dtypeName(t.dtype())) + ", but %" + std::string(p->name) + " of @main is " +
                  typeToString(p->type));
  }

  ExecutableBuilder& eb_;
  const GlobalFunction& g_;
  Liveness live_;
  bytecode::InstructionWriter code_;
  std::unordered_set<const Var*> usedVars_;
  std::unordered_set<const Var*> kernelOnly_;
  std::unordered_map<const Expr*, Planned> planned_;  // keyed by the Let whose value is planned
  std::vector<const Let*> blockLets_;  // the block being planned
  std::vector<uint64_t> arenaBytes_;
  std::vector<Device> arenaDevices_;
  Device arenaDevice_;  // of the arenas being planned
  std::vector<uint32_t> arenaReg_;
  std::unordered_map<const Var*, uint32_t> regOf_;
  std::vector<uint32_t> refs_;
  std::vector<bool> heap_;
  std::vector<uint32_t> free_;
  uint32_t next_ = 0, frameSize_ = 0;
};

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

std::shared_ptr<const Executable> emitBytecode(const Module& lifted, const EmitOptions& opts) {
  auto kept = reachableGlobals(lifted);
  ExecutableBuilder eb(lifted, opts, kept);
  size_t i = 0;
  for (const auto& g : lifted.functions()) {
    if (!kept.count(g.var->name)) continue;
    eb.contents().functions[i++] = FunctionEmitter(eb, g).run();
  }
  if (opts.devices) eb.contents().devices = opts.devices->devices;
  return Executable::build(std::move(eb.contents()));
}

}  // namespace kiln::compiler
