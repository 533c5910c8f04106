// The pattern file: composite patterns and supported calls as text (README "Partitioning").
//
//   # a comment
//   let conv = nn.conv2d(*, *)                       a named pattern: every mention is one node
//   composite dnnl.conv2d_relu = nn.relu(add?(conv, *))
//     | nn.relu(conv)                                a line beginning with | continues
//   supports dnnl = nn.relu(*) | add(*, *)
//   supports my_library = _(...) [attr match_key="my_library"]
//
// Patterns: `*` anything (an input), `const` a literal, `op(p, ...)` an operator
// call, `op?(p, ...)` that call or just p, `_(p, ...)` a call of a function,
// `@g(p, ...)` a call of the global @g, `...` more arguments, `(p, q)` a tuple,
// `p.0` a projection, `p | q` either, and after any pattern the constraints
// `[attr k=v, ...]`, `[type Tensor[(1, ?), float32]]` (exact), `[shape (1, ?)]`
// (`?`: any), `[dtype float32]`.
#include <cctype>
#include <map>

#include "compiler/partition/pattern.h"
#include "kiln/error.h"

namespace kiln::partition {

namespace {

class PatternParser {
 public:
  PatternParser(std::string_view text, const std::string& file, PatternTable& table)
      : s_(text), file_(file), t_(table), a_(*table.arena) {}

  void file() {
    for (skip(); pos_ < s_.size(); skip()) {
      SourceLoc start = here();
      std::string kw = word("'composite', 'supports' or 'let'");
      if (kw == "let") {
        SourceLoc nameAt = here();
        std::string name = word("a pattern name");
        if (named_.count(name)) fail(nameAt, "pattern '" + name + "' is defined twice");
        expect('=');
        named_[name] = alt();
      } else if (kw == "composite") {
        SourceLoc nameAt = here();
        std::string name = word("a composite name (library.name)");
        size_t dot = name.find('.');
        if (dot == 0 || dot == std::string::npos || dot + 1 == name.size())
          fail(nameAt, "a composite is named library.name (as dnnl.conv2d_relu), not '" + name + "'");
        expect('=');
        t_.composites.push_back({name, alt()});
      } else if (kw == "supports") {
        std::string lib = word("a library name");
        expect('=');
        t_.supports.push_back({lib, alt()});
      } else {
        fail(start, "expected 'composite', 'supports' or 'let', found '" + kw + "'");
      }
      skip(/*stopAtNewline=*/true);
      if (pos_ < s_.size() && s_[pos_] != '\n') fail(loc(), "expected the end of the line after the pattern");
    }
  }

 private:
  // Spaces and comments; newlines too unless `stopAtNewline`.
  void skip(bool stopAtNewline = false) {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') advance();
      } else if (c == '\n' ? !stopAtNewline : std::isspace(static_cast<unsigned char>(c))) {
        advance();
      } else {
        break;
      }
    }
  }
  // Inside a pattern: a line break ends it unless a bracket is open.
  void ws() { skip(depth_ == 0); }

  void advance() {
    if (s_[pos_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++pos_;
  }
  SourceLoc loc() const { return {line_, col_}; }
  // Where the next token starts.
  SourceLoc here() {
    ws();
    return loc();
  }
  [[noreturn]] void fail(SourceLoc at, const std::string& msg) const { throw Error(file_, at, msg); }

  bool at(char c) {
    ws();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  bool accept(char c) {
    if (!at(c)) return false;
    advance();
    return true;
  }
  void expect(char c) {
    if (!accept(c)) fail(loc(), std::string("expected '") + c + "'");
  }
  static bool wordChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; }
  std::string word(const char* what) {
    ws();
    size_t b = pos_;
    while (pos_ < s_.size() && wordChar(s_[pos_])) advance();
    if (b == pos_) fail(loc(), std::string("expected ") + what);
    return std::string(s_.substr(b, pos_ - b));
  }

  // A line that begins with `|` continues the alternatives above it.
  bool nextLineContinues() {
    size_t pos = pos_;
    uint32_t line = line_, col = col_;
    skip();
    if (pos_ < s_.size() && s_[pos_] == '|') return true;
    pos_ = pos, line_ = line, col_ = col;
    return false;
  }

  const PatternNode* alt() {
    const PatternNode* p = postfix();
    while (accept('|') || (nextLineContinues() && accept('|'))) p = a_.alt(p, postfix());
    return p;
  }

  const PatternNode* postfix() {
    const PatternNode* p = primary();
    for (;;) {
      if (at('[')) {
        advance();
        ++depth_;
        p = constraint(p);
        expect(']');
        --depth_;
      } else if (at('.')) {
        advance();
        SourceLoc i = here();
        std::string n = word("a tuple field index after '.'");
        if (n.find_first_not_of("0123456789") != std::string::npos || n.size() > 9) fail(i, "expected a tuple field index after '.'");
        p = a_.tupleGet(p, std::stoll(n));
      } else {
        return p;
      }
    }
  }

  const PatternNode* constraint(const PatternNode* p) {
    SourceLoc start = here();
    std::string kind = word("'attr', 'type', 'shape' or 'dtype'");
    if (kind == "attr") {
      ops::AttrMap attrs;
      do {
        std::string k = word("an attribute name");
        expect('=');
        attrs.set(k, value());
      } while (accept(','));
      return a_.hasAttrs(p, std::move(attrs));
    }
    if (kind == "dtype") return a_.hasDType(p, dtype());
    if (kind == "shape") return a_.hasType(p, std::nullopt, dims(), /*exact=*/false);
    if (kind == "type") {
      SourceLoc w = here();
      if (word("Tensor") != "Tensor") fail(w, "expected Tensor[(dims), dtype]");
      expect('[');
      std::vector<int64_t> d = dims();
      expect(',');
      DType t = dtype();
      expect(']');
      return a_.hasType(p, t, std::move(d), /*exact=*/true);
    }
    fail(start, "expected 'attr', 'type', 'shape' or 'dtype', found '" + kind + "'");
  }

  DType dtype() {
    SourceLoc start = here();
    std::string n = word("a dtype");
    std::optional<DType> t = parseDType(n);
    if (!t) fail(start, "'" + n + "' is not a dtype");
    return *t;
  }

  std::vector<int64_t> dims() {
    std::vector<int64_t> d;
    expect('(');
    ++depth_;
    while (!at(')')) {
      if (accept('?')) {
        d.push_back(ops::kAnyDim);
      } else {
        SourceLoc start = here();
        std::string n = word("a dimension or ?");
        if (n.find_first_not_of("0123456789") != std::string::npos || n.size() > 15) fail(start, "expected a dimension or ?");
        d.push_back(std::stoll(n));
      }
      if (!accept(',')) break;
    }
    expect(')');
    --depth_;
    return d;
  }

  ops::AttrValue value() {
    ws();
    SourceLoc start = here();
    if (accept('"')) {
      std::string v;
      while (pos_ < s_.size() && s_[pos_] != '"' && s_[pos_] != '\n') {
        v += s_[pos_];
        advance();
      }
      if (pos_ >= s_.size() || s_[pos_] != '"') fail(start, "unterminated string");
      advance();
      return ops::AttrValue::ofString(v);
    }
    if (accept('[')) {
      ++depth_;
      std::vector<ops::AttrValue> items;
      while (!at(']')) {
        items.push_back(value());
        if (!accept(',')) break;
      }
      expect(']');
      --depth_;
      return ops::AttrValue::ofList(std::move(items));
    }
    size_t b = pos_;
    if (pos_ < s_.size() && (s_[pos_] == '-' || s_[pos_] == '+')) advance();
    while (pos_ < s_.size() && (wordChar(s_[pos_]) || ((s_[pos_] == '-' || s_[pos_] == '+') && (s_[pos_ - 1] == 'e' || s_[pos_ - 1] == 'E'))))
      advance();
    std::string w(s_.substr(b, pos_ - b));
    if (w == "True" || w == "False") return ops::AttrValue::ofBool(w == "True");
    if (w == "None") return ops::AttrValue::none();
    if (!w.empty() && w.back() == 'f') w.pop_back();
    try {
      size_t used = 0;
      if (w.find_first_of(".eE") == std::string::npos) {
        int64_t i = std::stoll(w, &used);
        if (used == w.size()) return ops::AttrValue::ofInt(i);
      } else {
        double f = std::stod(w, &used);
        if (used == w.size()) return ops::AttrValue::ofFloat(f);
      }
    } catch (const std::exception&) {
    }
    fail(start, "expected an attribute value (a number, \"string\", True, False, None or [list])");
  }

  // Arguments of a call pattern after its '('; `rest` is set by a final `...`.
  std::vector<const PatternNode*> args(bool& rest) {
    ++depth_;
    std::vector<const PatternNode*> out;
    while (!at(')')) {
      if (s_.substr(pos_, 3) == "...") {
        for (int i = 0; i < 3; ++i) advance();
        rest = true;
        break;
      }
      out.push_back(alt());
      if (!accept(',')) break;
    }
    expect(')');
    --depth_;
    return out;
  }

  const PatternNode* primary() {
    ws();
    SourceLoc start = here();
    if (accept('*')) return a_.wildcard();
    if (accept('(')) {
      ++depth_;
      std::vector<const PatternNode*> fields{alt()};
      bool tuple = false;
      while (accept(',')) {
        tuple = true;
        if (at(')')) break;
        fields.push_back(alt());
      }
      expect(')');
      --depth_;
      return tuple ? a_.tuple(std::move(fields)) : fields[0];
    }
    if (accept('@')) {
      std::string g = word("a global name after '@'");
      expect('(');
      bool rest = false;
      std::vector<const PatternNode*> as = args(rest);
      return a_.call(a_.global(g), std::move(as), rest);
    }
    std::string n = word("a pattern");
    if (n == "const") return a_.constant();
    bool optional = accept('?');
    if (!at('(')) {
      if (optional) fail(start, "'" + n + "?' needs its operands: " + n + "?(pattern, ...)");
      auto it = named_.find(n);
      if (it == named_.end()) fail(start, "'" + n + "' is not a pattern defined with let (an operator needs its operands)");
      return it->second;
    }
    advance();
    bool rest = false;
    std::vector<const PatternNode*> as = args(rest);
    const PatternNode* callee = nullptr;
    if (n == "_") {
      callee = a_.anyCallee();
    } else {
      try {
        callee = a_.op(n);
      } catch (const Error& e) {
        fail(start, e.message());
      }
    }
    if (!optional) return a_.call(callee, std::move(as), rest);
    if (as.empty()) fail(start, "'" + n + "?(...)' needs an operand: the pattern matched when the call is absent");
    const PatternNode* inner = as[0];
    return a_.alt(a_.call(callee, std::move(as), rest), inner);
  }

  std::string_view s_;
  const std::string& file_;
  PatternTable& t_;
  PatternArena& a_;
  size_t pos_ = 0;
  uint32_t line_ = 1, col_ = 1;
  int depth_ = 0;
  std::map<std::string, const PatternNode*> named_;
};

}  // namespace

PatternTable parsePatternTable(std::string_view text, const std::string& file) {
  PatternTable t;
  PatternParser(text, file, t).file();
  return t;
}

}  // namespace kiln::partition
