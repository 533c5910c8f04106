// Tuned schedules timed inside their program against the defaults (program_check.h).
#include "tune/program_check.h"

#include <algorithm>
#include <chrono>

#include "jit/tuning_log.h"
#include "kiln/error.h"
#include "kiln/runtime.h"
#include "kiln/vm.h"

namespace kiln::tune {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

// A kernel's figures at one set of shapes so far in a VM's profile.
KernelShapeProfile figuresOf(const VirtualMachine& vm, uint32_t kernel, const std::string& shapes) {
  const std::vector<KernelProfile>& p = vm.kernelProfile();
  if (kernel >= p.size()) return {};
  auto it = p[kernel].byShape.find(shapes);
  return it == p[kernel].byShape.end() ? KernelShapeProfile{} : it->second;
}

}  // namespace

std::vector<ProgramTiming> checkInProgram(const std::shared_ptr<const Executable>& exe, std::span<const Value> args,
                                          const std::vector<TaskResult>& results, const std::string& tunedLog,
                                          const ProgramCheckOptions& options) {
  std::vector<ProgramTiming> out(results.size());
  std::vector<size_t> checked;
  for (size_t i = 0; i < results.size(); ++i)
    if (!results[i].best.isDefault()) checked.push_back(i);
  if (checked.empty()) return out;

  // Two Runtimes of their own (their own kernel caches), both on the process's pool.
  RuntimeOptions plain;
  plain.numThreads = 0;
  RuntimeOptions tuned = plain;
  tuned.tuningLog = tunedLog;
  VirtualMachine* sides[2];
  VMOptions vmOptions;
  vmOptions.rowBatching = false;
  vmOptions.runtime = Runtime::create(plain);
  VirtualMachine defaultVm(exe, vmOptions);
  vmOptions.runtime = Runtime::create(tuned);
  VirtualMachine tunedVm(exe, vmOptions);
  sides[0] = &defaultVm;
  sides[1] = &tunedVm;
  for (VirtualMachine* vm : sides) {
    vm->checkArguments(options.function, args);
    vm->enableShapeRecording();
  }

  // Warm: kernels made, packed weights prepared, pools filled; the slower side
  // sizes the blocks.
  double slowest = 0;
  for (VirtualMachine* vm : sides)
    for (int i = 0; i < 3; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      vm->invoke(options.function, args);
      slowest = std::max(slowest, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  int runs = static_cast<int>(std::clamp(options.roundMillis / std::max(slowest, 1e-6), 1.0, 100000.0));

  std::vector<std::string> shapes(results.size());
  for (size_t i : checked) shapes[i] = jit::formatShapes(results[i].task.shapes);
  // perCall[side][i]: each block's time per call.
  std::vector<std::vector<double>> perCall[2] = {std::vector<std::vector<double>>(results.size()),
                                                 std::vector<std::vector<double>>(results.size())};
  std::vector<uint64_t> callsPerBlock(results.size(), 0);
  for (int round = 0; round < std::max(options.rounds, 1); ++round) {
    for (int k = 0; k < 2; ++k) {
      int side = (round + k) % 2;  // each side goes first in every other round
      VirtualMachine& vm = *sides[side];
      std::vector<KernelShapeProfile> before(results.size());
      for (size_t i : checked) before[i] = figuresOf(vm, results[i].task.kernel, shapes[i]);
      for (int r = 0; r < runs; ++r) vm.invoke(options.function, args);
      for (size_t i : checked) {
        KernelShapeProfile after = figuresOf(vm, results[i].task.kernel, shapes[i]);
        uint64_t calls = after.calls - before[i].calls;
        if (calls == 0) continue;
        perCall[side][i].push_back(static_cast<double>(after.totalNanos - before[i].totalNanos) / 1e3 /
                                   static_cast<double>(calls));
        callsPerBlock[i] = calls;
      }
    }
  }
  for (size_t i : checked) {
    if (perCall[0][i].empty() || perCall[1][i].empty()) continue;
    out[i].seen = true;
    out[i].defaultMicros = median(perCall[0][i]);
    out[i].micros = median(perCall[1][i]);
    out[i].calls = callsPerBlock[i] / static_cast<uint64_t>(runs);
  }
  return out;
}

}  // namespace kiln::tune
