// The Relay text lexer.
#include "compiler/parser/lexer.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace kiln::parser {

const char* tokName(Tok t) {
  switch (t) {
    case Tok::End: return "end of input";
    case Tok::Local: return "local name";
    case Tok::Global: return "global name";
    case Tok::Ident: return "identifier";
    case Tok::Int: return "integer";
    case Tok::Float: return "float";
    case Tok::String: return "string";
    case Tok::LParen: return "'('";
    case Tok::RParen: return "')'";
    case Tok::LBracket: return "'['";
    case Tok::RBracket: return "']'";
    case Tok::LBrace: return "'{'";
    case Tok::RBrace: return "'}'";
    case Tok::Comma: return "','";
    case Tok::Semi: return "';'";
    case Tok::Colon: return "':'";
    case Tok::Dot: return "'.'";
    case Tok::Question: return "'?'";
    case Tok::Assign: return "'='";
    case Tok::Eq: return "'=='";
    case Tok::Ne: return "'!='";
    case Tok::Lt: return "'<'";
    case Tok::Le: return "'<='";
    case Tok::Gt: return "'>'";
    case Tok::Ge: return "'>='";
    case Tok::Plus: return "'+'";
    case Tok::Minus: return "'-'";
    case Tok::Star: return "'*'";
    case Tok::Slash: return "'/'";
    case Tok::FatArrow: return "'=>'";
    case Tok::Arrow: return "'->'";
  }
  return "token";
}

std::string describe(const Token& t) {
  // An error line quotes at most the start of a long token (a 10 MB literal is not echoed).
  std::string text = t.text.size() > 40 ? std::string(t.text.substr(0, 40)) + "..." : std::string(t.text);
  switch (t.kind) {
    case Tok::Local: return "'%" + text + "'";
    case Tok::Global: return "'@" + text + "'";
    case Tok::Ident:
    case Tok::Int:
    case Tok::Float: return "'" + text + "'";
    case Tok::String: return "string \"" + text + "\"";
    default: return tokName(t.kind);
  }
}

namespace {

bool identStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool identChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

class Lexer {
 public:
  Lexer(std::string_view src, const std::string& file) : s_(src), file_(file) {}

  std::vector<Token> run() {
    std::vector<Token> out;
    out.reserve(s_.size() / 4 + 16);
    for (;;) {
      skipSpaceAndComments();
      Token t;
      t.loc = loc();
      if (i_ >= s_.size()) {
        t.kind = Tok::End;
        out.push_back(t);
        return out;
      }
      bool afterDot = !out.empty() && out.back().kind == Tok::Dot;
      lexOne(t, afterDot);
      out.push_back(t);
      tokensSeen_ = true;
    }
  }

 private:
  SourceLoc loc() const { return {line_, static_cast<uint32_t>(i_ - lineStart_ + 1)}; }
  [[noreturn]] void fail(SourceLoc at, const std::string& msg) { throw Error(file_, at, msg); }

  void newline() {
    ++line_;
    lineStart_ = i_;
  }

  // `#[version = "0.0.5"]`: only before the first token, and only in that form
  // (the version a dotted number); it carries nothing else.
  void versionHeader() {
    SourceLoc start = loc();
    if (tokensSeen_) fail(start, "a '#[version = \"...\"]' line may only begin the program");
    size_t end = s_.find_first_of("]\n", i_);
    if (end == std::string_view::npos || s_[end] != ']') fail(start, "unterminated '#[' attribute");
    std::string_view body = s_.substr(i_ + 2, end - i_ - 2);
    auto trim = [](std::string_view v) {
      size_t a = v.find_first_not_of(" \t"), b = v.find_last_not_of(" \t");
      return a == std::string_view::npos ? std::string_view() : v.substr(a, b - a + 1);
    };
    size_t eq = body.find('=');
    std::string_view key = trim(body.substr(0, eq)), value = eq == std::string_view::npos ? "" : trim(body.substr(eq + 1));
    bool ok = key == "version" && value.size() >= 3 && value.front() == '"' && value.back() == '"' &&
              value.substr(1, value.size() - 2).find_first_not_of("0123456789.") == std::string_view::npos;
    if (!ok) {
      std::string shown(s_.substr(i_, std::min<size_t>(end + 1 - i_, 60)));
      fail(start, "expected '#[version = \"0.0.5\"]', but found '" + shown + "'");
    }
    i_ = end + 1;
  }

  void skipSpaceAndComments() {
    for (;;) {
      while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) {
        if (s_[i_++] == '\n') newline();
      }
      if (i_ + 1 < s_.size() && s_[i_] == '/' && s_[i_ + 1] == '/') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
      } else if (i_ + 1 < s_.size() && s_[i_] == '/' && s_[i_ + 1] == '*') {
        SourceLoc start = loc();
        int depth = 0;
        do {
          if (i_ + 1 >= s_.size()) fail(start, "unterminated block comment");
          if (s_[i_] == '/' && s_[i_ + 1] == '*') {
            ++depth;
            i_ += 2;
          } else if (s_[i_] == '*' && s_[i_ + 1] == '/') {
            --depth;
            i_ += 2;
          } else {
            if (s_[i_] == '\n') {
              ++i_;
              newline();
            } else {
              ++i_;
            }
          }
        } while (depth > 0);
      } else if (i_ + 1 < s_.size() && s_[i_] == '#' && s_[i_ + 1] == '[') {
        versionHeader();
      } else {
        return;
      }
    }
  }

  std::string_view name() {
    size_t b = i_;
    while (i_ < s_.size() && identChar(s_[i_])) ++i_;
    return s_.substr(b, i_ - b);
  }

  void lexOne(Token& t, bool afterDot) {
    char c = s_[i_];
    auto two = [&](char next) { return i_ + 1 < s_.size() && s_[i_ + 1] == next; };
    auto punct = [&](Tok k, size_t n) {
      t.kind = k;
      t.text = s_.substr(i_, n);
      i_ += n;
    };
    if (c == '%' || c == '@') {
      ++i_;
      t.kind = c == '%' ? Tok::Local : Tok::Global;
      t.text = name();
      if (t.text.empty()) fail(t.loc, std::string("expected a name after '") + c + "'");
      return;
    }
    if (identStart(c)) {
      size_t b = i_;
      name();
      // Operator names are dotted: nn.conv2d, dyn.reshape.
      while (i_ + 1 < s_.size() && s_[i_] == '.' && identStart(s_[i_ + 1])) {
        ++i_;
        name();
      }
      t.kind = Tok::Ident;
      t.text = s_.substr(b, i_ - b);
      return;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return number(t, afterDot);
    if (c == '"') return string(t);
    switch (c) {
      case '(': return punct(Tok::LParen, 1);
      case ')': return punct(Tok::RParen, 1);
      case '[': return punct(Tok::LBracket, 1);
      case ']': return punct(Tok::RBracket, 1);
      case '{': return punct(Tok::LBrace, 1);
      case '}': return punct(Tok::RBrace, 1);
      case ',': return punct(Tok::Comma, 1);
      case ';': return punct(Tok::Semi, 1);
      case ':': return punct(Tok::Colon, 1);
      case '.': return punct(Tok::Dot, 1);
      case '?': return punct(Tok::Question, 1);
      case '+': return punct(Tok::Plus, 1);
      case '*': return punct(Tok::Star, 1);
      case '/': return punct(Tok::Slash, 1);
      case '-': return two('>') ? punct(Tok::Arrow, 2) : punct(Tok::Minus, 1);
      case '=': return two('=') ? punct(Tok::Eq, 2) : two('>') ? punct(Tok::FatArrow, 2) : punct(Tok::Assign, 1);
      case '!':
        if (two('=')) return punct(Tok::Ne, 2);
        break;
      case '<': return two('=') ? punct(Tok::Le, 2) : punct(Tok::Lt, 1);
      case '>': return two('=') ? punct(Tok::Ge, 2) : punct(Tok::Gt, 1);
      default: break;
    }
    fail(t.loc, std::string("unexpected character '") + c + "'");
  }

  void string(Token& t) {
    size_t b = ++i_;
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\n') fail(t.loc, "unterminated string");
      if (s_[i_] == '\\') ++i_;
      ++i_;
    }
    if (i_ >= s_.size()) fail(t.loc, "unterminated string");
    t.kind = Tok::String;
    t.text = s_.substr(b, i_ - b);
    ++i_;
  }

  void number(Token& t, bool afterDot) {
    size_t b = i_;
    auto digits = [&] {
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    };
    digits();
    bool isFloatLit = false;
    // After `.`, only a field index follows: `%t.0.1` is two field accesses.
    if (!afterDot) {
      if (i_ + 1 < s_.size() && s_[i_] == '.' && std::isdigit(static_cast<unsigned char>(s_[i_ + 1]))) {
        ++i_;
        digits();
        isFloatLit = true;
      }
      if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
        size_t save = i_++;
        if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
        if (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
          digits();
          isFloatLit = true;
        } else {
          i_ = save;
        }
      }
    }
    std::string_view body = s_.substr(b, i_ - b);
    size_t sb = i_;
    if (!afterDot)
      while (i_ < s_.size() && identChar(s_[i_])) ++i_;
    std::string_view suffix = s_.substr(sb, i_ - sb);
    t.text = s_.substr(b, i_ - b);

    DType dt = isFloatLit ? DType::Float32 : DType::Int32;
    if (!suffix.empty()) {
      if (suffix == "f" || suffix == "f32") dt = DType::Float32;
      else if (suffix == "f16") dt = DType::Float16;
      else if (suffix == "f64") dt = DType::Float64;
      else if (suffix == "i8") dt = DType::Int8;
      else if (suffix == "i16") dt = DType::Int16;
      else if (suffix == "i32") dt = DType::Int32;
      else if (suffix == "i64") dt = DType::Int64;
      else if (suffix == "u8") dt = DType::UInt8;
      else if (suffix == "u16") dt = DType::UInt16;
      else fail(t.loc, "unknown literal suffix '" + std::string(suffix) + "' in '" + std::string(t.text) + "'");
      if (isFloatLit && !isFloat(dt))
        fail(t.loc, "the float literal '" + std::string(t.text) + "' has an integer suffix");
    }
    t.litType = dt;
    // A literal must be a value of its type, as in TVM: an unsuffixed integer
    // too large for int32 is an int64; a float that overflows its type is an error.
    auto shown = [&] { return t.text.size() > 40 ? std::string(t.text.substr(0, 40)) + "..." : std::string(t.text); };
    if (isFloat(dt)) {
      t.kind = Tok::Float;
      std::string tmp(body);
      t.floatValue = std::strtod(tmp.c_str(), nullptr);
      if (!std::isfinite(t.floatValue) || !floatFits(dt, t.floatValue))
        fail(t.loc, "the literal '" + shown() + "' does not fit " + std::string(dtypeName(dt)));
    } else {
      t.kind = Tok::Int;
      auto [p, ec] = std::from_chars(body.data(), body.data() + body.size(), t.intValue);
      (void)p;
      if (ec != std::errc()) fail(t.loc, "integer literal '" + shown() + "' is too large for int64");
      // (A suffixed literal's range is checked where its sign is known: the parser.)
      if (suffix.empty() && t.intValue > INT32_MAX) t.litType = DType::Int64;
    }
  }

  std::string_view s_;
  const std::string& file_;
  size_t i_ = 0;
  bool tokensSeen_ = false;
  size_t lineStart_ = 0;
  uint32_t line_ = 1;
};

}  // namespace

std::vector<Token> lex(std::string_view source, const std::string& file) { return Lexer(source, file).run(); }

}  // namespace kiln::parser
