// The memory of the browser this Node process started: the proportional set size (PSS: resident memory,
// shared pages divided among their sharers, so that the sum counts each page once) of each of its
// processes (browser, GPU, renderers), summed; bench/browser/models.mjs samples it every 100 ms.
import { readdirSync, readFileSync } from "node:fs";

/** The text of a /proc file, or "" where its process ended meanwhile. Read synchronously: for /proc an
 * asynchronous read costs many times as much, CPU time taken from the engine being measured. */
function procText(path) {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return "";
  }
}

/** PSS bytes of this process's descendants. Every process's parent is read first, and PSS (the kernel walks a
 * process's page tables for it) only for the browser's own. */
export function browserResidentBytes() {
  const parents = new Map();
  for (const name of readdirSync("/proc")) {
    const parent = /^\d+$/.test(name) && /^PPid:\s+(\d+)/m.exec(procText(`/proc/${name}/status`));
    if (parent) parents.set(Number(name), Number(parent[1]));
  }
  const within = (pid) => {
    for (let p = pid; p > 1; p = parents.get(p) ?? 0) if (parents.get(p) === process.pid) return true;
    return false;
  };
  let total = 0;
  for (const pid of parents.keys()) {
    if (within(pid)) total += 1024 * Number(/^Pss:\s+(\d+)/m.exec(procText(`/proc/${pid}/smaps_rollup`))?.[1] ?? 0);
  }
  return total;
}

/** Samples browserResidentBytes every 100 ms until stop() is called; stop() resolves to the peak. */
export function samplePeak() {
  let peak = 0, running = true;
  const loop = (async () => {
    while (running) {
      peak = Math.max(peak, browserResidentBytes());
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  })();
  return async () => {
    running = false;
    await loop;
    return Math.max(peak, browserResidentBytes());
  };
}
