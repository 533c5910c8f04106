// Runs ONNX's backend test cases (libonnx-testdata) through Kiln and reports each.
//
// usage: onnx_backend_cases DATA_DIR [--suite NAME]... [--report OUT] [--expect REPORT] [--only SUBSTR] [--device DEV]
//
// Each case is a folder with model.onnx and test_data_set_N/{input,output}_K.pb.
// A case goes the way a user's model does: importOnnxFile, compileOnnx, a VM, the
// inputs bound by position; every output is compared with the expected tensor
// (same element type and shape, |got - want| <= atol + rtol * |want| with ONNX's
// backend defaults rtol 1e-3, atol 1e-7; NaN matches NaN). A case is `pass`,
// `fail: why` (Kiln imported the model but computed something else or could not
// compile what it imported) or `unsupported: why` (the importer refused it, naming
// the node). `--report` writes one line per case and the totals; `--expect` reads a
// report and exits 1 if a case it lists as passing no longer passes. `--device`
// compiles every model for that device first (cuda-emu: the GPU kernels, emulated).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include <onnx/onnx-data_pb.h>
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

// A test value: a tensor, a sequence of values, or an optional (empty or holding one).
struct Data {
  enum class Kind { Tensor, Sequence, Optional } kind = Kind::Tensor;
  Tensor tensor;
  std::vector<Data> items;  // a sequence's elements; an optional's value (none: empty)
};

// Thrown for values the driver (or Kiln) cannot represent: the case is unsupported.
struct Unrepresentable {
  std::string why;
};

Data fromTensorProto(const onnx::TensorProto& t) {
  if (!kiln::onnx_import::dtypeFromOnnx(t.data_type()))
    throw Unrepresentable{"a value has element type " + kiln::onnx_import::onnxTypeName(t.data_type())};
  try {
    return Data{Data::Kind::Tensor, kiln::onnx_import::tensorFromProto(t, ""), {}};
  } catch (const kiln::Error& e) {
    throw Unrepresentable{e.message()};
  }
}

Data fromSequenceProto(const onnx::SequenceProto& s);
Data fromOptionalProto(const onnx::OptionalProto& o) {
  Data d{Data::Kind::Optional, {}, {}};
  if (o.has_tensor_value()) d.items.push_back(fromTensorProto(o.tensor_value()));
  else if (o.has_sequence_value()) d.items.push_back(fromSequenceProto(o.sequence_value()));
  else if (o.has_optional_value()) d.items.push_back(fromOptionalProto(o.optional_value()));
  return d;
}

Data fromSequenceProto(const onnx::SequenceProto& s) {
  Data d{Data::Kind::Sequence, {}, {}};
  for (const auto& t : s.tensor_values()) d.items.push_back(fromTensorProto(t));
  for (const auto& q : s.sequence_values()) d.items.push_back(fromSequenceProto(q));
  for (const auto& o : s.optional_values()) d.items.push_back(fromOptionalProto(o));
  if (s.sparse_tensor_values_size() || s.map_values_size()) throw Unrepresentable{"a sequence of sparse tensors or maps"};
  return d;
}

// Reads a .pb file as the type says it holds.
Data readPb(const fs::path& p, const onnx::TypeProto& type) {
  auto bytes = kiln::readFileBytes(p.string());
  auto parse = [&](google::protobuf::MessageLite& m) {
    if (!m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) throw Unrepresentable{p.filename().string() + " does not parse"};
  };
  if (type.has_sequence_type()) {
    onnx::SequenceProto s;
    parse(s);
    return fromSequenceProto(s);
  }
  if (type.has_optional_type()) {
    onnx::OptionalProto o;
    parse(o);
    return fromOptionalProto(o);
  }
  if (!type.has_tensor_type()) throw Unrepresentable{"a value that is no tensor, sequence or optional"};
  onnx::TensorProto t;
  parse(t);
  return fromTensorProto(t);
}

uint32_t constructorId(const kiln::Executable& exe, const std::string& name) {
  for (size_t c = 0; c < exe.constructors().size(); ++c)
    if (exe.constructors()[c].name == name) return static_cast<uint32_t>(c);
  throw Unrepresentable{"the program has no constructor " + name};
}

kiln::Value toValue(const Data& d, const kiln::Executable& exe) {
  switch (d.kind) {
    case Data::Kind::Tensor: return kiln::Value(d.tensor);
    case Data::Kind::Optional:
      if (d.items.empty()) return kiln::Value::adt(constructorId(exe, "None"), {});
      return kiln::Value::adt(constructorId(exe, "Some"), {toValue(d.items[0], exe)});
    case Data::Kind::Sequence: {
      kiln::Value list = kiln::Value::adt(constructorId(exe, "Nil"), {});
      for (size_t k = d.items.size(); k-- > 0;) list = kiln::Value::adt(constructorId(exe, "Cons"), {toValue(d.items[k], exe), list});
      return list;
    }
  }
  return {};
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

// `got` against the expected value, recursively through sequences and optionals.
std::string compareData(const kiln::Value& got, const Data& want, const kiln::Executable& exe) {
  switch (want.kind) {
    case Data::Kind::Tensor:
      if (!got.isTensor()) return "a non-tensor where a tensor was expected";
      return compare(got.tensor(), want.tensor, 1e-3, 1e-7);
    case Data::Kind::Optional: {
      if (!got.isAdt()) return "not an optional";
      bool some = got.ctor() == constructorId(exe, "Some");
      if (some != !want.items.empty()) return some ? "a value where none was expected" : "no value where one was expected";
      return some ? compareData(got.fields()[0], want.items[0], exe) : "";
    }
    case Data::Kind::Sequence: {
      kiln::Value at = got;
      uint32_t cons = constructorId(exe, "Cons");
      for (size_t k = 0; k < want.items.size(); ++k) {
        if (!at.isAdt() || at.ctor() != cons)
          return "a sequence of " + std::to_string(k) + " elements, expected " + std::to_string(want.items.size());
        std::string d = compareData(at.fields()[0], want.items[k], exe);
        if (!d.empty()) return "element " + std::to_string(k) + ": " + d;
        kiln::Value next = at.fields()[1];
        at = next;
      }
      if (!at.isAdt() || at.ctor() == cons) return "a sequence longer than the " + std::to_string(want.items.size()) + " elements expected";
      return "";
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

kiln::Device gDevice;  // where every model computes (--device)

Outcome runCase(const fs::path& dir) {
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  onnx::ModelProto proto;
  {
    auto bytes = kiln::readFileBytes((dir / "model.onnx").string());
    if (!proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      try {
        kiln::importOnnxFile((dir / "model.onnx").string());
      } catch (const kiln::Error& e) {
        return {"unsupported", e.message()};
      }
      return {"fail", "Kiln imported a model.onnx that does not parse"};
    }
  }
  // The graph inputs the test data feeds: those without an initializer.
  std::vector<const onnx::TypeProto*> inTypes, outTypes;
  std::vector<std::string> inNames;
  {
    std::set<std::string> inits;
    for (const auto& i : proto.graph().initializer()) inits.insert(i.name());
    for (const auto& i : proto.graph().input())
      if (!inits.count(i.name())) {
        inTypes.push_back(&i.type());
        inNames.push_back(i.name());
      }
    for (const auto& o : proto.graph().output()) outTypes.push_back(&o.type());
  }
  if (sets.empty()) sets.push_back(dir / "no test data");
  // Each data set is imported with its inputs at hand, as vmrun imports a model with
  // the inputs it is given: inputs the program needs as constants are specialized.
  for (const fs::path& set : sets) {
    std::vector<Data> ins, want;
    bool dataOk = true;
    std::string dataWhy;
    try {
      if (!fs::is_directory(set)) throw Unrepresentable{"the case has no test data"};
      auto inFiles = numbered(set, "input_"), outFiles = numbered(set, "output_");
      if (inFiles.size() > inTypes.size() || outFiles.size() != outTypes.size())
        return {"fail", "the test data does not match the graph's inputs and outputs"};
      for (size_t k = 0; k < inFiles.size(); ++k) ins.push_back(readPb(inFiles[k], *inTypes[k]));
      for (size_t k = 0; k < outFiles.size(); ++k) want.push_back(readPb(outFiles[k], *outTypes[k]));
    } catch (const Unrepresentable& u) {
      dataOk = false;
      dataWhy = u.why;
    }
    kiln::OnnxImportOptions options;
    for (size_t k = 0; k < ins.size(); ++k) {
      if (ins[k].kind == Data::Kind::Tensor) options.inputValues[inNames[k]] = ins[k].tensor;
      // A sequence's element shape, where every element agrees on it, as a user of
      // from_onnx passes input shapes (the declaration may leave the rank out).
      if (ins[k].kind == Data::Kind::Sequence && !ins[k].items.empty()) {
        const Data& first = ins[k].items[0];
        bool same = first.kind == Data::Kind::Tensor;
        for (const Data& e : ins[k].items) same = same && e.kind == Data::Kind::Tensor && e.tensor.shape() == first.tensor.shape();
        if (same) options.inputShapes[inNames[k]] = std::vector<int64_t>(first.tensor.shape().begin(), first.tensor.shape().end());
      }
    }
    kiln::OnnxModel model;
    try {
      model = kiln::importOnnxFile((dir / "model.onnx").string(), options);
    } catch (const kiln::Error& e) {
      return {"unsupported", e.message()};
    }
    if (!dataOk) return {"unsupported", dataWhy};
    std::shared_ptr<const kiln::Executable> exe;
    try {
      kiln::CompileOptions options;
      options.devices = {gDevice};
      exe = kiln::compileOnnx(model, options);
    } catch (const kiln::Error& e) {
      return {"fail", std::string("compile: ") + e.what()};
    }
    std::vector<kiln::Value> args;
    try {
      for (size_t k = 0; k < ins.size(); ++k)
        if (std::find(model.frozenInputs.begin(), model.frozenInputs.end(), inNames[k]) == model.frozenInputs.end())
          args.push_back(toValue(ins[k], *exe));
    } catch (const Unrepresentable& u) {
      return {"unsupported", u.why};
    }
    kiln::VirtualMachine vm(exe);
    kiln::Value result;
    try {
      result = kiln::onnxResult(model, vm.copyTo(vm.invoke("main", args)));
    } catch (const kiln::Error& e) {
      return {"fail", std::string("run: ") + e.what()};
    }
    std::vector<kiln::Value> got;
    if (want.size() == 1) {
      got.push_back(result);
    } else if (result.isTuple()) {
      for (const kiln::Value& f : result.fields()) got.push_back(f);
    }
    if (got.size() != want.size()) return {"fail", std::to_string(got.size()) + " outputs, expected " + std::to_string(want.size())};
    for (size_t k = 0; k < want.size(); ++k) {
      std::string diff;
      try {
        diff = compareData(got[k], want[k], *exe);
      } catch (const Unrepresentable& u) {
        diff = u.why;
      }
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
    std::cerr << "usage: onnx_backend_cases DATA_DIR [--suite NAME]... [--report OUT] [--expect REPORT] [--only SUBSTR] [--device DEV]\n";
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
    else if (a == "--device") gDevice = kiln::Device::parse(v);
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
