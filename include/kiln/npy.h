// NumPy files: .npy arrays and .npz archives (uncompressed, as numpy.savez writes
// them, including zip64 entries), for weights, inputs and outputs.
//
// Supported element types are Kiln's dtypes in little-endian, C order. Anything
// else (Fortran order, big-endian, object arrays, compressed archives) is a
// kiln::Error that says what was found.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

Tensor readNpy(const std::string& path);
Tensor parseNpy(const uint8_t* data, size_t size, const std::string& what);
std::map<std::string, Tensor> readNpz(const std::string& path);
// An archive in memory; every offset and size in it is checked against `size`
// before use (`what` names it in errors).
std::map<std::string, Tensor> parseNpz(const uint8_t* data, size_t size, const std::string& what);

std::vector<uint8_t> encodeNpy(const Tensor& t);
void writeNpy(const std::string& path, const Tensor& t);
// Entries are written in the given order; names get the ".npy" suffix in the archive.
void writeNpz(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& arrays);

}  // namespace kiln
