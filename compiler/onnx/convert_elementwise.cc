// ONNX element-wise operators: unary math, activations, arithmetic, comparison, Cast, Clip, Where.
#include <cmath>
#include <limits>

#include "compiler/onnx/graph_importer.h"
#include "compiler/onnx/onnx_tensor.h"

namespace kiln::onnx_import {
namespace {

// Numpy broadcasting of two known shapes; nullopt when a rank is unknown.
std::optional<std::vector<int64_t>> broadcastShape(const Value& a, const Value& b) {
  if (!a.shape || !b.shape) return std::nullopt;
  const auto &x = *a.shape, &y = *b.shape;
  size_t r = std::max(x.size(), y.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t dx = i < r - x.size() ? 1 : x[i - (r - x.size())];
    int64_t dy = i < r - y.size() ? 1 : y[i - (r - y.size())];
    out[i] = dx == 1 ? dy : dy == 1 ? dx : (dx < 0 ? dy : dx);
  }
  return out;
}

std::string call(const std::string& op, std::initializer_list<std::string> args, const std::string& attrs = "") {
  std::string s = op + "(";
  size_t i = 0;
  for (const auto& a : args) s += (i++ ? ", " : "") + a;
  if (!attrs.empty()) s += ", " + attrs;
  return s + ")";
}

void unary(std::map<std::string, Converter>& t, const char* onnx, const char* kiln) {
  t[onnx] = [kiln](NodeContext& c) {
    const Value& x = c.input(0);
    c.emit(0, call(kiln, {c.ref(0)}), x.dtype, x.shape);
  };
}

void binary(std::map<std::string, Converter>& t, const char* onnx, const char* kiln, bool boolResult) {
  t[onnx] = [kiln, boolResult](NodeContext& c) {
    const Value &a = c.input(0), &b = c.input(1);
    std::string rb = c.ref(1);
    // Pow's exponent may have another type than its base; Kiln's operators take one.
    if (b.dtype != a.dtype) {
      if (std::string(kiln) != "power") c.fail("the operands' element types differ");
      rb = call("cast", {rb}, "dtype=\"" + std::string(dtypeName(a.dtype)) + "\"");
    }
    c.emit(0, call(kiln, {c.ref(0), rb}), boolResult ? DType::Bool : a.dtype, broadcastShape(a, b));
  };
}

// Max, Min, Sum, Mean: one or more operands, broadcast together.
void variadic(std::map<std::string, Converter>& t, const char* onnx, const char* kiln, bool mean) {
  t[onnx] = [kiln, mean](NodeContext& c) {
    if (c.numInputs() == 0) c.fail("needs at least one input");
    std::string acc = c.ref(0);
    Value shape = c.input(0);
    for (size_t i = 1; i < c.numInputs(); ++i) {
      shape.shape = broadcastShape(shape, c.input(i));
      acc = c.let(call(kiln, {acc, c.ref(i)}));
    }
    DType dt = c.input(0).dtype;
    if (mean) acc = call("divide", {acc, c.literal(static_cast<double>(c.numInputs()), dt)});
    else if (c.numInputs() == 1) acc = call("copy", {acc});
    c.emit(0, acc, dt, shape.shape);
  };
}

// An activation written as an expression of x (`X` in the template).
using Formula = std::string (*)(NodeContext& c, const std::string& x, DType t);

void formula(std::map<std::string, Converter>& t, const char* onnx, Formula f) {
  t[onnx] = [f](NodeContext& c) {
    const Value& x = c.input(0);
    c.emit(0, f(c, c.ref(0), x.dtype), x.dtype, x.shape);
  };
}

std::string lit(NodeContext& c, double v, DType t) { return c.literal(v, t); }

}  // namespace

void registerElementwiseConverters(std::map<std::string, Converter>& t) {
  const std::pair<const char*, const char*> unaries[] = {
      {"Abs", "abs"},     {"Neg", "negative"}, {"Exp", "exp"},      {"Log", "log"},          {"Sqrt", "sqrt"},
      {"Tanh", "tanh"},   {"Sigmoid", "sigmoid"}, {"Relu", "nn.relu"}, {"Floor", "floor"},  {"Ceil", "ceil"},
      {"Erf", "erf"},     {"Sin", "sin"},      {"Cos", "cos"},      {"Not", "logical_not"}, {"Round", "round"},
  };
  for (auto [o, k] : unaries) unary(t, o, k);

  const std::tuple<const char*, const char*, bool> binaries[] = {
      {"Add", "add", false},          {"Sub", "subtract", false},   {"Mul", "multiply", false},
      {"Div", "divide", false},       {"Pow", "power", false},      {"Equal", "equal", true},
      {"Less", "less", true},         {"Greater", "greater", true}, {"LessOrEqual", "less_equal", true},
      {"GreaterOrEqual", "greater_equal", true}, {"And", "logical_and", true}, {"Or", "logical_or", true},
      {"Xor", "not_equal", true},
  };
  for (auto [o, k, b] : binaries) binary(t, o, k, b);

  variadic(t, "Max", "maximum", false);
  variadic(t, "Min", "minimum", false);
  variadic(t, "Sum", "add", false);
  variadic(t, "Mean", "add", true);

  t["Mod"] = [](NodeContext& c) {
    const Value &a = c.input(0), &b = c.input(1);
    // fmod=1: the remainder takes the dividend's sign (C fmod); 0: the divisor's (Python).
    bool fmod = c.intAttr("fmod", 0) != 0;
    if (!fmod && isFloat(a.dtype)) c.fail("fmod=0 is defined only for integers");
    c.emit(0, call(fmod ? "mod" : "floor_mod", {c.ref(0), c.ref(1)}), a.dtype, broadcastShape(a, b));
  };
  t["Where"] = [](NodeContext& c) {
    const Value &x = c.input(1), &y = c.input(2);
    Value xy;
    xy.shape = broadcastShape(x, y);
    c.emit(0, call("where", {c.ref(0), c.ref(1), c.ref(2)}), x.dtype, broadcastShape(c.input(0), xy));
  };
  t["Identity"] = [](NodeContext& c) { c.alias(0, c.input(0)); };

  formula(t, "Reciprocal", [](NodeContext& c, const std::string& x, DType d) { return call("divide", {lit(c, 1, d), x}); });
  formula(t, "Softplus", [](NodeContext& c, const std::string& x, DType d) {
    return call("log", {call("add", {call("exp", {x}), lit(c, 1, d)})});
  });
  formula(t, "Softsign", [](NodeContext& c, const std::string& x, DType d) {
    return call("divide", {x, call("add", {lit(c, 1, d), call("abs", {x})})});
  });
  formula(t, "Sign", [](NodeContext& c, const std::string& x, DType d) {
    std::string zero = lit(c, 0, d);
    return call("where", {call("greater", {x, zero}), lit(c, 1, d),
                          call("where", {call("less", {x, zero}), lit(c, -1, d), zero})});
  });
  formula(t, "LeakyRelu", [](NodeContext& c, const std::string& x, DType) {
    return call("nn.leaky_relu", {x}, "alpha=" + floatText(c.floatAttr("alpha", 0.01f)));
  });
  formula(t, "Elu", [](NodeContext& c, const std::string& x, DType d) {
    double alpha = c.floatAttr("alpha", 1.0f);
    return call("where", {call("less", {x, lit(c, 0, d)}),
                          call("multiply", {lit(c, alpha, d), call("subtract", {call("exp", {x}), lit(c, 1, d)})}), x});
  });
  formula(t, "Selu", [](NodeContext& c, const std::string& x, DType d) {
    double alpha = c.floatAttr("alpha", 1.67326319217681884765625f), gamma = c.floatAttr("gamma", 1.05070102214813232421875f);
    std::string neg = call("multiply", {lit(c, alpha, d), call("subtract", {call("exp", {x}), lit(c, 1, d)})});
    return call("multiply", {lit(c, gamma, d), call("where", {call("less_equal", {x, lit(c, 0, d)}), neg, x})});
  });
  formula(t, "Celu", [](NodeContext& c, const std::string& x, DType d) {
    double alpha = c.floatAttr("alpha", 1.0f);
    std::string e = call("multiply", {lit(c, alpha, d), call("subtract", {call("exp", {call("divide", {x, lit(c, alpha, d)})}), lit(c, 1, d)})});
    return call("add", {call("maximum", {x, lit(c, 0, d)}), call("minimum", {e, lit(c, 0, d)})});
  });
  formula(t, "HardSigmoid", [](NodeContext& c, const std::string& x, DType d) {
    double alpha = c.floatAttr("alpha", 0.2f), beta = c.floatAttr("beta", 0.5f);
    return call("clip", {call("add", {call("multiply", {lit(c, alpha, d), x}), lit(c, beta, d)})}, "a_min=0f, a_max=1f");
  });
  formula(t, "HardSwish", [](NodeContext& c, const std::string& x, DType d) {
    std::string h = call("clip", {call("add", {call("multiply", {lit(c, 1.0 / 6, d), x}), lit(c, 0.5, d)})}, "a_min=0f, a_max=1f");
    return call("multiply", {x, h});
  });
  formula(t, "ThresholdedRelu", [](NodeContext& c, const std::string& x, DType d) {
    return call("where", {call("greater", {x, lit(c, c.floatAttr("alpha", 1.0f), d)}), x, lit(c, 0, d)});
  });
  formula(t, "Shrink", [](NodeContext& c, const std::string& x, DType d) {
    double bias = c.floatAttr("bias", 0.0f), lambd = c.floatAttr("lambd", 0.5f);
    return call("where", {call("less", {x, lit(c, -lambd, d)}), call("add", {x, lit(c, bias, d)}),
                          call("where", {call("greater", {x, lit(c, lambd, d)}), call("subtract", {x, lit(c, bias, d)}), lit(c, 0, d)})});
  });
  formula(t, "Tan", [](NodeContext&, const std::string& x, DType) { return call("divide", {call("sin", {x}), call("cos", {x})}); });
  formula(t, "Sinh", [](NodeContext& c, const std::string& x, DType d) {
    return call("multiply", {lit(c, 0.5, d), call("subtract", {call("exp", {x}), call("exp", {call("negative", {x})})})});
  });
  formula(t, "Cosh", [](NodeContext& c, const std::string& x, DType d) {
    return call("multiply", {lit(c, 0.5, d), call("add", {call("exp", {x}), call("exp", {call("negative", {x})})})});
  });
  formula(t, "Asinh", [](NodeContext& c, const std::string& x, DType d) {
    return call("log", {call("add", {x, call("sqrt", {call("add", {call("multiply", {x, x}), lit(c, 1, d)})})})});
  });
  formula(t, "Acosh", [](NodeContext& c, const std::string& x, DType d) {
    return call("log", {call("add", {x, call("sqrt", {call("subtract", {call("multiply", {x, x}), lit(c, 1, d)})})})});
  });
  formula(t, "Atanh", [](NodeContext& c, const std::string& x, DType d) {
    return call("multiply", {lit(c, 0.5, d), call("log", {call("divide", {call("add", {lit(c, 1, d), x}), call("subtract", {lit(c, 1, d), x})})})});
  });

  t["PRelu"] = [](NodeContext& c) {
    const Value &x = c.input(0), &s = c.input(1);
    std::string rx = c.ref(0), slope = c.ref(1);
    // A per-channel slope of [C] (as opset 6 defined it, and exporters still write)
    // runs along axis 1, not the last axis.
    if (x.shape && s.shape && s.shape->size() == 1 && x.shape->size() > 2 && (*s.shape)[0] != 1 &&
        (*s.shape)[0] != x.shape->back() && (*s.shape)[0] == (*x.shape)[1]) {
      std::vector<int64_t> to(x.shape->size() - 1, 1);
      to[0] = -1;
      slope = "reshape(" + slope + ", newshape=" + intList(to) + ")";
    }
    c.emit(0, call("where", {call("less", {rx, c.literal(0, x.dtype)}), call("multiply", {rx, slope}), rx}), x.dtype,
           broadcastShape(x, s));
  };
  t["IsNaN"] = [](NodeContext& c) {
    std::string x = c.ref(0);
    c.emit(0, call("not_equal", {x, x}), DType::Bool, c.input(0).shape);
  };
  t["IsInf"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    std::string rx = c.ref(0), inf = c.literal(std::numeric_limits<double>::infinity(), x.dtype);
    bool neg = c.intAttr("detect_negative", 1) != 0, pos = c.intAttr("detect_positive", 1) != 0;
    std::string e = neg && pos ? call("equal", {call("abs", {rx}), inf})
                    : pos      ? call("equal", {rx, inf})
                    : neg      ? call("equal", {rx, call("negative", {inf})})
                               : call("not_equal", {rx, rx});
    if (!neg && !pos) e = call("logical_and", {e, call("equal", {rx, rx})});  // always false, NaN included
    c.emit(0, e, DType::Bool, x.shape);
  };
  t["Cast"] = [](NodeContext& c) {
    auto to = dtypeFromOnnx(static_cast<int>(c.intAttr("to", 0)));
    if (!to) c.fail("cannot cast to " + onnxTypeName(static_cast<int>(c.intAttr("to", 0))));
    const Value& x = c.input(0);
    c.emit(0, call("cast", {c.ref(0)}, "dtype=\"" + std::string(dtypeName(*to)) + "\""), *to, x.shape);
  };
  t["CastLike"] = [](NodeContext& c) {
    DType to = c.input(1).dtype;
    c.emit(0, call("cast", {c.ref(0)}, "dtype=\"" + std::string(dtypeName(to)) + "\""), to, c.input(0).shape);
  };
  t["Clip"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    std::string e = c.ref(0);
    if (c.opset() < 11) {
      float lo = c.floatAttr("min", -std::numeric_limits<float>::max()), hi = c.floatAttr("max", std::numeric_limits<float>::max());
      e = call("minimum", {call("maximum", {e, c.literal(lo, x.dtype)}), c.literal(hi, x.dtype)});
    } else {
      // min and max are optional inputs; either may be computed.
      if (c.hasInput(1)) e = call("maximum", {e, c.ref(1)});
      if (c.hasInput(2)) e = call("minimum", {e, c.ref(2)});
      if (!c.hasInput(1) && !c.hasInput(2)) e = call("copy", {e});
    }
    c.emit(0, e, x.dtype, x.shape);
  };
}

}  // namespace kiln::onnx_import
