// Probe task: targeted compaction, the body of `function evolve(state)` (strict mode, ES2020).
// Keeps every message, the newest END output and the newest complete copy of each batch cut
// to the tracked keys' lines (exact values and corrections kept); drops batch reads that were
// cleared, truncated or failed, older duplicate copies, and earlier evolve calls with their
// receipts. A call is always dropped together with its output; the pending call stays last.
// The line patterns mirror envs/probe/stream.py.
const KEY = "[A-Z][0-9][A-Z]";
const TRACKED = new RegExp("^Tracked keys: ((?:" + KEY + ", )*" + KEY + ")\\.$", "m");
const HEADER = /^batch (\d+)( \(tracked keys only\))?$/;
const FOOTER = /^end of batch (\d+) \((\d+) lines(?: kept of (\d+))?\)$/;
const UPDATE = new RegExp("^(" + KEY + ")=(-?\\d+)$");
const CORRECTION = new RegExp("^correction: (" + KEY + ") at batch (\\d+) should have been (-?\\d+)$");
const END = /^END \(the stream has (\d+) batches\)$/;

const textOf = (content) => {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.filter((p) => p && typeof p.text === "string").map((p) => p.text).join("\n");
};

let keys = null;
for (const item of state) {
  if (item.type !== "function_call" && item.type !== "function_call_output" && item.role === "user") {
    const m = TRACKED.exec(textOf(item.content));
    if (m) {
      keys = new Set(m[1].split(", "));
      break;
    }
  }
}
if (keys === null) return state; // not a probe task statement in sight: change nothing

// A complete batch output cut to the tracked keys' lines, or null if it is not one.
const filterBatch = (text) => {
  const lines = text.replace(/^\n+|\n+$/g, "").split("\n");
  if (lines.length < 2) return null;
  const head = HEADER.exec(lines[0]);
  const foot = FOOTER.exec(lines[lines.length - 1]);
  if (!head || !foot || head[1] !== foot[1]) return null;
  const filtered = head[2] !== undefined;
  if (filtered !== (foot[3] !== undefined)) return null;
  const body = lines.slice(1, -1);
  if (body.length !== Number(foot[2])) return null;
  const seen = new Set();
  const kept = [];
  for (const line of body) {
    let m = UPDATE.exec(line);
    if (m) {
      if (seen.has(m[1])) return null;
      seen.add(m[1]);
    } else {
      m = CORRECTION.exec(line);
      if (!m) return null;
    }
    if (keys.has(m[1])) kept.push(line);
  }
  const total = filtered ? Number(foot[3]) : body.length;
  const index = Number(head[1]);
  return {
    index,
    text: ["batch " + index + " (tracked keys only)", ...kept,
      "end of batch " + index + " (" + kept.length + " lines kept of " + total + ")"].join("\n"),
  };
};

const last = state[state.length - 1];
const pendingId = last && last.type === "function_call" ? last.call_id : null;
const names = new Map();
const drop = new Set();
const rewrite = new Map();
const newestBatch = new Map();
let newestEnd = null;
for (const item of state) {
  if (item.type === "function_call") {
    names.set(item.call_id, item.name);
    if (item.name === "evolve" && item.call_id !== pendingId) drop.add(item.call_id);
  } else if (item.type === "function_call_output") {
    const text = textOf(item.output);
    const batch = filterBatch(text);
    if (batch) {
      if (newestBatch.has(batch.index)) drop.add(newestBatch.get(batch.index));
      newestBatch.set(batch.index, item.call_id);
      rewrite.set(item.call_id, batch.text);
    } else if (END.test(text.trim())) {
      if (newestEnd !== null) drop.add(newestEnd);
      newestEnd = item.call_id;
    } else if (names.get(item.call_id) === "next_batch") {
      drop.add(item.call_id);
    }
  }
}

const out = [];
for (const item of state) {
  const paired = item.type === "function_call" || item.type === "function_call_output";
  if (paired && item !== last && drop.has(item.call_id)) continue;
  if (item.type === "function_call_output" && rewrite.has(item.call_id)) {
    out.push({ ...item, output: rewrite.get(item.call_id) });
  } else {
    out.push(item);
  }
}
return out;
