// The serving workload: one executable that a server's worker threads share, and
// a fixed set of distinct requests mixing what a dynamic-model server sees —
// static shapes (a dense layer at batch 1), dynamic shapes (a batch of `?` rows
// through softmax and a reduction; the dense layer over 64 to 1023 rows, whose
// loops are big enough to share out on the Runtime's pool), and recursion (a List
// built and folded by recursive functions, its length and tensor size from the
// request).
//
// Used by the stress test (tests/stress/serve_stress.cc: every result checked
// against a single-threaded run) and by bench/serve_bench (throughput, latency).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/executable.h"
#include "kiln/value.h"

namespace kiln::bench {

struct ServeRequest {
  std::string function;
  std::vector<Value> args;  // shared by every thread that sends it (values are immutable)
  std::string kind;         // "static", "dynamic", "batched" or "recursive"
};

struct ServeWorkload {
  std::shared_ptr<const Executable> exe;
  std::vector<ServeRequest> requests;  // distinct variants; request i of a run sends variants[(i * 7 + t * 13) % n]
};

// Compiles the program and makes `variants` requests (deterministic inputs).
ServeWorkload makeServeWorkload(int variants = 48);

// Which variant request `i` of thread `t` sends.
inline size_t serveVariant(size_t i, size_t t, size_t n) { return (i * 7 + t * 13) % n; }

// Whether `a` matches `b` (same structure, shapes and dtypes; float elements
// within `rtol` relative to max(1, |b|)); otherwise `why` says where not.
bool sameValue(const Value& a, const Value& b, double rtol, std::string* why);

}  // namespace kiln::bench
