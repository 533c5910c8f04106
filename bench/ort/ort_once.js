// One ONNX Runtime process as a user would start it: load the package, create a
// session for MODEL, run it once on the float32 .npy inputs named NAME=FILE, print
// the first output's sum. startup_bench.py times this whole process.
// Usage: node ort_once.js MODEL NAME=FILE.npy...
'use strict';
const fs = require('fs');
const ort = require('onnxruntime-node');

function readNpy(path) {
  const b = fs.readFileSync(path);
  const headerLen = b.readUInt16LE(8);
  const header = b.toString('latin1', 10, 10 + headerLen);
  if (!header.includes("'descr': '<f4'")) throw new Error(path + ': only little-endian float32 is read');
  const shape = header.match(/'shape': \(([^)]*)\)/)[1].split(',').filter((s) => s.trim() !== '').map(Number);
  const start = 10 + headerLen;
  const data = new Float32Array(b.buffer.slice(b.byteOffset + start, b.byteOffset + b.length));
  return new ort.Tensor('float32', data, shape);
}

async function main() {
  const [model, ...inputs] = process.argv.slice(2);
  const session = await ort.InferenceSession.create(model);
  const feeds = {};
  for (const spec of inputs) {
    const eq = spec.indexOf('=');
    feeds[spec.slice(0, eq)] = readNpy(spec.slice(eq + 1));
  }
  const out = await session.run(feeds);
  const first = out[session.outputNames[0]].data;
  let sum = 0;
  for (const v of first) sum += v;
  console.log(sum.toFixed(6));
}

main().catch((e) => {
  console.error('error: ' + e.message);
  process.exit(1);
});
