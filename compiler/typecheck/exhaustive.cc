// The classic "usefulness" algorithm over a pattern matrix (Maranget), returning
// a witness of the first uncovered value.
#include "compiler/typecheck/exhaustive.h"

#include <set>
#include <vector>

namespace kiln::typecheck {

using namespace kiln::ir;

namespace {

using Row = std::vector<const Pattern*>;  // nullptr stands for a wildcard
using Witness = std::vector<std::string>;

bool isWild(const Pattern* p) { return !p || p->kind == PatternKind::Wildcard || p->kind == PatternKind::Var; }

class Checker {
 public:
  explicit Checker(Arena& a) : a_(a) {}

  std::optional<Witness> useful(const std::vector<Row>& rows, const std::vector<const Type*>& types) {
    if (types.empty()) return rows.empty() ? std::optional<Witness>(Witness{}) : std::nullopt;
    const Type* t = types[0];
    std::vector<const Type*> rest(types.begin() + 1, types.end());

    if (const AdtType* adt = asAdt(t)) {
      const TypeDef* def = adt->def;
      std::set<uint32_t> used;
      for (const Row& r : rows)
        if (!isWild(r[0])) used.insert(static_cast<const PatternCtor*>(r[0])->ctor->tag);
      if (used.size() == def->ctors.size() && !def->ctors.empty()) {
        for (const Constructor* c : def->ctors) {
          std::vector<const Type*> sub;
          for (const Type* f : c->fields) sub.push_back(substitute(a_, f, def->params, adt->args));
          size_t arity = sub.size();
          sub.insert(sub.end(), rest.begin(), rest.end());
          std::vector<Row> spec;
          for (const Row& r : rows) {
            Row n;
            if (isWild(r[0])) {
              n.assign(arity, nullptr);
            } else {
              auto* pc = static_cast<const PatternCtor*>(r[0]);
              if (pc->ctor != c) continue;
              n.assign(pc->args.begin(), pc->args.end());
            }
            n.insert(n.end(), r.begin() + 1, r.end());
            spec.push_back(std::move(n));
          }
          if (auto w = useful(spec, sub)) return build(std::string(c->name), arity, *w, true);
        }
        return std::nullopt;
      }
      auto w = useful(defaultRows(rows), rest);
      if (!w) return std::nullopt;
      std::string head = "_";
      for (const Constructor* c : def->ctors) {
        if (used.count(c->tag)) continue;
        head = std::string(c->name);
        if (!c->fields.empty()) {
          head += "(";
          for (size_t i = 0; i < c->fields.size(); ++i) head += i ? ", _" : "_";
          head += ")";
        }
        break;
      }
      w->insert(w->begin(), head);
      return w;
    }

    if (const TupleType* tt = asTuple(t)) {
      size_t arity = tt->fields.size();
      std::vector<const Type*> sub(tt->fields.begin(), tt->fields.end());
      sub.insert(sub.end(), rest.begin(), rest.end());
      std::vector<Row> expanded;
      for (const Row& r : rows) {
        Row n;
        if (isWild(r[0])) n.assign(arity, nullptr);
        else n.assign(static_cast<const PatternTuple*>(r[0])->fields.begin(), static_cast<const PatternTuple*>(r[0])->fields.end());
        n.insert(n.end(), r.begin() + 1, r.end());
        expanded.push_back(std::move(n));
      }
      if (auto w = useful(expanded, sub)) return build("", arity, *w, false);
      return std::nullopt;
    }

    auto w = useful(defaultRows(rows), rest);
    if (w) w->insert(w->begin(), "_");
    return w;
  }

 private:
  static std::vector<Row> defaultRows(const std::vector<Row>& rows) {
    std::vector<Row> out;
    for (const Row& r : rows)
      if (isWild(r[0])) out.emplace_back(r.begin() + 1, r.end());
    return out;
  }

  // Folds the first `arity` witness columns into one: `Name(a, b)` or `(a, b)`.
  static Witness build(const std::string& name, size_t arity, const Witness& w, bool ctor) {
    std::string s = name;
    if (!ctor || arity > 0) {
      s += "(";
      for (size_t i = 0; i < arity; ++i) s += (i ? ", " : "") + w[i];
      if (!ctor && arity == 1) s += ",";
      s += ")";
    }
    Witness out{s};
    out.insert(out.end(), w.begin() + static_cast<long>(arity), w.end());
    return out;
  }

  Arena& a_;
};

}  // namespace

std::optional<std::string> findUnmatched(std::span<const Clause> clauses, const Type* scrutinee, Arena& arena) {
  std::vector<Row> rows;
  for (const Clause& c : clauses) rows.push_back(Row{c.pattern});
  auto w = Checker(arena).useful(rows, {scrutinee});
  if (!w) return std::nullopt;
  return (*w)[0];
}

}  // namespace kiln::typecheck
