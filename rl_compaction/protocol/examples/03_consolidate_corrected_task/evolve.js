// Fold the user's later corrections into the original offsite request, so one up-to-date task
// stays at the start of the context. Unchanged parts of the request keep their exact wording; the
// correction messages, their acknowledgements and the searches made for the old dates are removed.
const isUserText = (item) => item.type === "message" && item.role === "user" && typeof item.content === "string";
const task = state.find((item) => isUserText(item) && item.content.includes("plan our team offsite"));
if (!task) throw new Error("original offsite request not found");

// Each correction: a phrase that identifies its message, exact replacements in the task text, and
// requirements it adds.
const corrections = [
  {
    says: "we’re 16 people, not 14",
    edits: [
      ["Group: 14 people", "Group: 16 people"],
      ["a meeting room for 14", "a meeting room for 16"],
    ],
    adds: [],
  },
  {
    says: "clashes with our release",
    edits: [
      [
        "arrive Tuesday 12 May 2026, leave Thursday 14 May 2026",
        "arrive Tuesday 19 May 2026, leave Thursday 21 May 2026",
      ],
    ],
    adds: [],
  },
  {
    says: "the budget is now €10,500",
    edits: [["€9,000", "€10,500"]],
    adds: ["- Access: one attendee uses a wheelchair, so the hotel and the venue both need step-free access"],
  },
];
const supersededDates = ["2026-05-12", "2026-05-13", "2026-05-14"];

const drop = new Set();
let text = task.content;
for (const c of corrections) {
  const found = state.filter((item) => item !== task && isUserText(item) && item.content.includes(c.says));
  if (found.length !== 1) throw new Error("expected one message saying '" + c.says + "', found " + found.length);
  drop.add(found[0]);
  // An assistant reply that only acknowledges the correction goes with it.
  const next = state[state.indexOf(found[0]) + 1];
  const isAck = next && next.type === "message" && next.role === "assistant" && typeof next.content === "string";
  if (isAck && /^Noted\b/.test(next.content)) {
    drop.add(next);
  }
  for (const [from, to] of c.edits) {
    if (!text.includes(from)) throw new Error("task text has no '" + from + "'");
    text = text.split(from).join(to);
  }
  if (c.adds.length) {
    // New requirements go after the last bullet of the request's list.
    const lastBullet = text.lastIndexOf("\n- ");
    const lineEnd = text.indexOf("\n", lastBullet + 1);
    const at = lineEnd === -1 ? text.length : lineEnd;
    text = text.slice(0, at) + "\n" + c.adds.join("\n") + text.slice(at);
  }
}

// Searches made for the superseded dates, and their outputs (matched by call_id).
const staleCalls = new Set();
for (const item of state) {
  if (item.type !== "function_call") continue;
  const args = JSON.parse(item.arguments);
  if (Object.values(args).some((v) => supersededDates.includes(v))) staleCalls.add(item.call_id);
}

const header =
  "Task (consolidated by the agent: the original request with the " + corrections.length +
  " later corrections applied — headcount, dates, budget and step-free access; the correction messages " +
  "and " + staleCalls.size + " searches for the old dates were removed):\n\n";

return state
  .filter((item) => !drop.has(item) && !(item.call_id !== undefined && staleCalls.has(item.call_id)))
  .map((item) => (item === task ? { ...item, content: header + text } : item));
