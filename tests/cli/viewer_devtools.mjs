// tests/cli/viewer_devtools.mjs — `etr chrome`'s output loaded by a real viewer's importer:
// the trace engine of Chrome DevTools' Performance panel (npm @paulirish/trace_engine, the
// same code Lighthouse runs in Node). Checks that what the viewer builds is what the
// execution trace says:
//   - every thread track is there, named as the export names it;
//   - every slice of the export is an entry of its thread (none dropped);
//   - the viewer's nesting is the trace's: the parent of each entry is the slice of the
//     op's parent node (ctrl_deps), and a top-level op is a root;
//   - its flow handler runs over our flow events (fw_parent links) without error. DevTools
//     binds a flow event only to a slice of the same ts *and* category, and a flow's start
//     and end share one category, so a link between a forward op (cpu_op) and a backward op
//     (backward) cannot bind there; Perfetto and chrome://tracing bind by time (bp "e").
//     The count it bound is printed, not checked;
//   - fewer than 1% of the slices have length 0 (with ETR_TRACE_TIMING=ns).
// usage: node viewer_devtools.mjs ENGINE_DIR TRACE.json CHROME.json
// Exit 0 when all hold, 1 with a message otherwise, 77 (skip) when the engine cannot load.
import fs from 'node:fs';
import path from 'node:path';
import {pathToFileURL} from 'node:url';

const [engineDir, etPath, chromePath] = process.argv.slice(2);
const fail = (msg) => {
  console.error('viewer_devtools: ' + msg);
  process.exit(1);
};
if (!chromePath) fail('usage: node viewer_devtools.mjs ENGINE_DIR TRACE.json CHROME.json');

const analyze = path.join(engineDir, '@paulirish', 'trace_engine', 'analyze-trace.mjs');
let analyzeTrace;
try {
  ({analyzeTrace} = await import(pathToFileURL(analyze).href));
} catch (e) {
  // The engine itself does not load here (its own dependencies, unpinned upstream, or this
  // Node.js): not a verdict on our export. 77: ctest's skip.
  console.log(`SKIP: the trace engine does not load: ${e.message}`);
  process.exit(77);
}

// The execution trace: each op node's parent op (0 for a thread's top-level op).
const et = JSON.parse(fs.readFileSync(etPath, 'utf8'));
const threadNodes = new Set();
const parentOf = new Map();
for (const n of et.nodes) {
  if (n.name === '[pytorch|profiler|execution_trace|thread]') threadNodes.add(n.id);
  parentOf.set(n.id, n.ctrl_deps);
}

// The export, as written.
const chrome = JSON.parse(fs.readFileSync(chromePath, 'utf8'));
const events = chrome.traceEvents ?? chrome;
const slices = events.filter((e) => e.ph === 'X');
const names = new Map();
for (const e of events)
  if (e.ph === 'M' && e.name === 'thread_name') names.set(`${e.pid}/${e.tid}`, e.args.name);
const perThread = new Map();
for (const s of slices) {
  const k = `${s.pid}/${s.tid}`;
  perThread.set(k, (perThread.get(k) || 0) + 1);
}
const flowStarts = events.filter((e) => e.ph === 's').length;
if (slices.length < 100) fail(`only ${slices.length} slices in ${chromePath}`);

const {parsedTrace} = await analyzeTrace(chromePath);
const renderer = parsedTrace.data.Renderer;
let entries = 0;
let checkedParents = 0;
const seen = new Set();
for (const [pid, proc] of renderer.processes) {
  for (const [tid, thread] of proc.threads) {
    const k = `${pid}/${tid}`;
    seen.add(k);
    const want = perThread.get(k) || 0;
    if (thread.entries.length !== want)
      fail(`thread ${k}: the viewer has ${thread.entries.length} entries, the export ${want}`);
    if (names.has(k) && thread.name !== names.get(k))
      fail(`thread ${k}: named '${thread.name}' by the viewer, '${names.get(k)}' in the export`);
    entries += thread.entries.length;
    if (!thread.tree) fail(`thread ${k}: no tree`);
    for (const entry of thread.entries) {
      const node = renderer.entryToNode.get(entry);
      if (!node) fail(`thread ${k}: an entry without a tree node`);
      const id = entry.args && entry.args.id;
      const want = parentOf.get(id);
      if (want === undefined) fail(`slice id ${id} is not a node of ${etPath}`);
      const got = node.parent ? node.parent.entry.args.id : undefined;
      if (threadNodes.has(want) ? got !== undefined : got !== want)
        fail(`op ${id} (${entry.name}): the viewer nests it under ${got}, the trace under ${want}`);
      checkedParents++;
    }
  }
}
for (const k of perThread.keys()) if (!seen.has(k)) fail(`thread ${k} is missing in the viewer`);
if (entries !== slices.length) fail(`the viewer has ${entries} entries, the export ${slices.length}`);

const flows = parsedTrace.data.Flows.flows;
if (flowStarts === 0) fail('no flow events in the export (the example has backward ops)');

const zero = slices.filter((s) => s.dur === 0).length;
if (zero * 100 >= slices.length) fail(`${zero} of ${slices.length} slices have length 0`);

console.log(
    `viewer_devtools: ${entries} slices on ${seen.size} threads, ${checkedParents} parents as in ` +
    `the trace, ${zero} of length 0; ${flows.length} of ${flowStarts} flows bound by DevTools`);
