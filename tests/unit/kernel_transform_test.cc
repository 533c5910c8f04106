// Shape and data-movement kernels against reference index mappings, with dynamic
// dimensions, size-0 fields and out-of-range indices; creation operators.
#include <functional>

#include "kernel_util.h"

using namespace kiln;
using test::getElement;

namespace {

Tensor iota(DType dt, std::initializer_list<int64_t> shape) {
  Tensor t = Tensor::empty(dt, shape);
  for (int64_t i = 0; i < t.numel(); ++i) test::setElement(t, i, static_cast<double>(i));
  return t;
}

// Element `index` of a row-major tensor.
double at(const Tensor& t, std::initializer_list<int64_t> index) {
  int64_t flat = 0;
  size_t d = 0;
  for (int64_t i : index) flat = flat * t.shape()[d++] + i;
  return getElement(t, flat);
}

// Calls want(multi-index) for every element of `got` and compares.
void expectAll(const Tensor& got, const std::function<double(const std::vector<int64_t>&)>& want) {
  std::vector<int64_t> idx(got.rank(), 0);
  for (int64_t i = 0; i < got.numel(); ++i) {
    int64_t rem = i;
    for (size_t d = got.rank(); d-- > 0;) {
      idx[d] = rem % got.shape()[d];
      rem /= got.shape()[d];
    }
    CAPTURE(i);
    CHECK(getElement(got, i) == want(idx));
  }
}

std::vector<Tensor> run(const std::string& src, std::vector<Tensor> inputs) { return (*test::kernelFrom(src))(inputs); }

}  // namespace

TEST_CASE("reshape, transpose, expand_dims, squeeze") {
  Tensor x = iota(DType::Int32, {2, 6});
  Tensor r = run("def @main(%x: Tensor[(?, 6), int32]) { reshape(%x, newshape=[-1, 3, 2]) }", {x})[0];
  CHECK(r.shape() == Shape{2, 3, 2});
  for (int64_t i = 0; i < 12; ++i) CHECK(getElement(r, i) == i);

  Tensor x3 = iota(DType::Int32, {2, 3, 4});
  Tensor t = run("def @main(%x: Tensor[(2, 3, 4), int32]) { transpose(%x, axes=[2, 0, 1]) }", {x3})[0];
  CHECK(t.shape() == Shape{4, 2, 3});
  expectAll(t, [&](const std::vector<int64_t>& i) { return at(x3, {i[1], i[2], i[0]}); });

  Tensor e = run("def @main(%x: Tensor[(?, 6), int32]) { expand_dims(%x, axis=1, num_newaxis=2) }", {x})[0];
  CHECK(e.shape() == Shape{2, 1, 1, 6});
  expectAll(e, [&](const std::vector<int64_t>& i) { return at(x, {i[0], i[3]}); });

  Tensor x13 = iota(DType::Int32, {1, 3, 1});
  Tensor s = run("def @main(%x: Tensor[(1, 3, 1), int32]) { squeeze(%x) }", {x13})[0];
  CHECK(s.shape() == Shape{3});
  expectAll(s, [&](const std::vector<int64_t>& i) { return at(x13, {0, i[0], 0}); });
}

TEST_CASE("concatenate, stack and split, with dynamic and empty fields") {
  Tensor a = iota(DType::Int32, {2, 3}), b = iota(DType::Int32, {4, 3}), z = Tensor::empty(DType::Int32, {0, 3});
  for (int64_t i = 0; i < 12; ++i) test::setElement(b, i, 100 + i);
  Tensor c = run("def @main(%a: Tensor[(2, 3), int32], %b: Tensor[(?, 3), int32], %z: Tensor[(?, 3), int32]) {"
                 " concatenate((%a, %z, %b, %z)) }", {a, b, z})[0];
  CHECK(c.shape() == Shape{6, 3});
  expectAll(c, [&](const std::vector<int64_t>& i) { return i[0] < 2 ? at(a, {i[0], i[1]}) : at(b, {i[0] - 2, i[1]}); });
  Tensor c1 = run("def @main(%a: Tensor[(2, 3), int32], %b: Tensor[(2, ?), int32]) { concatenate((%a, %b), axis=1) }",
                  {a, iota(DType::Int32, {2, 2})})[0];
  CHECK(c1.shape() == Shape{2, 5});
  expectAll(c1, [&](const std::vector<int64_t>& i) { return i[1] < 3 ? at(a, {i[0], i[1]}) : static_cast<double>(i[0] * 2 + i[1] - 3); });

  // Static extents along the axis: one copy nest per field (axis -1, a `?`
  // leading dimension, a fused producer, an empty field in the middle).
  Tensor c2 = run("def @main(%a: Tensor[(?, 3), int32], %b: Tensor[(?, 2), int32], %e: Tensor[(?, 0), int32]) {"
                  " concatenate((%a * 2, %e, %b, %a), axis=-1) }",
                  {a, iota(DType::Int32, {2, 2}), Tensor::empty(DType::Int32, {2, 0})})[0];
  CHECK(c2.shape() == Shape{2, 8});
  expectAll(c2, [&](const std::vector<int64_t>& i) {
    if (i[1] < 3) return 2 * at(a, {i[0], i[1]});
    if (i[1] < 5) return static_cast<double>(i[0] * 2 + i[1] - 3);
    return at(a, {i[0], i[1] - 5});
  });

  Tensor st = run("def @main(%a: Tensor[(2, 3), int32], %b: Tensor[(2, 3), int32]) { stack((%a, %b, %a), axis=1) }",
                  {a, iota(DType::Int32, {2, 3})})[0];
  CHECK(st.shape() == Shape{2, 3, 3});
  expectAll(st, [&](const std::vector<int64_t>& i) { return at(a, {i[0], i[2]}); });

  Tensor x = iota(DType::Int32, {2, 6});
  auto parts = run("def @main(%x: Tensor[(2, ?), int32]) { let %s = split(%x, indices_or_sections=3, axis=1); (%s.0, %s.1, %s.2) }", {x});
  for (int64_t f = 0; f < 3; ++f) {
    CHECK(parts[static_cast<size_t>(f)].shape() == Shape{2, 2});
    expectAll(parts[static_cast<size_t>(f)], [&](const std::vector<int64_t>& i) { return at(x, {i[0], 2 * f + i[1]}); });
  }
  Tensor y = iota(DType::Int32, {6, 2});
  auto pieces = run("def @main(%x: Tensor[(6, 2), int32]) { let %s = split(%x, indices_or_sections=[1, 4]); (%s.0, %s.1, %s.2) }", {y});
  CHECK(pieces[1].shape() == Shape{3, 2});
  expectAll(pieces[1], [&](const std::vector<int64_t>& i) { return at(y, {1 + i[0], i[1]}); });
  expectAll(pieces[2], [&](const std::vector<int64_t>& i) { return at(y, {4 + i[0], i[1]}); });
}

TEST_CASE("strided_slice with strides, negative begins and strides, and axes") {
  Tensor x = iota(DType::Int32, {10, 8});
  Tensor a = run("def @main(%x: Tensor[(10, 8), int32]) { strided_slice(%x, begin=[1, 0], end=[7, 8], strides=[2, 1]) }", {x})[0];
  CHECK(a.shape() == Shape{3, 8});
  expectAll(a, [&](const std::vector<int64_t>& i) { return at(x, {1 + 2 * i[0], i[1]}); });
  Tensor b = run("def @main(%x: Tensor[(?, 8), int32]) { strided_slice(%x, begin=[9], end=[-11], strides=[-1]) }", {x})[0];
  CHECK(b.shape() == Shape{10, 8});
  expectAll(b, [&](const std::vector<int64_t>& i) { return at(x, {9 - i[0], i[1]}); });
  Tensor c = run("def @main(%x: Tensor[(10, 8), int32]) { strided_slice(%x, begin=[-3], end=[10]) }", {x})[0];
  expectAll(c, [&](const std::vector<int64_t>& i) { return at(x, {7 + i[0], i[1]}); });
  Tensor d = run("def @main(%x: Tensor[(10, 8), int32]) { strided_slice(%x, begin=[2], end=[6], strides=[3], axes=[1]) }", {x})[0];
  CHECK(d.shape() == Shape{10, 2});
  expectAll(d, [&](const std::vector<int64_t>& i) { return at(x, {i[0], 2 + 3 * i[1]}); });
}

TEST_CASE("take clips or wraps out-of-range indices - broadcast_to, tile, reverse") {
  Tensor x = iota(DType::Float32, {5, 4});
  Tensor idx = Tensor::empty(DType::Int32, {2, 3});
  int32_t vals[] = {0, 4, 9, -1, 2, -7};
  std::copy(vals, vals + 6, idx.data<int32_t>());
  Tensor clip = run("def @main(%x: Tensor[(?, 4), float32], %i: Tensor[(2, 3), int32]) { take(%x, %i, axis=0) }", {x, idx})[0];
  CHECK(clip.shape() == Shape{2, 3, 4});
  expectAll(clip, [&](const std::vector<int64_t>& i) {
    int64_t v = std::clamp<int64_t>(vals[i[0] * 3 + i[1]], 0, 4);
    return at(x, {v, i[2]});
  });
  Tensor wrap = run("def @main(%x: Tensor[(?, 4), float32], %i: Tensor[(2, 3), int32]) { take(%x, %i, axis=1, mode=\"wrap\") }", {x, idx})[0];
  CHECK(wrap.shape() == Shape{5, 2, 3});
  expectAll(wrap, [&](const std::vector<int64_t>& i) {
    int64_t v = ((vals[i[1] * 3 + i[2]] % 4) + 4) % 4;
    return at(x, {i[0], v});
  });
  Tensor flat = run("def @main(%x: Tensor[(?, 4), float32], %i: Tensor[(2, 3), int32]) { take(%x, %i) }", {x, idx})[0];
  expectAll(flat, [&](const std::vector<int64_t>& i) { return static_cast<double>(std::clamp<int64_t>(vals[i[0] * 3 + i[1]], 0, 19)); });
  Tensor scalarIdx = Tensor::empty(DType::Int64, std::initializer_list<int64_t>{});
  scalarIdx.data<int64_t>()[0] = 3;
  Tensor row = run("def @main(%x: Tensor[(?, 4), float32], %i: int64) { take(%x, %i, axis=0) }", {x, scalarIdx})[0];
  CHECK(row.shape() == Shape{4});
  expectAll(row, [&](const std::vector<int64_t>& i) { return at(x, {3, i[0]}); });

  Tensor col = iota(DType::Int32, {3, 1});
  Tensor bt = run("def @main(%x: Tensor[(3, 1), int32]) { broadcast_to(%x, shape=[2, 3, 4]) }", {col})[0];
  expectAll(bt, [&](const std::vector<int64_t>& i) { return static_cast<double>(i[1]); });
  Tensor small = iota(DType::Int32, {2, 3});
  Tensor tl = run("def @main(%x: Tensor[(2, 3), int32]) { tile(%x, reps=[2, 1, 2]) }", {small})[0];
  CHECK(tl.shape() == Shape{2, 2, 6});
  expectAll(tl, [&](const std::vector<int64_t>& i) { return at(small, {i[1] % 2, i[2] % 3}); });
  Tensor rv = run("def @main(%x: Tensor[(2, ?), int32]) { reverse(%x, axis=1) }", {small})[0];
  expectAll(rv, [&](const std::vector<int64_t>& i) { return at(small, {i[0], 2 - i[1]}); });
}

TEST_CASE("gather reads along an axis at per-element indices, negative ones from the end") {
  Tensor x = iota(DType::Float32, {3, 4});
  Tensor idx = Tensor::empty(DType::Int64, {2, 4});
  int64_t vals[] = {0, 2, -1, 1, 2, 0, 1, -3};
  std::copy(vals, vals + 8, idx.data<int64_t>());
  Tensor rows = run("def @main(%x: Tensor[(?, 4), float32], %i: Tensor[(2, 4), int64]) { gather(%x, %i, axis=0) }", {x, idx})[0];
  CHECK(rows.shape() == Shape{2, 4});
  expectAll(rows, [&](const std::vector<int64_t>& i) { return at(x, {(vals[i[0] * 4 + i[1]] + 3) % 3, i[1]}); });
  Tensor cols = run("def @main(%x: Tensor[(3, 4), float32], %i: Tensor[(2, 4), int64]) { gather(%x, %i, axis=-1) }", {x, idx})[0];
  expectAll(cols, [&](const std::vector<int64_t>& i) { return at(x, {i[0], (vals[i[0] * 4 + i[1]] + 4) % 4}); });
  Tensor tooWide = Tensor::empty(DType::Int64, {2, 5});
  CHECK_THROWS_WITH_AS(run("def @main(%x: Tensor[(3, ?), float32], %i: Tensor[(2, ?), int64]) { gather(%x, %i, axis=0) }", {x, tooWide}),
                       doctest::Contains("exceeds the data's"), kiln::Error);
}

TEST_CASE("nn.pad repeats the edge or mirrors inside it") {
  Tensor x = iota(DType::Float32, {3, 4});
  auto outs = run("def @main(%x: Tensor[(3, ?), float32]) { (nn.pad(%x, 0f, pad_width=[[1, 2], [3, 0]], pad_mode=\"edge\"),"
                  " nn.pad(%x, 0f, pad_width=[[2, 1], [1, 3]], pad_mode=\"reflect\")) }", {x});
  CHECK(outs[0].shape() == Shape{6, 7});
  expectAll(outs[0], [&](const std::vector<int64_t>& i) { return at(x, {std::clamp<int64_t>(i[0] - 1, 0, 2), std::clamp<int64_t>(i[1] - 3, 0, 3)}); });
  auto mirror = [](int64_t j, int64_t n) { j = std::abs(j); return (n - 1) - std::abs((n - 1) - j); };
  CHECK(outs[1].shape() == Shape{6, 8});
  expectAll(outs[1], [&](const std::vector<int64_t>& i) { return at(x, {mirror(i[0] - 2, 3), mirror(i[1] - 1, 4)}); });
  CHECK_THROWS_WITH_AS(run("def @main(%x: Tensor[(3, ?), float32]) { nn.pad(%x, 0f, pad_width=[[3, 0], [0, 0]], pad_mode=\"reflect\") }", {x}),
                       doctest::Contains("by at most 2"), kiln::Error);
}

TEST_CASE("creation operators and shape_of") {
  Tensor x = iota(DType::Float32, {2, 3});
  Tensor v = Tensor::empty(DType::Float64, std::initializer_list<int64_t>{});
  v.data<double>()[0] = 2.5;
  auto outs = run("def @main(%x: Tensor[(?, 3), float32], %v: float64) {"
                  " (zeros(shape=[2, 2], dtype=\"int32\"), ones(shape=[3], dtype=\"float32\"), full(%v, shape=[2], dtype=\"float32\"),"
                  " zeros_like(%x), ones_like(%x), full_like(%x, %v), shape_of(%x), shape_of(%x, dtype=\"int64\")) }", {x, v});
  expectAll(outs[0], [](const auto&) { return 0.0; });
  expectAll(outs[1], [](const auto&) { return 1.0; });
  expectAll(outs[2], [](const auto&) { return 2.5; });
  CHECK(outs[3].shape() == Shape{2, 3});
  expectAll(outs[3], [](const auto&) { return 0.0; });
  expectAll(outs[4], [](const auto&) { return 1.0; });
  expectAll(outs[5], [](const auto&) { return 2.5; });
  CHECK(outs[6].dtype() == DType::Int32);
  CHECK(getElement(outs[6], 0) == 2);
  CHECK(getElement(outs[6], 1) == 3);
  CHECK(outs[7].dtype() == DType::Int64);
  CHECK(getElement(outs[7], 0) == 2);
}

TEST_CASE("bad input to a kernel is a kiln::Error, not a crash") {
  auto k = test::kernelFrom("def @main(%x: Tensor[(?, 4), float32], %b: Tensor[(4,), float32]) { %x + %b }");
  auto err = [&](std::vector<Tensor> in) {
    try {
      (*k)(in);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(err({Tensor::empty(DType::Float32, {2, 4})}) == "error: kernel k takes 2 input(s), but 1 were given");
  CHECK(err({Tensor::empty(DType::Int32, {2, 4}), Tensor::empty(DType::Float32, {4})}) ==
        "error: kernel k: input 0 has dtype int32 but the kernel expects Tensor[(?, 4), float32]");
  CHECK(err({Tensor::empty(DType::Float32, {2, 5}), Tensor::empty(DType::Float32, {4})}) ==
        "error: kernel k: input 0 has shape (2x5) but the kernel expects Tensor[(?, 4), float32]");
  CHECK(err({Tensor::empty(DType::Float32, {2}), Tensor::empty(DType::Float32, {4})}) ==
        "error: kernel k: input 0 has shape (2) but the kernel expects Tensor[(?, 4), float32]");
  CHECK(err({Tensor::empty(DType::Float32, {2, 4}), Tensor()}) == "error: kernel k: input 1 is undefined");
  std::vector<Tensor> in{Tensor::empty(DType::Float32, {2, 4}), Tensor::empty(DType::Float32, {4})};
  std::vector<Tensor> wrongOut{Tensor::empty(DType::Float32, {3, 4})};
  CHECK_THROWS_WITH_AS(k->run(in, wrongOut), "error: kernel k: output 0 must be 2x4xf32 on cpu", Error);
  // Operators without a loop lowering say so when compiled.
  CHECK_THROWS_WITH_AS(test::kernelFrom("def @main(%n: int32) { arange(0, %n, 1) }"),
                       "error: kernel k: operator 'arange' has no loop lowering yet", Error);
}

TEST_CASE("shape and data-movement kernels for every dtype") {
  const DType all[] = {DType::Float16, DType::Float32, DType::Float64, DType::Int8, DType::Int16,
                       DType::Int32,   DType::Int64,   DType::UInt8,   DType::Bool};
  for (DType dt : all) {
    CAPTURE(dtypeName(dt));
    std::string t = std::string(dtypeName(dt));
    Tensor x = iota(dt, {3, 4});
    if (isBool(dt))
      for (int64_t i = 0; i < 12; ++i) test::setElement(x, i, i % 3 == 0);
    if (dt == DType::Int8 || dt == DType::UInt8)
      for (int64_t i = 0; i < 12; ++i) test::setElement(x, i, static_cast<double>(i * 7 % 100));
    Tensor idx = Tensor::empty(DType::Int32, {3, 4});
    for (int64_t i = 0; i < 12; ++i) idx.data<int32_t>()[i] = static_cast<int32_t>(i * 5 % 11) - 3;
    auto outs = run("def @main(%x: Tensor[(?, 4), " + t + "], %i: Tensor[(3, 4), int32]) {"
                    " (concatenate((transpose(%x), reverse(reshape(%x, newshape=[4, 3]), axis=0)), axis=1),"
                    "  strided_slice(%x, begin=[1, 3], end=[3, 0], strides=[1, -2]),"
                    "  take(%x, %i, axis=1, mode=\"wrap\"), tile(expand_dims(%x, axis=0), reps=[2, 1, 1])) }",
                    {x, idx});
    CHECK(outs[0].shape() == Shape{4, 6});
    expectAll(outs[0], [&](const std::vector<int64_t>& i) {
      return i[1] < 3 ? at(x, {i[1], i[0]}) : getElement(x, (3 - i[0]) * 3 + (i[1] - 3));
    });
    CHECK(outs[1].shape() == Shape{2, 2});
    expectAll(outs[1], [&](const std::vector<int64_t>& i) { return at(x, {1 + i[0], 3 - 2 * i[1]}); });
    expectAll(outs[2], [&](const std::vector<int64_t>& i) {
      int64_t v = idx.data<int32_t>()[i[1] * 4 + i[2]];
      return at(x, {i[0], ((v % 4) + 4) % 4});
    });
    expectAll(outs[3], [&](const std::vector<int64_t>& i) { return at(x, {i[1], i[2]}); });
  }
}
