// FuseOps: which operators land in which kernel, and that fused and unfused
// evaluation of the same program give the same results.
#include <unordered_map>

#include "compiler/passes/fuse_ops.h"
#include "compiler/passes/to_fused_function.h"
#include "compiler/pipeline.h"
#include "kiln/compile.h"
#include "kiln/vm.h"
#include "kernel_util.h"

using namespace kiln;
using namespace kiln::ir;

namespace {

// Operator names of every kernel of @main, e.g. {"nn.dense nn.bias_add nn.relu", "nn.softmax"}.
std::vector<std::string> kernelsOf(const std::string& src, const compiler::FuseOptions& options = {}) {
  auto m = test::check(src);
  auto fused = compiler::fuseOps(*m, options);
  std::vector<std::string> out;
  for (const Function* fn : compiler::primitiveFunctions(*fused)) {
    kernel_ir::FusedFunction f = compiler::toFusedFunction(fn, "k");
    std::string ops;
    for (const auto& n : f.nodes)
      if (!n.isConstant()) ops += (ops.empty() ? "" : " ") + n.op->name;
    out.push_back(ops);
  }
  return out;
}

// Evaluates a straight-line fused function body: lets, kernel calls, tuples.
class KernelEvaluator {
 public:
  std::vector<Tensor> eval(const Expr* e) {
    while (e->kind == ExprKind::Let) {
      auto* l = static_cast<const Let*>(e);
      env_[l->var] = eval(l->value);
      e = l->body;
    }
    switch (e->kind) {
      case ExprKind::Var: return env_.at(static_cast<const Var*>(e));
      case ExprKind::Tuple: {
        std::vector<Tensor> out;
        for (const Expr* f : static_cast<const Tuple*>(e)->fields) {
          auto v = eval(f);
          REQUIRE(v.size() == 1);
          out.push_back(v[0]);
        }
        return out;
      }
      case ExprKind::TupleGet: {
        auto* g = static_cast<const TupleGet*>(e);
        return {eval(g->tuple).at(g->index)};
      }
      case ExprKind::Call: {
        auto* c = static_cast<const Call*>(e);
        REQUIRE(c->callee->kind == ExprKind::Function);
        auto* fn = static_cast<const Function*>(c->callee);
        REQUIRE(fn->primitive);
        std::vector<Tensor> args;
        for (const Expr* a : c->args) {
          auto v = eval(a);
          REQUIRE(v.size() == 1);
          args.push_back(v[0]);
        }
        ++kernelCalls;
        return (*jit::KernelCache::global().get(compiler::toFusedFunction(fn, "k")))(args);
      }
      default: FAIL("unexpected expression in a straight-line program"); return {};
    }
  }
  void bind(const Var* v, Tensor t) { env_[v] = {std::move(t)}; }
  int kernelCalls = 0;

 private:
  std::unordered_map<const Var*, std::vector<Tensor>> env_;
};

std::vector<Tensor> evaluate(const Module& fused, const std::vector<Tensor>& inputs, int* calls) {
  const GlobalFunction* main = fused.findFunction("main");
  KernelEvaluator ev;
  for (size_t i = 0; i < inputs.size(); ++i) ev.bind(main->fn->params[i], inputs[i]);
  auto out = ev.eval(main->fn->body);
  *calls = ev.kernelCalls;
  return out;
}

}  // namespace

TEST_CASE("fusion groups follow the operator patterns") {
  // A dense takes its bias and activation as an epilogue.
  CHECK(kernelsOf("def @main(%x: Tensor[(?, 8), float32], %w: Tensor[(4, 8), float32], %b: Tensor[(4,), float32]) {"
                  " nn.relu(nn.bias_add(nn.dense(%x, %w), %b)) }") ==
        std::vector<std::string>{"nn.dense nn.bias_add nn.relu"});
  // Element-wise producers fuse into a reduction, and an element-wise epilogue after it.
  CHECK(kernelsOf("def @main(%x: Tensor[(?, 8), float32]) { sqrt(sum(exp(%x) * 2f, axis=[1])) }") ==
        std::vector<std::string>{"exp multiply sum sqrt"});
  // A value used twice is computed once, in a kernel of its own.
  CHECK(kernelsOf("def @main(%x: Tensor[(8,), float32]) { let %a = exp(%x); (%a + 1f, %a * 2f) }") ==
        std::vector<std::string>{"exp", "add", "multiply"});
  // Two anchors never share a kernel; opaque operators stand alone; dense inputs are not inlined.
  CHECK(kernelsOf("def @main(%x: Tensor[(4, 8), float32], %w: Tensor[(8, 8), float32]) {"
                  " nn.softmax(sum(nn.dense(tanh(%x), %w), axis=[1], keepdims=True)) }") ==
        std::vector<std::string>{"tanh", "nn.dense", "sum", "nn.softmax"});
  // Injective operators fuse (reshape, transpose, concatenate through its tuple).
  CHECK(kernelsOf("def @main(%x: Tensor[(2, 6), float32], %y: Tensor[(3, 2), float32]) {"
                  " concatenate((transpose(reshape(%x, newshape=[6, 2])), transpose(%y * 2f)), axis=1) }") ==
        std::vector<std::string>{"reshape transpose multiply transpose concatenate"});
  // A product's data operand that is a concatenation (with what fused into it)
  // is copied by the product's kernel; used twice, or feeding a convolution, it
  // stays a kernel of its own.
  CHECK(kernelsOf("def @main(%x: Tensor[(1, 8), float32], %y: Tensor[(1, 8), float32], %w: Tensor[(4, 16), float32]) {"
                  " tanh(nn.dense(concatenate((tanh(%x), %y), axis=1), %w)) }") ==
        std::vector<std::string>{"tanh concatenate nn.dense tanh"});
  CHECK(kernelsOf("def @main(%x: Tensor[(1, 8), float32], %y: Tensor[(1, 8), float32], %w: Tensor[(4, 16), float32]) {"
                  " let %c = concatenate((%x, %y), axis=1); (nn.dense(%c, %w), %c) }") ==
        std::vector<std::string>{"concatenate", "nn.dense"});
  CHECK(kernelsOf("def @main(%x: Tensor[(1, 2, 4, 4), float32], %y: Tensor[(1, 2, 4, 4), float32], %w: Tensor[(3, 4, 1, 1), float32]) {"
                  " nn.conv2d(concatenate((%x, %y), axis=1), %w) }") ==
        std::vector<std::string>{"concatenate", "nn.conv2d"});
  // Only the data operand: a concatenated weight stays outside.
  CHECK(kernelsOf("def @main(%x: Tensor[(1, 8), float32], %u: Tensor[(2, 8), float32], %v: Tensor[(2, 8), float32]) {"
                  " nn.dense(%x, concatenate((%u, %v), axis=0)) }") ==
        std::vector<std::string>{"concatenate", "nn.dense"});
  // Control flow bounds kernels: nothing fuses across a branch.
  CHECK(kernelsOf("def @main(%c: bool, %x: Tensor[(8,), float32]) { let %a = exp(%x); if (%c) { %a + 1f } else { %a } }") ==
        std::vector<std::string>{"exp", "add"});
}

TEST_CASE("fused and unfused evaluation give the same results") {
  std::mt19937 rng(51);
  const std::string src =
      "def @main(%x: Tensor[(?, 16), float32], %w: Tensor[(12, 16), float32], %b: Tensor[(12,), float32],"
      "          %g: Tensor[(12,), float32]) {\n"
      "  let %h = tanh(nn.bias_add(nn.dense(%x * 0.5f, %w), %b));\n"
      "  let %n = nn.layer_norm(%h, %g, %b);\n"
      "  let %s = split(%n, indices_or_sections=3, axis=1);\n"
      "  let %m = max(%s.0 * sigmoid(%s.1), axis=[1], keepdims=True);\n"
      "  (nn.log_softmax(%s.2 - %m), mean(exp(%h), axis=[0]), concatenate((%s.0, %s.2), axis=1))\n"
      "}";
  auto m = test::check(src);
  auto fused = compiler::fuseOps(*m);
  compiler::FuseOptions none;
  none.fuse = false;
  auto unfused = compiler::fuseOps(*m, none);
  std::vector<Tensor> in{test::randomTensor(DType::Float32, {5, 16}, rng), test::randomTensor(DType::Float32, {12, 16}, rng),
                         test::randomTensor(DType::Float32, {12}, rng), test::randomTensor(DType::Float32, {12}, rng)};
  int fusedCalls = 0, unfusedCalls = 0;
  auto a = evaluate(*fused, in, &fusedCalls);
  auto b = evaluate(*unfused, in, &unfusedCalls);
  CHECK(fusedCalls < unfusedCalls);
  MESSAGE("kernel calls: fused " << fusedCalls << ", unfused " << unfusedCalls);
  REQUIRE(a.size() == b.size());
  for (size_t o = 0; o < a.size(); ++o) {
    REQUIRE(a[o].shape() == b[o].shape());
    for (int64_t i = 0; i < a[o].numel(); ++i)
      CHECK(test::getElement(a[o], i) == doctest::Approx(test::getElement(b[o], i)).epsilon(1e-5));
  }
}

TEST_CASE("products reading a concatenation they copied themselves give the unfused results") {
  std::mt19937 rng(52);
  struct Case {
    std::string src;
    std::vector<std::vector<int64_t>> shapes;
  };
  const std::vector<Case> cases = {
      // A tree node: K = 17 + 23, bias and tanh after the product.
      {"def @main(%l: Tensor[(1, 17), float32], %r: Tensor[(1, 23), float32], %w: Tensor[(9, 40), float32], %b: Tensor[(9,), float32]) {"
       " tanh(nn.bias_add(nn.dense(concatenate((%l, %r), axis=1), %w), %b)) }",
       {{1, 17}, {1, 23}, {9, 40}, {9}}},
      // `?` rows; the parts computed in the same kernel; bias and ReLU in the product.
      {"def @main(%x: Tensor[(?, 8), float32], %h: Tensor[(?, 5), float32], %w: Tensor[(7, 13), float32], %b: Tensor[(7,), float32]) {"
       " nn.relu(nn.bias_add(nn.dense(concatenate((%x * 2f, tanh(%h)), axis=1), %w), %b)) }",
       {{3, 8}, {3, 5}, {7, 13}, {7}}},
      // Rows concatenated (along M), and a `?` extent along the axis (no copy nests per part).
      {"def @main(%x: Tensor[(?, 6), float32], %y: Tensor[(2, 6), float32], %w: Tensor[(5, 6), float32]) {"
       " nn.dense(concatenate((%x, %y), axis=0), %w) }",
       {{4, 6}, {2, 6}, {5, 6}}},
      {"def @main(%x: Tensor[(3, ?), float32], %y: Tensor[(3, 4), float32], %w: Tensor[(10, 5), float32]) {"
       " nn.matmul(concatenate((%x, %y), axis=1), %w) }",
       {{3, 6}, {3, 4}, {10, 5}}},
      {"def @main(%x: Tensor[(2, 3, 4), float32], %y: Tensor[(2, 3, 5), float32], %w: Tensor[(2, 6, 9), float32]) {"
       " nn.batch_matmul(concatenate((%x, %y), axis=2), %w) }",
       {{2, 3, 4}, {2, 3, 5}, {2, 6, 9}}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.src);
    auto m = test::check(c.src);
    auto fused = compiler::fuseOps(*m);
    compiler::FuseOptions none;
    none.fuse = false;
    auto unfused = compiler::fuseOps(*m, none);
    std::vector<Tensor> in;
    for (const auto& shape : c.shapes) in.push_back(test::randomTensor(DType::Float32, shape, rng));
    int fusedCalls = 0, unfusedCalls = 0;
    auto a = evaluate(*fused, in, &fusedCalls);
    auto b = evaluate(*unfused, in, &unfusedCalls);
    CHECK(fusedCalls == 1);
    REQUIRE(a.size() == 1);
    REQUIRE(b.size() == 1);
    REQUIRE(a[0].shape() == b[0].shape());
    for (int64_t i = 0; i < a[0].numel(); ++i)
      CHECK(test::getElement(a[0], i) == doctest::Approx(test::getElement(b[0], i)).epsilon(1e-5));
  }
}

TEST_CASE("take(shape_of(x), i) on a static dimension is a literal - on a ? dimension it stays a kernel") {
  auto kernelNames = [](const std::string& src) {
    auto exe = kiln::compile(src, "t.relay");
    std::string names;
    for (const KernelInfo& k : exe->kernels()) names += k.function->name + " ";
    return std::pair{exe, names};
  };
  const char* fixed = R"(
def @main(%x: Tensor[(32, 1, 7), float32]) {
  (take(shape_of(%x), 0), take(shape_of(%x), -1), take(shape_of(%x), 5, mode="wrap"),
   take(shape_of(%x, dtype="int64"), 9), %x * 2f)
})";
  auto [exe, names] = kernelNames(fixed);
  CHECK(names.find("shape_of") == std::string::npos);
  CHECK(names.find("take") == std::string::npos);
  kiln::VirtualMachine vm(exe);
  Value r = vm.invoke("main", {Value(Tensor::empty(DType::Float32, {32, 1, 7}))});
  // clip clamps -1 to 0; wrap takes 5 mod 3 = 2; 9 clamps to the last.
  CHECK(exe->format(r.fields()[0]) == "i32=32");
  CHECK(exe->format(r.fields()[1]) == "i32=32");
  CHECK(exe->format(r.fields()[2]) == "i32=7");
  CHECK(exe->format(r.fields()[3]) == "i64=7");
  // A `?` dimension is known only at run time; a static one beside it still folds.
  auto [dyn, dynNames] = kernelNames("def @main(%x: Tensor[(?, 5), float32]) { (take(shape_of(%x), 0), take(shape_of(%x), 1)) }");
  CHECK(dynNames.find("shape_of") != std::string::npos);
  kiln::VirtualMachine dvm(dyn);
  Value d = dvm.invoke("main", {Value(Tensor::empty(DType::Float32, {3, 5}))});
  CHECK(dyn->format(d) == "(i32=3, i32=5)");
  CHECK(dyn->kernels().size() == 2);  // shape_of and its take, for the ? dimension only
}

TEST_CASE("a convolution with a bias/ReLU epilogue feeding another is one kernel with it (CPU devices only)") {
  const std::string chain =
      "def @main(%x: Tensor[(?, 3, 16, 16), float32], %w1: Tensor[(8, 3, 3, 3), float32], %b1: Tensor[(8,), float32],"
      "          %w2: Tensor[(6, 8, 3, 3), float32], %b2: Tensor[(6,), float32]) {"
      " nn.relu(nn.bias_add(nn.conv2d(nn.relu(nn.bias_add(nn.conv2d(%x, %w1, padding=[1, 1]), %b1)), %w2,"
      " strides=[2, 2], padding=[1, 1]), %b2)) }";
  compiler::FuseOptions chains;
  chains.convChains = true;
  CHECK(kernelsOf(chain, chains) ==
        std::vector<std::string>{"nn.conv2d nn.bias_add nn.relu nn.conv2d nn.bias_add nn.relu"});
  CHECK(kernelsOf(chain) == std::vector<std::string>{"nn.conv2d nn.bias_add nn.relu", "nn.conv2d nn.bias_add nn.relu"});
  // The first's output used twice, or an epilogue the convolution does not
  // apply itself: no chain. Three in a row: the first two.
  CHECK(kernelsOf("def @main(%x: Tensor[(1, 3, 8, 8), float32], %w1: Tensor[(4, 3, 3, 3), float32], %w2: Tensor[(4, 4, 3, 3), float32]) {"
                  " let %a = nn.relu(nn.conv2d(%x, %w1)); (nn.conv2d(%a, %w2), %a) }",
                  chains) == std::vector<std::string>{"nn.conv2d nn.relu", "nn.conv2d"});
  CHECK(kernelsOf("def @main(%x: Tensor[(1, 3, 8, 8), float32], %w1: Tensor[(4, 3, 3, 3), float32], %w2: Tensor[(4, 4, 3, 3), float32]) {"
                  " nn.conv2d(nn.conv2d(%x, %w1) * 2f, %w2) }",
                  chains) == std::vector<std::string>{"nn.conv2d multiply", "nn.conv2d"});
  CHECK(kernelsOf("def @main(%x: Tensor[(1, 3, 12, 12), float32], %w1: Tensor[(4, 3, 3, 3), float32],"
                  " %w2: Tensor[(4, 4, 3, 3), float32], %w3: Tensor[(4, 4, 3, 3), float32]) {"
                  " nn.conv2d(nn.conv2d(nn.conv2d(%x, %w1), %w2), %w3) }",
                  chains) == std::vector<std::string>{"nn.conv2d nn.conv2d", "nn.conv2d"});
  // The pipeline chains where every device is a CPU; with a GPU among them
  // (whose kernels have no such statement) it does not.
  auto convsPerKernel = [&](const std::vector<Device>& devices) {
    CompileOptions o;
    o.devices = devices;
    compiler::Stages s = compiler::runPasses(chain, "chain.relay", o);
    int most = 0;
    for (const Function* fn : compiler::primitiveFunctions(*s.fused)) {
      int convs = 0;
      for (const auto& n : compiler::toFusedFunction(fn, "k").nodes) convs += !n.isConstant() && n.op->name == "nn.conv2d";
      most = std::max(most, convs);
    }
    return most;
  };
  CHECK(convsPerKernel({Device{}}) == 2);
  CHECK(convsPerKernel({Device{Device::Kind::CudaEmu, 0}}) == 1);
}

TEST_CASE("chained convolutions give the unfused results: fused functions and the compiled program, ? images") {
  std::mt19937 rng(54);
  struct Case {
    std::string src;
    std::vector<int64_t> x, w1, w2;
  };
  const std::vector<Case> cases = {
      // model_bench's CNN, smaller: a stride-2 second, bias and ReLU on both.
      {"def @main(%x: Tensor[(?, 3, 32, 32), float32], %w1: Tensor[(16, 3, 3, 3), float32], %b1: Tensor[(16,), float32],"
       " %w2: Tensor[(12, 16, 3, 3), float32], %b2: Tensor[(12,), float32]) {"
       " nn.relu(nn.bias_add(nn.conv2d(nn.relu(nn.bias_add(nn.conv2d(%x, %w1, padding=[1, 1]), %b1)), %w2,"
       " strides=[2, 2], padding=[1, 1]), %b2)) }",
       {2, 3, 32, 32}, {16, 3, 3, 3}, {12, 16, 3, 3}},
      // No epilogue on the first; the second's output read by an element-wise tail.
      {"def @main(%x: Tensor[(?, 4, 30, 30), float32], %w1: Tensor[(8, 4, 3, 3), float32], %b1: Tensor[(8,), float32],"
       " %w2: Tensor[(5, 8, 3, 3), float32], %b2: Tensor[(5,), float32]) {"
       " tanh(nn.conv2d(nn.conv2d(%x, %w1, padding=[1, 1]), %w2, padding=[1, 1])) }",
       {3, 4, 30, 30}, {8, 4, 3, 3}, {5, 8, 3, 3}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.src);
    std::vector<Tensor> in{test::randomTensor(DType::Float32, c.x, rng), test::randomTensor(DType::Float32, c.w1, rng),
                           test::randomTensor(DType::Float32, {c.w1[0]}, rng), test::randomTensor(DType::Float32, c.w2, rng),
                           test::randomTensor(DType::Float32, {c.w2[0]}, rng)};
    auto m = test::check(c.src);
    compiler::FuseOptions chains, none;
    chains.convChains = true;
    none.fuse = false;
    int chainedCalls = 0, unfusedCalls = 0;
    auto a = evaluate(*compiler::fuseOps(*m, chains), in, &chainedCalls);
    auto b = evaluate(*compiler::fuseOps(*m, none), in, &unfusedCalls);
    CHECK(chainedCalls < unfusedCalls);
    // The whole pipeline (chains on for a CPU), the weights as constants.
    CompileOptions o;
    const char* weights[] = {"w1", "b1", "w2", "b2"};  // parameters 1..4
    for (size_t i = 0; i < 4; ++i) o.params[weights[i]] = in[i + 1];
    VirtualMachine vm(kiln::compile(c.src, "chain.relay", o));
    Tensor run = vm.invoke("main", {Value(in[0])}).tensor();
    REQUIRE(a.size() == 1);
    REQUIRE(b.size() == 1);
    REQUIRE(a[0].shape() == b[0].shape());
    REQUIRE(run.shape() == b[0].shape());
    int64_t wrong = 0;
    for (int64_t i = 0; i < b[0].numel(); ++i) {
      double want = test::getElement(b[0], i);
      wrong += !(std::fabs(test::getElement(a[0], i) - want) <= 1e-4 * std::max(1.0, std::fabs(want)));
      wrong += !(std::fabs(test::getElement(run, i) - want) <= 1e-4 * std::max(1.0, std::fabs(want)));
    }
    CHECK(wrong == 0);
  }
}
