// ONNX Einsum with one or two operands, as reductions, transposes and one batched
// matrix product: letters summed away where only one operand has them, the rest
// sorted into batch, kept-left, contracted and kept-right axes, each operand
// transposed and reshaped to (batch, rows, inner) / (batch, inner, cols), multiplied,
// and the product reshaped and transposed to the output's letters.
#include <algorithm>
#include <numeric>

#include "compiler/onnx/graph_importer.h"

namespace kiln::onnx_import {
namespace {

struct Operand {
  std::string letters;
  std::string ref;
  std::vector<int64_t> shape;
};

std::vector<int64_t> positions(const std::string& from, const std::string& letters) {
  std::vector<int64_t> p;
  for (char l : letters) p.push_back(static_cast<int64_t>(from.find(l)));
  return p;
}

// Sums away the operand's letters that appear nowhere in `keep`.
void sumAway(NodeContext& c, Operand& o, const std::string& keep) {
  std::vector<int64_t> axes;
  std::string left;
  std::vector<int64_t> shape;
  for (size_t k = 0; k < o.letters.size(); ++k) {
    if (keep.find(o.letters[k]) == std::string::npos) axes.push_back(static_cast<int64_t>(k));
    else {
      left += o.letters[k];
      shape.push_back(o.shape[k]);
    }
  }
  if (axes.empty()) return;
  o.ref = c.let("sum(" + o.ref + ", axis=" + intList(axes) + ")");
  o.letters = left;
  o.shape = shape;
}

std::string permuted(NodeContext& c, const Operand& o, const std::string& order) {
  if (order == o.letters) return o.ref;
  return "transpose(" + o.ref + ", axes=" + intList(positions(o.letters, order)) + ")";
}

int64_t product(NodeContext& c, const Operand& o, const std::string& letters) {
  std::vector<int64_t> dims;
  for (char l : letters) dims.push_back(o.shape[o.letters.find(l)]);
  return c.product(dims);
}

}  // namespace

void registerEinsumConverters(std::map<std::string, Converter>& t) {
  t["Einsum"] = [](NodeContext& c) {
    std::string eq;
    for (char ch : c.stringAttr("equation", ""))
      if (ch != ' ') eq += ch;
    size_t arrow = eq.find("->");
    std::string lhs = eq.substr(0, arrow);
    std::vector<std::string> terms;
    for (size_t at = 0;;) {
      size_t comma = lhs.find(',', at);
      terms.push_back(lhs.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
    if (terms.size() != c.numInputs()) c.fail("the equation names " + std::to_string(terms.size()) + " operands for " + std::to_string(c.numInputs()) + " inputs");
    if (terms.size() > 2) c.fail("Einsum of more than two operands is not supported");
    if (eq.find("...") != std::string::npos) c.fail("ellipses in the equation are not supported");
    std::vector<Operand> ops;
    for (size_t k = 0; k < terms.size(); ++k) {
      const Value& v = c.input(k);
      if (!v.staticShape()) c.fail("Einsum needs the operands' shapes to be known");
      if (terms[k].size() != v.shape->size()) c.fail("term '" + terms[k] + "' does not match the operand's rank");
      for (char l : terms[k]) {
        if (!std::isalpha(static_cast<unsigned char>(l))) c.fail("the equation may hold letters only");
        if (std::count(terms[k].begin(), terms[k].end(), l) > 1) c.fail("repeated letters within a term (diagonals) are not supported");
      }
      ops.push_back(Operand{terms[k], c.ref(k), *v.shape});
    }
    std::string out;
    if (arrow != std::string::npos) {
      out = eq.substr(arrow + 2);
    } else {
      // Implicit output: the letters used once, in alphabetical order.
      std::string all = lhs;
      for (char l = 'A'; l <= 'z'; ++l)
        if (std::isalpha(static_cast<unsigned char>(l)) && std::count(all.begin(), all.end(), l) == 1) out += l;
    }
    DType dt = c.input(0).dtype;
    if (ops.size() == 1) {
      sumAway(c, ops[0], out);
      std::vector<int64_t> shape;
      for (char l : out) shape.push_back(ops[0].shape[ops[0].letters.find(l)]);
      c.emit(0, "copy(" + permuted(c, ops[0], out) + ")", dt, shape);
      return;
    }
    Operand &a = ops[0], &b = ops[1];
    sumAway(c, a, out + b.letters);
    sumAway(c, b, out + a.letters);
    std::string batch, left, inner, right;
    for (char l : a.letters) {
      bool inB = b.letters.find(l) != std::string::npos, inOut = out.find(l) != std::string::npos;
      if (inB && inOut) batch += l;
      else if (inB) inner += l;
      else left += l;
    }
    for (char l : b.letters)
      if (a.letters.find(l) == std::string::npos) right += l;
    for (char l : batch + inner)
      if (a.shape[a.letters.find(l)] != b.shape[b.letters.find(l)]) c.fail(std::string("the extents of '") + l + "' differ");
    int64_t nb = product(c, a, batch), nl = product(c, a, left), ni = product(c, a, inner), nr = product(c, b, right);
    std::string a3 = "reshape(" + permuted(c, a, batch + left + inner) + ", newshape=" + intList({nb, nl, ni}) + ")";
    std::string b3 = "reshape(" + permuted(c, b, batch + inner + right) + ", newshape=" + intList({nb, ni, nr}) + ")";
    Operand prod{batch + left + right, "", {}};
    for (char l : batch + left) prod.shape.push_back(a.shape[a.letters.find(l)]);
    for (char l : right) prod.shape.push_back(b.shape[b.letters.find(l)]);
    prod.ref = c.let("reshape(nn.batch_matmul(" + a3 + ", " + b3 + ", transpose_b=False), newshape=" + intList(prod.shape) + ")");
    for (char l : out)
      if (prod.letters.find(l) == std::string::npos) c.fail(std::string("output letter '") + l + "' is in no operand");
    std::vector<int64_t> shape;
    for (char l : out) shape.push_back(prod.shape[prod.letters.find(l)]);
    c.emit(0, "copy(" + permuted(c, prod, out) + ")", dt, shape);
  };
}

}  // namespace kiln::onnx_import
