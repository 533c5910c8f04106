// Bytecode emission (see bytecode_emitter.h for the contract).
#include "compiler/codegen/bytecode_emitter.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "bytecode/instruction_writer.h"
#include "bytecode/opcodes.h"
#include "compiler/codegen/executable_builder.h"
#include "compiler/ir/visit.h"
#include "compiler/passes/lambda_lift.h"
#include "compiler/passes/liveness.h"
#include "kernel_ir/fused_function.h"
#include "kiln/error.h"
#include "kiln/memory.h"

namespace kiln::compiler {

using namespace kiln::ir;
using bytecode::Opcode;

namespace {

constexpr uint32_t kCpu = 0;  // device operand: cpu:0, the host

// Registers: a variable's value lives in one register from its definition to
// its last use (liveness.h); aliases (`let x = y`, a variable pattern over the
// scrutinee) share the register, which is released when its last name dies.
// Temporaries (materialized constants and globals, kernel shapes and storage)
// die at the instruction that consumes them. At a branch the register state is
// saved, and each arm starts from it: an arm never sees registers freed by its
// sibling.
//
// Views (kiln/value.h): a parameter of a data type (not a tuple) that a match
// takes apart is pinned: its register keeps the value to the end of the
// function, so the fields the match binds are views of it (get_field_view),
// pinned too, each in a register of its own. Calls of globals pass every
// argument they do not move as a view (a `B` list), the pinned ones included:
// a recursion over a tree hands its subtrees and the values it shares down
// without touching a reference count. A pinned register is never released
// or moved out (the verifier's stable registers); Ret and tail calls make
// owned values of what they take from it.
class FunctionEmitter {
 public:
  FunctionEmitter(ExecutableBuilder& eb, const GlobalFunction& g)
      : eb_(eb), g_(g), mem_(eb.memory(g.var->name)), arenaReg_(mem_.arenas.size(), 0) {}

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
    std::unordered_set<const Var*> takenApart = matchedDataParams(params, body);
    for (auto& [p, r] : paramRegs) {
      bindVar(p, r);
      if (takenApart.count(p) && r < out.numParams) pinned_[r] = true;
      if (!std::binary_search(live_.liveIn.begin(), live_.liveIn.end(), p)) kill(p);
    }
    out.resultType = describeType(result);
    emitTail(body, functionEnd());
    out.code = code_.take();
    out.frameSize = std::max<uint32_t>(frameSize_, 1);
    return out;
  }

 private:
  // The parameters of a data type (an ADT, not a tuple or a reference cell)
  // that some match of `body` scrutinizes directly.
  static std::unordered_set<const Var*> matchedDataParams(const std::vector<const Var*>& params, const Expr* body) {
    std::unordered_set<const Var*> candidates;
    for (const Var* p : params)
      if (p->type && p->type->kind == TypeKind::Adt && !isRefType(static_cast<const AdtType*>(p->type)))
        candidates.insert(p);
    std::unordered_set<const Var*> found;
    if (candidates.empty()) return found;
    std::vector<const Expr*> stack{body};
    while (!stack.empty()) {
      const Expr* e = stack.back();
      stack.pop_back();
      if (e->kind == ExprKind::Match) {
        const Expr* s = static_cast<const Match*>(e)->scrutinee;
        if (s->kind == ExprKind::Var && candidates.count(static_cast<const Var*>(s))) found.insert(static_cast<const Var*>(s));
      }
      // Nested functions are other globals after lambda lifting: their own business.
      if (e->kind != ExprKind::Function) forEachChild(e, [&](const Expr* c) { stack.push_back(c); });
    }
    return found;
  }

  // ---- devices (passes/device_placement.h) ----
  Device deviceOf(const Expr* e) const { return eb_.options().devices ? eb_.options().devices->deviceOf(e) : Device{}; }
  static bool onHost(Device d) { return d == Device{}; }
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
      pinned_.resize(next_, false);
    }
    refs_[r] = 0;
    heap_[r] = false;
    return r;
  }

  // A register never used before in this function, on any path.
  uint32_t freshReg() {
    std::vector<uint32_t> keep;
    keep.swap(free_);
    uint32_t r = newReg();
    free_.swap(keep);
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
    if (pinned_[r] || refs_[r] == 0 || --refs_[r] > 0) return;
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
      if (refs_[r] == 1 && !pinned_[r]) rs.push_back(r);
    }
    return rs;
  }

  // Sets the move bit on the last occurrence in `list` of each register in
  // `movable` (earlier occurrences must still copy). Returns those moved.
  // Linear in the list (a tuple may have hundreds of thousands of fields).
  static std::vector<uint32_t> mark(std::vector<uint32_t>& list, const std::vector<uint32_t>& movable) {
    std::vector<uint32_t> moved;
    std::unordered_set<uint32_t> canMove(movable.begin(), movable.end()), done;
    for (size_t i = list.size(); i-- > 0;) {
      uint32_t r = list[i];
      if (!canMove.count(r) || !done.insert(r).second) continue;
      moved.push_back(r);
      list[i] = r | bytecode::kMoveBit;
    }
    return moved;
  }

  std::vector<uint32_t> unpinned(const std::vector<uint32_t>& rs) const {
    std::vector<uint32_t> out;
    for (uint32_t r : rs)
      if (!pinned_[r]) out.push_back(r);
    return out;
  }

  // An invoke's or fork's arguments that are not moved go as views: the caller
  // holds them across the call. A register moved at its last occurrence is
  // copied at the others (the verifier refuses a view and a move of one register).
  static void viewUnmoved(std::vector<uint32_t>& list, const std::vector<uint32_t>& moved) {
    for (uint32_t& e : list)
      if (!(e & bytecode::kMoveBit) && std::find(moved.begin(), moved.end(), e) == moved.end()) e |= bytecode::kViewBit;
  }

  void finish(LivenessPoint at, const Operands& ops, const std::vector<uint32_t>& moved = {}) {
    std::unordered_set<uint32_t> movedSet(moved.begin(), moved.end());
    auto wasMoved = [&](uint32_t r) { return movedSet.count(r) > 0; };
    for (const Var* v : live_.diesAt(at)) kill(v, wasMoved(regOf_.at(v)));
    for (uint32_t t : ops.temps) dropReg(t, wasMoved(t));
  }

  // ---- instruction encoding ----
  // bytecode::InstructionWriter lays operands out as opcodes.def says and checks
  // each instruction against its row.
  using Word = uint64_t;
  using Part = bytecode::InstructionWriter::Arg;
  void emit(Opcode op, std::initializer_list<Word> operands) {
    uint32_t at = code_.emitWords(op, operands);
    if (op == Opcode::Release) releasesBeforeHere_.push_back(at);
    else releasesBeforeHere_.clear();
  }
  static Part one(uint32_t w) { return bytecode::InstructionWriter::word(w); }
  static Part list(const std::vector<uint32_t>& ws) { return bytecode::InstructionWriter::regs(ws); }
  void emitParts(Opcode op, std::initializer_list<Part> parts) {
    code_.emit(op, parts);
    releasesBeforeHere_.clear();
  }
  uint32_t here() const { return code_.size(); }
  // A jump target written as kLater is patched when the target is known.
  static constexpr Word kLater = 0;
  // Emits a jump; returns the word of its J operand (found through the table) to patch.
  uint32_t emitJump(Opcode op, std::initializer_list<Word> operands) {
    uint32_t at = code_.emitWords(op, operands);
    releasesBeforeHere_.clear();
    return code_.jumpWords(at).at(0);
  }
  void patch(uint32_t at) { patchTo(at, here()); }
  void patchTo(uint32_t at, Word target) {
    code_[at] = static_cast<uint32_t>(target);
    lastTarget_ = std::max<int64_t>(lastTarget_, static_cast<int64_t>(target));
  }

  // A return: the releases right before it go (ret drops, and recycles, every
  // register of the frame itself), but for those past a jump target (which
  // would land past the end); a jump to the first one dropped lands on the ret.
  void emitRet(uint32_t r) {
    size_t keep = 0;
    for (size_t i = 0; i < releasesBeforeHere_.size(); ++i)
      if (static_cast<int64_t>(releasesBeforeHere_[i]) < lastTarget_) keep = i + 1;
    if (keep < releasesBeforeHere_.size()) code_.truncate(releasesBeforeHere_[keep]);
    releasesBeforeHere_.clear();
    emit(Opcode::Ret, {r});
  }

  // ---- blocks ----
  // `let a = @f(...); let b = @g(...)` where both globals are pure and the
  // second call reads only variables, not `a`: the pair a fork can run at once
  // (`fork` for the first, `join` after the second). Null when `l` starts none.
  const Let* forkPartner(const Let* l) const {
    auto directCall = [this](const Expr* v) -> const Call* {
      if (v->kind != ExprKind::Call) return nullptr;
      auto* c = static_cast<const Call*>(v);
      if (c->callee->kind != ExprKind::GlobalVar) return nullptr;
      std::string_view name = static_cast<const GlobalVar*>(c->callee)->name;
      size_t cap = capturedCount(eb_.global(name));
      if ((cap && c->args.size() == cap) || !eb_.pure(name)) return nullptr;  // a closure made, or not pure
      return c;
    };
    if (!directCall(l->value) || !usedVar(l->var) || l->body->kind != ExprKind::Let) return nullptr;
    auto* next = static_cast<const Let*>(l->body);
    const Call* second = directCall(next->value);
    if (!second) return nullptr;
    // Its operands already in registers: nothing but the call between fork and join.
    for (const Expr* a : second->args)
      if (a->kind != ExprKind::Var || static_cast<const Var*>(a) == l->var) return nullptr;
    return next;
  }

  void emitLets(const Expr*& e) {
    while (e->kind == ExprKind::Let) {
      auto* l = static_cast<const Let*>(e);
      if (const Let* next = forkPartner(l)) {
        uint32_t first = newReg();
        emitCall(static_cast<const Call*>(l->value), first, letPoint(l), Opcode::Fork);
        bindVar(l->var, first);
        uint32_t second = newReg();
        emitValue(next->value, second, letPoint(next));
        bindVar(next->var, second);
        emit(Opcode::Join, {first});
        if (!usedVar(next->var)) kill(next->var);
        e = next->body;
        continue;
      }
      if (l->value->kind == ExprKind::Var) {
        // An alias shares the register.
        bindVar(l->var, regOfVar(static_cast<const Var*>(l->value), l->value->loc));
        finish(letPoint(l), {});
      } else {
        uint32_t r = newReg();
        emitValue(l->value, r, letPoint(l));
        bindVar(l->var, r);
      }
      if (!usedVar(l->var)) kill(l->var);
      e = l->body;
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
    emitRet(r);
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
      mark(args, unpinned(args));
      emitParts(Opcode::TailCall, {one(eb_.functionId(name)), list(args)});
      return true;
    }
    if (c->callee->kind == ExprKind::Var) {
      uint32_t f = atom(c->callee, ops);
      auto args = atoms(c->args, ops);
      std::vector<uint32_t> movable;
      for (uint32_t r : unpinned(args))
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
      case ExprKind::RefOp: {
        auto* r = static_cast<const RefOp*>(e);
        Operands ops;
        auto rs = atoms(r->args, ops);
        if (r->op == RefOpKind::Create) {
          emit(Opcode::AllocRef, {dst, rs[0]});
        } else if (r->op == RefOpKind::Read) {
          emit(Opcode::RefRead, {dst, rs[0]});
        } else {
          emit(Opcode::RefWrite, {rs[0], rs[1]});
          emitParts(Opcode::AllocTuple, {one(dst), list({})});
        }
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

  // `invoke`: Opcode::Fork for the first call of a fork pair (forkPartner).
  void emitCall(const Call* c, uint32_t dst, LivenessPoint at, Opcode invoke = Opcode::Invoke) {
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
        Opcode op = cap && args.size() == cap ? Opcode::AllocClosure : invoke;
        if (op != Opcode::AllocClosure) viewUnmoved(args, moved);
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

  // Emits a kernel call as the memory pass decided it (passes/manifest_memory.h).
  void emitKernelCall(const Call* call, uint32_t dst, LivenessPoint at) {
    auto* prim = static_cast<const Function*>(call->callee);
    const KernelCallMemory& m = mem_.calls.at(call);
    const KernelRef& k = m.kernel;
    uint32_t dev = bytecode::encodeDevice(m.device);
    const kernel_ir::FusedFunction& f = *k.fn;
    Operands ops;
    auto ins = atoms(call->args, ops);
    size_t nout = f.outputs.size();
    bool tuple = asTuple(prim->body->type) != nullptr;
    std::vector<uint32_t> outs;
    if (!tuple && nout == 1) {
      outs.push_back(dst);
    } else {
      for (size_t i = 0; i < nout; ++i) outs.push_back(temp());
    }
    auto shapeConstant = [&](const ops::TensorDesc& t) {
      return eb_.shapeConstant(std::span<const int64_t>(t.shape.data(), t.shape.size()));
    };
    switch (m.kind) {
      case CallKind::Scalar: emitParts(Opcode::InvokeScalar, {one(k.index), list(ins), list(outs)}); break;
      case CallKind::Dynamic:
        emitParts(Opcode::InvokeDynamic, {one(k.index), list(ins), list(outs)});
        // It runs where its operands are; one with none makes its result on the host.
        if (ins.empty() && !onHost(m.device)) emit(Opcode::DeviceCopy, {outs[0], outs[0], kCpu, dev});
        break;
      case CallKind::Reshape: {
        const ops::TensorDesc& t = f.typeOf(f.outputs[0]);
        uint32_t shape = temp();
        bool dynamic = std::find(t.shape.begin(), t.shape.end(), ops::kAnyDim) != t.shape.end();
        if (dynamic) emitParts(Opcode::ShapeFunc, {one(k.index), list(ins), list({shape})});
        else emit(Opcode::LoadConst, {shape, shapeConstant(t), kCpu});
        emit(Opcode::Reshape, {outs[0], ins[0], shape});
        dropReg(shape);
        break;
      }
      case CallKind::Compiled:
        switch (m.source) {
          case OutputMemory::Arena: {
            const ops::TensorDesc& t = f.typeOf(f.outputs[0]);
            uint32_t a = m.slot.arena;
            if (m.slot.first) {
              arenaReg_[a] = temp();
              emit(Opcode::AllocStorage, {arenaReg_[a], mem_.arenas[a].bytes, 64, bytecode::encodeDevice(mem_.arenas[a].device)});
            }
            emit(Opcode::AllocTensor, {outs[0], arenaReg_[a], m.slot.offset, shapeConstant(t), static_cast<uint32_t>(t.dtype)});
            if (m.slot.last) dropReg(arenaReg_[a]);
            break;
          }
          case OutputMemory::ShapeFunction: {
            std::vector<uint32_t> shapes;
            for (size_t i = 0; i < nout; ++i) shapes.push_back(temp());
            emitParts(Opcode::ShapeFunc, {one(k.index), list(ins), list(shapes)});
            uint32_t storage = temp();
            for (size_t i = 0; i < nout; ++i) {
              uint32_t dt = static_cast<uint32_t>(f.typeOf(f.outputs[i]).dtype);
              emit(Opcode::AllocStorageDyn, {storage, shapes[i], dt, dev});
              emit(Opcode::AllocTensorReg, {outs[i], storage, 0, shapes[i], dt});
            }
            dropReg(storage);
            for (uint32_t s : shapes) dropReg(s);
            break;
          }
          case OutputMemory::Static:
          case OutputMemory::None: {
            // Each output in a block of its own: one instruction, one object.
            for (size_t i = 0; i < nout; ++i) {
              const ops::TensorDesc& t = f.typeOf(f.outputs[i]);
              emit(Opcode::AllocTensorOwn, {outs[i], shapeConstant(t), static_cast<uint32_t>(t.dtype), dev});
            }
            break;
          }
        }
        emitParts(Opcode::InvokeKernel, {one(k.index), list(ins), list(outs)});
        break;
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
  // A pattern's failed test: the jump to patch, and how many fields the pattern
  // had loaded when it was made (a prefix of `loaded`: those to release).
  struct FailedTest {
    uint32_t jump;
    size_t loaded;
  };

  // `tested` false: the value is known to match (the last clause of an
  // exhaustive match), so the pattern only binds.
  void emitPattern(const Pattern* p, uint32_t v, std::vector<FailedTest>& fails, std::vector<uint32_t>& temps,
                   std::vector<uint32_t>& loaded, bool tested) {
    switch (p->kind) {
      case PatternKind::Wildcard: return;
      case PatternKind::Var: {
        const Var* x = static_cast<const PatternVar*>(p)->var;
        bindVar(x, v);  // shares the register holding the matched value
        return;
      }
      case PatternKind::Ctor: {
        auto* c = static_cast<const PatternCtor*>(p);
        if (tested) fails.push_back({emitJump(Opcode::BranchIfNotCtor, {v, eb_.ctorId(c->ctor), kLater}), loaded.size()});
        fieldPatterns(c->args, v, fails, temps, loaded, tested);
        return;
      }
      case PatternKind::Tuple:
        fieldPatterns(static_cast<const PatternTuple*>(p)->fields, v, fails, temps, loaded, tested);
        return;
    }
  }

  void fieldPatterns(std::span<const Pattern* const> ps, uint32_t v, std::vector<FailedTest>& fails, std::vector<uint32_t>& temps,
                     std::vector<uint32_t>& loaded, bool tested) {
    for (size_t i = 0; i < ps.size(); ++i) {
      const Pattern* p = ps[i];
      if (p->kind == PatternKind::Wildcard) continue;
      if (p->kind == PatternKind::Var && !usedVar(static_cast<const PatternVar*>(p)->var)) continue;
      // A field of a pinned value is a view, pinned in a register no other
      // value ever takes (the verifier's rule is over the whole function).
      bool view = pinned_[v];
      uint32_t r = view ? freshReg() : newReg();
      emit(view ? Opcode::GetFieldView : Opcode::GetField, {r, v, static_cast<uint32_t>(i)});
      if (view) pinned_[r] = true;
      loaded.push_back(r);
      if (p->kind == PatternKind::Var) {
        bindVar(static_cast<const PatternVar*>(p)->var, r);
        heap_[r] = true;
      } else {
        refs_[r] = 1;
        heap_[r] = true;
        temps.push_back(r);
        emitPattern(p, r, fails, temps, loaded, tested);
      }
    }
  }

  bool usedVar(const Var* v) const { return mem_.used.count(v) > 0; }

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
      std::vector<FailedTest> fails;
      std::vector<uint32_t> temps, loaded;
      // The type checker proved `match` exhaustive: a value that reaches its
      // last clause matches it, and the tests there would only cost time.
      bool lastOfComplete = m->complete && k + 1 == m->clauses.size();
      emitPattern(c.pattern, s, fails, temps, loaded, !lastOfComplete);
      std::vector<uint32_t> entry = temps;
      entry.insert(entry.end(), ops.temps.begin(), ops.temps.end());
      enterArm(armPoint(m, static_cast<int>(k)), entry);
      if (tail) {
        emitTail(c.body, armPoint(m, static_cast<int>(k)));
      } else {
        emitBlockInto(c.body, dst, armPoint(m, static_cast<int>(k)));
        ends.push_back(emitJump(Opcode::Goto, {kLater}));
      }
      // A failed test may leave fields loaded: drop them before the next clause,
      // last loaded first, each test jumping to the release of the last field
      // loaded before it, so that no path releases a register it never wrote
      // (a constructor's test fails before any of its fields is loaded).
      // Fields loaded after the last test are never released here (no path).
      size_t reached = 0;
      for (const FailedTest& f : fails) reached = std::max(reached, f.loaded);
      std::vector<Word> releaseFrom(reached + 1);
      for (size_t i = reached; i-- > 0;) {
        releaseFrom[i + 1] = here();
        if (!pinned_[loaded[i]]) emit(Opcode::Release, {loaded[i]});
      }
      releaseFrom[0] = here();
      for (const FailedTest& f : fails) patchTo(f.jump, releaseFrom[f.loaded]);
    }
    // Only a `match?` can run out of clauses (a complete match's last clause tests nothing).
    if (!m->complete || m->clauses.empty()) {
      std::string where = (g_.fromPrelude ? std::string("<prelude>") : eb_.module().file()) + ":" +
                          std::to_string(m->loc.line) + ":" + std::to_string(m->loc.col);
      emit(Opcode::Fatal, {eb_.string(std::string(m->complete ? "match" : "match?") + " at " + where +
                                      ": no clause matches the value")});
    }
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
  const FunctionMemory& mem_;      // the memory pass's decisions for this function
  std::vector<uint32_t> arenaReg_;  // the register holding each arena, while it is held
  std::unordered_map<const Var*, uint32_t> regOf_;
  std::vector<uint32_t> refs_;
  std::vector<bool> heap_;
  std::vector<bool> pinned_;  // holds its value to the end of the function (see "Views")
  std::vector<uint32_t> free_;
  uint32_t next_ = 0, frameSize_ = 0;
  std::vector<uint32_t> releasesBeforeHere_;  // starts of the releases emitted last, in a row
  int64_t lastTarget_ = -1;                   // the furthest jump target patched so far
};

}  // namespace

std::shared_ptr<const Executable> emitBytecode(const Module& lifted, const EmitOptions& opts, KernelTableBuilder& kernels,
                                               const MemoryPlan& memory) {
  ExecutableBuilder eb(lifted, opts, kernels, memory);
  size_t i = 0;
  for (const auto& g : lifted.functions()) {
    if (!eb.hasFunction(g.var->name)) continue;
    eb.contents().functions[i++] = FunctionEmitter(eb, g).run();
  }
  eb.finishKernels();
  if (opts.devices) eb.contents().devices = opts.devices->devices;
  return Executable::build(std::move(eb.contents()));
}

std::shared_ptr<const Executable> emitBytecode(const Module& lifted, const EmitOptions& opts) {
  KernelTableBuilder kernels(lifted);
  MemoryPlan memory = manifestMemory(lifted, kernels, ManifestOptions{opts.planMemory, opts.devices});
  return emitBytecode(lifted, opts, kernels, memory);
}

}  // namespace kiln::compiler
