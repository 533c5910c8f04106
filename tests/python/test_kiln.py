"""The Python module as its users call it: compile, load, invoke with numpy
arrays, tuples and ADT values, DLPack both ways, kiln.Error for every failure,
and VMs on Python threads. Run by ctest with PYTHONPATH at the built package."""
import os
import sys
import tempfile
import threading
import unittest

import numpy as np

import kiln

SRC = os.environ.get("KILN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
LISTS = os.path.join(SRC, "tests", "c_api", "lists.relay")

PROGRAMS = """
def @identity(%x: Tensor[(?), float32]) -> Tensor[(?), float32] { %x }
def @fresh() -> Tensor[(16), float32] { ones(shape=[16], dtype="float32") }
def @scale(%x: Tensor[(?, ?), float32], %k: float32) -> Tensor[(?, ?), float32] { multiply(%x, %k) }
def @adder(%k: float32) -> fn (float32) -> float32 { fn (%x: float32) -> float32 { %x + %k } }
def @apply(%f: fn (float32) -> float32, %x: float32) -> float32 { %f(%x) }
def @pair(%x: Tensor[(4, 4), float32]) -> (Tensor[(4, 4), float32], Tensor[(4, 4), float32]) { (%x, %x) }
def @main(%a: int32, %flag: bool) -> int32 { if (%flag) { %a * 2 } else { %a } }
"""


def aligned(n, dtype=np.float32):
    """A 1-D array of n elements whose data is 64-byte aligned."""
    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(n * itemsize + 64, dtype=np.uint8)
    offset = (-raw.ctypes.data) % 64
    return raw[offset:offset + n * itemsize].view(dtype)


class CompileAndRun(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.exe = kiln.compile(PROGRAMS)
        cls.vm = cls.exe.vm()

    def test_mlp_from_a_path_with_params(self):
        weights = dict(np.load(os.path.join(SRC, "samples", "mlp_weights.npz")))
        exe = kiln.compile(os.path.join(SRC, "samples", "mlp.relay"), params=weights)
        x = np.random.default_rng(1).standard_normal((3, 784)).astype(np.float32)
        probs = exe.vm().invoke("main", x)
        self.assertEqual(probs.shape, (3, 10))
        self.assertEqual(probs.dtype, np.float32)
        np.testing.assert_allclose(probs.sum(axis=1), np.ones(3), rtol=1e-5)
        self.assertIn("%x: Tensor[(?, 784), float32]", exe.signature("main"))

    def test_scalars_take_the_parameters_dtype(self):
        self.assertEqual(int(self.vm.invoke("main", 21, True)), 42)
        self.assertEqual(int(self.vm.invoke("main", 21, False)), 21)
        out = self.vm.invoke("scale", np.full((2, 3), 2, np.float32), 1.5)
        np.testing.assert_array_equal(out, np.full((2, 3), 3, np.float32))

    def test_results_share_kiln_memory(self):
        x = np.arange(64, dtype=np.float32).reshape(8, 8)
        out = self.vm.invoke("scale", x, 2.0)
        self.assertFalse(out.flags.owndata)  # a view of Kiln's tensor, no copy
        self.assertTrue(out.flags.writeable)  # nothing else holds that memory
        out[0, 0] = -1  # and writing it is safe
        np.testing.assert_array_equal(out[1], 2 * x[1])

    def test_aligned_inputs_are_shared_unaligned_copied(self):
        x = aligned(32)
        x[:] = np.arange(32)
        out = self.vm.invoke("identity", x)
        self.assertTrue(np.shares_memory(out, x))
        self.assertFalse(out.flags.writeable)  # the caller's array still holds it
        y = aligned(33)[1:]  # 4 bytes past a 64-byte boundary
        y[:] = 7
        out = self.vm.invoke("identity", y)
        self.assertFalse(np.shares_memory(out, y))
        np.testing.assert_array_equal(out, y)
        # Strided input: copied into compact memory.
        z = np.arange(40, dtype=np.float32)[::2]
        np.testing.assert_array_equal(self.vm.invoke("identity", z), z)

    def test_constants_come_back_read_only(self):
        w = np.arange(16, dtype=np.float32)
        exe = kiln.compile("def @main(%w: Tensor[(16), float32]) -> Tensor[(16), float32] { %w }", params={"w": w})
        c = exe.vm().invoke("main")
        np.testing.assert_array_equal(c, w)
        self.assertFalse(c.flags.writeable)  # the executable's own constant
        fresh = self.vm.invoke("fresh")
        np.testing.assert_array_equal(fresh, np.ones(16, np.float32))
        self.assertTrue(fresh.flags.writeable)  # computed for this call

    def test_tuple_fields_sharing_memory_are_read_only(self):
        a, b = self.vm.invoke("pair", np.ones((4, 4), np.float32) * 3)
        np.testing.assert_array_equal(a, b)
        self.assertFalse(a.flags.writeable or b.flags.writeable)

    def test_closures_come_back_and_go_in(self):
        add5 = self.vm.invoke("adder", 5.0)
        self.assertIsInstance(add5, kiln.Value)
        self.assertIn("closure", repr(add5))
        self.assertEqual(float(self.vm.invoke("apply", add5, 1.5)), 6.5)


class AlgebraicDataTypes(unittest.TestCase):
    def test_lists_out_and_in(self):
        exe = kiln.compile(LISTS)
        vm = exe.vm()
        lst = vm.invoke("countdown", 3)
        self.assertIsInstance(lst, kiln.Adt)
        self.assertEqual(lst.constructor, "Cons")
        self.assertEqual([float(v) for v in kiln.to_list(lst)], [3.0, 2.0, 1.0])
        made = kiln.Adt("Cons", np.float32(1.5), kiln.Adt("Cons", np.float32(2.5), kiln.Adt("Nil")))
        self.assertEqual(float(vm.invoke("total", made)), 4.0)
        self.assertEqual(float(vm.invoke("total", lst)), 6.0)  # a returned list passed back
        self.assertEqual(repr(kiln.Adt("Nil")), "Nil")
        with self.assertRaisesRegex(kiln.Error, "no constructor named 'Leaf'"):
            vm.invoke("total", kiln.Adt("Leaf"))
        with self.assertRaisesRegex(kiln.Error, "takes 2 field"):
            vm.invoke("total", kiln.Adt("Cons", 1.0))

    def test_tuples_and_trees(self):
        out = kiln.compile(os.path.join(SRC, "samples", "tree_sum.relay")).vm().invoke("main", 1.0, 2.0, 3.0)
        self.assertIsInstance(out, tuple)
        self.assertEqual((float(out[0]), int(out[1])), (12.0, 3))


class Errors(unittest.TestCase):
    def test_parse_errors_name_the_position(self):
        with self.assertRaisesRegex(kiln.Error, r"<string>:1:\d+: error: "):
            kiln.compile("def @main( { }")

    def test_wrong_arguments(self):
        vm = kiln.compile(PROGRAMS).vm()
        with self.assertRaisesRegex(kiln.Error, "argument 'x' of @scale"):
            vm.invoke("scale", np.ones(3, np.float32), 1.0)
        with self.assertRaisesRegex(kiln.Error, "no function @nope"):
            vm.invoke("nope")
        with self.assertRaisesRegex(kiln.Error, "has no Kiln counterpart"):
            vm.invoke("identity", np.ones(3, np.complex64))
        with self.assertRaisesRegex(kiln.Error, "not a int32"):
            vm.invoke("main", 2**40, True)
        self.assertEqual(int(vm.invoke("main", 2, True)), 4)  # the VM still works

    def test_run_time_failures(self):
        huge = kiln.compile('def @main() { zeros(shape=[100000, 1000000], dtype="float32") }').vm()
        with self.assertRaisesRegex(kiln.Error, "out of memory on cpu"):
            huge.invoke("main")
        deep = kiln.compile("def @count(%n: int32) -> int32 { if (%n == 0) { 0 } else { 1 + @count(%n - 1) } }")
        self.assertEqual(int(deep.vm().invoke("count", 100000)), 100000)  # frames on the heap, not the C stack
        with self.assertRaisesRegex(kiln.Error, "match"):
            kiln.compile("def @main(%l: List[int32]) -> int32 { match? (%l) { Cons(%x, _) => %x } }").vm().invoke(
                "main", kiln.Adt("Nil"))

    def test_bad_files(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaisesRegex(kiln.Error, "cannot open"):
                kiln.load(os.path.join(d, "missing.kx"))
            junk = os.path.join(d, "junk.kx")
            with open(junk, "wb") as f:
                f.write(os.urandom(256))
            with self.assertRaisesRegex(kiln.Error, "not a Kiln executable"):
                kiln.load(junk)
            with self.assertRaises(kiln.Error):
                kiln.compile(PROGRAMS, devices=["tpu"])

    def test_partitioned_for_a_library(self):
        # Regions of a library Kiln cannot call run on Kiln's kernels: same result.
        src = ("def @main(%x: Tensor[(2, 3), float32]) { let %a = tanh(%x); let %b = nn.relu(%a); add(%b, %a) }")
        x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
        want = kiln.compile(src).vm().invoke("main", x)
        got = kiln.compile(src, partition=["mylib"], patterns=["supports mylib = tanh(*) | nn.relu(*) | add(*, *)"]).vm().invoke("main", x)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        with self.assertRaisesRegex(kiln.Error, "no patterns name the library 'nolib'"):
            kiln.compile(src, partition=["nolib"])
        with self.assertRaisesRegex(kiln.Error, "<patterns>:1:24: error: expected"):
            kiln.compile(src, partition=["mylib"], patterns=["supports mylib = tanh(*"])

    def test_save_and_load(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "p.kx")
            kiln.compile(PROGRAMS).save(path)
            exe = kiln.load(path)
            self.assertIn("main", exe.functions)
            self.assertEqual(int(exe.vm().invoke("main", 5, True)), 10)


class DLPack(unittest.TestCase):
    def test_from_dlpack_shares_numpy_memory(self):
        x = aligned(64)
        x[:] = np.arange(64)
        t = kiln.from_dlpack(x)
        self.assertEqual(t.shape, [64])
        self.assertEqual(t.dtype, np.float32)
        self.assertEqual(t.device, "cpu")
        self.assertTrue(np.shares_memory(t.numpy(), x))
        vm = kiln.compile(PROGRAMS).vm()
        np.testing.assert_array_equal(vm.invoke("identity", t), x)

    def test_kiln_tensors_go_out_through_dlpack(self):
        t = kiln.from_dlpack(np.arange(12, dtype=np.int64).reshape(3, 4))  # small enough to be copied in
        self.assertEqual(t.__dlpack_device__(), (1, 0))
        back = np.from_dlpack(t)
        self.assertEqual(back.shape, (3, 4))
        self.assertTrue(np.shares_memory(back, t.numpy()))
        del t  # the numpy array keeps the memory
        np.testing.assert_array_equal(back, np.arange(12).reshape(3, 4))

    def test_any_object_with_dlpack_is_an_argument(self):
        class Producer:  # only the protocol, not a numpy array
            def __init__(self, a):
                self.a = a

            def __dlpack__(self, stream=None):
                return self.a.__dlpack__()

            def __dlpack_device__(self):
                return self.a.__dlpack_device__()

        x = aligned(8)
        x[:] = np.arange(8)
        vm = kiln.compile(PROGRAMS).vm()
        np.testing.assert_array_equal(vm.invoke("identity", Producer(x)), x)

    def test_a_capsule_is_used_once(self):
        cap = kiln.from_dlpack(np.ones(32, np.float32)).__dlpack__()
        kiln.from_dlpack(cap)
        with self.assertRaises(kiln.Error):
            kiln.from_dlpack(cap)


class Threads(unittest.TestCase):
    def test_one_vm_on_two_threads_is_an_error_not_a_crash(self):
        exe = kiln.compile("def @count(%n: int32) -> int32 { if (%n == 0) { 0 } else { 1 + @count(%n - 1) } }")
        vm = exe.vm()
        outcomes = []

        def work():
            for _ in range(20):
                try:
                    outcomes.append(int(vm.invoke("count", 200000)))
                except kiln.Error as e:
                    outcomes.append(str(e))

        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(outcomes), 40)
        for o in outcomes:
            self.assertTrue(o == 200000 or "running on another thread" in o, o)

    def test_a_time_limit_and_request_stop_end_an_endless_loop(self):
        exe = kiln.compile("def @spin(%i: int64) -> int64 { if (%i < -1i64) { %i } else { @spin(%i + 1i64) } }\n"
                           "def @count(%n: int64) -> int64 { if (%n == 0i64) { 0i64 } else { @count(%n - 1i64) } }")
        vm = exe.vm(time_limit=0.05)
        with self.assertRaisesRegex(kiln.Error, "time limit"):
            vm.invoke("spin", 0)
        self.assertEqual(int(vm.invoke("count", 1000)), 0)
        stoppable = exe.vm()
        timer = threading.Timer(0.03, stoppable.request_stop)
        timer.start()
        with self.assertRaisesRegex(kiln.Error, "in @spin: the run was stopped"):
            stoppable.invoke("spin", 0)
        timer.join()
        self.assertEqual(int(stoppable.invoke("count", 10)), 0)
        for bad in (0.0, -1.0, float("nan"), 1e9):
            with self.assertRaisesRegex(kiln.Error, "time_limit"):
                exe.vm(time_limit=bad)

    def test_one_vm_per_thread_in_parallel(self):
        exe = kiln.compile(PROGRAMS)
        errors, results = [], {}

        def work(k):
            try:
                vm = exe.vm()
                for i in range(200):
                    x = np.full((3, 5), float(k), np.float32)
                    out = vm.invoke("scale", x, float(i))
                    assert out[2, 4] == k * i, (k, i, out)
                results[k] = True
            except Exception as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(len(results), 4)


if __name__ == "__main__":
    unittest.main(verbosity=2)
