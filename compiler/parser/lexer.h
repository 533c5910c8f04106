// Lexer for the Relay text format: source text to a vector of tokens.
//
// Tokens hold string_views into the source buffer, which must outlive them.
// Locations are 1-based line and byte column. Number literals are decoded here,
// suffix included (`3i64`, `1.5f`, `2f16`); a leading `-` is always its own token
// and the parser decides whether it negates a literal or subtracts.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/error.h"

namespace kiln::parser {

enum class Tok : uint8_t {
  End,
  Local,   // %name (text without the %)
  Global,  // @name
  Ident,   // keywords, operator names (may contain dots), type and constructor names, _
  Int,
  Float,
  String,  // text is the raw contents between the quotes
  LParen, RParen, LBracket, RBracket, LBrace, RBrace,
  Comma, Semi, Colon, Dot, Question,
  Assign, Eq, Ne, Lt, Le, Gt, Ge,
  Plus, Minus, Star, Slash,
  FatArrow,  // =>
  Arrow,     // ->
};

const char* tokName(Tok t);

struct Token {
  Tok kind = Tok::End;
  SourceLoc loc;
  std::string_view text;
  DType litType = DType::Int32;  // Int / Float literals
  int64_t intValue = 0;
  double floatValue = 0;
};

// Describes a token for error messages: `'('`, `identifier 'foo'`, `end of input`.
std::string describe(const Token& t);

std::vector<Token> lex(std::string_view source, const std::string& file);

}  // namespace kiln::parser
