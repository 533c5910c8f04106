// vmrun: runs a Relay program or a compiled executable (shared/spec/tools.md).
//
// Exit status: 0 success; 1 the program failed while running; 2 the input was
// unusable (flags, files, parse or type errors, wrong inputs). Results go to
// stdout, one per line; timing, profiles and statistics go to stderr, so stdout
// stays the program's output.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <random>
#include <string>
#include <vector>

#include "compiler/frontend.h"
#include "jit/kernel.h"
#include "runtime/kernel_table.h"
#include "kiln/compile.h"
#include "kiln/onnx.h"
#include "kiln/error.h"
#include "kiln/executable.h"
#include "kiln/npy.h"
#include "kiln/vm.h"
#include "tools/tool_util.h"
#include "tune/tasks.h"

namespace {

using kiln::DType;
using kiln::Error;
using kiln::Tensor;
using kiln::Value;
using kiln::tools::inputValue;

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: vmrun PROGRAM [options]   (PROGRAM: a .relay file, an ONNX model (.onnx) or an executable from kilnc -o)\n"
               "  --function NAME      entry function (default main)\n"
               "  --input SPEC         an input, in parameter order; NAME=SPEC binds by name. SPEC:\n"
               "                         @file.npy | 2x3xf32=1,2,3,4,5,6 | 2x3xf32=0 | i32=7 | 4xf32=random\n"
               "  --inputs FILE.npz    inputs by parameter name\n"
               "  --params FILE.npz    weights: bind @main's parameters of those names as constants\n"
               "  --device LIST        devices, first the default: where the program computes (cpu, cpu:1, cuda,\n"
               "                       cuda-emu: the GPU path emulated on the host, ...); the host cpu holds\n"
               "                       control flow, shapes and scalars\n"
               "  --output FILE.npz    write every tensor of the result as out0, out1, ...\n"
               "  --repeat N --warmup N  time N runs after N warm-up runs\n"
               "  --profile            per-kernel table (calls, time, share, JIT compile time)\n"
               "  --trace FILE.json    Chrome trace of the run\n"
               "  --stats              memory and JIT statistics; load, kernel and first-run time\n"
               "  --print-bytecode     print the bytecode and exit\n"
               "  --max-depth N        call depth limit (default 1000000)\n"
               "  --memory-limit SIZE  most bytes each device's pool may hold (e.g. 512M, 2G); over it: error, exit 1\n"
               "  --no-memory-plan     (text programs) no storage sharing between temporaries, to compare peaks\n"
               "  --partition LIBS     (text programs) hand what libraries support to them (README \"Partitioning\")\n"
               "  --patterns FILE      a pattern file for --partition (repeatable)\n"
               "  --record-shapes FILE write each kernel's input shapes, calls and time in this run, for kilnc\n"
               "                       --emit tasks --shapes FILE and kiln-tune --shapes FILE\n"
               "  --tuning-log FILE    compile kernels with the schedules kiln-tune found (records of another CPU\n"
               "                       are ignored, with a note)\n"
               "environment: KILN_CACHE_DIR (on-disk kernel cache), KILN_COMPILE_ON_LOAD=0 (compile each kernel at\n"
               "  its first call instead of all at load, in parallel), KILN_NUM_THREADS, KILN_CODEGEN_LIBRARY, KILN_TUNING_LOG\n");
}

struct Usage : Error {
  using Error::Error;
};

// 1234, 64K, 512M, 2G (binary units).
uint64_t parseByteSize(const std::string& flag, const std::string& v) {
  size_t digits = std::min(v.find_first_not_of("0123456789"), v.size());
  std::string unit = v.substr(digits);
  uint64_t scale = unit.empty() ? 1 : unit == "K" || unit == "k" ? 1ull << 10 : unit == "M" || unit == "m" ? 1ull << 20
                                   : unit == "G" || unit == "g" ? 1ull << 30 : 0;
  if (digits == 0 || digits > 12 || scale == 0) throw Usage(flag + " needs a size such as 1048576, 512M or 2G, got '" + v + "'");
  uint64_t n = std::stoull(v.substr(0, digits)), bytes;
  if (__builtin_mul_overflow(n, scale, &bytes)) throw Usage(flag + " " + v + " is more bytes than a 64-bit size holds");
  return bytes;
}

// `2x3xf32=1,2,3`, `f32=1.5`, `4xi32=random`, `@x.npy`.
Value parseSpec(const std::string& spec, uint64_t seed) {
  if (!spec.empty() && spec[0] == '@') return inputValue(kiln::readNpy(spec.substr(1)));
  size_t eq = spec.find('=');
  if (eq == std::string::npos) throw Usage("input '" + spec + "' is not SHAPExTYPE=VALUES or @file.npy");
  std::string head = spec.substr(0, eq), values = spec.substr(eq + 1);
  kiln::Shape shape;
  size_t at = 0;
  for (;;) {
    size_t x = head.find('x', at);
    if (x == std::string::npos) break;
    std::string d = head.substr(at, x - at);
    if (d.empty() || d.find_first_not_of("0123456789") != std::string::npos || d.size() > 12)
      throw Usage("input '" + spec + "': bad dimension '" + d + "'");
    shape.push_back(std::stoll(d));
    at = x + 1;
  }
  auto dt = kiln::parseDType(head.substr(at));
  if (!dt) throw Usage("input '" + spec + "': unknown element type '" + head.substr(at) + "'");
  Tensor t = Tensor::empty(*dt, shape);
  int64_t n = t.numel();
  size_t es = kiln::dtypeSize(*dt);
  auto* p = static_cast<char*>(t.data());
  if (values == "random") {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> uf(-1.0, 1.0);
    std::uniform_int_distribution<int64_t> ui(-10, 10);
    for (int64_t i = 0; i < n; ++i) {
      int64_t iv = *dt == DType::Bool ? ui(rng) > 0 : isUnsignedInt(*dt) ? std::abs(ui(rng)) : ui(rng);
      kiln::writeScalar(p + static_cast<size_t>(i) * es, *dt, iv, uf(rng));
    }
  } else {
    std::vector<std::string> items;
    for (size_t s = 0;;) {
      size_t c = values.find(',', s);
      items.push_back(values.substr(s, c == std::string::npos ? std::string::npos : c - s));
      if (c == std::string::npos) break;
      s = c + 1;
    }
    if (items.size() != 1 && static_cast<int64_t>(items.size()) != n)
      throw Usage("input '" + spec + "': " + std::to_string(items.size()) + " values for " + std::to_string(n) + " elements");
    std::vector<std::pair<int64_t, double>> parsed;
    for (const std::string& s : items) {
      try {
        size_t used = 0;
        if (s == "true" || s == "True") parsed.emplace_back(1, 1.0);
        else if (s == "false" || s == "False") parsed.emplace_back(0, 0.0);
        else if (kiln::isFloat(*dt)) parsed.emplace_back(0, std::stod(s, &used));
        else parsed.emplace_back(std::stoll(s, &used), 0.0);
        if (used && used != s.size()) throw std::invalid_argument(s);
      } catch (const std::exception&) {
        throw Usage("input '" + spec + "': bad value '" + s.substr(0, 40) + (s.size() > 40 ? "...'" : "'"));
      }
      bool fits = kiln::isFloat(*dt) ? kiln::floatFits(*dt, parsed.back().second) : kiln::intFits(*dt, parsed.back().first);
      if (!fits) throw Usage("input '" + spec.substr(0, 60) + "': " + s.substr(0, 40) + " is out of the range of " + std::string(kiln::dtypeName(*dt)));
    }
    for (int64_t i = 0; i < n; ++i) {
      auto& v = parsed[items.size() == 1 ? 0 : static_cast<size_t>(i)];
      kiln::writeScalar(p + static_cast<size_t>(i) * es, *dt, v.first, v.second);
    }
  }
  return inputValue(t);
}

void collectTensors(const Value& v, std::vector<std::pair<std::string, Tensor>>& out) {
  std::vector<const Value*> stack{&v};
  while (!stack.empty()) {
    const Value* x = stack.back();
    stack.pop_back();
    if (x->isTensor()) {
      out.emplace_back("out" + std::to_string(out.size()), x->tensor());
    } else if (x->isObject(kiln::ObjectKind::Adt)) {
      auto fs = x->fields();
      for (size_t i = fs.size(); i-- > 0;) stack.push_back(&fs[i]);
    }
  }
}

std::string ms(double nanos) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f ms", nanos / 1e6);
  return b;
}

void writeTrace(const std::string& path, const std::vector<kiln::TraceEvent>& events) {
  std::ofstream f(path);
  if (!f) throw Usage("cannot write '" + path + "'");
  f << "{\"traceEvents\": [\n";
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    char buf[128];
    std::snprintf(buf, sizeof buf, "\"ph\": \"X\", \"pid\": 1, \"tid\": 1, \"ts\": %.3f, \"dur\": %.3f", e.startNanos / 1e3,
                  e.durationNanos / 1e3);
    std::string name;
    for (char c : e.name) name += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
    f << "  {\"name\": \"" << name << "\", \"cat\": \"" << (e.name.rfind('@', 0) == 0 ? "function" : "kernel") << "\", "
      << buf << "}" << (i + 1 < events.size() ? "," : "") << "\n";
  }
  f << "], \"displayTimeUnit\": \"ms\"}\n";
}

// --record-shapes: one line per kernel and input shapes (tune/tasks.h), compiled kernels only.
void writeShapeRecords(const std::string& path, const kiln::Executable& exe, const std::vector<kiln::KernelProfile>& prof,
                       const std::string& program) {
  std::ofstream f(path);
  if (!f) throw Usage("cannot write '" + path + "'");
  f << "# kiln shape record of " << program << "\n";
  for (size_t k = 0; k < prof.size() && k < exe.kernels().size(); ++k) {
    if (exe.kernels()[k].kind != kiln::KernelKind::Compiled) continue;
    for (const auto& [shapes, figures] : prof[k].byShape) {
      kiln::tune::ShapeRecord r;
      r.kernel = exe.kernels()[k].function->name;
      r.task = kiln::jit::taskKey(*exe.kernels()[k].function);
      r.shapes = *kiln::jit::parseShapes(shapes);
      r.calls = figures.calls;
      r.totalMicros = static_cast<double>(figures.totalNanos) / 1e3;
      f << kiln::tune::formatShapeRecord(r) << "\n";
    }
  }
  if (!f) throw Usage("cannot write '" + path + "'");
}

int run(int argc, char** argv) {
  std::string program, function = "main", inputsFile, paramsFile, devices = "cpu", outputFile, traceFile;
  std::string recordShapesFile, tuningLogFile;
  bool deviceGiven = false;
  std::vector<std::string> inputSpecs;
  int repeat = 0, warmup = 0;
  bool profile = false, stats = false, printBytecode = false;
  size_t maxDepth = 1'000'000;
  uint64_t memoryLimit = 0;
  bool planMemory = true;
  std::string partitionLibs;
  std::vector<std::string> patternFiles;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw Usage(a + " needs a value");
      return args[++i];
    };
    auto count = [&]() -> int {
      std::string v = value();
      if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos)
        throw Usage(a + " needs a non-negative integer, got '" + v + "'");
      return std::stoi(v);
    };
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else if (a == "--function") function = value();
    else if (a == "--input") inputSpecs.push_back(value());
    else if (a == "--inputs") inputsFile = value();
    else if (a == "--params") paramsFile = value();
    else if (a == "--device") devices = value(), deviceGiven = true;
    else if (a == "--output") outputFile = value();
    else if (a == "--repeat") repeat = count();
    else if (a == "--warmup") warmup = count();
    else if (a == "--max-depth") maxDepth = static_cast<size_t>(std::max(1, count()));
    else if (a == "--memory-limit") memoryLimit = parseByteSize(a, value());
    else if (a == "--no-memory-plan") planMemory = false;
    else if (a == "--partition") partitionLibs = value();
    else if (a == "--patterns") patternFiles.push_back(value());
    else if (a == "--profile") profile = true;
    else if (a == "--record-shapes") recordShapesFile = value();
    else if (a == "--tuning-log") tuningLogFile = value();
    else if (a == "--trace") traceFile = value();
    else if (a == "--stats") stats = true;
    else if (a == "--print-bytecode") printBytecode = true;
    else if (!a.empty() && a[0] == '-') throw Usage("unknown option '" + a + "' (see vmrun --help)");
    else if (program.empty()) program = a;
    else throw Usage("more than one program given ('" + program + "' and '" + a + "')");
  }
  if (program.empty()) throw Usage("no program given (see vmrun --help)");
  std::vector<kiln::Device> deviceList = kiln::tools::checkDevices(devices, true);

  std::map<std::string, Tensor> params;
  if (!paramsFile.empty()) params = kiln::readNpz(paramsFile);

  // Inputs are read once (a .npy or .npz may be large): an ONNX import sees their
  // values before the program is compiled, and binding them reuses what it read.
  std::optional<std::map<std::string, Tensor>> npzInputs;
  auto inputsFromFile = [&]() -> const std::map<std::string, Tensor>& {
    if (!npzInputs) npzInputs = kiln::readNpz(inputsFile);
    return *npzInputs;
  };
  std::vector<std::pair<std::string, Value>> parsedSpecs(inputSpecs.size());  // (text, value) of --input k
  auto specValue = [&](size_t k, const std::string& text) {
    if (parsedSpecs[k].second.empty() || parsedSpecs[k].first != text) parsedSpecs[k] = {text, parseSpec(text, 1234 + k)};
    return parsedSpecs[k].second;
  };

  // Load or compile.
  // The magic word decides; an executable is then mapped, not read.
  uint8_t magic[8] = {};
  std::ifstream probe(program, std::ios::binary);
  probe.read(reinterpret_cast<char*>(magic), sizeof magic);
  bool isExe = kiln::Executable::looksLikeExecutable({magic, static_cast<size_t>(probe.gcount())});
  std::shared_ptr<const kiln::Executable> exe;
  std::map<std::string, std::string> inputAliases;  // an ONNX graph input's name -> its @main parameter
  std::set<std::string> frozenInputs;               // ONNX graph inputs the program was specialized to
  std::optional<kiln::OnnxModel> onnxModel;         // for an ONNX model: how its outputs are returned
  auto loadStart = std::chrono::steady_clock::now();
  if (isExe) {
    exe = kiln::Executable::load(program);
    // Placement happened when it was compiled.
    auto listOf = [](const std::vector<kiln::Device>& ds) {
      std::string s;
      for (const auto& d : ds) s += (s.empty() ? "" : ",") + d.toString();
      return s;
    };
    if (!partitionLibs.empty() || !patternFiles.empty())
      throw Usage("--partition applies when a program is compiled; " + program + " is an executable (partition with kilnc --partition)");
    if (deviceGiven && !(exe->devices().front() == deviceList.front()))
      throw Usage(program + " was compiled for --device " + listOf(exe->devices()) + "; recompile it with kilnc --device " + devices);
  } else {
    kiln::CompileOptions opts;
    opts.devices = deviceList;
    opts.params = params;
    opts.planMemory = planMemory;
    kiln::tools::setPartitionOptions(partitionLibs, patternFiles, opts);
    if (kiln::isOnnxPath(program)) {
      // Positional inputs name the graph's inputs in order; every input given is
      // offered to the import, which specializes the program to those it needs
      // as constants (a shape, axes, scales fed as graph inputs).
      std::vector<std::string> graphInputs = kiln::onnxInputNames(program);
      kiln::OnnxImportOptions importOptions;
      auto offer = [&](const std::string& name, const Value& v) {
        if (v.isTensor()) importOptions.inputValues[name] = v.tensor();
      };
      if (!inputsFile.empty())
        for (auto& [name, t] : inputsFromFile()) offer(name, inputValue(t));
      size_t position = 0;
      for (size_t k = 0; k < inputSpecs.size(); ++k) {
        std::string& spec = inputSpecs[k];
        size_t eq = spec.find('=');
        std::string name = eq == std::string::npos || spec[0] == '@' ? "" : spec.substr(0, eq);
        bool named = std::find(graphInputs.begin(), graphInputs.end(), name) != graphInputs.end() &&
                     spec.size() > eq + 1 && (spec[eq + 1] == '@' || spec.find('=', eq + 1) != std::string::npos);
        if (!named) {
          if (position >= graphInputs.size()) throw Usage("too many inputs: " + program + " takes " + std::to_string(graphInputs.size()));
          name = graphInputs[position++];
          spec = name + "=" + spec;  // bound by name below, once the program is compiled
        }
        offer(name, specValue(k, spec.substr(name.size() + 1)));
      }
      kiln::OnnxModel model = kiln::importOnnxFile(program, importOptions);
      // Inputs may be named as the graph names them; @main's parameters may differ.
      for (const auto& [onnxName, param] : model.inputs) inputAliases[onnxName] = param;
      frozenInputs.insert(model.frozenInputs.begin(), model.frozenInputs.end());
      exe = kiln::compileOnnx(model, opts);
      model.program.clear();
      model.params.clear();
      onnxModel = std::move(model);
    } else {
      exe = kiln::compile(kiln::compiler::readSourceFile(program), program, opts);
    }
    params.clear();  // bound as constants
  }
  double loadMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - loadStart).count();
  if (printBytecode) {
    std::string text = exe->disassemble();
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }

  const kiln::BytecodeFunction* fn = exe->findFunction(function);
  if (!fn) throw Usage("no function named '" + function + "' in " + program);

  // Bind inputs: by name from --params (executables) and --inputs, then --input.
  std::vector<Value> argv2(fn->numParams);
  std::vector<bool> bound(fn->numParams, false);
  auto paramKey = [&](const std::string& name) {
    std::string key = !name.empty() && name[0] == '%' ? name.substr(1) : name;
    auto alias = inputAliases.find(key);
    return alias == inputAliases.end() ? key : alias->second;
  };
  auto bindName = [&](const std::string& name, Value v, const char* from) {
    if (frozenInputs.count(name)) return true;  // its value is compiled into the program
    std::string key = paramKey(name);
    for (size_t p = 0; p < fn->numParams; ++p)
      if (fn->paramNames[p] == key) {
        argv2[p] = std::move(v);
        bound[p] = true;
        return true;
      }
    if (from) throw Usage(std::string(from) + ": '" + key + "' is not a parameter of @" + function);
    return false;
  };
  for (auto& [name, t] : params) bindName(name, inputValue(t), nullptr);
  if (!inputsFile.empty())
    for (auto& [name, t] : inputsFromFile()) bindName(name, inputValue(t), "--inputs");
  size_t nextPositional = 0;
  for (size_t k = 0; k < inputSpecs.size(); ++k) {
    const std::string& s = inputSpecs[k];
    size_t eq = s.find('=');
    if (eq != std::string::npos && s[0] != '@') {
      if (frozenInputs.count(s.substr(0, eq))) continue;
      std::string key = paramKey(s.substr(0, eq));
      if (std::find(fn->paramNames.begin(), fn->paramNames.end(), key) != fn->paramNames.end() &&
          s.find('=', eq + 1) != std::string::npos) {
        bindName(key, specValue(k, s.substr(eq + 1)), "--input");
        continue;
      }
      if (std::find(fn->paramNames.begin(), fn->paramNames.end(), key) != fn->paramNames.end() && s.size() > eq + 1 && s[eq + 1] == '@') {
        bindName(key, specValue(k, s.substr(eq + 1)), "--input");
        continue;
      }
    }
    while (nextPositional < bound.size() && bound[nextPositional]) ++nextPositional;
    if (nextPositional >= bound.size())
      throw Usage("too many inputs: @" + function + " takes " + std::to_string(fn->numParams) + " (after named ones)");
    argv2[nextPositional] = specValue(k, s);
    bound[nextPositional] = true;
  }
  for (size_t p = 0; p < fn->numParams; ++p)
    if (!bound[p])
      throw Usage("missing input for parameter '" + fn->paramNames[p] + "' (" + fn->paramTypes[p].toString() + ") of @" + function);

  if (!tuningLogFile.empty()) {
    std::shared_ptr<const kiln::jit::TuningLog> log;
    try {
      log = std::make_shared<const kiln::jit::TuningLog>(kiln::jit::TuningLog::load(tuningLogFile));
    } catch (const Error& e) {
      throw Usage(e.message());
    }
    for (const std::string& note : log->notes()) std::fprintf(stderr, "note: %s: %s\n", tuningLogFile.c_str(), note.c_str());
    kiln::jit::KernelCache::global().setTuningLog(log);
  }
  kiln::VMOptions vmo;
  vmo.maxCallDepth = maxDepth;
  vmo.memoryLimit = memoryLimit;
  size_t compilesBefore = kiln::jit::KernelCache::global().compiles();
  kiln::VirtualMachine vm(exe, vmo);  // makes the executable's kernels (compile on load)
  try {
    vm.checkArguments(function, argv2);
  } catch (const Error& e) {
    throw Usage(e.message());
  }
  if (profile || !traceFile.empty()) vm.enableProfiling(!traceFile.empty());
  if (!recordShapesFile.empty()) vm.enableShapeRecording();
  if (stats) vm.enableMemoryTrace();

  Value result;
  std::vector<double> times;
  auto timedInvoke = [&] {
    auto t0 = std::chrono::steady_clock::now();
    result = vm.invoke(function, argv2);
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int w = 0; w < warmup; ++w) timedInvoke();
  int runs = std::max(repeat, 1);
  for (int r = 0; r < runs; ++r) times.push_back(timedInvoke());

  // Results computed on a GPU come to the host to be printed and saved.
  if (std::any_of(exe->devices().begin(), exe->devices().end(), [](kiln::Device d) { return d.isGpu(); }))
    result = vm.copyTo(result);
  if (onnxModel && function == "main") result = kiln::onnxResult(*onnxModel, result);
  std::string text = exe->format(result) + "\n";
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  if (!outputFile.empty()) {
    std::vector<std::pair<std::string, Tensor>> outs;
    collectTensors(result, outs);
    kiln::writeNpz(outputFile, outs);
  }
  if (repeat > 0) {
    std::vector<double> s = times;
    std::sort(s.begin(), s.end());
    double mean = 0;
    for (double t : s) mean += t / static_cast<double>(s.size());
    std::fprintf(stderr, "latency over %d runs (after %d warm-up): min %s, median %s, mean %s, max %s\n", repeat, warmup,
                 ms(s.front()).c_str(), ms(s[s.size() / 2]).c_str(), ms(mean).c_str(), ms(s.back()).c_str());
  }
  if (profile) {
    const auto& prof = vm.kernelProfile();
    uint64_t total = 0;
    for (const auto& p : prof) total += p.totalNanos;
    std::vector<size_t> order(prof.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return prof[a].totalNanos > prof[b].totalNanos; });
    std::fprintf(stderr, "%-36s %8s %12s %12s %7s %12s\n", "kernel", "calls", "total", "mean", "share", "jit compile");
    for (size_t k : order) {
      if (!prof[k].calls) continue;
      std::string jit = "-";
      const std::string& library = exe->kernels()[k].function->library;
      if (!library.empty()) {
        jit = "library " + library;  // an external library runs it: nothing compiled
      } else if (exe->kernels()[k].kind == kiln::KernelKind::Compiled) {
        const auto& ck = vm.runtime().kernelTable(exe)->compiled(static_cast<uint32_t>(k), exe->devices().front());
        jit = ck.fromDiskCache() ? "disk cache" : ms(ck.compileMillis() * 1e6);
      } else {
        jit = exe->kernels()[k].kind == kiln::KernelKind::Scalar ? "host scalar" : "native";
      }
      char mean[32];
      std::snprintf(mean, sizeof mean, "%.2f us", static_cast<double>(prof[k].totalNanos) / static_cast<double>(prof[k].calls) / 1e3);
      std::string name = exe->kernels()[k].function->name + (library.empty() ? "" : " [" + library + "]");
      std::fprintf(stderr, "%-36s %8llu %12s %12s %6.1f%% %12s\n", name.c_str(),
                   static_cast<unsigned long long>(prof[k].calls), ms(static_cast<double>(prof[k].totalNanos)).c_str(), mean,
                   total ? 100.0 * static_cast<double>(prof[k].totalNanos) / static_cast<double>(total) : 0.0, jit.c_str());
    }
  }
  if (!traceFile.empty()) writeTrace(traceFile, vm.trace());
  if (!recordShapesFile.empty()) writeShapeRecords(recordShapesFile, *exe, vm.kernelProfile(), program);
  if (stats) {
    auto m = vm.memoryStats();
    auto& cache = kiln::jit::KernelCache::global();
    double compileMs = 0;
    size_t compiled = 0;
    for (size_t k = 0; k < exe->kernels().size(); ++k)
      if (exe->kernels()[k].kind == kiln::KernelKind::Compiled && vm.kernelCompiled(static_cast<uint32_t>(k))) {
        compileMs += vm.runtime().kernelTable(exe)->compiled(static_cast<uint32_t>(k), exe->devices().front()).compileMillis();
        ++compiled;
      }
    std::fprintf(stderr, "memory: %llu allocations, %llu bytes requested\n", static_cast<unsigned long long>(m.allocations),
                 static_cast<unsigned long long>(m.bytesAllocated));
    auto bounds = vm.livenessLowerBound();
    for (const kiln::PoolStats& p : m.pools) {
      uint64_t bound = 0;
      for (auto& [d, b] : bounds)
        if (d == p.device) bound = b;
      char ratio[32] = "";
      if (bound) std::snprintf(ratio, sizeof ratio, " (%.2fx)", static_cast<double>(p.peakBytesInUse) / static_cast<double>(bound));
      std::fprintf(stderr,
                   "memory (%s): peak %llu bytes in use, liveness lower bound %llu%s; peak %llu reserved; at exit %llu in use, "
                   "%llu cached; pool hits %llu, misses %llu\n",
                   p.device.toString().c_str(), static_cast<unsigned long long>(p.peakBytesInUse),
                   static_cast<unsigned long long>(bound), ratio, static_cast<unsigned long long>(p.peakBytesReserved),
                   static_cast<unsigned long long>(p.bytesInUse), static_cast<unsigned long long>(p.bytesCached),
                   static_cast<unsigned long long>(p.hits), static_cast<unsigned long long>(p.misses));
    }
    std::fprintf(stderr, "jit: %zu kernels used, %zu compiled in this process (%.1f ms), %zu memory-cache hits, %zu disk-cache hits\n",
                 compiled, cache.compiles() - compilesBefore, compileMs, cache.hits(), cache.diskHits());
    kiln::RuntimeStats rs = vm.runtime().stats();
    std::fprintf(stderr, "kernels: %zu by the code generator, %zu precompiled, %zu from the disk cache; code generator %s\n",
                 cache.codegens(), cache.precompiledHits(), cache.diskHits(),
                 rs.codegenLoaded ? ("loaded (" + ms(rs.codegenLoadMillis * 1e6) + ")").c_str() : "not loaded (no LLVM in this process)");
    std::fprintf(stderr, "time: load %s, kernels %s (%s), first run %s\n", ms(loadMs * 1e6).c_str(),
                 ms(vm.kernelsMillis() * 1e6).c_str(),
                 vm.runtime().options().compileOnLoad ? "on load, parallel" : "at first call, inside the first run",
                 ms(vm.firstRunMillis() * 1e6).c_str());
    auto prepared = vm.runtime().kernelTable(exe)->preparedStats();
    std::fprintf(stderr, "prepared constants: %llu packed weight(s), %llu bytes, shared by the executable's VMs\n",
                 static_cast<unsigned long long>(prepared.count), static_cast<unsigned long long>(prepared.bytes));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const Usage& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const kiln::Error& e) {
    // Compile errors carry a location; run-time failures come from the VM.
    std::string what = e.what();
    bool located = !e.file().empty();
    std::fprintf(stderr, "%s\n", what.c_str());
    bool runtime = what.find("error: in @") == 0;
    return located || !runtime ? 2 : 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: internal: %s\n", e.what());
    return 1;
  }
}
