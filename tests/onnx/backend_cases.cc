// Runs ONNX's backend test cases (libonnx-testdata) through Kiln and reports each.
//
// usage: onnx_backend_cases DATA_DIR [--suite NAME]... [--report OUT] [--expect REPORT] [--only SUBSTR]
//
// Each case is a folder with model.onnx and test_data_set_N/{input,output}_K.pb.
// A case goes the way a user's model does: importOnnxFile, compileOnnx, a VM, the
// inputs bound by position; every output is compared with the expected tensor
// (same element type and shape, |got - want| <= atol + rtol * |want| with ONNX's
// backend defaults rtol 1e-3, atol 1e-7; NaN matches NaN). A case is `pass`,
// `fail: why` (Kiln imported the model but computed something else or could not
// compile what it imported) or `unsupported: why` (the importer refused it, naming
// the node). `--report` writes one line per case and the totals; `--expect` reads a
// report and exits 1 if a case it lists as passing no longer passes.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include <onnx/onnx_pb.h>

#include "base/read_file.h"
#include "compiler/onnx/onnx_tensor.h"
#include "kiln/error.h"
#include "kiln/onnx.h"
#include "kiln/vm.h"

namespace fs = std::filesystem;
using kiln::Tensor;

namespace {

struct Outcome {
  std::string status;  // pass, fail, unsupported
  std::string why;
};

Tensor readTensorPb(const fs::path& p, bool& unsupported, std::string& why) {
  auto bytes = kiln::readFileBytes(p.string());
  onnx::TensorProto t;
  if (!t.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) || !t.has_data_type()) {
    unsupported = true;
    why = p.filename().string() + " is not a TensorProto (a sequence or optional value)";
    return {};
  }
  if (!kiln::onnx_import::dtypeFromOnnx(t.data_type())) {
    unsupported = true;
    why = p.filename().string() + " has element type " + kiln::onnx_import::onnxTypeName(t.data_type());
    return {};
  }
  return kiln::onnx_import::tensorFromProto(t, "");
}

void flatten(const kiln::Value& v, std::vector<Tensor>& out) {
  if (v.isTensor()) {
    out.push_back(v.tensor());
  } else if (v.isObject(kiln::ObjectKind::Adt)) {
    for (const kiln::Value& f : v.fields()) flatten(f, out);
  } else {
    throw kiln::Error("the result holds a value that is no tensor");
  }
}

double elementAt(const Tensor& t, int64_t i) {
  int64_t iv = 0;
  double f = 0;
  kiln::readScalar(static_cast<const char*>(t.data()) + i * static_cast<int64_t>(kiln::dtypeSize(t.dtype())), t.dtype(), iv, f);
  return kiln::isFloat(t.dtype()) ? f : static_cast<double>(iv);
}

std::string compare(const Tensor& got, const Tensor& want, double rtol, double atol) {
  if (got.dtype() != want.dtype())
    return "element type " + std::string(kiln::dtypeName(got.dtype())) + ", expected " + std::string(kiln::dtypeName(want.dtype()));
  if (got.shape() != want.shape()) return "shape " + kiln::shapeString(got.shape()) + ", expected " + kiln::shapeString(want.shape());
  for (int64_t i = 0; i < want.numel(); ++i) {
    double g = elementAt(got, i), w = elementAt(want, i);
    if (std::isnan(w) && std::isnan(g)) continue;
    if (g == w) continue;
    if (!(std::fabs(g - w) <= atol + rtol * std::fabs(w))) {
      std::ostringstream s;
      s << "element " << i << " is " << g << ", expected " << w;
      return s.str();
    }
  }
  return "";
}

std::vector<fs::path> numbered(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> out;
  for (int k = 0;; ++k) {
    fs::path p = dir / (prefix + std::to_string(k) + ".pb");
    if (!fs::exists(p)) break;
    out.push_back(p);
  }
  return out;
}

Outcome runCase(const fs::path& dir) {
  kiln::OnnxModel model;
  try {
    model = kiln::importOnnxFile((dir / "model.onnx").string());
  } catch (const kiln::Error& e) {
    return {"unsupported", e.message()};
  }
  std::shared_ptr<const kiln::Executable> exe;
  try {
    exe = kiln::compileOnnx(model);
  } catch (const kiln::Error& e) {
    return {"fail", std::string("compile: ") + e.what()};
  }
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) return {"unsupported", "the case has no test data"};
  kiln::VirtualMachine vm(exe);
  for (const fs::path& set : sets) {
    bool unsupported = false;
    std::string why;
    std::vector<kiln::Value> args;
    for (const fs::path& p : numbered(set, "input_")) {
      Tensor t = readTensorPb(p, unsupported, why);
      if (unsupported) return {"unsupported", why};
      args.emplace_back(t);
    }
    std::vector<Tensor> want;
    for (const fs::path& p : numbered(set, "output_")) {
      Tensor t = readTensorPb(p, unsupported, why);
      if (unsupported) return {"unsupported", why};
      want.push_back(t);
    }
    std::vector<Tensor> got;
    try {
      flatten(vm.invoke("main", args), got);
    } catch (const kiln::Error& e) {
      return {"fail", std::string("run: ") + e.what()};
    }
    if (got.size() != want.size())
      return {"fail", std::to_string(got.size()) + " outputs, expected " + std::to_string(want.size())};
    for (size_t k = 0; k < want.size(); ++k) {
      std::string diff = compare(got[k], want[k], 1e-3, 1e-7);
      if (!diff.empty()) return {"fail", set.filename().string() + " output " + std::to_string(k) + ": " + diff};
    }
  }
  return {"pass", ""};
}

std::string oneLine(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  if (s.size() > 240) s = s.substr(0, 237) + "...";
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: onnx_backend_cases DATA_DIR [--suite NAME]... [--report OUT] [--expect REPORT] [--only SUBSTR]\n";
    return 2;
  }
  fs::path data = argv[1];
  std::vector<std::string> suites;
  std::string reportPath, expectPath, only;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) {
      std::cerr << "error: " << a << " needs a value\n";
      return 2;
    }
    std::string v = argv[++i];
    if (a == "--suite") suites.push_back(v);
    else if (a == "--report") reportPath = v;
    else if (a == "--expect") expectPath = v;
    else if (a == "--only") only = v;
    else {
      std::cerr << "error: unknown option " << a << "\n";
      return 2;
    }
  }
  if (suites.empty()) suites = {"node", "simple", "pytorch-converted", "pytorch-operator"};
  if (!fs::is_directory(data)) {
    std::cerr << "error: " << data << " is not a folder (install libonnx-testdata)\n";
    return 2;
  }
  std::ostringstream report;
  std::map<std::string, Outcome> results;
  for (const std::string& suite : suites) {
    std::vector<fs::path> cases;
    for (const auto& e : fs::directory_iterator(data / suite))
      if (e.is_directory()) cases.push_back(e.path());
    std::sort(cases.begin(), cases.end());
    std::map<std::string, int> totals;
    for (const fs::path& c : cases) {
      std::string name = suite + "/" + c.filename().string();
      if (!only.empty() && name.find(only) == std::string::npos) continue;
      Outcome o = runCase(c);
      ++totals[o.status];
      results[name] = o;
      std::string line = name + ": " + o.status + (o.why.empty() ? "" : ": " + oneLine(o.why));
      report << line << "\n";
      std::cout << line << std::endl;
    }
    int n = totals["pass"] + totals["fail"] + totals["unsupported"];
    std::ostringstream t;
    t << "# " << suite << ": " << totals["pass"] << " pass, " << totals["fail"] << " fail, " << totals["unsupported"]
      << " unsupported of " << n;
    if (n) t << " (" << (100 * totals["pass"] / n) << "% pass)";
    report << t.str() << "\n";
    std::cout << t.str() << std::endl;
  }
  if (!reportPath.empty()) std::ofstream(reportPath) << report.str();
  int status = 0;
  if (!expectPath.empty()) {
    std::ifstream in(expectPath);
    if (!in) {
      std::cerr << "error: cannot read " << expectPath << "\n";
      return 2;
    }
    std::string line;
    int expected = 0;
    while (std::getline(in, line)) {
      auto colon = line.find(": pass");
      if (line.empty() || line[0] == '#' || colon == std::string::npos || colon + 6 != line.size()) continue;
      std::string name = line.substr(0, colon);
      auto it = results.find(name);
      if (it == results.end()) continue;  // not run (a filter)
      ++expected;
      if (it->second.status != "pass") {
        std::cout << "REGRESSION " << name << ": " << it->second.status << ": " << oneLine(it->second.why) << "\n";
        status = 1;
      }
    }
    std::cout << expected << " cases the report lists as passing were checked" << (status ? "; some no longer pass" : "") << "\n";
    if (expected == 0) status = 1;  // a check that checked nothing is no check
  }
  return status;
}
