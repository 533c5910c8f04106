// Fuzz target for ONNX import: any bytes as a model must import and compile, or be
// refused with a kiln::Error — never crash, hang, leak, or report an internal error.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "kiln/error.h"
#include "kiln/onnx.h"

extern "C" const bool kiln_fuzz_odd_last_byte = false;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    kiln::OnnxModel m = kiln::importOnnx(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.onnx");
    (void)kiln::compileOnnx(m);
  } catch (const kiln::Error& e) {
    if (std::string(e.what()).find("error: internal:") != std::string::npos) {
      std::fprintf(stderr, "internal error on fuzz input: %s\n", e.what());
      std::abort();
    }
  }
  return 0;
}
