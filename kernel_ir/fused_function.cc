// FusedFunction: verification, hashing, printing and the run-time shape function.
#include "kernel_ir/fused_function.h"

#include <cstdio>
#include <cstring>

#include "kiln/error.h"
#include "kernel_ir/shape_util.h"

namespace kiln::kernel_ir {

FusedNode FusedNode::constant(DType dtype, double floatValue, int64_t intValue) {
  FusedNode n;
  n.type = ops::TensorDesc{dtype, {}};
  n.floatValue = floatValue;
  n.intValue = intValue;
  return n;
}

const ops::TensorDesc& FusedFunction::typeOf(int32_t value) const {
  return isParam(value) ? params[static_cast<size_t>(value)] : node(value).type;
}

namespace {

// Runs one node's shape rule on the given operand descriptions.
ops::TensorDesc nodeResult(const FusedFunction& f, const FusedNode& n, std::span<const ops::TensorDesc> operands) {
  std::vector<ops::TensorDesc> outs;
  try {
    outs = n.op->infer(operands, n.attrs);
  } catch (const ops::OpError& e) {
    throw Error("kernel " + f.name + ": " + e.what());
  }
  if (n.field < 0 || static_cast<size_t>(n.field) >= outs.size())
    throw Error("kernel " + f.name + ": " + n.op->name + " has no result field " + std::to_string(n.field));
  return outs[static_cast<size_t>(n.field)];
}

void hashMix(uint64_t& h, uint64_t v) {
  // FNV-1a over 64-bit words, then a final avalanche (splitmix64) when read.
  h ^= v;
  h *= 0x100000001b3ull;
}
void hashString(uint64_t& h, const std::string& s) {
  for (unsigned char c : s) hashMix(h, c);
  hashMix(h, s.size());
}
void hashDesc(uint64_t& h, const ops::TensorDesc& d) {
  hashMix(h, static_cast<uint64_t>(d.dtype));
  hashMix(h, d.shape.size());
  for (int64_t x : d.shape) hashMix(h, static_cast<uint64_t>(x));
}

}  // namespace

void FusedFunction::verify() const {
  std::vector<ops::TensorDesc> operands;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const FusedNode& n = nodes[i];
    int32_t self = static_cast<int32_t>(params.size() + i);
    if (n.isConstant()) {
      if (n.type.rank() != 0 || !n.inputs.empty()) throw Error("kernel " + name + ": a constant must be a scalar");
      continue;
    }
    operands.clear();
    for (int32_t in : n.inputs) {
      if (in < 0 || in >= self) throw Error("kernel " + name + ": node %" + std::to_string(self) + " uses an undefined value");
      operands.push_back(typeOf(in));
    }
    if (!n.op->tupleInput && static_cast<int>(n.inputs.size()) != n.op->numInputs)
      throw Error("kernel " + name + ": " + n.op->name + " needs " + std::to_string(n.op->numInputs) + " operands");
    ops::TensorDesc r = nodeResult(*this, n, operands);
    if (!(r == n.type))
      throw Error("kernel " + name + ": node %" + std::to_string(self) + " (" + n.op->name + ") is typed " +
                  ops::descToString(n.type) + " but its rule gives " + ops::descToString(r));
  }
  if (outputs.empty()) throw Error("kernel " + name + " has no outputs");
  for (int32_t o : outputs)
    if (o < 0 || static_cast<size_t>(o) >= numValues()) throw Error("kernel " + name + ": bad output value");
}

uint64_t FusedFunction::contentHash() const {
  uint64_t h = 0xcbf29ce484222325ull;
  hashMix(h, params.size());
  for (const auto& p : params) hashDesc(h, p);
  for (const FusedNode& n : nodes) {
    hashString(h, n.isConstant() ? std::string("#const") : n.op->name);
    uint64_t fbits;
    std::memcpy(&fbits, &n.floatValue, sizeof fbits);
    hashMix(h, fbits);
    hashMix(h, static_cast<uint64_t>(n.intValue));
    hashMix(h, n.inputs.size());
    for (int32_t in : n.inputs) hashMix(h, static_cast<uint64_t>(in));
    hashMix(h, static_cast<uint64_t>(n.field));
    for (const auto& [k, v] : n.attrs.items()) {
      hashString(h, k);
      hashString(h, v.toString());
    }
    hashDesc(h, n.type);
  }
  for (int32_t o : outputs) hashMix(h, static_cast<uint64_t>(o));
  if (!library.empty()) hashString(h, "library:" + library);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

std::string FusedFunction::toString() const {
  std::string s = (library.empty() ? "" : "/* " + library + " */ ") + "fn " + name + "(";
  for (size_t i = 0; i < params.size(); ++i)
    s += (i ? ", %" : "%") + std::to_string(i) + ": " + ops::descToString(params[i]);
  s += ") {\n";
  for (size_t i = 0; i < nodes.size(); ++i) {
    const FusedNode& n = nodes[i];
    if (n.isConstant()) {
      char buf[64];
      if (isFloat(n.type.dtype)) std::snprintf(buf, sizeof buf, "%.17g", n.floatValue);
      else std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n.intValue));
      s += "  %" + std::to_string(params.size() + i) + " = " + buf + std::string(dtypeShortName(n.type.dtype)) + "\n";
      continue;
    }
    s += "  %" + std::to_string(params.size() + i) + " = " + n.op->name + "(";
    for (size_t k = 0; k < n.inputs.size(); ++k) s += (k ? ", %" : "%") + std::to_string(n.inputs[k]);
    for (const auto& [key, v] : n.attrs.items()) s += ", " + key + "=" + v.toString();
    s += ")";
    if (n.op->tupleOutput) s += "." + std::to_string(n.field);
    s += "  /* " + ops::descToString(n.type) + " */\n";
  }
  s += "  (";
  for (size_t i = 0; i < outputs.size(); ++i) s += (i ? ", %" : "%") + std::to_string(outputs[i]);
  return s + ")\n}";
}

std::vector<Shape> computeShapes(const FusedFunction& f, std::span<const Shape> paramShapes) {
  if (paramShapes.size() != f.params.size())
    throw Error("kernel " + f.name + " takes " + std::to_string(f.params.size()) + " input(s), but " +
                std::to_string(paramShapes.size()) + " were given");
  std::vector<ops::TensorDesc> descs(f.numValues());
  for (size_t i = 0; i < f.params.size(); ++i) {
    const ops::TensorDesc& p = f.params[i];
    const Shape& s = paramShapes[i];
    bool ok = s.size() == p.rank();
    for (size_t d = 0; ok && d < s.size(); ++d) ok = p.shape[d] == ops::kAnyDim || p.shape[d] == s[d];
    if (!ok)
      throw Error("kernel " + f.name + ": input " + std::to_string(i) + " has shape (" + shapeString(s) +
                  ") but the kernel expects " + ops::descToString(p));
    descs[i] = ops::TensorDesc{p.dtype, ops::Shape(s.begin(), s.end())};
  }
  std::vector<ops::TensorDesc> operands;
  for (size_t i = 0; i < f.nodes.size(); ++i) {
    const FusedNode& n = f.nodes[i];
    if (n.isConstant()) {
      descs[f.params.size() + i] = n.type;
      continue;
    }
    operands.clear();
    for (int32_t in : n.inputs) operands.push_back(descs[static_cast<size_t>(in)]);
    descs[f.params.size() + i] = nodeResult(f, n, operands);
  }
  std::vector<Shape> out;
  out.reserve(descs.size());
  for (const auto& d : descs) out.emplace_back(d.shape.begin(), d.shape.end());
  return out;
}

}  // namespace kiln::kernel_ir
