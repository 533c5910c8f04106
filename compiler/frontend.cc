// Front-end entry points and the large-stack compiler thread.
#include "compiler/frontend.h"

#include <pthread.h>

#include <cstring>

#include "base/read_file.h"
#include "compiler/parser/parser.h"
#include "compiler/parser/prelude.h"
#include "compiler/parser/prelude_filter.h"
#include "compiler/typecheck/infer.h"

namespace kiln::compiler {

namespace {
thread_local bool tOnCompilerStack = false;

struct ThreadJob {
  const std::function<void()>* fn;
  std::exception_ptr error;
};

void* threadMain(void* arg) {
  auto* job = static_cast<ThreadJob*>(arg);
  tOnCompilerStack = true;
  try {
    (*job->fn)();
  } catch (...) {
    job->error = std::current_exception();
  }
  return nullptr;
}
}  // namespace

void runOnCompilerStack(const std::function<void()>& fn) {
  if (tOnCompilerStack) {
    fn();
    return;
  }
  ThreadJob job{&fn, nullptr};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kCompilerStack);
  pthread_t thread;
  int rc = pthread_create(&thread, &attr, threadMain, &job);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    // No thread could be made (resource limits): run here, on the caller's stack.
    tOnCompilerStack = true;
    try {
      fn();
    } catch (...) {
      tOnCompilerStack = false;
      throw;
    }
    tOnCompilerStack = false;
    return;
  }
  pthread_join(thread, nullptr);
  if (job.error) std::rethrow_exception(job.error);
}

std::unique_ptr<ir::Module> loadProgram(std::string_view source, const std::string& file,
                                        const FrontendOptions& opts) {
  return onCompilerStack([&] {
    auto m = std::make_unique<ir::Module>(std::make_shared<ir::Arena>(), file);
    // The prelude less what the program defines itself (parser/prelude_filter.h);
    // the text lives in the module's arena, as the source of its nodes.
    if (opts.prelude) parser::parseInto(*m, m->arena().str(parser::preludeFor(source)), "<prelude>", /*fromPrelude=*/true);
    parser::parseInto(*m, source, file);
    if (opts.typeCheck) typecheck::inferTypes(*m);
    return m;
  });
}

std::string readSourceFile(const std::string& path) { return readFileText(path); }

}  // namespace kiln::compiler
