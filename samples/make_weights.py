#!/usr/bin/env python3
"""Writes the sample weights (mlp_weights.npz, cnn_weights.npz) as numpy.savez
would: uncompressed zip64 entries of .npy arrays. Needs only the standard library;
values are deterministic (a scaled sine), so the expected outputs stay fixed."""
import math, struct, zipfile

def npy(shape, scale, phase):
    n = 1
    for d in shape:
        n *= d
    data = struct.pack("<%df" % n, *[scale * math.sin(0.37 * i + phase) for i in range(n)])
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % (
        "".join("%d, " % d for d in shape) if len(shape) > 1 else "%d," % shape[0])
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data

def savez(path, arrays):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, (shape, scale, phase) in arrays.items():
            with z.open(name + ".npy", "w", force_zip64=True) as f:
                f.write(npy(shape, scale, phase))

savez("mlp_weights.npz", {"w1": ((128, 784), 0.05, 0.1), "b1": ((128,), 0.1, 0.2),
                          "w2": ((10, 128), 0.2, 0.3), "b2": ((10,), 0.1, 0.4)})
savez("cnn_weights.npz", {"c1_w": ((16, 3, 3, 3), 0.3, 0.5), "c1_b": ((16,), 0.1, 0.6),
                          "c2_w": ((32, 16, 3, 3), 0.1, 0.7), "c2_b": ((32,), 0.1, 0.8),
                          "fc_w": ((10, 32), 0.3, 0.9), "fc_b": ((10,), 0.1, 1.0)})
