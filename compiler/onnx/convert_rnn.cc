// ONNX's recurrent operators (LSTM, GRU, RNN) as Kiln loops over the sequence.
//
// Each direction is one recurrence (recurrence.h) carrying the hidden state (and
// the LSTM's cell), with every step's hidden state collected as a scan output; the
// weights of a direction are sliced once, outside the loop. Gates follow ONNX's
// orders (LSTM iofc, GRU zrh), activations its `activations` attribute (defaults:
// LSTM Sigmoid, Tanh, Tanh; GRU Sigmoid, Tanh; RNN Tanh), `clip` bounds every
// activation's input, `layout` 1 puts the batch first.
#include <onnx/onnx_pb.h>

#include "compiler/onnx/graph_importer.h"
#include "compiler/onnx/onnx_tensor.h"
#include "compiler/onnx/recurrence.h"

namespace kiln::onnx_import {
namespace {

struct Activation {
  std::string name;
  double alpha = 0, beta = 0;
  bool hasAlpha = false, hasBeta = false;
};

std::string activate(NodeContext& c, const Activation& a, const std::string& x, DType dt) {
  auto lit = [&](double v) { return c.literal(v, dt); };
  const std::string& n = a.name;
  if (n == "Sigmoid") return "sigmoid(" + x + ")";
  if (n == "Tanh") return "tanh(" + x + ")";
  if (n == "Relu") return "nn.relu(" + x + ")";
  if (n == "LeakyRelu") return "nn.leaky_relu(" + x + ", alpha=" + floatText(a.hasAlpha ? a.alpha : 0.01) + ")";
  if (n == "HardSigmoid")
    return "clip(add(multiply(" + lit(a.hasAlpha ? a.alpha : 0.2) + ", " + x + "), " + lit(a.hasBeta ? a.beta : 0.5) + "), a_min=0f, a_max=1f)";
  if (n == "Affine") return "add(multiply(" + lit(a.hasAlpha ? a.alpha : 1) + ", " + x + "), " + lit(a.hasBeta ? a.beta : 0) + ")";
  if (n == "ScaledTanh")
    return "multiply(" + lit(a.hasAlpha ? a.alpha : 1) + ", tanh(multiply(" + lit(a.hasBeta ? a.beta : 1) + ", " + x + ")))";
  if (n == "Softsign") return "divide(" + x + ", add(" + lit(1) + ", abs(" + x + ")))";
  if (n == "Softplus") return "log(add(exp(" + x + "), " + lit(1) + "))";
  c.fail("activation '" + n + "' is not supported");
}

struct Direction {
  bool reverse;
  std::vector<Activation> acts;
};

class RecurrentImport {
 public:
  RecurrentImport(NodeContext& c, int gates, std::vector<std::string> defaultActs) : c_(c) {
    const Value& x = c.input(0);
    if (!x.shape || x.shape->size() != 3) c.fail("X must have rank 3");
    dt_ = x.dtype;
    layout_ = c.intAttr("layout", 0);
    if (layout_ != 0 && layout_ != 1) c.fail("layout must be 0 or 1");
    x_ = layout_ ? c.let("transpose(" + c.ref(0) + ", axes=[1, 0, 2])") : c.ref(0);
    seq_ = (*x.shape)[layout_ ? 1 : 0];
    batch_ = (*x.shape)[layout_ ? 0 : 1];
    const Value& r = c.input(2);
    if (!r.shape || r.shape->size() != 3) c.fail("R must have rank 3");
    hidden_ = c.intAttr("hidden_size", (*r.shape)[2]);
    if (hidden_ < 1 || (*r.shape)[2] != hidden_ || (*r.shape)[1] != gates * hidden_) c.fail("R's shape does not match hidden_size");
    std::string direction = c.stringAttr("direction", "forward");
    if (direction != "forward" && direction != "reverse" && direction != "bidirectional") c.fail("direction '" + direction + "' is not supported");
    int dirs = direction == "bidirectional" ? 2 : 1;
    if ((*r.shape)[0] != dirs) c.fail("R's first dimension must be the number of directions");
    // sequence_lens: when some sequence is shorter than the input, its steps past
    // its length leave the state alone and output zeros (forward directions).
    if (c.hasInput(4)) {
      const Value& lens = c.input(4);
      bool whole = lens.known.has_value() && seq_ >= 0;
      for (int64_t k = 0; whole && k < lens.known->numel(); ++k) {
        int64_t v = 0;
        double f;
        readScalar(static_cast<const char*>(lens.known->data()) + k * static_cast<int64_t>(dtypeSize(lens.known->dtype())), lens.known->dtype(), v, f);
        whole = v == seq_;
      }
      if (!whole) {
        if (direction != "forward") c.fail("sequence_lens shorter than the sequence are supported for the forward direction only");
        lens_ = c.let("cast(" + c.ref(4) + ", dtype=\"int64\")");
      }
    }
    std::vector<std::string> acts;
    if (const auto* a = c.attr("activations"))
      for (const auto& s : a->strings()) acts.push_back(s);
    size_t per = defaultActs.size();
    if (acts.empty())
      for (int d = 0; d < dirs; ++d) acts.insert(acts.end(), defaultActs.begin(), defaultActs.end());
    if (acts.size() != per * static_cast<size_t>(dirs)) c.fail("activations must name " + std::to_string(per * dirs) + " functions");
    auto alphas = c.floatsAttr("activation_alpha").value_or(std::vector<float>{});
    auto betas = c.floatsAttr("activation_beta").value_or(std::vector<float>{});
    for (int d = 0; d < dirs; ++d) {
      Direction dir{direction == "reverse" || d == 1, {}};
      for (size_t k = 0; k < per; ++k) {
        size_t at = static_cast<size_t>(d) * per + k;
        Activation a{acts[at]};
        if (at < alphas.size()) a.alpha = alphas[at], a.hasAlpha = true;
        if (at < betas.size()) a.beta = betas[at], a.hasBeta = true;
        dir.acts.push_back(a);
      }
      dirs_.push_back(dir);
    }
    if (c.attr("clip")) clip_ = c.floatAttr("clip", 0);
    count_ = seq_ >= 0 ? std::to_string(seq_) + "i64" : c.let("take(shape_of(" + x_ + ", dtype=\"int64\"), 0)");
  }

  NodeContext& c() { return c_; }
  size_t directions() const { return dirs_.size(); }
  const Direction& direction(size_t d) const { return dirs_[d]; }
  DType dtype() const { return dt_; }
  int64_t hidden() const { return hidden_; }

  // Input `k`'s slice for direction d (a let outside the loop).
  std::string perDirection(size_t k, size_t d) { return c_.let("take(" + c_.ref(k) + ", " + std::to_string(d) + "i64, axis=0)"); }
  // Rows [from, from + n) of a direction's matrix or vector (axis 0).
  std::string rows(const std::string& m, int64_t from, int64_t n) {
    return c_.let("strided_slice(" + m + ", begin=[" + std::to_string(from) + "], end=[" + std::to_string(from + n) + "], axes=[0])");
  }
  // The initial state from input `k` for direction d, or zeros.
  std::string initial(size_t k, size_t d) {
    if (c_.hasInput(k)) {
      std::string s = c_.ref(k);
      if (layout_) s = c_.let("transpose(" + s + ", axes=[1, 0, 2])");
      return c_.let("take(" + s + ", " + std::to_string(d) + "i64, axis=0)");
    }
    std::string dtype = "dtype=\"" + std::string(dtypeName(dt_)) + "\"";
    if (batch_ >= 0) return "zeros(shape=" + intList({batch_, hidden_}) + ", " + dtype + ")";
    Tensor h = Tensor::empty(DType::Int64, {1});
    *h.data<int64_t>() = hidden_;
    std::string shape = "concatenate((strided_slice(shape_of(" + x_ + ", dtype=\"int64\"), begin=[1], end=[2]), " + c_.constant(h, "hidden_size") + "), axis=0)";
    return c_.let("dyn.zeros(" + shape + ", " + dtype + ")");
  }
  std::string clipped(const std::string& v) {
    if (!clip_) return v;
    return "clip(" + v + ", a_min=" + floatText(-*clip_) + ", a_max=" + floatText(*clip_) + ")";
  }
  std::string act(size_t d, size_t k, const std::string& v) { return activate(c_, dirs_[d].acts[k], clipped(v), dt_); }
  // The step's input x_t, from the counter (backwards for a reverse direction).
  std::string stepInput(const Recurrence& r, size_t d) {
    std::string idx = dirs_[d].reverse ? "subtract(subtract(" + count_ + ", " + r.i + "), 1i64)" : r.i;
    return "take(" + x_ + ", " + idx + ", axis=0)";
  }
  const std::string& count() const { return count_; }
  const std::string& lengths() const { return lens_; }
  Value state() const {
    Value v;
    v.dtype = dt_;
    v.shape = std::vector<int64_t>{batch_, hidden_};
    return v;
  }

  // Outputs: Y from each direction's scan, Y_h (and Y_c) from each final state.
  void emitOutputs(const std::vector<std::string>& ys, const std::vector<std::vector<std::string>>& finals) {
    auto stack = [&](const std::vector<std::string>& parts, int axis) {
      std::vector<std::string> e;
      for (const auto& p : parts) e.push_back("expand_dims(" + p + ", axis=" + std::to_string(axis) + ")");
      if (e.size() == 1) return e[0];
      return "concatenate((" + e[0] + ", " + e[1] + "), axis=" + std::to_string(axis) + ")";
    };
    int64_t dirs = static_cast<int64_t>(dirs_.size());
    std::string y = stack(ys, 1);
    std::vector<int64_t> yShape{seq_, dirs, batch_, hidden_};
    if (layout_) {
      y = "transpose(" + y + ", axes=[2, 0, 1, 3])";
      yShape = {batch_, seq_, dirs, hidden_};
    }
    c_.emit(0, y, dt_, yShape);
    for (size_t k = 0; k < finals.size(); ++k) {
      std::string s = stack(finals[k], 0);
      std::vector<int64_t> shape{dirs, batch_, hidden_};
      if (layout_) {
        s = "transpose(" + s + ", axes=[1, 0, 2])";
        shape = {batch_, dirs, hidden_};
      }
      c_.emit(k + 1, s, dt_, shape);
    }
  }

 private:
  NodeContext& c_;
  DType dt_;
  int64_t layout_, seq_, batch_, hidden_;
  std::string x_, count_, lens_;
  std::vector<Direction> dirs_;
  std::optional<float> clip_;
};

// Runs one direction: `step` writes the body's lines (through `b`) and returns the
// next carried values, the first of which is the hidden state (the scan element).
template <class Step>
std::string runDirection(RecurrentImport& ri, size_t d, const std::vector<std::string>& init, Step step) {
  NodeContext& c = ri.c();
  ImportState& st = c.scope().state();
  Recurrence r = newRecurrence(st);
  r.count = ri.count();
  for (size_t k = 0; k < init.size(); ++k) {
    Value v = ri.state();
    v.ref = "%" + st.freshName(k == 0 ? "h" : "c");
    r.carried.push_back(v);
    r.carriedInit.push_back(init[k]);
  }
  GraphScope body(st, &c.scope());
  NodeContext b(body, c.node());
  std::vector<std::string> carried;
  for (const Value& v : r.carried) carried.push_back(v.ref);
  r.nextCarried = step(b, r, carried);
  r.scans.push_back(scanAccumulator(st, ri.dtype(), *ri.state().shape));
  r.scanElements.push_back(r.nextCarried[0]);
  if (!ri.lengths().empty()) {
    // Rows whose sequence has ended keep their state and output zeros.
    std::string live = b.let("expand_dims(less(" + r.i + ", " + ri.lengths() + "), axis=1)");
    r.scanElements[0] = b.let("where(" + live + ", " + r.nextCarried[0] + ", zeros_like(" + r.nextCarried[0] + "))");
    for (size_t k = 0; k < r.nextCarried.size(); ++k) r.nextCarried[k] = b.let("where(" + live + ", " + r.nextCarried[k] + ", " + carried[k] + ")");
  }
  r.bodyLines = body.lines();
  return emitRecurrence(c, r);
}

}  // namespace

void registerRecurrentConverters(std::map<std::string, Converter>& t) {
  t["LSTM"] = [](NodeContext& c) {
    RecurrentImport ri(c, 4, {"Sigmoid", "Tanh", "Tanh"});
    int64_t h = ri.hidden();
    bool inputForget = c.intAttr("input_forget", 0) != 0;
    std::vector<std::string> ys;
    std::vector<std::vector<std::string>> finals(2);
    for (size_t d = 0; d < ri.directions(); ++d) {
      std::string w = ri.perDirection(1, d), r = ri.perDirection(2, d), bias;
      if (c.hasInput(3)) {
        std::string b = ri.perDirection(3, d);
        bias = c.let("add(" + ri.rows(b, 0, 4 * h) + ", " + ri.rows(b, 4 * h, 4 * h) + ")");
      }
      std::string pi, po, pf;
      if (c.hasInput(7)) {
        std::string p = ri.perDirection(7, d);
        pi = ri.rows(p, 0, h), po = ri.rows(p, h, h), pf = ri.rows(p, 2 * h, h);
      }
      std::string res = runDirection(ri, d, {ri.initial(5, d), ri.initial(6, d)},
                                     [&](NodeContext& b, const Recurrence& rec, const std::vector<std::string>& s) {
        const std::string &hPrev = s[0], &cPrev = s[1];
        std::string g = "add(nn.dense(" + ri.stepInput(rec, d) + ", " + w + "), nn.dense(" + hPrev + ", " + r + "))";
        if (!bias.empty()) g = "add(" + g + ", " + bias + ")";
        std::string parts = b.let("split(" + g + ", indices_or_sections=4, axis=1)");
        auto peep = [&](const std::string& gate, const std::string& p, const std::string& cell) {
          return p.empty() ? gate : "add(" + gate + ", multiply(" + p + ", " + cell + "))";
        };
        std::string i = b.let(ri.act(d, 0, peep(parts + ".0", pi, cPrev)));
        std::string f = inputForget ? b.let("subtract(" + c.literal(1, ri.dtype()) + ", " + i + ")")
                                    : b.let(ri.act(d, 0, peep(parts + ".2", pf, cPrev)));
        std::string cell = b.let("add(multiply(" + f + ", " + cPrev + "), multiply(" + i + ", " + ri.act(d, 1, parts + ".3") + "))");
        std::string o = b.let(ri.act(d, 0, peep(parts + ".1", po, cell)));
        std::string hNext = b.let("multiply(" + o + ", " + ri.act(d, 2, cell) + ")");
        return std::vector<std::string>{hNext, cell};
      });
      std::string y = res + ".2";
      ys.push_back(ri.direction(d).reverse ? "reverse(" + y + ", axis=0)" : y);
      finals[0].push_back(res + ".0");
      finals[1].push_back(res + ".1");
    }
    ri.emitOutputs(ys, finals);
  };
  t["GRU"] = [](NodeContext& c) {
    RecurrentImport ri(c, 3, {"Sigmoid", "Tanh"});
    int64_t h = ri.hidden();
    bool linearBeforeReset = c.intAttr("linear_before_reset", 0) != 0;
    std::vector<std::string> ys;
    std::vector<std::vector<std::string>> finals(1);
    for (size_t d = 0; d < ri.directions(); ++d) {
      std::string w = ri.perDirection(1, d), r = ri.perDirection(2, d);
      std::string rz = ri.rows(r, 0, h), rr = ri.rows(r, h, h), rh = ri.rows(r, 2 * h, h);
      std::string wb, rbz, rbr, rbh;
      if (c.hasInput(3)) {
        std::string b = ri.perDirection(3, d);
        wb = ri.rows(b, 0, 3 * h);
        rbz = ri.rows(b, 3 * h, h), rbr = ri.rows(b, 4 * h, h), rbh = ri.rows(b, 5 * h, h);
      }
      auto plus = [](const std::string& a, const std::string& bias) { return bias.empty() ? a : "add(" + a + ", " + bias + ")"; };
      std::string res = runDirection(ri, d, {ri.initial(5, d)}, [&](NodeContext& b, const Recurrence& rec, const std::vector<std::string>& s) {
        const std::string& hPrev = s[0];
        std::string gx = b.let("split(" + plus("nn.dense(" + ri.stepInput(rec, d) + ", " + w + ")", wb) + ", indices_or_sections=3, axis=1)");
        std::string z = b.let(ri.act(d, 0, plus("add(" + gx + ".0, nn.dense(" + hPrev + ", " + rz + "))", rbz)));
        std::string rg = b.let(ri.act(d, 0, plus("add(" + gx + ".1, nn.dense(" + hPrev + ", " + rr + "))", rbr)));
        std::string hh = linearBeforeReset
                             ? "add(" + gx + ".2, multiply(" + rg + ", " + plus("nn.dense(" + hPrev + ", " + rh + ")", rbh) + "))"
                             : plus("add(" + gx + ".2, nn.dense(multiply(" + rg + ", " + hPrev + "), " + rh + "))", rbh);
        std::string cand = b.let(ri.act(d, 1, hh));
        std::string hNext = b.let("add(multiply(subtract(" + c.literal(1, ri.dtype()) + ", " + z + "), " + cand + "), multiply(" + z + ", " + hPrev + "))");
        return std::vector<std::string>{hNext};
      });
      std::string y = res + ".1";
      ys.push_back(ri.direction(d).reverse ? "reverse(" + y + ", axis=0)" : y);
      finals[0].push_back(res + ".0");
    }
    ri.emitOutputs(ys, finals);
  };
  t["RNN"] = [](NodeContext& c) {
    RecurrentImport ri(c, 1, {"Tanh"});
    int64_t h = ri.hidden();
    std::vector<std::string> ys;
    std::vector<std::vector<std::string>> finals(1);
    for (size_t d = 0; d < ri.directions(); ++d) {
      std::string w = ri.perDirection(1, d), r = ri.perDirection(2, d), bias;
      if (c.hasInput(3)) {
        std::string b = ri.perDirection(3, d);
        bias = c.let("add(" + ri.rows(b, 0, h) + ", " + ri.rows(b, h, h) + ")");
      }
      std::string res = runDirection(ri, d, {ri.initial(5, d)}, [&](NodeContext& b, const Recurrence& rec, const std::vector<std::string>& s) {
        std::string g = "add(nn.dense(" + ri.stepInput(rec, d) + ", " + w + "), nn.dense(" + s[0] + ", " + r + "))";
        if (!bias.empty()) g = "add(" + g + ", " + bias + ")";
        return std::vector<std::string>{b.let(ri.act(d, 0, g))};
      });
      std::string y = res + ".1";
      ys.push_back(ri.direction(d).reverse ? "reverse(" + y + ", axis=0)" : y);
      finals[0].push_back(res + ".0");
    }
    ri.emitOutputs(ys, finals);
  };
}

}  // namespace kiln::onnx_import
