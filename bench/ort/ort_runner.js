// Runs ONNX models on ONNX Runtime (onnxruntime-node, CPU) for model_bench, which
// drives it line by line over stdin/stdout so the two runtimes alternate in one run.
//
//   load DIR THREADS   -> "ok": DIR/model.onnx in a session with THREADS intra-op
//                         threads; its inputs are DIR/<input name>.npy
//   run ITERS          -> "times t1 ... tN" (microseconds per run) and
//                         "out v1 ... vM" (the first output, after the last run)
// The native binding is called synchronously: no promise or event-loop cost is timed.
'use strict';
const fs = require('fs');
const path = require('path');
const readline = require('readline');
const ort = require('onnxruntime-node');
const { binding, initOrt } = require('onnxruntime-node/dist/binding');

function readNpy(file) {  // little-endian float32 arrays, format 1.0, C order
  const buf = fs.readFileSync(file);
  const headerLen = buf.readUInt16LE(8);
  const header = buf.toString('latin1', 10, 10 + headerLen);
  if (!header.includes("'descr': '<f4'") || header.includes("'fortran_order': True")) throw new Error(file + ': not a C-order float32 .npy');
  const shape = header.match(/'shape': \(([^)]*)\)/)[1].split(',').map(s => s.trim()).filter(s => s).map(Number);
  const data = new Float32Array(buf.buffer.slice(buf.byteOffset + 10 + headerLen, buf.byteOffset + buf.length));
  return new ort.Tensor('float32', data, shape);
}

initOrt();
let session = null, feeds = null, fetches = null;
const rl = readline.createInterface({ input: process.stdin });
rl.on('line', line => {
  const [cmd, a, b] = line.trim().split(/\s+/);
  try {
    if (cmd === 'load') {
      session = new binding.InferenceSession();
      session.loadModel(path.join(a, 'model.onnx'), {
        intraOpNumThreads: Number(b), interOpNumThreads: 1, executionMode: 'sequential', graphOptimizationLevel: 'all',
      });
      feeds = {};
      for (const m of session.inputMetadata) feeds[m.name] = readNpy(path.join(a, m.name + '.npy'));
      fetches = {};
      for (const m of session.outputMetadata) fetches[m.name] = null;
      console.log('ok');
    } else if (cmd === 'run') {
      const times = [];
      let out = null;
      for (let i = 0; i < Number(a); ++i) {
        const t0 = process.hrtime.bigint();
        out = session.run(feeds, fetches, {});
        times.push(Number(process.hrtime.bigint() - t0) / 1000);
      }
      console.log('times ' + times.join(' '));
      const first = out[session.outputMetadata[0].name];
      console.log('out ' + Array.from(first.data).join(' '));
    } else {
      throw new Error('unknown command ' + cmd);
    }
  } catch (e) {
    console.log('error ' + String(e.message || e).replace(/\s+/g, ' '));
  }
});
