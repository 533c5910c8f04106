// Bytecode emission (see bytecode_emitter.h for the contract).
#include "compiler/codegen/bytecode_emitter.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "bytecode/opcodes.h"
#include "compiler/ir/visit.h"
#include "compiler/passes/lambda_lift.h"
#include "compiler/passes/to_fused_function.h"
#include "jit/fused_function.h"
#include "kiln/error.h"
#include "vm/dynamic_ops.h"
#include "vm/scalar_kernel.h"

namespace kiln::compiler {

using namespace kiln::ir;
using bytecode::Opcode;

namespace {

constexpr uint32_t kCpu = 0;  // device operand: cpu:0 (placement arrives with the device issue)

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

bool isReshapeOnly(const jit::FusedFunction& f) {
  if (f.params.size() != 1 || f.nodes.size() != 1 || f.outputs.size() != 1) return false;
  const jit::FusedNode& n = f.nodes[0];
  if (n.isConstant()) return false;
  const std::string& op = n.op->name;
  return (op == "reshape" || op == "squeeze" || op == "expand_dims") && n.inputs.size() == 1 && n.inputs[0] == 0 &&
         f.outputs[0] == 1;
}

enum class CallKind { Compiled, Scalar, Dynamic, Reshape };

// Tables shared by every function of the executable.
class ExecutableBuilder {
 public:
  ExecutableBuilder(const Module& m, const EmitOptions& opts) : m_(m), opts_(opts), exe_(std::make_shared<Executable>()) {
    for (const auto& td : m.typeDefs())
      for (const Constructor* c : td.def->ctors) {
        ctorIds_[c] = static_cast<uint32_t>(exe_->constructors.size());
        exe_->constructors.push_back({std::string(c->name), std::string(td.def->name), static_cast<uint32_t>(c->fields.size())});
      }
    for (const auto& g : m.functions()) {
      functionIds_[g.var->name] = static_cast<uint32_t>(exe_->functions.size());
      exe_->functions.emplace_back();
      globals_[g.var->name] = g.fn;
    }
  }

  Executable& exe() { return *exe_; }
  const Module& module() const { return m_; }
  const EmitOptions& options() const { return opts_; }
  std::shared_ptr<Executable> take() { return exe_; }

  uint32_t functionId(std::string_view name) const { return functionIds_.at(name); }
  const Function* global(std::string_view name) const { return globals_.at(name); }
  uint32_t ctorId(const Constructor* c) const { return ctorIds_.at(c); }

  uint32_t string(const std::string& s) {
    auto [it, fresh] = strings_.emplace(s, static_cast<uint32_t>(exe_->strings.size()));
    if (fresh) exe_->strings.push_back(s);
    return it->second;
  }

  uint32_t constant(const Tensor& t) {
    exe_->constants.push_back(t);
    return static_cast<uint32_t>(exe_->constants.size() - 1);
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
    const jit::FusedFunction* fn;
  };

  KernelRef kernel(const Function* prim) {
    if (auto it = byNode_.find(prim); it != byNode_.end()) return it->second;
    auto f = std::make_shared<jit::FusedFunction>(toFusedFunction(prim, "kernel", m_.file()));
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
      if (!kernelNames_.insert(f->name).second) f->name += "_" + std::to_string(exe_->kernels.size());
      CallKind kind = vm::isDynamicKernel(*f)                ? CallKind::Dynamic
                      : vm::ScalarKernel::tryBuild(*f)        ? CallKind::Scalar
                      : isReshapeOnly(*f)                     ? CallKind::Reshape
                                                              : CallKind::Compiled;
      ref = KernelRef{static_cast<uint32_t>(exe_->kernels.size()), kind, f.get()};
      exe_->kernels.push_back(KernelInfo{f, KernelKind::Compiled, nullptr});
      byHash_.emplace(hash, ref);
    }
    byNode_.emplace(prim, ref);
    return ref;
  }

 private:
  const Module& m_;
  const EmitOptions& opts_;
  std::shared_ptr<Executable> exe_;
  std::unordered_map<const Constructor*, uint32_t> ctorIds_;
  std::unordered_map<std::string_view, uint32_t> functionIds_;
  std::unordered_map<std::string_view, const Function*> globals_;
  std::unordered_map<std::string, uint32_t> strings_;
  std::map<std::vector<int64_t>, uint32_t> shapeConsts_;
  std::unordered_map<const Function*, KernelRef> byNode_;
  std::unordered_map<uint64_t, KernelRef> byHash_;
  std::unordered_set<std::string> kernelNames_;
};

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
    countUses(body);

    // `main`'s parameters named in the params file become constants.
    std::vector<std::pair<const Var*, uint32_t>> bound;
    const auto& weights = eb_.options().params;
    for (const Var* p : params) {
      auto it = out.name == "main" ? weights.find(std::string(p->name)) : weights.end();
      if (it != weights.end()) {
        checkWeight(p, it->second);
        bound.emplace_back(p, eb_.constant(it->second));
        continue;
      }
      uint32_t r = newReg();
      bind(p, r);
      out.paramNames.push_back(std::string(p->name));
      out.paramTypes.push_back(describeType(p->type));
    }
    out.numParams = static_cast<uint32_t>(out.paramNames.size());
    for (auto& [p, c] : bound) {
      uint32_t r = newReg();
      emit(Opcode::LoadConst, {r, c});
      bind(p, r);
    }
    for (const Var* p : params)
      if (regOf_.count(p)) releaseIfDead(regOf_[p]);
    out.resultType = describeType(result);
    emitTail(body);
    out.code = std::move(code_);
    out.frameSize = std::max<uint32_t>(frameSize_, 1);
    return out;
  }

 private:
  // ---- registers and liveness ----
  void countUses(const Expr* root) {
    std::vector<const Expr*> stack{root};
    while (!stack.empty()) {
      const Expr* e = stack.back();
      stack.pop_back();
      if (e->kind == ExprKind::Var) uses_[static_cast<const Var*>(e)]++;
      forEachChild(e, [&](const Expr* c) { stack.push_back(c); });
    }
  }

  uint32_t newReg() {
    uint32_t r;
    if (!free_.empty()) {
      r = free_.back();
      free_.pop_back();
    } else {
      r = next_++;
      frameSize_ = std::max(frameSize_, next_);
      remaining_.resize(next_, 0);
      heap_.resize(next_, false);
    }
    remaining_[r] = 0;
    heap_[r] = false;
    return r;
  }

  // A register holding a temporary, given back by done().
  uint32_t temp() {
    uint32_t r = newReg();
    remaining_[r] = 1;
    return r;
  }

  void bind(const Var* v, uint32_t r) {
    regOf_[v] = r;
    remaining_[r] += uses_[v];
    heap_[r] = heap_[r] || isHeapType(v->type);
  }

  void releaseIfDead(uint32_t r) {
    if (remaining_[r] == 0) freeReg(r, true);
  }

  void freeReg(uint32_t r, bool release) {
    if (release && heap_[r]) emit(Opcode::Release, {r});
    free_.push_back(r);
  }

  // One use of register `r` is complete; at its last use it is released and reused.
  void done(uint32_t r, bool release = true) {
    if (remaining_[r] == 0) return;
    if (--remaining_[r] == 0) freeReg(r, release);
  }

  // The register of an atom; constants and globals are materialized into a temporary.
  uint32_t atomReg(const Expr* e) {
    switch (e->kind) {
      case ExprKind::Var: {
        auto it = regOf_.find(static_cast<const Var*>(e));
        if (it == regOf_.end()) throw Error(eb_.module().file(), e->loc, "internal: unbound variable %" + std::string(static_cast<const Var*>(e)->name));
        return it->second;
      }
      default: {
        uint32_t r = temp();
        emitInto(e, r);
        return r;
      }
    }
  }

  std::vector<uint32_t> atomRegs(std::span<const Expr* const> es) {
    std::vector<uint32_t> rs;
    for (const Expr* e : es) rs.push_back(atomReg(e));
    return rs;
  }

  void doneAll(const std::vector<uint32_t>& rs, bool release = true) {
    for (uint32_t r : rs) done(r, release);
  }

  // ---- instruction encoding ----
  using Word = uint64_t;  // operands; W operands are split, L operands expanded by emitList
  void emit(Opcode op, std::initializer_list<Word> operands) {
    code_.push_back(static_cast<uint32_t>(op));
    auto kinds = bytecode::info(op).operands;
    size_t k = 0;
    for (Word w : operands) {
      if (kinds[k] == 'W') {
        code_.push_back(static_cast<uint32_t>(w));
        code_.push_back(static_cast<uint32_t>(w >> 32));
      } else {
        code_.push_back(static_cast<uint32_t>(w));
      }
      ++k;
    }
  }
  // An instruction with register lists: `parts` are operands in table order,
  // each a single word or a list.
  struct Part {
    std::vector<uint32_t> words;
    bool list = false;
  };
  static Part one(uint32_t w) { return Part{{w}, false}; }
  static Part list(const std::vector<uint32_t>& ws) { return Part{ws, true}; }
  void emitParts(Opcode op, std::initializer_list<Part> parts) {
    code_.push_back(static_cast<uint32_t>(op));
    for (const Part& p : parts) {
      if (p.list) code_.push_back(static_cast<uint32_t>(p.words.size()));
      code_.insert(code_.end(), p.words.begin(), p.words.end());
    }
  }
  uint32_t here() const { return static_cast<uint32_t>(code_.size()); }
  // Emits a jump whose target is patched later; returns the word to patch.
  uint32_t emitJump(Opcode op, std::initializer_list<uint32_t> before) {
    code_.push_back(static_cast<uint32_t>(op));
    for (uint32_t w : before) code_.push_back(w);
    code_.push_back(0);
    return here() - 1;
  }
  void patch(uint32_t at) { code_[at] = here(); }

  // ---- expressions ----
  void emitLets(const Expr*& e) {
    while (e->kind == ExprKind::Let) {
      auto* l = static_cast<const Let*>(e);
      if (l->value->kind == ExprKind::Var) {
        // An alias shares the register.
        uint32_t r = atomReg(l->value);
        bind(l->var, r);
        done(r);
      } else {
        uint32_t r = newReg();
        emitInto(l->value, r);
        bind(l->var, r);
        if (uses_[l->var] == 0) freeReg(r, true);
      }
      e = l->body;
    }
  }

  void emitTail(const Expr* e) {
    emitLets(e);
    switch (e->kind) {
      case ExprKind::If: {
        auto* i = static_cast<const If*>(e);
        uint32_t c = atomReg(i->cond);
        uint32_t toElse = emitJump(Opcode::BranchIfNot, {c});
        done(c, false);
        emitTail(i->thenBranch);
        patch(toElse);
        emitTail(i->elseBranch);
        return;
      }
      case ExprKind::Match: emitMatch(static_cast<const Match*>(e), 0, true); return;
      case ExprKind::Call: {
        auto* c = static_cast<const Call*>(e);
        if (emitCallTail(c)) return;
        break;
      }
      default: break;
    }
    uint32_t r;
    if (e->kind == ExprKind::Var) {
      r = atomReg(e);
    } else {
      r = newReg();
      emitInto(e, r);
    }
    emit(Opcode::Ret, {r});
  }

  // Tail calls of functions and closures; false for other calls.
  bool emitCallTail(const Call* c) {
    if (c->callee->kind == ExprKind::GlobalVar) {
      std::string_view name = static_cast<const GlobalVar*>(c->callee)->name;
      const Function* g = eb_.global(name);
      size_t cap = capturedCount(g);
      if (cap && c->args.size() == cap) return false;  // builds a closure
      auto args = atomRegs(c->args);
      emitParts(Opcode::TailCall, {one(eb_.functionId(name)), list(args)});
      doneAll(args, false);
      return true;
    }
    if (c->callee->kind == ExprKind::Var) {
      uint32_t f = atomReg(c->callee);
      auto args = atomRegs(c->args);
      emitParts(Opcode::TailCallClosure, {one(f), list(args)});
      done(f, false);
      doneAll(args, false);
      return true;
    }
    return false;
  }

  void emitInto(const Expr* e, uint32_t dst) {
    switch (e->kind) {
      case ExprKind::Var: {
        uint32_t r = atomReg(e);
        emit(Opcode::Move, {dst, r});
        done(r);
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
        auto rs = atomRegs(static_cast<const Tuple*>(e)->fields);
        emitParts(Opcode::AllocTuple, {one(dst), list(rs)});
        doneAll(rs);
        return;
      }
      case ExprKind::TupleGet: {
        auto* g = static_cast<const TupleGet*>(e);
        uint32_t t = atomReg(g->tuple);
        emit(Opcode::GetField, {dst, t, g->index});
        done(t);
        return;
      }
      case ExprKind::Call: emitCall(static_cast<const Call*>(e), dst); return;
      case ExprKind::If: {
        auto* i = static_cast<const If*>(e);
        uint32_t c = atomReg(i->cond);
        uint32_t toElse = emitJump(Opcode::BranchIfNot, {c});
        done(c, false);
        emitBlockInto(i->thenBranch, dst);
        uint32_t toEnd = emitJump(Opcode::Goto, {});
        patch(toElse);
        emitBlockInto(i->elseBranch, dst);
        patch(toEnd);
        return;
      }
      case ExprKind::Match: emitMatch(static_cast<const Match*>(e), dst, false); return;
      case ExprKind::Let: emitBlockInto(e, dst); return;
      default:
        throw Error(eb_.module().file(), e->loc, "internal: unexpected expression in bytecode emission");
    }
  }

  void emitBlockInto(const Expr* e, uint32_t dst) {
    emitLets(e);
    emitInto(e, dst);
  }

  void emitCall(const Call* c, uint32_t dst) {
    const Expr* callee = c->callee;
    switch (callee->kind) {
      case ExprKind::Function: emitKernelCall(static_cast<const Function*>(callee), c->args, dst); return;
      case ExprKind::GlobalVar: {
        std::string_view name = static_cast<const GlobalVar*>(callee)->name;
        const Function* g = eb_.global(name);
        size_t cap = capturedCount(g);
        auto args = atomRegs(c->args);
        Opcode op = cap && args.size() == cap ? Opcode::AllocClosure : Opcode::Invoke;
        emitParts(op, {one(dst), one(eb_.functionId(name)), list(args)});
        doneAll(args);
        return;
      }
      case ExprKind::Ctor: {
        auto args = atomRegs(c->args);
        emitParts(Opcode::AllocAdt, {one(dst), one(eb_.ctorId(static_cast<const CtorRef*>(callee)->ctor)), list(args)});
        doneAll(args);
        return;
      }
      case ExprKind::Var: {
        uint32_t f = atomReg(callee);
        auto args = atomRegs(c->args);
        emitParts(Opcode::InvokeClosure, {one(dst), one(f), list(args)});
        done(f);
        doneAll(args);
        return;
      }
      case ExprKind::Op: {
        const ops::OpDef* op = static_cast<const OpRef*>(callee)->op;
        uint32_t x = atomReg(c->args[0]);
        if (op->name == "device_copy") {
          ops::AttrReader attrs(op->name, *c->attrs);
          Device src = Device::parse(attrs.getString("src_device", "cpu"));
          Device dstDev = Device::parse(attrs.getString("dst_device", "cpu"));
          emit(Opcode::DeviceCopy, {dst, x, bytecode::encodeDevice(static_cast<uint32_t>(src.kind), src.index),
                                    bytecode::encodeDevice(static_cast<uint32_t>(dstDev.kind), dstDev.index)});
        } else {
          emit(Opcode::Move, {dst, x});  // on_device: placement is decided by the device pass
        }
        done(x);
        return;
      }
      default: throw Error(eb_.module().file(), c->loc, "internal: unexpected callee in bytecode emission");
    }
  }

  void emitKernelCall(const Function* prim, std::span<const Expr* const> argExprs, uint32_t dst) {
    auto k = eb_.kernel(prim);
    const jit::FusedFunction& f = *k.fn;
    auto ins = atomRegs(argExprs);
    size_t nout = f.outputs.size();
    bool tuple = asTuple(prim->body->type) != nullptr;
    std::vector<uint32_t> outs;
    if (!tuple && nout == 1) {
      outs.push_back(dst);
    } else {
      for (size_t i = 0; i < nout; ++i) outs.push_back(temp());
    }
    switch (k.kind) {
      case CallKind::Scalar: emitParts(Opcode::InvokeScalar, {one(k.index), list(ins), list(outs)}); break;
      case CallKind::Dynamic: emitParts(Opcode::InvokeDynamic, {one(k.index), list(ins), list(outs)}); break;
      case CallKind::Reshape: {
        const ops::TensorDesc& t = f.typeOf(f.outputs[0]);
        uint32_t shape = temp();
        bool dynamic = std::find(t.shape.begin(), t.shape.end(), ops::kAnyDim) != t.shape.end();
        if (dynamic) emitParts(Opcode::ShapeFunc, {one(k.index), list(ins), list({shape})});
        else emit(Opcode::LoadConst, {shape, eb_.shapeConstant(std::span<const int64_t>(t.shape.data(), t.shape.size()))});
        emit(Opcode::Reshape, {outs[0], ins[0], shape});
        done(shape);
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
        uint32_t storage = temp();
        heap_[storage] = true;
        for (size_t i = 0; i < nout; ++i) {
          const ops::TensorDesc& t = f.typeOf(f.outputs[i]);
          uint32_t dt = static_cast<uint32_t>(t.dtype);
          if (anyDynamic) {
            emit(Opcode::AllocStorageDyn, {storage, shapes[i], dt, kCpu});
            emit(Opcode::AllocTensorReg, {outs[i], storage, 0, shapes[i], dt});
          } else {
            uint64_t bytes = static_cast<uint64_t>(kiln::numElements(std::span<const int64_t>(t.shape.data(), t.shape.size()))) * dtypeSize(t.dtype);
            emit(Opcode::AllocStorage, {storage, bytes, 64, kCpu});
            emit(Opcode::AllocTensor, {outs[i], storage, 0, eb_.shapeConstant(std::span<const int64_t>(t.shape.data(), t.shape.size())), dt});
          }
        }
        done(storage);
        for (uint32_t s : shapes) done(s);
        emitParts(Opcode::InvokeKernel, {one(k.index), list(ins), list(outs)});
        break;
      }
    }
    doneAll(ins);
    if (tuple || nout != 1) {
      emitParts(Opcode::AllocTuple, {one(dst), list(outs)});
      for (uint32_t o : outs) {
        heap_[o] = true;
        done(o);
      }
    }
  }

  // ---- match ----
  // Emits the tests of `p` against the value in `v`; failing tests jump to a
  // location recorded in `fails`. Binds pattern variables.
  void emitPattern(const Pattern* p, uint32_t v, std::vector<uint32_t>& fails, std::vector<uint32_t>& temps) {
    switch (p->kind) {
      case PatternKind::Wildcard: return;
      case PatternKind::Var: {
        const Var* x = static_cast<const PatternVar*>(p)->var;
        bind(x, v);  // shares the register holding the matched value
        return;
      }
      case PatternKind::Ctor: {
        auto* c = static_cast<const PatternCtor*>(p);
        fails.push_back(emitJump(Opcode::BranchIfNotCtor, {v, eb_.ctorId(c->ctor)}));
        fieldPatterns(c->args, v, fails, temps);
        return;
      }
      case PatternKind::Tuple: fieldPatterns(static_cast<const PatternTuple*>(p)->fields, v, fails, temps); return;
    }
  }

  void fieldPatterns(std::span<const Pattern* const> ps, uint32_t v, std::vector<uint32_t>& fails, std::vector<uint32_t>& temps) {
    for (size_t i = 0; i < ps.size(); ++i) {
      const Pattern* p = ps[i];
      if (p->kind == PatternKind::Wildcard) continue;
      if (p->kind == PatternKind::Var && uses_[static_cast<const PatternVar*>(p)->var] == 0) continue;
      uint32_t r = newReg();
      emit(Opcode::GetField, {r, v, static_cast<uint32_t>(i)});
      if (p->kind == PatternKind::Var) {
        bind(static_cast<const PatternVar*>(p)->var, r);
      } else {
        remaining_[r] = 1;
        temps.push_back(r);
        emitPattern(p, r, fails, temps);
      }
    }
  }

  void emitMatch(const Match* m, uint32_t dst, bool tail) {
    uint32_t s = atomReg(m->scrutinee);
    // The scrutinee stays live through every clause's tests; its use ends after the match.
    std::vector<uint32_t> ends;
    for (const Clause& c : m->clauses) {
      std::vector<uint32_t> fails, temps;
      emitPattern(c.pattern, s, fails, temps);
      for (uint32_t t : temps) done(t, false);
      if (tail) {
        emitTail(c.body);
      } else {
        emitBlockInto(c.body, dst);
        ends.push_back(emitJump(Opcode::Goto, {}));
      }
      for (uint32_t f : fails) patch(f);
    }
    std::string where = (g_.fromPrelude ? std::string("<prelude>") : eb_.module().file()) + ":" + std::to_string(m->loc.line) + ":" + std::to_string(m->loc.col);
    emit(Opcode::Fatal, {eb_.string(std::string(m->complete ? "match" : "match?") + " at " + where +
                                    ": no clause matches the value")});
    for (uint32_t e : ends) patch(e);
    done(s, !tail);
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
  std::vector<uint32_t> code_;
  std::unordered_map<const Var*, uint32_t> uses_;
  std::unordered_map<const Var*, uint32_t> regOf_;
  std::vector<uint32_t> remaining_;
  std::vector<bool> heap_;
  std::vector<uint32_t> free_;
  uint32_t next_ = 0, frameSize_ = 0;
};

}  // namespace

std::shared_ptr<Executable> emitBytecode(const Module& lifted, const EmitOptions& opts) {
  ExecutableBuilder eb(lifted, opts);
  size_t i = 0;
  for (const auto& g : lifted.functions()) {
    eb.exe().functions[i++] = FunctionEmitter(eb, g).run();
  }
  auto exe = eb.take();
  exe->finalize();
  return exe;
}

}  // namespace kiln::compiler
