"""Kiln: a runtime for dynamic machine-learning programs.

    import kiln, numpy as np
    exe = kiln.compile("samples/mlp.relay", params=dict(np.load("samples/mlp_weights.npz")))
    vm = exe.vm()                     # one VM per thread; VMs share exe's kernels
    probs = vm.invoke("main", np.random.rand(1, 784).astype(np.float32))

`kiln.compile(program, params=None, devices=None)` takes Relay text or a path;
`kiln.load(path)` reads an executable written by `kilnc -o` or `Executable.save`.
`VM.invoke` takes numpy arrays (shared without a copy when compact and 64-byte
aligned), anything with `__dlpack__`, Python numbers, tuples and `kiln.Adt` values,
and returns numpy arrays that share Kiln's memory, tuples, and `kiln.Adt` values
(`Adt("Cons", head, tail)`: `.constructor`, `.fields`). `kiln.from_dlpack(obj)` makes a
`kiln.Tensor`, which has `__dlpack__`. Every failure is a `kiln.Error`. The GIL is
released while Kiln compiles or runs. `exe.vm(time_limit=seconds)` bounds each invoke,
and `vm.request_stop()` (from another thread) ends the invoke running now: either
raises `kiln.Error`.
"""
from ._kiln import Adt, Error, Executable, Runtime, Tensor, Value, VM, compile, from_dlpack, load

__all__ = ["Adt", "Error", "Executable", "Runtime", "Tensor", "Value", "VM", "compile", "from_dlpack", "load",
           "to_list"]


def to_list(value):
    """The elements of a prelude `List` value (Cons/Nil cells) as a Python list."""
    out = []
    while isinstance(value, Adt) and value.constructor == "Cons":
        out.append(value.fields[0])
        value = value.fields[1]
    if not (isinstance(value, Adt) and value.constructor == "Nil"):
        raise Error("error: not a List value: %r" % (value,))
    return out
