// The front end's entry points: source text to a parsed, type-checked module.
//
// Everything here runs on a dedicated thread with a large stack (kCompilerStack),
// so deeply nested programs neither depend on the caller's stack size nor crash
// it; nesting beyond the parser's limit is a clean error. Exceptions (kiln::Error)
// propagate to the caller unchanged. Safe to call from many threads at once: each
// call builds its own module in its own arena.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "compiler/ir/module.h"

namespace kiln::compiler {

inline constexpr size_t kCompilerStack = size_t(1) << 30;  // reserved, committed only as used

// Runs `fn` on a thread with a kCompilerStack-byte stack (or directly, when
// already on one) and rethrows what it throws.
void runOnCompilerStack(const std::function<void()>& fn);

template <class F>
auto onCompilerStack(F&& f) -> std::invoke_result_t<F> {
  using R = std::invoke_result_t<F>;
  if constexpr (std::is_void_v<R>) {
    runOnCompilerStack(f);
  } else {
    std::optional<R> out;
    runOnCompilerStack([&] { out.emplace(f()); });
    return std::move(*out);
  }
}

struct FrontendOptions {
  bool prelude = true;    // parse the prelude ahead of the program
  bool typeCheck = true;  // run type inference
};

// Parses (and by default type-checks) a program. Throws kiln::Error.
std::unique_ptr<ir::Module> loadProgram(std::string_view source, const std::string& file,
                                        const FrontendOptions& opts = {});

// Reads a whole file; a missing or unreadable file is a kiln::Error.
std::string readSourceFile(const std::string& path);

}  // namespace kiln::compiler
