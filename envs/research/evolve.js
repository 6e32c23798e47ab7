// Targeted compaction for research tasks (body of `function evolve(state)`).
// PLAN is written by the oracle from the State it saw: which search outputs and pages the
// questions' hops use. Search outputs keep only the results used (with their dates); pages
// keep their header, the sentences that state facts or corrections, and the end marker.
// Everything else goes: other calls with their outputs, messages other than the task
// statement and system text, reasoning items. The pending evolve call stays last, unchanged.
const PLAN = __PLAN__;
const patterns = PLAN.patterns.map((p) => new RegExp(p));
const pages = new Set(PLAN.pages);
const searches = new Map(Object.entries(PLAN.searches));
const textOf = (c) => (typeof c === "string" ? c : c.map((p) => (typeof p.text === "string" ? p.text : "")).join("\n"));
const HEADER = /^(Title|URL|Published): /;

const shrinkPage = (text) => {
  const kept = [];
  for (const line of text.split("\n")) {
    if (HEADER.test(line) || line === PLAN.end) {
      kept.push(line);
      continue;
    }
    for (const sentence of line.match(/[^.]+\./g) || []) {
      const s = sentence.trim();
      if (patterns.some((re) => re.test(s))) kept.push(s);
    }
  }
  return kept.join("\n");
};

// Results keep title, URL and the date that starts the excerpt (the date decides which page wins).
const shrinkSearch = (text, urls) => {
  const data = JSON.parse(text);
  const used = data.results.filter((r) => urls.includes(r.url));
  return JSON.stringify({ results: used.map((r) => ({ ...r, excerpt: r.excerpt.split(" — ")[0] + " —" })) });
};

const last = state.length - 1;
const out = [];
for (let i = 0; i < last; i++) {
  const item = state[i];
  const kind = item.type || "message";
  if (kind === "message") {
    const keep = item.role === "system" || item.role === "developer" || textOf(item.content).includes(PLAN.marker);
    if (keep) out.push(item);
  } else if (kind === "function_call") {
    if (searches.has(item.call_id) || pages.has(item.call_id)) out.push(item);
  } else if (kind === "function_call_output") {
    if (searches.has(item.call_id)) {
      out.push({ ...item, output: shrinkSearch(textOf(item.output), searches.get(item.call_id)) });
    } else if (pages.has(item.call_id)) {
      out.push({ ...item, output: shrinkPage(textOf(item.output)) });
    }
  }
}
out.push(state[last]);
return out;
