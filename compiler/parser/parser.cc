// The Relay text parser: declarations first (so names may be used before their
// definition), then bodies, by recursive descent with precedence climbing.
#include "compiler/parser/parser.h"

#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiler/parser/lexer.h"
#include "kernel_ir/op.h"
#include "ops/registry.h"

namespace kiln::parser {

using namespace kiln::ir;

namespace {

bool isUpper(std::string_view s) { return !s.empty() && s[0] >= 'A' && s[0] <= 'Z'; }
bool isNumber(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

std::string unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      ++i;
      out += s[i] == 'n' ? '\n' : s[i] == 't' ? '\t' : s[i];
    } else {
      out += s[i];
    }
  }
  return out;
}

// A dtype by its Relay spelling (int32, float32, ...) or TVM's alias `int`
// (int32); vmrun's short spellings (f32) are not Relay.
std::optional<DType> relayDType(std::string_view text) {
  auto d = parseDType(text);
  if (d && (dtypeName(*d) == text || text == "int")) return d;
  return std::nullopt;
}

class Parser {
 public:
  Parser(Module& m, std::string_view src, const std::string& file, bool fromPrelude)
      : m_(m), b_(m.arena()), file_(file), fromPrelude_(fromPrelude) {
    toks_ = lex(src, file);
  }

  void run() {
    declare();
    for (TypeDecl& d : typeDecls_) parseConstructors(d);
    for (TypeDecl& d : typeDecls_) m_.addTypeDef(d.def, fromPrelude_);
    pos_ = 0;
    while (!at(Tok::End)) {
      if (atIdent("type") || atIdent("extern")) {
        pos_ = typeEnd_.at(pos_);
      } else if (atIdent("def")) {
        parseDef();
      } else {
        fail("expected 'def' or 'type' at the top level");
      }
    }
  }

 private:
  // ---- token access ----
  const Token& tok() const { return toks_[pos_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  bool at(Tok k) const { return tok().kind == k; }
  bool atIdent(std::string_view s) const { return tok().kind == Tok::Ident && tok().text == s; }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (t.kind != Tok::End) ++pos_;
    return t;
  }
  bool accept(Tok k) {
    if (!at(k)) return false;
    ++pos_;
    return true;
  }
  [[noreturn]] void failAt(SourceLoc loc, const std::string& msg) const { throw Error(file_, loc, msg); }
  [[noreturn]] void fail(const std::string& expected) const {
    failAt(tok().loc, expected + ", but found " + describe(tok()));
  }
  const Token& expect(Tok k, const char* context = nullptr) {
    if (!at(k)) fail(std::string("expected ") + tokName(k) + (context ? std::string(" ") + context : ""));
    return next();
  }
  void expectIdent(std::string_view s) {
    if (!atIdent(s)) fail("expected '" + std::string(s) + "'");
    next();
  }

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxNesting)
        p.failAt(p.tok().loc, "expression nested too deeply (more than " + std::to_string(kMaxNesting) + " levels)");
    }
    ~DepthGuard() { --p.depth_; }
  };

  // ---- declarations ----
  struct TypeDecl {
    TypeDef* def;
    size_t bodyPos;  // token index of '{'
    std::vector<const TypeParam*> params;
  };

  // Skips a balanced bracket group starting at pos_ (which is an opening bracket).
  // A closing bracket of the wrong kind, or the end of the input, is reported
  // where it is, naming the bracket still open and where it was opened.
  void skipGroup() {
    struct Open {
      Tok kind;
      SourceLoc loc;
    };
    std::vector<Open> open;
    auto closer = [](Tok k) { return k == Tok::LParen ? Tok::RParen : k == Tok::LBracket ? Tok::RBracket : Tok::RBrace; };
    do {
      const Token& t = tok();
      Tok k = t.kind;
      bool closing = k == Tok::RParen || k == Tok::RBracket || k == Tok::RBrace;
      if (k == Tok::End || (closing && closer(open.back().kind) != k)) {
        const Open& o = open.back();
        fail(std::string("expected ") + tokName(closer(o.kind)) + " to close the " + tokName(o.kind) + " opened at " +
             std::to_string(o.loc.line) + ":" + std::to_string(o.loc.col));
      }
      if (k == Tok::LParen || k == Tok::LBracket || k == Tok::LBrace) open.push_back({k, t.loc});
      if (closing) open.pop_back();
      next();
    } while (!open.empty());
  }

  void declare() {
    for (const auto& e : m_.typeDefs()) {
      types_[e.def->name] = e.def;
      for (const Constructor* c : e.def->ctors) ctors_[c->name] = c;
    }
    for (const auto& f : m_.functions()) globals_[f.var->name] = f.var;
    std::unordered_set<std::string_view> declaredHere;
    std::unordered_set<std::string_view> typesHere;
    while (!at(Tok::End)) {
      if (atIdent("type") || atIdent("extern")) {
        size_t start = pos_;
        bool external = atIdent("extern");
        SourceLoc loc = next().loc;
        if (external) expectIdent("type");
        const Token& name = expect(Tok::Ident, "(a type name) after 'type'");
        checkDeclaredName(name, "a type");
        if (!typesHere.insert(name.text).second) failAt(name.loc, "type '" + std::string(name.text) + "' is defined twice");
        TypeDecl d;
        d.def = b_.arena().make<TypeDef>();
        d.def->name = b_.arena().str(name.text);
        d.def->loc = loc;
        d.def->external = external;
        if (at(Tok::LBracket)) d.params = parseTypeParamList();
        d.def->params = b_.arena().copy(d.params);
        if (external) {
          // TVM's `extern type Storage`: an opaque type whose values come from outside.
          if (at(Tok::LBrace)) fail("an extern type has no constructors; expected the next definition");
          d.bodyPos = SIZE_MAX;
        } else {
          if (!at(Tok::LBrace)) fail("expected '{' to begin the constructors of type '" + std::string(name.text) + "'");
          d.bodyPos = pos_;
          skipGroup();
        }
        typeEnd_[start] = pos_;
        types_[d.def->name] = d.def;
        typeDecls_.push_back(d);
      } else if (atIdent("def")) {
        next();
        const Token& name = expect(Tok::Global, "(the function's name) after 'def'");
        if (!declaredHere.insert(name.text).second)
          failAt(name.loc, "global function @" + std::string(name.text) + " is defined twice");
        auto it = globals_.find(name.text);
        if (it == globals_.end()) globals_.emplace(b_.arena().str(name.text), b_.globalVar(name.text, name.loc));
        while (!at(Tok::End) && !at(Tok::LBrace)) next();
        if (at(Tok::LBrace)) skipGroup();
      } else if (at(Tok::End)) {
        break;
      } else {
        fail("expected 'def' or 'type' at the top level");
      }
    }
  }

  std::vector<const TypeParam*> parseTypeParamList() {
    expect(Tok::LBracket);
    std::vector<const TypeParam*> out;
    do {
      const Token& n = expect(Tok::Ident, "(a type parameter)");
      checkDeclaredName(n, "a type parameter");
      for (const TypeParam* p : out)
        if (p->name == n.text) failAt(n.loc, "type parameter '" + std::string(n.text) + "' is declared twice");
      auto* p = b_.arena().make<TypeParam>();
      p->kind = TypeKind::Param;
      p->name = b_.arena().str(n.text);
      out.push_back(p);
    } while (accept(Tok::Comma));
    expect(Tok::RBracket, "after the type parameters");
    return out;
  }

  void parseConstructors(TypeDecl& d) {
    if (d.def->external) return;
    pos_ = d.bodyPos;
    size_t mark = pushTypeParams(d.params);
    SourceLoc open = expect(Tok::LBrace).loc;
    std::vector<const Constructor*> ctors;
    while (!at(Tok::RBrace)) {
      const Token& n = expect(Tok::Ident, "(a constructor name)");
      checkDeclaredName(n, "a constructor");
      if (ctorsHere_.count(n.text)) failAt(n.loc, "constructor '" + std::string(n.text) + "' is defined twice");
      auto* c = b_.arena().make<Constructor>();
      c->name = b_.arena().str(n.text);
      c->owner = d.def;
      c->loc = n.loc;
      c->tag = static_cast<uint32_t>(ctors.size());
      std::vector<const Type*> fields;
      if (accept(Tok::LParen)) {
        if (!at(Tok::RParen)) {
          do fields.push_back(parseType());
          while (accept(Tok::Comma));
        }
        expect(Tok::RParen, "after the constructor's fields");
      }
      c->fields = b_.arena().copy(fields);
      ctors.push_back(c);
      ctorsHere_.insert(c->name);
      ctors_[c->name] = c;
      if (!accept(Tok::Comma)) break;
    }
    expect(Tok::RBrace, "to end the constructor list");
    // A value of a type without constructors could never be made or matched.
    if (ctors.empty()) failAt(open, "type '" + std::string(d.def->name) + "' has no constructors");
    d.def->ctors = b_.arena().copy(ctors);
    popTypeParams(mark);
  }

  // Type, type parameter and constructor names may be any identifier (TVM's
  // `type nat { zero, succ(nat) }`) except one that already means something where
  // the name is used: a dtype, a keyword, or `Tensor`.
  void checkDeclaredName(const Token& n, const char* what) const {
    static const std::unordered_set<std::string_view> reserved = {
        "Tensor", "fn", "let", "if", "else", "match", "def", "type", "extern", "free_var",
        "True", "False", "_", "ref", "ref_read", "ref_write"};
    if (reserved.count(n.text) || relayDType(n.text))
      failAt(n.loc, "'" + std::string(n.text) + "' cannot name " + what + ": it already means something in Relay");
  }

  // ---- scopes ----
  void bind(Var* v) {
    vars_[v->name].push_back(v);
    undo_.push_back(v->name);
  }
  size_t mark() const { return undo_.size(); }
  void popTo(size_t m) {
    while (undo_.size() > m) {
      auto it = vars_.find(undo_.back());
      it->second.pop_back();
      undo_.pop_back();
    }
  }
  size_t pushTypeParams(const std::vector<const TypeParam*>& ps) {
    size_t m = typeParams_.size();
    typeParams_.insert(typeParams_.end(), ps.begin(), ps.end());
    return m;
  }
  void popTypeParams(size_t m) { typeParams_.resize(m); }

  // ---- types ----
  // An annotation, or TVM's type hole `_`: left to inference (null).
  const Type* parseAnnotation() {
    if (at(Tok::Ident) && tok().text == "_") {
      next();
      return nullptr;
    }
    return parseType();
  }

  const Type* parseType() {
    DepthGuard g(*this);
    const Token& t = tok();
    if (t.kind == Tok::LParen) {
      next();
      std::vector<const Type*> fields;
      bool comma = false;
      if (!at(Tok::RParen)) {
        fields.push_back(parseType());
        while (accept(Tok::Comma)) {
          comma = true;
          if (at(Tok::RParen)) break;
          fields.push_back(parseType());
        }
      }
      expect(Tok::RParen, "to close the tuple type");
      if (fields.size() == 1 && !comma) return fields[0];
      return tupleType(b_.arena(), fields);
    }
    if (t.kind != Tok::Ident) fail("expected a type");
    if (t.text == "Tensor") {
      next();
      expect(Tok::LBracket, "after 'Tensor'");
      expect(Tok::LParen, "to begin the tensor's shape");
      std::vector<int64_t> dims;
      while (!at(Tok::RParen)) {
        if (accept(Tok::Question)) {
          dims.push_back(kAnyDim);
        } else {
          const Token& d = expect(Tok::Int, "(a dimension or '?')");
          if (d.intValue < 0) failAt(d.loc, "dimensions must not be negative");
          dims.push_back(d.intValue);
        }
        if (!accept(Tok::Comma)) break;
      }
      if (!ops::shapeInBounds(dims)) failAt(t.loc, "tensor type has more than 2^40 elements");
      expect(Tok::RParen, "to end the tensor's shape");
      expect(Tok::Comma, "between the tensor's shape and dtype");
      const Token& dt = expect(Tok::Ident, "(a dtype)");
      auto dtype = relayDType(dt.text);
      if (!dtype) failAt(dt.loc, "unknown dtype '" + std::string(dt.text) + "'");
      expect(Tok::RBracket, "to end the tensor type");
      return tensorType(b_.arena(), *dtype, dims);
    }
    if (t.text == "ref" && peek().kind == Tok::LParen) {
      // The type of reference cells, printed `ref(T)` as TVM prints RefType.
      next();
      next();
      const Type* content = parseType();
      expect(Tok::RParen, "to end the reference type");
      return refType(b_.arena(), content);
    }
    if (t.text == "fn") {
      next();
      std::vector<const TypeParam*> tps;
      if (at(Tok::LBracket)) tps = parseTypeParamList();
      size_t m = pushTypeParams(tps);
      expect(Tok::LParen, "after 'fn' in a function type");
      std::vector<const Type*> params;
      if (!at(Tok::RParen)) {
        do params.push_back(parseType());
        while (accept(Tok::Comma));
      }
      expect(Tok::RParen, "to end the parameter types");
      expect(Tok::Arrow, "before the function type's result");
      const Type* r = parseType();
      popTypeParams(m);
      return funcType(b_.arena(), params, r, tps);
    }
    if (auto dtype = relayDType(t.text)) {
      next();
      return scalarType(b_.arena(), *dtype);
    }
    if (t.kind == Tok::Ident) {
      for (auto it = typeParams_.rbegin(); it != typeParams_.rend(); ++it) {
        if ((*it)->name == t.text) {
          next();
          return *it;
        }
      }
      auto it = types_.find(t.text);
      if (it == types_.end()) fail("expected a type");
      const TypeDef* def = it->second;
      next();
      std::vector<const Type*> args;
      if (accept(Tok::LBracket)) {
        do args.push_back(parseType());
        while (accept(Tok::Comma));
        expect(Tok::RBracket, "to end the type arguments");
      }
      if (args.size() != def->params.size())
        failAt(t.loc, "type '" + std::string(def->name) + "' takes " + std::to_string(def->params.size()) +
                          " type argument(s), but " + std::to_string(args.size()) + " were given");
      return adtType(b_.arena(), def, args);
    }
    fail("expected a type");
  }

  // ---- definitions ----
  void parseDef() {
    SourceLoc loc = next().loc;  // 'def'
    const Token& name = expect(Tok::Global);
    const GlobalVar* gv = globals_.at(name.text);
    std::vector<const TypeParam*> tps;
    if (at(Tok::LBracket)) tps = parseTypeParamList();
    const Function* fn = parseFunctionRest(tps, loc, /*isDef=*/true);
    m_.addFunction(gv, fn, fromPrelude_);
  }

  // After `def @name [TPs]` or `fn [TPs]`: `(params) [-> T] { body }`.
  const Function* parseFunctionRest(const std::vector<const TypeParam*>& tps, SourceLoc loc, bool isDef) {
    size_t tm = pushTypeParams(tps);
    size_t vm = mark();
    graphNames_.emplace_back();
    expect(Tok::LParen, isDef ? "to begin the parameter list" : "after 'fn'");
    std::vector<const Var*> params;
    ops::AttrMap* attrs = nullptr;
    if (!at(Tok::RParen)) {
      do {
        // TVM's function attributes follow the parameters: `Primitive=1`, `Compiler="dnnl"`.
        if (at(Tok::Ident) && peek().kind == Tok::Assign) {
          const Token& name = next();
          next();
          if (!attrs) attrs = b_.arena().own<ops::AttrMap>();
          if (attrs->find(name.text)) failAt(name.loc, "attribute '" + std::string(name.text) + "' is given twice");
          attrs->set(std::string(name.text), parseAttrValue());
          continue;
        }
        if (attrs) fail("expected an attribute (name=value) after the first function attribute");
        const Token& p = expect(Tok::Local, "(a parameter)");
        for (const Var* q : params)
          if (q->name == p.text) failAt(p.loc, "parameter %" + std::string(p.text) + " is declared twice");
        const Type* ann = accept(Tok::Colon) ? parseAnnotation() : nullptr;
        Var* v = b_.var(p.text, ann, p.loc);
        params.push_back(v);
      } while (accept(Tok::Comma));
    }
    expect(Tok::RParen, "to end the parameter list");
    for (const Var* v : params) bind(const_cast<Var*>(v));
    const Type* ret = accept(Tok::Arrow) ? parseAnnotation() : nullptr;
    const Expr* body = parseBlock("the function body");
    graphNames_.pop_back();
    popTo(vm);
    popTypeParams(tm);
    Function* fn = b_.function(tps, params, ret, body, loc);
    fn->attrs = attrs;
    // Primitive=1: a fused kernel as written (the fusion pass leaves it whole),
    // unless it is a function made for a library (`Compiler="..."`, by
    // partitioning): the library, or Kiln as an ordinary function, runs that.
    if (attrs && attrs->find("Primitive") && !attrs->find("Compiler")) {
      const ops::AttrValue* v = attrs->find("Primitive");
      fn->primitive = v->kind == ops::AttrValue::Kind::Int && v->i != 0;
    }
    return fn;
  }

  const Expr* parseBlock(const char* what) {
    if (!at(Tok::LBrace)) fail(std::string("expected '{' to begin ") + what);
    next();
    const Expr* e = parseExpr(/*sequences=*/true);
    if (!at(Tok::RBrace)) fail(std::string("expected '}' to end ") + what);
    next();
    return e;
  }

  // ---- expressions ----
  bool atBinding() const {
    if (atIdent("let")) return true;
    return at(Tok::Local) && peek().kind == Tok::Assign;
  }

  // An expression; with `sequences` (a block's contents: a function body, an
  // arm), also TVM's `e1; e2`. Elsewhere (a let's value, an argument) the `;`
  // after an expression belongs to the enclosing let.
  const Expr* parseExpr(bool sequences = false) {
    DepthGuard g(*this);
    if (!atBinding()) {
      const Expr* e = parseBinary(1);
      if (!sequences || !at(Tok::Semi)) return e;
      return bindingChain(e, sequences);
    }
    return bindingChain(nullptr, sequences);
  }

  // A let chain: parsed with a loop so 10^5 bindings cost no stack. `first`, when
  // given, is an expression already parsed and followed by `;` (a sequence).
  const Expr* bindingChain(const Expr* first, bool sequences) {
    struct Binding {
      const Var* var;
      const Expr* value;
      SourceLoc loc;
      bool graph;
    };
    std::vector<Binding> chain;
    size_t vm = mark();
    // TVM's sequencing `e1; e2`: e1 is evaluated and its value dropped (bound to %_).
    auto sequence = [&](const Expr* e) {
      SourceLoc semi = next().loc;
      chain.push_back({b_.var("_", nullptr, semi), e, semi, false});
    };
    if (first) sequence(first);
    const Expr* body = nullptr;
    while (!body) {
      if (!atBinding()) {
        const Expr* e = parseBinary(1);
        if (sequences && at(Tok::Semi)) sequence(e);
        else body = e;
        continue;
      }
      SourceLoc loc = tok().loc;
      bool graph = !atIdent("let");
      if (!graph) next();
      const Token& name = expect(Tok::Local, "(the bound variable) after 'let'");
      if (graph) {
        if (!isNumber(name.text))
          failAt(name.loc, "a binding without 'let' must be numbered (%0 = ...); write 'let %" +
                               std::string(name.text) + " = ...'");
        if (!graphNames_.empty() && !graphNames_.back().insert(name.text).second)
          failAt(name.loc, "%" + std::string(name.text) + " is bound twice in this function");
      }
      const Type* ann = !graph && accept(Tok::Colon) ? parseAnnotation() : nullptr;
      expect(Tok::Assign, "in the binding");
      Var* v = b_.var(name.text, ann, name.loc);
      // A let-bound function may call itself by its own name.
      bool recursive = atIdent("fn");
      if (recursive) bind(v);
      const Expr* value = parseExpr();
      expect(Tok::Semi, "after the bound value");
      if (!recursive) bind(v);
      chain.push_back({v, value, loc, graph});
    }
    popTo(vm);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) body = b_.let(it->var, it->value, body, it->graph, it->loc);
    return body;
  }

  static int precedence(Tok k) {
    switch (k) {
      case Tok::Eq: case Tok::Ne: case Tok::Lt: case Tok::Le: case Tok::Gt: case Tok::Ge: return 1;
      case Tok::Plus: case Tok::Minus: return 2;
      case Tok::Star: case Tok::Slash: return 3;
      default: return 0;
    }
  }
  static const char* binaryOpName(Tok k) {
    switch (k) {
      case Tok::Eq: return "equal";
      case Tok::Ne: return "not_equal";
      case Tok::Lt: return "less";
      case Tok::Le: return "less_equal";
      case Tok::Gt: return "greater";
      case Tok::Ge: return "greater_equal";
      case Tok::Plus: return "add";
      case Tok::Minus: return "subtract";
      case Tok::Star: return "multiply";
      case Tok::Slash: return "divide";
      default: return "";
    }
  }

  const Expr* opCall(const char* name, std::vector<const Expr*> args, SourceLoc loc) {
    return b_.call(b_.op(ops::findOp(name), loc), args, nullptr, loc);
  }

  // Precedence climbing; every level is left-associative.
  const Expr* parseBinary(int minPrec) {
    const Expr* lhs = parseUnary();
    for (;;) {
      int p = precedence(tok().kind);
      if (p == 0 || p < minPrec) break;
      const Token& op = next();
      DepthGuard g(*this);
      const Expr* rhs = parseBinary(p + 1);
      lhs = opCall(binaryOpName(op.kind), {lhs, rhs}, op.loc);
    }
    return lhs;
  }

  const Expr* parseUnary() {
    if (at(Tok::Minus)) {
      DepthGuard g(*this);
      SourceLoc loc = next().loc;
      if ((at(Tok::Int) || at(Tok::Float)) && !postfixFollows()) {
        const Token& lit = next();
        return literal(lit, true, loc);
      }
      return opCall("negative", {parseUnary()}, loc);
    }
    return parsePostfix();
  }

  // True when the literal after a '-' is followed by a call or field access, so
  // that `-x.0` style postfix binds tighter than negation.
  bool postfixFollows() const { return peek().kind == Tok::Dot || peek().kind == Tok::LParen; }

  const Expr* literal(const Token& t, bool negate, SourceLoc loc) {
    if (isFloat(t.litType)) {
      double v = t.kind == Tok::Float ? t.floatValue : static_cast<double>(t.intValue);
      if (negate) v = -v;
      // A float32 (or float16, computed in float32) literal holds float32's value.
      if (t.litType != DType::Float64) v = static_cast<double>(static_cast<float>(v));
      return b_.floatConst(t.litType, v, loc);
    }
    if (negate && isUnsignedInt(t.litType))
      failAt(loc, "a " + std::string(dtypeName(t.litType)) + " literal cannot be negative");
    int64_t v = negate ? -t.intValue : t.intValue;
    if (!intFits(t.litType, v)) {
      std::string text = t.text.size() > 40 ? std::string(t.text.substr(0, 40)) + "..." : std::string(t.text);
      failAt(loc, "the literal '" + std::string(negate ? "-" : "") + text + "' does not fit " + std::string(dtypeName(t.litType)));
    }
    return b_.intConst(t.litType, v, loc);
  }

  const Expr* parsePostfix() {
    const Expr* e = parsePrimary();
    for (;;) {
      if (at(Tok::LParen)) {
        e = parseCall(e);
      } else if (at(Tok::Dot)) {
        SourceLoc loc = next().loc;
        const Token& idx = expect(Tok::Int, "(a tuple field index) after '.'");
        e = b_.tupleGet(e, static_cast<uint32_t>(idx.intValue), loc);
      } else {
        return e;
      }
    }
  }

  const Expr* parseCall(const Expr* callee) {
    SourceLoc loc = next().loc;  // '('
    std::vector<const Expr*> args;
    ops::AttrMap* attrs = nullptr;
    bool isOp = callee->kind == ExprKind::Op;
    SourceLoc firstAttr{};
    while (!at(Tok::RParen)) {
      if (at(Tok::Ident) && peek().kind == Tok::Assign) {
        const Token& name = next();
        if (!attrs) firstAttr = name.loc;
        next();
        if (!attrs) attrs = b_.arena().own<ops::AttrMap>();
        if (attrs->find(name.text)) failAt(name.loc, "attribute '" + std::string(name.text) + "' is given twice");
        attrs->set(std::string(name.text), parseAttrValue());
      } else {
        if (attrs) fail("expected an attribute (name=value) after the first attribute");
        args.push_back(parseExpr());
      }
      if (!accept(Tok::Comma)) break;
    }
    expect(Tok::RParen, "to end the call's arguments");
    // A call of a function may carry attributes as TVM writes them, typed by
    // `attrs_type_key="..."`; they are kept and printed back, and mean nothing here.
    if (!isOp && attrs && !attrs->find("attrs_type_key"))
      failAt(firstAttr, "attributes on a call of a function need attrs_type_key=\"...\" (as TVM writes them); only operators take bare attributes");
    if (isOp) {
      const ops::OpDef* op = static_cast<const OpRef*>(callee)->op;
      if (static_cast<int>(args.size()) != op->numInputs)
        failAt(callee->loc, "operator '" + op->name + "' takes " + std::to_string(op->numInputs) +
                                " operand(s), but " + std::to_string(args.size()) + " were given");
    }
    return b_.call(callee, args, attrs, callee->kind == ExprKind::Op ? callee->loc : loc);
  }

  ops::AttrValue parseAttrValue() {
    DepthGuard g(*this);
    const Token& t = tok();
    bool neg = false;
    if (t.kind == Tok::Minus) {
      next();
      neg = true;
      if (!at(Tok::Int) && !at(Tok::Float)) fail("expected a number after '-'");
    }
    const Token& v = next();
    switch (v.kind) {
      case Tok::Int:
        if (isFloat(v.litType)) return ops::AttrValue::ofFloat(neg ? -double(v.intValue) : double(v.intValue));
        return ops::AttrValue::ofInt(neg ? -v.intValue : v.intValue);
      case Tok::Float: return ops::AttrValue::ofFloat(neg ? -v.floatValue : v.floatValue);
      case Tok::String: return ops::AttrValue::ofString(unescape(v.text));
      case Tok::Ident:
        if (v.text == "True") return ops::AttrValue::ofBool(true);
        if (v.text == "False") return ops::AttrValue::ofBool(false);
        if (v.text == "None") return ops::AttrValue::none();
        break;
      case Tok::LBracket: {
        std::vector<ops::AttrValue> items;
        while (!at(Tok::RBracket)) {
          items.push_back(parseAttrValue());
          if (!accept(Tok::Comma)) break;
        }
        expect(Tok::RBracket, "to end the list");
        return ops::AttrValue::ofList(std::move(items));
      }
      default: break;
    }
    failAt(v.loc, "expected an attribute value (number, string, True, False, None or list), but found " + describe(v));
  }

  const Expr* parsePrimary() {
    const Token& t = tok();
    switch (t.kind) {
      case Tok::LParen: {
        DepthGuard g(*this);
        next();
        std::vector<const Expr*> fields;
        bool comma = false;
        if (!at(Tok::RParen)) {
          fields.push_back(parseExpr());
          while (accept(Tok::Comma)) {
            comma = true;
            if (at(Tok::RParen)) break;
            fields.push_back(parseExpr());
          }
        }
        expect(Tok::RParen, fields.size() == 1 && !comma ? "to close the parenthesis" : "to end the tuple");
        if (fields.size() == 1 && !comma) return fields[0];
        return b_.tuple(fields, t.loc);
      }
      case Tok::Local: {
        next();
        auto it = vars_.find(t.text);
        if (it == vars_.end() || it->second.empty()) failAt(t.loc, "unknown variable %" + std::string(t.text));
        return it->second.back();
      }
      case Tok::Global: {
        next();
        auto it = globals_.find(t.text);
        if (it == globals_.end()) failAt(t.loc, "undefined global function @" + std::string(t.text));
        return it->second;
      }
      case Tok::Int:
      case Tok::Float: next(); return literal(t, false, t.loc);
      case Tok::Ident: return parseKeywordOrName();
      default: fail("expected an expression");
    }
  }

  const Expr* parseKeywordOrName() {
    const Token& t = tok();
    if (t.text == "if") return parseIf();
    if (t.text == "match") return parseMatch();
    if (t.text == "fn") {
      DepthGuard g(*this);
      SourceLoc loc = next().loc;
      std::vector<const TypeParam*> tps;
      if (at(Tok::LBracket)) tps = parseTypeParamList();
      return parseFunctionRest(tps, loc, false);
    }
    if (t.text == "True" || t.text == "False") {
      next();
      return b_.intConst(DType::Bool, t.text == "True" ? 1 : 0, t.loc);
    }
    if (t.text == "let" || t.text == "def" || t.text == "type" || t.text == "else") fail("expected an expression");
    if (t.text == "ref" || t.text == "ref_read" || t.text == "ref_write") return parseRefOp();
    next();
    // Constructors by name, whatever their case (TVM's `nat` has `zero` and
    // `succ`); a capitalized name that is no constructor is a typo of one.
    if (auto it = ctors_.find(t.text); it != ctors_.end()) return b_.ctor(it->second, t.loc);
    if (isUpper(t.text)) failAt(t.loc, "unknown constructor '" + std::string(t.text) + "'");
    const ops::OpDef* op = ops::findOp(t.text);
    if (!op) failAt(t.loc, "unknown operator '" + std::string(t.text) + "'");
    if (!at(Tok::LParen)) fail("expected '(' after the operator '" + std::string(t.text) + "'");
    return b_.op(op, t.loc);
  }

  // `ref(v)`, `ref_read(r)`, `ref_write(r, v)`: special forms, as in TVM.
  const Expr* parseRefOp() {
    DepthGuard g(*this);
    const Token& t = next();
    RefOpKind op = t.text == "ref" ? RefOpKind::Create : t.text == "ref_read" ? RefOpKind::Read : RefOpKind::Write;
    std::string what(t.text);
    expect(Tok::LParen, ("after '" + what + "'").c_str());
    std::vector<const Expr*> args{parseExpr()};
    if (op == RefOpKind::Write) {
      expect(Tok::Comma, "between the reference and the value of 'ref_write'");
      args.push_back(parseExpr());
    }
    expect(Tok::RParen, ("to end '" + what + "'").c_str());
    return b_.refOp(op, args, t.loc);
  }

  const Expr* parseIf() {
    DepthGuard g(*this);
    SourceLoc loc = next().loc;
    expect(Tok::LParen, "after 'if'");
    const Expr* c = parseExpr();
    expect(Tok::RParen, "after the condition");
    const Expr* th = parseBlock("the 'if' branch");
    expectIdent("else");
    const Expr* el = at(Tok::Ident) && tok().text == "if" ? parseIf() : parseBlock("the 'else' branch");
    return b_.ifElse(c, th, el, loc);
  }

  const Expr* parseMatch() {
    DepthGuard g(*this);
    SourceLoc loc = next().loc;
    bool complete = !accept(Tok::Question);
    // The scrutinee is an atomic expression, as in TVM: `match %x {`, `match (%x) {`;
    // `match (%a, %b)` matches the tuple (%a, %b).
    if (at(Tok::LBrace)) fail("expected the value to match after 'match'");
    const Expr* s = parsePrimary();
    expect(Tok::LBrace, "to begin the match clauses");
    std::vector<Clause> clauses;
    while (!at(Tok::RBrace)) {
      size_t vm = mark();
      const Pattern* p = parsePattern();
      expect(Tok::FatArrow, "after the pattern");
      const Expr* body = at(Tok::LBrace) ? parseBlock("the clause body") : parseExpr();
      popTo(vm);
      clauses.push_back({p, body});
      if (!accept(Tok::Comma)) break;
    }
    expect(Tok::RBrace, "to end the match clauses");
    if (clauses.empty()) failAt(loc, "a match needs at least one clause");
    return b_.match(s, clauses, complete, loc);
  }

  const Pattern* parsePattern() {
    DepthGuard g(*this);
    const Token& t = tok();
    if (t.kind == Tok::Ident && t.text == "_") {
      next();
      return b_.wildcard(t.loc);
    }
    if (t.kind == Tok::Local) {
      next();
      const Type* ann = accept(Tok::Colon) ? parseAnnotation() : nullptr;
      Var* v = b_.var(t.text, ann, t.loc);
      bind(v);
      return b_.patternVar(v, t.loc);
    }
    if (t.kind == Tok::LParen) {
      next();
      std::vector<const Pattern*> fields;
      while (!at(Tok::RParen)) {
        fields.push_back(parsePattern());
        if (!accept(Tok::Comma)) break;
      }
      expect(Tok::RParen, "to end the tuple pattern");
      return b_.patternTuple(fields, t.loc);
    }
    if (t.kind == Tok::Ident && (isUpper(t.text) || ctors_.count(t.text))) {
      next();
      auto it = ctors_.find(t.text);
      if (it == ctors_.end()) failAt(t.loc, "unknown constructor '" + std::string(t.text) + "'");
      const Constructor* c = it->second;
      std::vector<const Pattern*> args;
      if (accept(Tok::LParen)) {
        while (!at(Tok::RParen)) {
          args.push_back(parsePattern());
          if (!accept(Tok::Comma)) break;
        }
        expect(Tok::RParen, "to end the constructor pattern");
      }
      if (args.size() != c->fields.size())
        failAt(t.loc, "constructor " + std::string(c->name) + " has " + std::to_string(c->fields.size()) +
                          " field(s), but the pattern gives " + std::to_string(args.size()));
      return b_.patternCtor(c, args, t.loc);
    }
    fail("expected a pattern ('_', a variable, a constructor or a tuple)");
  }

  Module& m_;
  Builder b_;
  const std::string& file_;
  bool fromPrelude_;
  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;

  std::vector<TypeDecl> typeDecls_;
  std::unordered_map<size_t, size_t> typeEnd_;
  std::unordered_map<std::string_view, const TypeDef*> types_;
  std::unordered_map<std::string_view, const Constructor*> ctors_;
  std::unordered_set<std::string_view> ctorsHere_;
  std::unordered_map<std::string_view, const GlobalVar*> globals_;

  std::unordered_map<std::string_view, std::vector<Var*>> vars_;
  std::vector<std::string_view> undo_;
  std::vector<const TypeParam*> typeParams_;
  std::vector<std::unordered_set<std::string_view>> graphNames_;
};

}  // namespace

void parseInto(Module& module, std::string_view source, const std::string& file, bool fromPrelude) {
  Parser p(module, source, file, fromPrelude);
  p.run();
}

}  // namespace kiln::parser
