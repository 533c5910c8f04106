// Attribute values, maps and typed access.
#include "kernel_ir/attrs.h"

#include <cmath>
#include <cstdio>

#include "kernel_ir/op.h"

namespace kiln::ops {

bool AttrValue::operator==(const AttrValue& o) const {
  if (kind != o.kind) return false;
  switch (kind) {
    case Kind::None: return true;
    case Kind::Bool: return b == o.b;
    case Kind::Int: return i == o.i;
    case Kind::Float: return f == o.f || (std::isnan(f) && std::isnan(o.f));
    case Kind::String: return s == o.s;
    case Kind::List: return list == o.list;
  }
  return false;
}

namespace {
std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}
}  // namespace

std::string AttrValue::toString() const {
  switch (kind) {
    case Kind::None: return "None";
    case Kind::Bool: return b ? "True" : "False";
    case Kind::Int: return std::to_string(i);
    case Kind::Float: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.9g", f);
      return std::string(buf) + "f";
    }
    case Kind::String: return quote(s);
    case Kind::List: {
      std::string out = "[";
      for (size_t k = 0; k < list.size(); ++k) {
        if (k) out += ", ";
        out += list[k].toString();
      }
      return out + "]";
    }
  }
  return "";
}

void AttrMap::set(std::string name, AttrValue value) {
  for (auto& [n, v] : items_) {
    if (n == name) {
      v = std::move(value);
      return;
    }
  }
  items_.emplace_back(std::move(name), std::move(value));
}

const AttrValue* AttrMap::find(std::string_view name) const {
  for (const auto& [n, v] : items_)
    if (n == name) return &v;
  return nullptr;
}

void AttrReader::fail(std::string_view name, const std::string& what) const {
  throw OpError(std::string(op_) + ": attribute '" + std::string(name) + "' " + what);
}

bool AttrReader::has(std::string_view name) const {
  const AttrValue* v = attrs_.find(name);
  return v && v->kind != AttrValue::Kind::None;
}

// Shape rules do arithmetic on attributes and dimensions; bounding both keeps
// every sum and product of a few of them far from int64 overflow. Slice bounds
// may be anything (the slicing rule clamps them to the extent first).
int64_t AttrReader::inRange(std::string_view name, int64_t v) const {
  bool sliceBound = name == "begin" || name == "end" || name == "strides";
  bool dims = name == "newshape" || name == "shape";
  int64_t limit = dims ? kMaxDimension : int64_t(1) << 31;
  if (!sliceBound && (v > limit || v < -limit)) fail(name, "is out of range: " + std::to_string(v));
  return v;
}

int64_t AttrReader::getInt(std::string_view name, int64_t dflt) const {
  const AttrValue* v = attrs_.find(name);
  if (!v || v->kind == AttrValue::Kind::None) return dflt;
  if (v->kind == AttrValue::Kind::Int) return inRange(name, v->i);
  if (v->kind == AttrValue::Kind::Bool) return v->b ? 1 : 0;
  if (v->kind == AttrValue::Kind::List && v->list.size() == 1 && v->list[0].kind == AttrValue::Kind::Int)
    return inRange(name, v->list[0].i);
  fail(name, "must be an integer, not " + v->toString());
}

int64_t AttrReader::requireInt(std::string_view name) const {
  if (!has(name)) fail(name, "is required");
  return getInt(name, 0);
}

double AttrReader::getFloat(std::string_view name, double dflt) const {
  const AttrValue* v = attrs_.find(name);
  if (!v || v->kind == AttrValue::Kind::None) return dflt;
  if (v->kind == AttrValue::Kind::Float) return v->f;
  if (v->kind == AttrValue::Kind::Int) return static_cast<double>(v->i);
  fail(name, "must be a number, not " + v->toString());
}

bool AttrReader::getBool(std::string_view name, bool dflt) const {
  const AttrValue* v = attrs_.find(name);
  if (!v || v->kind == AttrValue::Kind::None) return dflt;
  if (v->kind == AttrValue::Kind::Bool) return v->b;
  if (v->kind == AttrValue::Kind::Int && (v->i == 0 || v->i == 1)) return v->i == 1;
  fail(name, "must be True or False, not " + v->toString());
}

std::string AttrReader::getString(std::string_view name, std::string_view dflt) const {
  const AttrValue* v = attrs_.find(name);
  if (!v || v->kind == AttrValue::Kind::None) return std::string(dflt);
  if (v->kind == AttrValue::Kind::String) return v->s;
  fail(name, "must be a string, not " + v->toString());
}

std::optional<std::vector<int64_t>> AttrReader::getIntList(std::string_view name) const {
  const AttrValue* v = attrs_.find(name);
  if (!v || v->kind == AttrValue::Kind::None) return std::nullopt;
  if (v->kind == AttrValue::Kind::Int) return std::vector<int64_t>{inRange(name, v->i)};
  if (v->kind == AttrValue::Kind::List) {
    std::vector<int64_t> out;
    for (const AttrValue& e : v->list) {
      if (e.kind != AttrValue::Kind::Int) fail(name, "must be a list of integers, not " + v->toString());
      out.push_back(inRange(name, e.i));
    }
    return out;
  }
  fail(name, "must be an integer or a list of integers, not " + v->toString());
}

std::vector<int64_t> AttrReader::requireIntList(std::string_view name) const {
  auto list = getIntList(name);
  if (!list) fail(name, "is required");
  return *list;
}

std::optional<DType> AttrReader::getDType(std::string_view name) const {
  std::string s = getString(name, "");
  if (s.empty()) return std::nullopt;
  auto t = parseDType(s);
  if (!t) fail(name, "names an unsupported dtype \"" + s + "\"");
  return t;
}

std::string AttrReader::getChoice(std::string_view name, std::initializer_list<std::string_view> allowed) const {
  std::string s = getString(name, *allowed.begin());
  for (std::string_view a : allowed)
    if (s == a) return s;
  std::string list;
  for (std::string_view a : allowed) list += (list.empty() ? "\"" : ", \"") + std::string(a) + "\"";
  fail(name, "= \"" + s + "\" is not supported (supported: " + list + ")");
}

}  // namespace kiln::ops
