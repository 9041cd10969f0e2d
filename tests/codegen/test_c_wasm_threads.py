"""The c-wasm backend's threaded module (kernels-threads.wasm, codegen/c/backend.py): beside the
single-threaded kernels.wasm, whose exports are unchanged, the same kernels over a shared memory with a
workgroup range and workgroup memory on the stack. Run by runtime-js's thread pool in Node (workers
over one shared memory, each with its own stack): shares of one launch at once give numpy's result."""

import json
import os
import subprocess

import numpy as np
import pytest
from harness import build
from tessera import arith, op
from tessera.codegen import get_backend
from tessera.codegen.c import LOWERING, emit_c_module
from tessera.codegen.c.backend import THREADS_MODULE, ThreadedWasmRenderer
from tessera.ir import Function, Tensor
from tessera.target import Target
from tessera.tir.lower import lower_kernel
from tessera.transform import legalize_ops

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WASM = Target.preset("wasm")
# cpu_adapter off: row reductions keep their workgroup-memory schedule, so the kernel has scratch arrays,
# which threads sharing one launch must not share.
WORKGROUP_MEMORY = Target("wasm", limits=dict(WASM.limits), name="wasm (workgroup reductions)")
REPEATS = 20

# Runs one launch of kernel 0 over THREADS threads of runtime-js's pool, REPEATS times, and writes the
# output of each repeat. Argument: a JSON file of the module's path, the input's (raw float32), the
# grid, the sizes, and where the outputs go (raw float32, one after the other).
POOL_SCRIPT = """
import { readFileSync, writeFileSync } from "node:fs";
import { WasmPool } from "ROOT/runtime-js/src/devices/wasm-pool.js";
const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
const module = await WebAssembly.compile(readFileSync(job.module));
let unshared = null;
try { await WebAssembly.instantiate(module, { env: { memory: new WebAssembly.Memory({ initial: 64 }) } }); }
catch (error) { unshared = error.constructor.name; }
const memory = new WebAssembly.Memory({ initial: 1024, maximum: 65536, shared: true });
const exports = (await WebAssembly.instantiate(module, { env: { memory } })).exports;
const align = (n) => Math.ceil(n / 16) * 16;
const stack = exports.__stack_pointer.value, heap = align(exports.__heap_base.value);
const stackTops = Array.from({ length: job.threads - 1 }, (_, i) => heap + stack * (i + 1));
const input = heap + stack * job.threads, output = input + align(job.count * 4);
const x = readFileSync(job.input);
new Uint8Array(memory.buffer, input, x.length).set(x);
const pool = await WasmPool.start(module, memory, stackTops, [job.entry]);
const outputs = [];
const total = job.grid[0] * job.grid[1] * job.grid[2];
const launch = (from) => pool.launch(0, exports[job.entry], [from, output, ...job.scalars, ...job.grid], total);
let trap = null;
for (let repeat = 0; repeat < job.repeats; repeat++) {
  new Float32Array(memory.buffer, output, job.count).fill(0);
  if (repeat === job.repeats - 1) {  // a launch that traps (its input past the memory), then the same launch right
    try { launch(memory.buffer.byteLength - 16); } catch (error) { trap = error.message; }
  }
  launch(input);
  outputs.push(new Uint8Array(memory.buffer, output, job.count * 4).slice());
}
pool.destroy();
writeFileSync(job.out, Buffer.concat(outputs));
writeFileSync(job.out + ".json", JSON.stringify({ unshared, stackBytes: stack, trap }));
""".replace("ROOT", ROOT)


def kernels_of(make, params, target):
    mod = legalize_ops(build(make, params), target)
    return [f for f in mod.functions.values() if not isinstance(f, Function)]


def test_the_threaded_module_sits_beside_the_single_threaded_one_whose_exports_are_unchanged():
    (kernel,) = kernels_of(op.nn.softmax, [Tensor(("n", 999), "float32")], WORKGROUP_MEMORY)
    compiled = get_backend("c-wasm").compile([kernel], WORKGROUP_MEMORY)
    assert set(compiled.modules) == {"kernels.wasm", THREADS_MODULE}
    assert [k.module for k in compiled.kernels] == ["kernels.wasm"]  # no record names the threaded module
    lowered = lower_kernel(kernel, LOWERING)
    single, threaded = emit_c_module([lowered]), emit_c_module([lowered], ThreadedWasmRenderer)
    entry = compiled.kernels[0].entry_point
    assert f"void {entry}(float* in0, float* out0, int32_t sym_n, int32_t nwg_x, int32_t nwg_y, int32_t nwg_z) {{" in single
    assert "static float" in single and "static float" not in threaded  # workgroup memory: one array vs per call
    assert (f"void {entry}(float* in0, float* out0, int32_t sym_n, int32_t nwg_x, int32_t nwg_y, int32_t nwg_z, "
            "int32_t wg_begin, int32_t wg_end) {") in threaded


@pytest.mark.parametrize("rows, threads", [(2001, 2), (67, 3), (5, 4), (1, 2)])
def test_threads_sharing_a_launch_give_numpys_softmax(tmp_path, rows, threads):
    """Workgroup-memory softmax split over ``threads`` threads at once (chunks of a ragged number of rows,
    and more threads than workgroups), twenty times: each repeat is the whole launch's result. Static
    workgroup memory or one stack for all would mix the threads' rows. The last repeat follows a launch
    that traps."""
    (kernel,) = kernels_of(op.nn.softmax, [Tensor(("n", 999), "float32")], WORKGROUP_MEMORY)
    assert kernel.scratch
    compiled = get_backend("c-wasm").compile([kernel], WORKGROUP_MEMORY)
    module = tmp_path / THREADS_MODULE
    module.write_bytes(compiled.modules[THREADS_MODULE])
    x = np.random.default_rng(rows).standard_normal((rows, 999)).astype(np.float32)
    grid = [arith.evaluate(g, {"n": rows}) for g in kernel.grid]
    x.tofile(tmp_path / "x.bin")
    job = {"module": str(module), "entry": compiled.kernels[0].entry_point, "input": str(tmp_path / "x.bin"),
           "count": x.size, "scalars": [rows], "grid": grid, "threads": threads, "repeats": REPEATS,
           "out": str(tmp_path / "out.bin")}
    (tmp_path / "job.json").write_text(json.dumps(job))
    (tmp_path / "pool.mjs").write_text(POOL_SCRIPT)
    subprocess.run(["node", str(tmp_path / "pool.mjs"), str(tmp_path / "job.json")], check=True, timeout=300)
    result = json.loads((tmp_path / "out.bin.json").read_text())
    assert result["unshared"] == "LinkError"  # the module imports a shared memory
    assert result["stackBytes"] >= 1 << 20  # room for 64 KiB of workgroup memory and the kernel's locals
    # A trap on any thread is an error of its launch, and the pool runs the next launch whole.
    assert result["trap"] and ("out of bounds" in result["trap"] or "WebAssembly trap" in result["trap"])
    want = np.exp(x - x.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    outputs = np.fromfile(tmp_path / "out.bin", np.float32).reshape(REPEATS, rows, 999)
    for output in outputs:
        np.testing.assert_allclose(output, want, rtol=1e-5, atol=1e-6)


# A kernel of the threaded module's ABI whose frame is 16 KiB: each workgroup spins (so that every
# thread claims chunks) and then writes where its frame lies (so the test sees each thread's stack
# pointer), or traps.
PROBE_C = r"""
#include <stdint.h>
__attribute__((export_name("probe")))
void probe(int32_t *frames, int32_t spin, int32_t trap, int32_t nwg_x, int32_t nwg_y, int32_t nwg_z, int32_t wg_begin, int32_t wg_end) {
  volatile int32_t scratch[4096];
  (void)nwg_y; (void)nwg_z;
  for (int32_t wg = wg_begin; wg < wg_end && wg < nwg_x; wg++) {
    scratch[wg & 4095] = wg;
    for (volatile int32_t i = 0; i < spin; i++) {}
    if (trap) __builtin_trap();
    frames[wg] = (int32_t)(intptr_t)&scratch[0];
  }
}
"""

# Frames of GOOD launches, then TRAPS launches that trap on every thread, then GOOD launches again, on
# runtime-js's WasmDevice with THREADS threads; writes each thread's frame addresses before and after.
TRAPS_SCRIPT = """
import { readFileSync, writeFileSync } from "node:fs";
import { WasmDevice } from "ROOT/runtime-js/src/devices/wasm.js";
const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
const bytes = readFileSync(job.module);
const device = new WasmDevice({ threads: job.threads });
const [kernel] = await device.loadKernels([{ module: "probe.wasm", entry_point: "probe", name: "probe" }],
  new Map([["probe.wasm", bytes], ["probe-threads.wasm", bytes]]));
const total = 64;
const frames = device.allocate(total * 4);
const bound = device.bind(kernel, [frames]);
const seen = () => {
  const addresses = new Set();
  for (let launch = 0; launch < job.good; launch++) {
    device.launch(bound, [job.spin, 0], [total, 1, 1]);
    for (const address of new Int32Array(device.memory.buffer, frames.offset, total)) addresses.add(address);
  }
  return [...addresses].sort((a, b) => a - b);
};
const mainBefore = device.stackPointer.value;
const before = seen();
let traps = 0;
for (let launch = 0; launch < job.traps; launch++) {
  try { device.launch(bound, [job.spin, 1], [total, 1, 1]); } catch { traps += 1; }
}
const after = seen();
writeFileSync(job.out, JSON.stringify({ threads: device.threads, traps, before, after, mainBefore, stackTops: device.stackTops,
  mainAfter: device.stackPointer.value }));
device.destroy();
""".replace("ROOT", ROOT)


def test_traps_on_every_thread_leave_each_threads_stack_where_it_was(tmp_path):
    """A trap skips the kernel's epilogue, which restores the stack pointer: unless the pool puts it
    back, 150 traps of a 16 KiB frame walk each worker's stack 2.4 MiB down, through its 1 MiB stack
    into its neighbour's. After them, every thread's frames are where they were before."""
    from tessera.codegen.c.wasm_build import compile_wasm_threads

    module = tmp_path / "probe-threads.wasm"
    module.write_bytes(compile_wasm_threads(PROBE_C))
    job = {"module": str(module), "threads": 4, "good": 20, "traps": 150, "spin": 20000, "out": str(tmp_path / "out.json")}
    (tmp_path / "job.json").write_text(json.dumps(job))
    (tmp_path / "traps.mjs").write_text(TRAPS_SCRIPT)
    subprocess.run(["node", str(tmp_path / "traps.mjs"), str(tmp_path / "job.json")], check=True, timeout=300)
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["threads"] == 4 and result["traps"] == job["traps"]
    assert result["mainAfter"] == result["mainBefore"]
    # Every call's frame lies the same distance below its thread's stack top (the main thread's is lowest).
    frame = result["mainBefore"] - min(result["before"])
    assert 16384 <= frame < 20000
    frames = {top - frame for top in [result["mainBefore"], *result["stackTops"]]}
    assert len(frames) == 4 and len(result["before"]) >= 2  # workers ran chunks, not the main thread alone
    assert set(result["before"]) <= frames
    assert set(result["after"]) <= frames, "a thread's frames moved after the traps"


def test_the_two_modules_build_at_once_and_a_failure_names_its_module(monkeypatch):
    """Both clang processes start before either is awaited (one after the other doubled a WASM build's
    time); a C error in one module names it, and no clang is left running."""
    events, processes = [], []
    real_popen = subprocess.Popen

    class Recorded(real_popen):
        def __init__(self, command, *args, **kwargs):
            super().__init__(command, *args, **kwargs)
            events.append("start")
            processes.append(self)

        def wait(self, *args, **kwargs):
            events.append("wait")
            return super().wait(*args, **kwargs)

        def communicate(self, *args, **kwargs):
            events.append("wait")
            return super().communicate(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", Recorded)
    (kernel,) = kernels_of(op.nn.softmax, [Tensor(("n", 999), "float32")], WORKGROUP_MEMORY)
    compiled = get_backend("c-wasm").compile([kernel], WORKGROUP_MEMORY)
    assert events[:2] == ["start", "start"]
    assert compiled.modules["kernels.wasm"][:4] == compiled.modules[THREADS_MODULE][:4] == b"\0asm"
    from tessera.codegen.c.wasm_build import WasmBuildError, compile_wasm_pair

    processes.clear()
    with pytest.raises(WasmBuildError, match=r"\(kernels-threads\.wasm\):\n(.|\n)*undeclared_name"):
        compile_wasm_pair(PROBE_C, PROBE_C.replace("scratch[wg & 4095] = wg;", "undeclared_name = wg;"))
    assert len(processes) == 2 and all(process.poll() is not None for process in processes)


# The probe with the single-threaded module's ABI: the whole grid, no range.
PROBE_SINGLE_C = PROBE_C.replace("int32_t nwg_z, int32_t wg_begin, int32_t wg_end)", "int32_t nwg_z)").replace(
    "wg = wg_begin; wg < wg_end && wg < nwg_x;", "wg = 0; wg < nwg_x;")

# TRAPS launches that trap between two good ones on runtime-js's one-thread WasmDevice (kernels.wasm).
SINGLE_SCRIPT = """
import { readFileSync, writeFileSync } from "node:fs";
import { WasmDevice } from "ROOT/runtime-js/src/devices/wasm.js";
const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
const device = new WasmDevice({ threads: 1 });
const [kernel] = await device.loadKernels([{ module: "probe.wasm", entry_point: "probe", name: "probe" }],
  new Map([["probe.wasm", readFileSync(job.module)]]));
const frames = device.allocate(16);
const bound = device.bind(kernel, [frames]);
const frame = () => { device.launch(bound, [0, 0], [4, 1, 1]); return new Int32Array(device.memory.buffer, frames.offset, 4)[3]; };
const before = frame();
let traps = 0;
for (let launch = 0; launch < job.traps; launch++) {
  try { device.launch(bound, [0, 1], [4, 1, 1]); } catch { traps += 1; }
}
writeFileSync(job.out, JSON.stringify({ traps, before, after: frame() }));
""".replace("ROOT", ROOT)


def test_traps_leave_the_single_threaded_modules_stack_where_it_was(tmp_path):
    """kernels.wasm's stack is 64 KiB: without the stack pointer put back, four traps of a 16 KiB frame
    take it below address 0, and every launch after traps. On runtime-js's device and on the VM's."""
    from tessera.codegen.c.wasm_build import compile_wasm
    from tessera.vm.devices import View
    from tessera.vm.devices.wasm import WasmDevice

    module = compile_wasm(PROBE_SINGLE_C)
    (tmp_path / "probe.wasm").write_bytes(module)
    job = {"module": str(tmp_path / "probe.wasm"), "traps": 20, "out": str(tmp_path / "out.json")}
    (tmp_path / "job.json").write_text(json.dumps(job))
    (tmp_path / "single.mjs").write_text(SINGLE_SCRIPT)
    subprocess.run(["node", str(tmp_path / "single.mjs"), str(tmp_path / "job.json")], check=True, timeout=120)
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["traps"] == 20 and 0 < result["after"] == result["before"]

    device = WasmDevice()
    (kernel,) = device.load_kernels([{"module": "probe.wasm", "entry_point": "probe"}], {"probe.wasm": module})
    frames = device.allocate(16)
    bound = device.bind(kernel, [View(frames, 0, 16)])
    device.launch(bound, [0, 0], [4, 1, 1])
    before = np.frombuffer(device.read_back(View(frames, 0, 16)), np.int32)
    for _ in range(20):
        with pytest.raises(Exception, match="unreachable|trap"):
            device.launch(bound, [0, 1], [4, 1, 1])
    device.launch(bound, [0, 0], [4, 1, 1])
    after = np.frombuffer(device.read_back(View(frames, 0, 16)), np.int32)
    assert before[3] > 0 and after[3] == before[3]
