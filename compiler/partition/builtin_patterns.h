// The pattern table Kiln has for a library (dnnl), used when the user's pattern
// files say nothing of it; nullopt for a library Kiln has none for.
#pragma once

#include <optional>
#include <string>

#include "compiler/partition/pattern.h"

namespace kiln::partition {

std::optional<PatternTable> builtinPatterns(const std::string& library);

}  // namespace kiln::partition
