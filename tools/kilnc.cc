// kilnc: compiles a Relay program; `--emit WHAT` prints an intermediate form.
//
// Exit status (shared/spec/tools.md): 0 success, 2 unusable input (bad flags,
// unreadable file, parse or type error), 1 any other failure.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "compiler/frontend.h"
#include "compiler/pipeline.h"
#include "kiln/npy.h"
#include "kiln/onnx.h"
#include "tools/tool_util.h"
#include "tune/tasks.h"
#include "compiler/ir/printer.h"
#include "compiler/passes/fuse_ops.h"
#include "compiler/passes/to_fused_function.h"
#include "jit/kernel.h"
#include "jit/tuning_log.h"
#include "kernel_ir/lower.h"
#include "jit/codegen_backend.h"
#include "kernel_ir/kernel_kind.h"
#include "kernel_ir/shape_util.h"
#include "kiln/error.h"
#include "kiln/runtime.h"

namespace {

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: kilnc PROGRAM.relay|MODEL.onnx [-o OUT] [--emit WHAT] [--params FILE.npz] [--device LIST]\n"
               "  --emit ir        print the program after type inference\n"
               "  --emit composite print the program after composite patterns matched (needs --partition)\n"
               "  --emit annotated ... each call a library supports marked with the library\n"
               "  --emit regions   ... and with its region (calls that go to the library together)\n"
               "  --emit partitioned print the program with each region a Compiler= function, and notes\n"
               "  --emit parsed    print the program as parsed, before type inference\n"
               "  --emit fused     print the program after operator fusion\n"
               "  --emit anf       print the program in A-normal form (explicit evaluation order)\n"
               "  --emit lifted    print the program after lambda lifting (closure conversion)\n"
               "  --emit devices   print the placed program: every binding's device, inserted copies, specializations\n"
               "  --emit bytecode  print each function's bytecode and the kernel table\n"
               "  --emit memory    print each function's allocations, shape functions and releases\n"
               "  --emit kernels   list each fused kernel: input shapes (? for dynamic), call sites\n"
               "  --emit loops     print each kernel's loop-level form\n"
               "  --emit llvm      print each kernel's optimized LLVM IR\n"
               "  --tuning-log F   with --emit llvm or loops: each kernel with the schedule kiln-tune recorded for it\n"
               "                   (its static shapes), as vmrun --tuning-log compiles it; records of another CPU are ignored\n"
               "  --emit ptx       print each kernel's PTX (sm_90) and its launches (no GPU needed)\n"
               "  --emit tasks     list the kernels worth tuning (kiln-tune): task key, operators, shapes, weight;\n"
               "                   and how many were left out, and why\n"
               "  --shapes FILE    with --emit tasks: shapes recorded by vmrun --record-shapes (for `?` dimensions)\n"
               "  --dims LO:HI     with --emit tasks: without a record, `?` dimensions at the powers of two LO..HI\n"
               "  --partition LIBS hand the parts of the program that libraries support to them (comma-separated,\n"
               "                   in order of preference; README \"Partitioning\")\n"
               "  --patterns FILE  a pattern file: composite patterns and supported calls (repeatable)\n"
               "  --no-prelude     do not add the prelude's definitions\n"
               "  --no-memory-plan give every kernel output its own storage (no sharing between temporaries)\n"
               "  --precompile     with -o: also store every CPU kernel's machine code for this CPU (a load on a\n"
               "                   machine like this one compiles nothing; elsewhere the kernels are compiled)\n"
               "  -o OUT           write the executable (for vmrun and the C++ API)\n"
               "  --params F.npz   bind @main's parameters of those names to the arrays as constants\n"
               "  --device LIST    devices, the first the default: where the program computes (cpu, cpu:1, cuda,\n"
               "                   cuda-emu: the GPU path emulated on the host, ...);\n"
               "                   the host cpu is always added for control flow, shapes and scalars\n");
}

int fail(int code, const std::string& msg) {
  std::fprintf(stderr, "%s\n", msg.rfind("error:", 0) == 0 || msg.find(": error: ") != std::string::npos
                                   ? msg.c_str()
                                   : ("error: " + msg).c_str());
  return code;
}

// --emit kernels / loops / llvm: each distinct kernel once, with its call sites.
std::string describeKernels(const kiln::ir::Module& fused, const std::string& emit) {
  std::vector<std::pair<kiln::kernel_ir::FusedFunction, int>> kernels;
  for (const kiln::ir::Function* fn : kiln::compiler::primitiveFunctions(fused)) {
    kiln::kernel_ir::FusedFunction f = kiln::compiler::toFusedFunction(fn, "", fused.file());
    std::string key = f.toString();
    auto it = std::find_if(kernels.begin(), kernels.end(), [&](auto& k) { return k.first.toString() == key; });
    if (it != kernels.end()) {
      ++it->second;
    } else {
      kernels.emplace_back(std::move(f), 1);
    }
  }
  std::string out;
  for (size_t i = 0; i < kernels.size(); ++i) {
    auto& [f, sites] = kernels[i];
    f.name = "kernel" + std::to_string(i);
    out += f.name + ": inputs (";
    for (size_t p = 0; p < f.params.size(); ++p) out += (p ? ", " : "") + kiln::ops::descToString(f.params[p]);
    out += ") -> (";
    for (size_t o = 0; o < f.outputs.size(); ++o) out += (o ? ", " : "") + kiln::ops::descToString(f.typeOf(f.outputs[o]));
    out += "), " + std::to_string(sites) + " call site" + (sites == 1 ? "" : "s") + "\n";
    if (emit == "kernels") {
      out += f.toString() + "\n\n";
    } else if (emit == "loops" && kiln::jit::KernelCache::global().tuningLog()) {
      // With a tuning log: the loops as the kernel's schedule left them (a kernel
      // with `?` dimensions keeps the default here; it picks its schedule per call).
      auto kernel = kiln::jit::KernelCache::global().get(f);
      out += "// schedule: " + kernel->loops().schedule.toString() + "\n" + kernel->loops().toString() + "\n";
    } else if (emit == "loops") {
      out += kiln::kernel_ir::lowerToLoops(f, {.directConv = true, .gemmPostOps = true, .splitBorders = true}).toString() + "\n";  // what the CPU runs
    } else if (emit == "ptx" && kiln::kernel_ir::isDynamicKernel(f)) {
      out += "// a data-dependent operator: it runs natively on the host, no PTX\n\n";
    } else if (emit == "ptx") {
      kiln::jit::PtxModule ptx =
          kiln::jit::codegenBackend().compilePtx(kiln::kernel_ir::lowerToLoops(f), f.name, kiln::jit::kMaxPtxSm);
      out += "// sm_" + std::to_string(ptx.sm) + "; what the host runs:\n" + kiln::jit::describePlan(ptx) + ptx.ptx + "\n";
    } else {
      out += kiln::jit::KernelCache::global().get(f, {}, true)->optimizedIR() + "\n";
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string program, out, emit, paramsFile, devices = "cpu", partitionLibs, shapesFile, dims, tuningLog;
  std::vector<std::string> patternFiles;
  bool prelude = true, planMemory = true, precompile = false;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string* { return i + 1 < args.size() ? &args[++i] : nullptr; };
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else if (a == "-o" || a == "--emit" || a == "--params" || a == "--device" || a == "--partition" || a == "--patterns" ||
               a == "--shapes" || a == "--dims" || a == "--tuning-log") {
      const std::string* v = value();
      if (!v) return fail(2, "error: " + a + " needs a value");
      if (a == "-o") out = *v;
      else if (a == "--shapes") shapesFile = *v;
      else if (a == "--dims") dims = *v;
      else if (a == "--tuning-log") tuningLog = *v;
      else if (a == "--partition") partitionLibs = *v;
      else if (a == "--patterns") patternFiles.push_back(*v);
      else if (a == "--emit") emit = *v;
      else if (a == "--params") paramsFile = *v;
      else devices = *v;
    } else if (a == "--no-prelude") {
      prelude = false;
    } else if (a == "--no-memory-plan") {
      planMemory = false;
    } else if (a == "--precompile") {
      precompile = true;
    } else if (!a.empty() && a[0] == '-') {
      usage(stderr);
      return fail(2, "error: unknown option '" + a + "'");
    } else if (program.empty()) {
      program = a;
    } else {
      return fail(2, "error: more than one program given ('" + program + "' and '" + a + "')");
    }
  }
  if (program.empty()) {
    usage(stderr);
    return fail(2, "error: no program given");
  }
  const std::vector<std::string> emits = {"ir", "parsed", "composite", "annotated", "regions", "partitioned", "fused", "anf", "lifted",
                                         "devices", "bytecode", "memory", "kernels", "loops", "llvm", "ptx", "tasks"};
  if (!emit.empty() && std::find(emits.begin(), emits.end(), emit) == emits.end()) {
    std::string list;
    for (const std::string& e : emits) list += (list.empty() ? "" : ", ") + e;
    return fail(2, "error: --emit " + emit + " is not available (available: " + list + ")");
  }
  if (emit.empty() && out.empty()) return fail(2, "error: nothing to do: give -o OUT or --emit WHAT");
  if (precompile && out.empty()) return fail(2, "error: --precompile needs -o OUT");
  if (!tuningLog.empty() && emit != "llvm" && emit != "loops")
    return fail(2, "error: --tuning-log goes with --emit llvm or --emit loops");

  kiln::OnnxModel onnxModel;  // for an ONNX program: errors inside it name the node
  try {
    kiln::CompileOptions copts;
    copts.devices = kiln::tools::checkDevices(devices, false);
    copts.prelude = prelude;
    copts.planMemory = planMemory;
    kiln::tools::setPartitionOptions(partitionLibs, patternFiles, copts);
    if (!paramsFile.empty()) copts.params = kiln::readNpz(paramsFile);
    std::string source;
    if (kiln::isOnnxPath(program)) {
      // An ONNX model is imported to a program and its weights; from here on it is
      // compiled as any other program (--emit ir prints the imported program).
      // --params may give graph inputs the program needs as constants (axes, shapes
      // fed as inputs): the import specializes the program to them.
      kiln::OnnxImportOptions importOptions;
      importOptions.inputValues = copts.params;
      onnxModel = kiln::importOnnxFile(program, importOptions);
      for (const auto& name : onnxModel.frozenInputs) copts.params.erase(name);
      source = onnxModel.program;
      for (auto& [name, t] : onnxModel.params) copts.params.emplace(name, t);
    } else {
      source = kiln::compiler::readSourceFile(program);
    }
    if (emit == "parsed") {
      kiln::compiler::FrontendOptions opts;
      opts.prelude = prelude;
      opts.typeCheck = false;
      auto module = kiln::compiler::loadProgram(source, program, opts);
      std::string text = kiln::compiler::onCompilerStack([&] { return kiln::ir::printModule(*module, {}); });
      std::fwrite(text.data(), 1, text.size(), stdout);
      return 0;
    }
    if (!tuningLog.empty()) {
      // The kernels --emit llvm and loops print come from the process's kernel cache.
      auto log = std::make_shared<const kiln::jit::TuningLog>(kiln::jit::TuningLog::load(tuningLog));
      for (const std::string& note : log->notes()) std::fprintf(stderr, "note: %s\n", note.c_str());
      kiln::jit::KernelCache::global().setTuningLog(log);
    }
    kiln::compiler::Stages stages = kiln::compiler::runPasses(source, program, copts);
    std::shared_ptr<const kiln::Executable> exe;
    if (!out.empty() || emit == "bytecode" || emit == "memory" || emit == "tasks") exe = kiln::compiler::emit(stages, copts);
    kiln::tune::ExtractOptions extract;
    if (emit == "tasks") {
      if (!shapesFile.empty()) extract.records = kiln::tune::readShapeRecords(shapesFile);
      if (!dims.empty()) kiln::tune::parseDimRange(dims, extract);
    } else if (!shapesFile.empty() || !dims.empty()) {
      return fail(2, "error: --shapes and --dims go with --emit tasks");
    }
    // --emit memory: the memory pass's decisions, then the instructions that carry them out.
    std::string memoryPlan = emit == "memory" ? kiln::compiler::printMemoryPlan(stages, copts) : "";
    std::string text = kiln::compiler::onCompilerStack([&]() -> std::string {
      kiln::ir::PrintOptions typed;
      typed.showTypes = true;
      if (emit == "ir") return kiln::ir::printModule(*stages.typed, typed);
      if (emit == "composite" || emit == "annotated" || emit == "regions" || emit == "partitioned")
        return kiln::tools::partitionListing(stages, emit);
      if (emit == "fused") return kiln::ir::printModule(*stages.fused, typed);
      if (emit == "anf") return kiln::ir::printModule(*stages.anf, typed);
      if (emit == "lifted") return kiln::ir::printModule(*stages.lifted, typed);
      if (emit == "devices") return kiln::tools::devicesListing(stages.placed);
      if (emit == "bytecode") return exe->disassemble();
      if (emit == "memory") return memoryPlan + kiln::tools::memoryListing(*exe);
      if (emit == "tasks") return kiln::tune::extractTasks(*exe, extract).toString();
      if (emit.empty()) return "";
      return describeKernels(*stages.fused, emit);
    });
    std::fwrite(text.data(), 1, text.size(), stdout);
    if (precompile) exe = kiln::Runtime::create({})->precompile(exe);
    if (!out.empty()) exe->save(out);
    return 0;
  } catch (const kiln::Error& e) {
    return fail(2, onnxModel.file.empty() ? e.what() : kiln::explainOnnxError(onnxModel, e).what());
  } catch (const std::exception& e) {
    return fail(1, std::string("error: internal: ") + e.what());
  }
}
