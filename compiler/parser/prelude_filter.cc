// Prelude filtering: definitions by name, their references, blanking in place.
#include "compiler/parser/prelude_filter.h"

#include <cctype>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiler/parser/lexer.h"
#include "compiler/parser/prelude.h"

namespace kiln::parser {

namespace {

bool upper(std::string_view s) { return !s.empty() && std::isupper(static_cast<unsigned char>(s[0])); }

// A top-level definition: `def @name ...` or `type Name ...`, its tokens [begin, end).
struct Definition {
  std::string name;  // "@f" for a global, "T" for a type
  size_t begin, end;
  std::vector<std::string> refs;   // globals ("@g") and capitalized names (types, constructors)
  std::vector<std::string> ctors;  // a type's constructors
};

std::vector<Definition> definitions(const std::vector<Token>& toks) {
  std::vector<Definition> out;
  int depth = 0;
  for (size_t i = 0; i < toks.size() && toks[i].kind != Tok::End; ++i) {
    const Token& t = toks[i];
    if (depth == 0 && t.kind == Tok::Ident && (t.text == "def" || t.text == "type") && i + 1 < toks.size()) {
      const Token& n = toks[i + 1];
      if (!out.empty()) out.back().end = i;
      Definition d;
      d.name = t.text == "def" ? "@" + std::string(n.text) : std::string(n.text);
      d.begin = i;
      d.end = toks.size() - 1;
      out.push_back(std::move(d));
    }
    if (t.kind == Tok::LParen || t.kind == Tok::LBracket || t.kind == Tok::LBrace) ++depth;
    if (t.kind == Tok::RParen || t.kind == Tok::RBracket || t.kind == Tok::RBrace) --depth;
  }
  for (Definition& d : out) {
    bool isType = d.name[0] != '@';
    int inner = 0, nested = 0;  // braces; parentheses and brackets
    for (size_t i = d.begin + 2; i < d.end; ++i) {
      const Token& t = toks[i];
      if (t.kind == Tok::LBrace) ++inner;
      if (t.kind == Tok::RBrace) --inner;
      if (t.kind == Tok::LParen || t.kind == Tok::LBracket) ++nested;
      if (t.kind == Tok::RParen || t.kind == Tok::RBracket) --nested;
      if (t.kind == Tok::Global) d.refs.push_back("@" + std::string(t.text));
      if (t.kind == Tok::Ident && upper(t.text)) {
        Tok before = toks[i - 1].kind;
        if (isType && inner == 1 && nested == 0 && (before == Tok::LBrace || before == Tok::Comma)) d.ctors.emplace_back(t.text);
        else d.refs.emplace_back(t.text);
      }
    }
  }
  return out;
}

}  // namespace

std::string preludeFor(std::string_view program) {
  std::string_view prelude = preludeSource();
  std::unordered_set<std::string> defined;
  try {
    std::vector<Token> toks = lex(program, "<program>");
    for (const Definition& d : definitions(toks)) defined.insert(d.name);
  } catch (const Error&) {
    return std::string(prelude);
  }
  std::vector<Token> toks = lex(prelude, "<prelude>");
  std::vector<Definition> defs = definitions(toks);
  std::unordered_map<std::string, std::string> ctorOwner;
  for (const Definition& d : defs)
    for (const std::string& c : d.ctors) ctorOwner[c] = d.name;
  // Left out: what the program defines, then whatever uses something left out.
  std::unordered_set<std::string> out;
  for (const Definition& d : defs)
    if (defined.count(d.name)) out.insert(d.name);
  if (out.empty()) return std::string(prelude);
  for (bool changed = true; changed;) {
    changed = false;
    for (const Definition& d : defs) {
      if (out.count(d.name)) continue;
      for (const std::string& r : d.refs) {
        auto owner = ctorOwner.find(r);
        if (out.count(r) || (owner != ctorOwner.end() && owner->second != d.name && out.count(owner->second))) {
          out.insert(d.name);
          changed = true;
          break;
        }
      }
    }
  }
  // Blank the left-out definitions, keeping newlines.
  std::vector<size_t> lineStart{0};
  for (size_t i = 0; i < prelude.size(); ++i)
    if (prelude[i] == '\n') lineStart.push_back(i + 1);
  auto offset = [&](const Token& t) {
    if (t.kind == Tok::End) return prelude.size();
    return lineStart[t.loc.line - 1] + t.loc.col - 1;
  };
  std::string text(prelude);
  for (const Definition& d : defs) {
    if (!out.count(d.name)) continue;
    for (size_t i = offset(toks[d.begin]), e = offset(toks[d.end]); i < e; ++i)
      if (text[i] != '\n') text[i] = ' ';
  }
  return text;
}

}  // namespace kiln::parser
