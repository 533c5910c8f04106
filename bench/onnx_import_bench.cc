// ONNX import time for a 50 MB model (three 2048x2048 Gemm layers), against the
// time to read the file: the import should be dominated by reading it.
//
//   onnx_import_bench [--rounds N]
//   onnx_import_bench --model PATH --phase write|read|parse|import   (one step, fresh process)
// Writes the model to a temporary folder, then times (medians of N rounds, file in
// the page cache): reading the bytes; protobuf's parse alone; importOnnxFile (read,
// parse, check, shape inference, conversion, weights copied out), and the same from
// bytes already read; compileOnnx.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "base/read_file.h"
#include "kiln/compile.h"
#include "kiln/onnx.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string writeModel(const std::string& dir) {
  onnx::ModelProto m;
  m.set_ir_version(7);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(13);
  auto* g = m.mutable_graph();
  g->set_name("big");
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0, 0.02f);
  const int64_t n = 2048;
  std::string prev = "x";
  for (int layer = 0; layer < 3; ++layer) {
    std::string w = "w" + std::to_string(layer), b = "b" + std::to_string(layer), h = "h" + std::to_string(layer), r = "r" + std::to_string(layer);
    auto* wt = g->add_initializer();
    wt->set_name(w);
    wt->set_data_type(onnx::TensorProto::FLOAT);
    wt->add_dims(n);
    wt->add_dims(n);
    std::vector<float> data(static_cast<size_t>(n * n));
    for (float& v : data) v = normal(rng);
    wt->set_raw_data(std::string(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float)));
    auto* bt = g->add_initializer();
    bt->set_name(b);
    bt->set_data_type(onnx::TensorProto::FLOAT);
    bt->add_dims(n);
    bt->set_raw_data(std::string(static_cast<size_t>(n) * sizeof(float), '\0'));
    auto* gemm = g->add_node();
    gemm->set_op_type("Gemm");
    gemm->add_input(prev);
    gemm->add_input(w);
    gemm->add_input(b);
    gemm->add_output(h);
    auto* tb = gemm->add_attribute();
    tb->set_name("transB");
    tb->set_type(onnx::AttributeProto::INT);
    tb->set_i(1);
    auto* relu = g->add_node();
    relu->set_op_type("Relu");
    relu->add_input(h);
    relu->add_output(r);
    prev = r;
  }
  auto io = [&](onnx::ValueInfoProto* v, const std::string& name) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    t->mutable_shape()->add_dim()->set_dim_param("batch");
    t->mutable_shape()->add_dim()->set_dim_value(n);
  };
  io(g->add_input(), "x");
  io(g->add_output(), prev);
  std::string path = dir + "/big.onnx";
  std::ofstream(path, std::ios::binary) << m.SerializeAsString();
  return path;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 7;
  std::string phase, keep;
  for (int i = 1; i + 1 < argc; ++i) {
    std::string a = argv[i];
    if (a == "--rounds") rounds = std::max(1, std::atoi(argv[i + 1]));
    if (a == "--phase") phase = argv[i + 1];
    if (a == "--model") keep = argv[i + 1];
  }
  // --phase read|parse|import --model PATH: that step once, in this (fresh) process,
  // as `vmrun model.onnx` meets it: no memory warmed by an earlier round.
  if (!phase.empty()) {
    if (keep.empty()) {
      std::fprintf(stderr, "--phase needs --model PATH (write one with --phase write)\n");
      return 2;
    }
    auto t0 = Clock::now();
    if (phase == "read") {
      std::vector<uint8_t> bytes = kiln::readFileBytes(keep);
      if (bytes.empty()) return 1;
    } else if (phase == "parse") {
      kiln::MappedFile f(keep);
      onnx::ModelProto m;
      if (!m.ParseFromArray(f.data(), static_cast<int>(f.size()))) return 1;
    } else if (phase == "import") {
      kiln::OnnxModel m = kiln::importOnnxFile(keep);
    } else if (phase == "write") {
      std::filesystem::path target(keep);
      std::string written = writeModel(target.parent_path().empty() ? "." : target.parent_path().string());
      std::filesystem::rename(written, target);
    } else {
      return 2;
    }
    std::printf("%-7s %8.1f ms\n", phase.c_str(), std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    return 0;
  }
  std::string dir = (std::filesystem::temp_directory_path() / ("kiln_onnx_import_" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  std::string path = writeModel(dir);
  double mb = static_cast<double>(std::filesystem::file_size(path)) / 1e6;
  std::vector<double> read, parse, fromBytes, import, compile;
  for (int r = 0; r < rounds; ++r) {
    auto t0 = Clock::now();
    std::vector<uint8_t> bytes = kiln::readFileBytes(path);
    auto t1 = Clock::now();
    onnx::ModelProto m;
    if (!m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return 1;
    auto t2 = Clock::now();
    kiln::OnnxModel viaBytes = kiln::importOnnx(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path, dir);
    auto t25 = Clock::now();
    kiln::OnnxModel model = kiln::importOnnxFile(path);
    auto t3 = Clock::now();

    auto exe = kiln::compileOnnx(model);
    auto t4 = Clock::now();
    auto ms = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    read.push_back(ms(t0, t1));
    parse.push_back(ms(t1, t2));
    fromBytes.push_back(ms(t2, t25));
    import.push_back(ms(t25, t3));
    compile.push_back(ms(t3, t4));
  }
  std::printf("ONNX import of a %.1f MB model (3 x Gemm 2048x2048), medians of %d rounds, file in the page cache\n", mb, rounds);
  std::printf("  read the file          %8.1f ms\n", median(read));
  std::printf("  protobuf parse alone   %8.1f ms\n", median(parse));
  std::printf("  importOnnx from bytes  %8.1f ms  (parse + weights copied out + check + shape inference + conversion)\n", median(fromBytes));
  std::printf("  importOnnxFile         %8.1f ms  (the file read, then as above)\n", median(import));
  std::printf("  compileOnnx            %8.1f ms  (Relay pipeline, weights bound)\n", median(compile));
  std::printf("  import / read          %8.2f\n", median(import) / median(read));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
