#!/usr/bin/python3
"""Start-up, measured as whole processes: what a serving binary or a short job pays.

Usage: bench/startup_bench.py [BUILD_DIR] [--rounds N]

Times (median of N rounds, 7 by default, the cases alternating within each round):
  - `vmrun --help`;
  - a small executable (samples/tree_sum) and the LSTM-loop executable (model_bench's
    lstm32: 32 steps of a 128->256 LSTM cell, 1.5 MB of weights) run once, each
    precompiled (`kilnc --precompile`) and from a warm disk cache (KILN_CACHE_DIR);
  - the LSTM-loop executable cold: no cache at all, every kernel compiled, in
    parallel on load (Kiln's default) and one by one at first call
    (KILN_COMPILE_ON_LOAD=0);
  - ONNX Runtime's process for the same LSTM (node: load onnxruntime-node, create
    the session, run once), when scripts/install-bench-deps.sh has installed it.
Every Kiln process prints the same result, checked against the first.
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The start-up issue's targets: --help, the small executable warm or precompiled,
# and the LSTM-loop cold. The LSTM's warm and precompiled runs have none: they load
# 1.5 MB of weights and run 32 steps, their first packing the weights.
TARGETS = {"vmrun --help": 10, "small, precompiled": 15, "small, warm disk cache": 15,
           "lstm32, cold (compile on load)": 100}


def timed(cmd, env=None):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ms = (time.perf_counter() - t0) * 1e3
    if r.returncode != 0:
        sys.exit(f"startup_bench: {' '.join(cmd)} failed:\n{r.stderr}")
    return ms, r.stdout.strip()


def main():
    args = sys.argv[1:]
    rounds = 7
    if "--rounds" in args:
        i = args.index("--rounds")
        rounds = int(args[i + 1])
        del args[i:i + 2]
    build = os.path.abspath(args[0] if args else os.path.join(ROOT, "build"))
    vmrun, kilnc = os.path.join(build, "vmrun"), os.path.join(build, "kilnc")
    work = tempfile.mkdtemp(prefix="kiln_startup_")
    try:
        subprocess.run([os.path.join(build, "bench", "model_bench"), "--no-ort", "--only", "lstm32", "--rounds", "1",
                        "--dump", work], check=True, stdout=subprocess.DEVNULL)
        lstm = os.path.join(work, "lstm32.relay")
        weights, inputs = os.path.join(work, "lstm32_weights.npz"), os.path.join(work, "lstm32_inputs.npz")
        small_src = os.path.join(ROOT, "samples", "tree_sum.relay")
        exes = {}
        for name, src, extra in (("lstm", lstm, ["--params", weights]), ("small", small_src, [])):
            for pre in (False, True):
                out = os.path.join(work, f"{name}{'_pre' if pre else ''}.kx")
                subprocess.run([kilnc, src, "-o", out] + extra + (["--precompile"] if pre else []), check=True)
                exes[(name, pre)] = out
        small_args = ["--input", "f32=1", "--input", "f32=2", "--input", "f32=3"]
        lstm_args = ["--inputs", inputs]
        plain = {k: v for k, v in os.environ.items() if k not in ("KILN_CACHE_DIR", "KILN_COMPILE_ON_LOAD")}
        warm = dict(plain, KILN_CACHE_DIR=os.path.join(work, "cache"))
        serial = dict(plain, KILN_COMPILE_ON_LOAD="0")
        for name, a in (("small", small_args), ("lstm", lstm_args)):  # fill the warm cache
            subprocess.run([vmrun, exes[(name, False)]] + a, env=warm, check=True, stdout=subprocess.DEVNULL)
        cases = [
            ("vmrun --help", [vmrun, "--help"], plain),
            ("small, precompiled", [vmrun, exes[("small", True)]] + small_args, plain),
            ("small, warm disk cache", [vmrun, exes[("small", False)]] + small_args, warm),
            ("lstm32, precompiled", [vmrun, exes[("lstm", True)]] + lstm_args, plain),
            ("lstm32, warm disk cache", [vmrun, exes[("lstm", False)]] + lstm_args, warm),
            ("lstm32, cold (compile on load)", [vmrun, exes[("lstm", False)]] + lstm_args, plain),
            ("lstm32, cold (compile at first call)", [vmrun, exes[("lstm", False)]] + lstm_args, serial),
        ]
        ort = ort_case(work)
        if isinstance(ort, tuple):
            cases.append(ort)
        times = {c[0]: [] for c in cases}
        results = {}
        for _ in range(rounds):
            for name, cmd, env in cases:
                ms, out = timed(cmd, env)
                times[name].append(ms)
                key = name.split(",")[0]
                if not name.startswith("ORT") and name != "vmrun --help":
                    if results.setdefault(key, out) != out:
                        sys.exit(f"startup_bench: {name} printed {out}, earlier {results[key]}")
        ort_ms = statistics.median(times[ort[0]]) if isinstance(ort, tuple) else None
        print(f"whole processes, median of {rounds} (min-max), ms; {os.cpu_count()} cores")
        print(f"{'case':40} {'median':>8} {'range':>15} {'target':>7} {'vs ORT':>7}")
        for name, _, _ in cases:
            t = times[name]
            med = statistics.median(t)
            target = TARGETS.get(name)
            mark = "" if target is None else (f"<={target}" + (" ok" if med <= target else " MISS"))
            ratio = f"{med / ort_ms:.2f}" if ort_ms and not name.startswith("ORT") and name != "vmrun --help" else ""
            print(f"{name:40} {med:8.1f} {min(t):7.1f}-{max(t):<7.1f} {mark:>7} {ratio:>7}")
        if not isinstance(ort, tuple):
            print(f"ORT: not measured ({ort})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ort_case(work):
    node = shutil.which("node")
    runner = os.path.join(ROOT, "bench", "ort", "ort_once.js")
    if not node or not os.path.isdir(os.path.join(ROOT, "bench", "ort", "node_modules", "onnxruntime-node")):
        return "onnxruntime-node is not installed (scripts/install-bench-deps.sh)"
    onnx_dir = os.path.join(work, "onnx")
    os.makedirs(onnx_dir)
    # The weights and inputs as .npy for onnx_models.py and the runner (numpy comes with python3-onnx).
    conv = ("import numpy as np, sys\n"
            "for f in sys.argv[2:]:\n"
            "    d = np.load(f)\n"
            "    for k in d: np.save(sys.argv[1] + '/' + k + '.npy', d[k])\n")
    r = subprocess.run(["/usr/bin/python3", "-c", conv, onnx_dir, os.path.join(work, "lstm32_weights.npz"),
                        os.path.join(work, "lstm32_inputs.npz")], capture_output=True, text=True)
    if r.returncode != 0:
        return "python3-onnx (and numpy) are missing: " + r.stderr.strip().splitlines()[-1]
    r = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench", "ort", "onnx_models.py"), onnx_dir, "lstm"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return "onnx_models.py failed: " + r.stderr.strip()
    return ("ORT 1.30: lstm32 (node, session, run once)",
            [node, runner, os.path.join(onnx_dir, "model.onnx"), "xs=" + os.path.join(onnx_dir, "xs.npy")], None)


if __name__ == "__main__":
    main()
