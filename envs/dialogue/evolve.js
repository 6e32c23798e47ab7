// Targeted compaction for the dialogue family: body of `function evolve(state)`.
// The oracle fills in the placeholders: the attendees whose calendar lines are still needed,
// the requirement-clause regex (the phrasings seen so far), the "done" regex and the markers
// of the task statement and of the oracle's own notes.
const PEOPLE = new Set(__PEOPLE__);
const CLAUSE = new RegExp(__CLAUSE__);
const DONE = new RegExp(__DONE__);
const STATEMENT = __STATEMENT__;
const NOTES = __NOTES__;
const TOOLS = ["calendar", "room_info"];
const DAY = "(?:Monday|Tuesday|Wednesday|Thursday|Friday)";
const BOOKING = new RegExp("^- " + DAY + " \\d\\d:\\d\\d-\\d\\d:\\d\\d booked");

const text = (c) => (typeof c === "string" ? c : c.map((p) => p.text || "").join("\n"));

// The person sections of the attendees, their blocking lines only, without flavour text.
const shrinkCalendar = (t) => {
  const out = [];
  let keep = false;
  for (const line of t.split("\n")) {
    if (line.startsWith("TEAM CALENDAR: ")) {
      out.push(line);
      continue;
    }
    const head = /^## ([A-Z][a-z]+)\b.*blocking entries: (\d+)\s*$/.exec(line);
    if (head) {
      keep = PEOPLE.has(head[1]);
      if (keep) out.push("## " + head[1] + ", blocking entries: " + head[2]);
      continue;
    }
    if (!keep) continue;
    const entry = /^- (\d\d:\d\d-\d\d:\d\d busy|all day out-of-office)/.exec(line);
    if (entry) out.push("- " + entry[1]);
  }
  return out.join("\n");
};

// Capacity, equipment and bookings; no location, notes or booking titles.
const shrinkRoom = (t) =>
  t
    .split("\n")
    .filter((l) => /^(ROOM |Capacity: |Equipment: |Existing bookings this week: )/.test(l) || BOOKING.test(l))
    .map((l) => (BOOKING.test(l) ? l.replace(/ booked.*$/, " booked") : l))
    .join("\n");

const usable = (name, t) => (name === "calendar" ? t.startsWith("TEAM CALENDAR: ") : t.startsWith("ROOM "));

const last = state[state.length - 1];
const answered = new Set(state.filter((it) => it.type === "function_call_output").map((it) => it.call_id));
const pending = last && last.type === "function_call" && !answered.has(last.call_id) ? last : null;
const body = pending ? state.slice(0, -1) : state;

const calls = new Map();
const outputs = new Map();
for (const it of body) {
  if (it.type === "function_call") calls.set(it.call_id, it);
  if (it.type === "function_call_output") outputs.set(it.call_id, it);
}

// The latest readable output per calendar day or room; older copies and cleared ones go.
const latest = new Map();
for (const [id, call] of calls) {
  if (!TOOLS.includes(call.name) || !outputs.has(id)) continue;
  if (!usable(call.name, text(outputs.get(id).output))) continue;
  let args = {};
  try {
    args = JSON.parse(call.arguments);
  } catch (e) {
    continue;
  }
  latest.set(call.name + ":" + (args.day || args.room), id);
}
const keepIds = new Set(latest.values());

const out = [];
for (const it of body) {
  const kind = it.type || (it.role ? "message" : "");
  if (kind === "message") {
    const t = text(it.content);
    if (it.role === "assistant" && t.startsWith(NOTES)) out.push(it); // the oracle's own notes
    if (it.role !== "user") continue;
    if (t.startsWith(STATEMENT)) {
      out.push(it);
      continue;
    }
    const kept = (t.match(/[^.!?]*[.!?]/g) || []).map((s) => s.trim()).filter((s) => CLAUSE.test(s) || DONE.test(s));
    if (kept.length) out.push({ type: "message", role: "user", content: kept.join(" ") });
  } else if (kind === "function_call" || kind === "function_call_output") {
    const call = calls.get(it.call_id);
    if (!call || call.name === "evolve") continue;
    if (!TOOLS.includes(call.name)) {
      out.push(it);
    } else if (keepIds.has(it.call_id)) {
      if (kind === "function_call") {
        out.push(it);
      } else {
        const t = text(it.output);
        out.push({
          type: "function_call_output",
          call_id: it.call_id,
          output: call.name === "calendar" ? shrinkCalendar(t) : shrinkRoom(t),
        });
      }
    }
  }
}
if (pending) out.push(pending);
return out;
