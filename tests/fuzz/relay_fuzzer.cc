// Fuzz target for the front end and the passes behind it: any bytes as Relay
// text must compile, or be refused with a kiln::Error — never crash, hang,
// leak, or report an internal error.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kiln/compile.h"
#include "kiln/error.h"

extern "C" const bool kiln_fuzz_odd_last_byte = false;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    auto exe = kiln::compile(text, "fuzz.relay");
    (void)exe->disassemble();
  } catch (const kiln::Error& e) {
    // Bad input is the user's error, said as such; "internal" means Kiln's bug.
    if (std::string(e.what()).find("error: internal:") != std::string::npos) {
      std::fprintf(stderr, "internal error on fuzz input: %s\n", e.what());
      std::abort();
    }
  }
  return 0;
}
