// Fuzz target for the .npy and .npz readers: any bytes must parse, or be refused
// with a kiln::Error — never read out of bounds, crash or allocate what the bytes
// cannot back.
#include <cstdint>

#include "kiln/error.h"
#include "kiln/npy.h"

extern "C" const bool kiln_fuzz_odd_last_byte = false;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    (void)kiln::parseNpy(data, size, "fuzz.npy");
  } catch (const kiln::Error&) {
  }
  try {
    (void)kiln::parseNpz(data, size, "fuzz.npz");
  } catch (const kiln::Error&) {
  }
  return 0;
}
