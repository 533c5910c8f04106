// libFuzzer target for the executable loader: any bytes must load, or be refused
// with a kiln::Error — never crash, hang or leak. Half of the inputs get their
// checksum resealed so mutations reach the parser and the instruction verifier.
#include <cstdint>
#include <vector>

#include "kiln/error.h"
#include "kiln/executable.h"

// The bounded driver makes every last byte odd, so every input is resealed.
extern "C" const bool kiln_fuzz_odd_last_byte = true;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> image(data, data + size);
  if (size > 0 && (data[size - 1] & 1)) kiln::Executable::resealChecksum(image);
  try {
    auto exe = kiln::Executable::fromBytes(image);
    (void)exe->disassemble();
  } catch (const kiln::Error&) {
  }
  return 0;
}
