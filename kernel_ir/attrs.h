// Operator attributes: the typed values written after an operator's operands
// (`sum(%x, axis=[1], keepdims=True)`).
//
// An AttrMap keeps attributes in the order they were written, so the printer can
// reproduce a program exactly. Values are plain data (ints, floats, strings,
// bools, None, nested lists); an AttrMap owns its values and is immutable once
// built, so it may be shared freely across threads. The typed accessors below
// apply defaults and raise OpError naming the attribute when a value has the
// wrong kind; operator shape rules read attributes only through them.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/dtype.h"

namespace kiln::ops {

// An operator rule rejected its operands or attributes. The type checker adds the
// source location; the runtime turns it into a kiln::Error.
class OpError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct AttrValue {
  enum class Kind : uint8_t { None, Bool, Int, Float, String, List };
  Kind kind = Kind::None;
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  std::vector<AttrValue> list;

  static AttrValue none() { return {}; }
  static AttrValue ofBool(bool v) { AttrValue a; a.kind = Kind::Bool; a.b = v; return a; }
  static AttrValue ofInt(int64_t v) { AttrValue a; a.kind = Kind::Int; a.i = v; return a; }
  static AttrValue ofFloat(double v) { AttrValue a; a.kind = Kind::Float; a.f = v; return a; }
  static AttrValue ofString(std::string v) { AttrValue a; a.kind = Kind::String; a.s = std::move(v); return a; }
  static AttrValue ofList(std::vector<AttrValue> v) { AttrValue a; a.kind = Kind::List; a.list = std::move(v); return a; }

  bool operator==(const AttrValue& o) const;
  // Relay text for the value: `[1, 2]`, `"NCHW"`, `1e-05f`, `True`, `None`.
  std::string toString() const;
};

class AttrMap {
 public:
  void set(std::string name, AttrValue value);
  const AttrValue* find(std::string_view name) const;
  const std::vector<std::pair<std::string, AttrValue>>& items() const { return items_; }
  bool empty() const { return items_.empty(); }
  bool operator==(const AttrMap& o) const { return items_ == o.items_; }

 private:
  std::vector<std::pair<std::string, AttrValue>> items_;
};

// Typed access with defaults. `op` names the operator in error messages.
class AttrReader {
 public:
  AttrReader(std::string_view op, const AttrMap& attrs) : op_(op), attrs_(attrs) {}

  bool has(std::string_view name) const;  // present and not None
  int64_t getInt(std::string_view name, int64_t dflt) const;
  int64_t requireInt(std::string_view name) const;
  double getFloat(std::string_view name, double dflt) const;
  bool getBool(std::string_view name, bool dflt) const;
  std::string getString(std::string_view name, std::string_view dflt) const;
  // None or absent gives nullopt; a single integer gives a one-element list.
  std::optional<std::vector<int64_t>> getIntList(std::string_view name) const;
  std::vector<int64_t> requireIntList(std::string_view name) const;
  // A dtype attribute; "" or absent gives nullopt.
  std::optional<DType> getDType(std::string_view name) const;
  // A string attribute that must be one of `allowed` (absent gives allowed[0]).
  std::string getChoice(std::string_view name, std::initializer_list<std::string_view> allowed) const;

  [[noreturn]] void fail(std::string_view name, const std::string& what) const;
  int64_t inRange(std::string_view name, int64_t v) const;
  const AttrMap& map() const { return attrs_; }

 private:
  std::string_view op_;
  const AttrMap& attrs_;
};

}  // namespace kiln::ops
