// kilnc: compiles a Relay program; `--emit WHAT` prints an intermediate form.
//
// Exit status (shared/spec/tools.md): 0 success, 2 unusable input (bad flags,
// unreadable file, parse or type error), 1 any other failure.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "compiler/frontend.h"
#include "compiler/ir/printer.h"
#include "kiln/error.h"

namespace {

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: kilnc PROGRAM.relay [-o OUT] [--emit WHAT] [--params FILE.npz] [--device LIST]\n"
               "  --emit ir        print the program after type inference\n"
               "  --emit parsed    print the program as parsed, before type inference\n"
               "  --no-prelude     do not add the prelude's definitions\n");
}

int fail(int code, const std::string& msg) {
  std::fprintf(stderr, "%s\n", msg.rfind("error:", 0) == 0 || msg.find(": error: ") != std::string::npos
                                   ? msg.c_str()
                                   : ("error: " + msg).c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  std::string program, out, emit;
  bool prelude = true;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const char* flag) -> const std::string* {
      if (i + 1 >= args.size()) return nullptr;
      (void)flag;
      return &args[++i];
    };
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else if (a == "-o" || a == "--emit" || a == "--params" || a == "--device") {
      const std::string* v = value(a.c_str());
      if (!v) return fail(2, "error: " + a + " needs a value");
      if (a == "-o") out = *v;
      else if (a == "--emit") emit = *v;
      else return fail(2, "error: " + a + " is not supported yet by this build of kilnc");
    } else if (a == "--no-prelude") {
      prelude = false;
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
  if (!emit.empty() && emit != "ir" && emit != "parsed")
    return fail(2, "error: --emit " + emit + " is not available yet (available: ir, parsed)");
  if (emit.empty() && out.empty()) return fail(2, "error: nothing to do: give -o OUT or --emit WHAT");
  if (!out.empty()) return fail(2, "error: writing executables (-o) is not available yet in this build");

  try {
    std::string source = kiln::compiler::readSourceFile(program);
    kiln::compiler::FrontendOptions opts;
    opts.prelude = prelude;
    opts.typeCheck = emit != "parsed";
    auto module = kiln::compiler::loadProgram(source, program, opts);
    kiln::ir::PrintOptions popts;
    popts.showTypes = emit == "ir";
    std::string text = kiln::compiler::onCompilerStack([&] { return kiln::ir::printModule(*module, popts); });
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  } catch (const kiln::Error& e) {
    return fail(2, e.what());
  } catch (const std::exception& e) {
    return fail(1, std::string("error: internal: ") + e.what());
  }
}
