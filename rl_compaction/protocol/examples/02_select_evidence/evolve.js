// Keep only the evidence from the failed export run's log: the exact WARN/ERROR/FATAL lines, every
// line about the part that failed, and the exit line. An annotation part says what was dropped.
const call = state.find((item) => {
  if (item.type !== "function_call" || item.name !== "read_log") return false;
  const args = JSON.parse(item.arguments);
  return args.job === "export-ledger" && /^run-20250314-/.test(args.run_id);
});
if (!call) throw new Error("read_log call for the 14 March export-ledger run not found");

const result = state.find((item) => item.type === "function_call_output" && item.call_id === call.call_id);
if (!result) throw new Error("output of read_log call " + call.call_id + " not found");
if (typeof result.output !== "string") throw new Error("expected the log as one string");

const lines = result.output.split("\n");
if (lines[lines.length - 1] === "") lines.pop();

// A log line is "<timestamp> <LEVEL> <component>: <message>".
const level = (line) => line.split(/\s+/)[1];
const relevant = (line) =>
  ["WARN", "ERROR", "FATAL"].includes(level(line)) || line.includes("part-00007") || line.includes(" job: exit ");
const keptNumbers = [];
lines.forEach((line, i) => {
  if (relevant(line)) keptNumbers.push(i + 1);
});
const kept = keptNumbers.map((n) => lines[n - 1]);
if (!kept.some((line) => level(line) === "FATAL")) throw new Error("the log has no FATAL line; wrong run?");

// Summarise what the dropped lines showed: which parts were uploaded, and when.
const uploads = lines.filter((line) => !relevant(line) && / s3: PutObject \S+ 200 OK /.test(line));
const partOf = (line) => line.match(/part-(\d{5})/)[1];
const timeOf = (line) => line.slice(11, 16);
const dropped = uploads.length
  ? "parts " + partOf(uploads[0]) + "–" + partOf(uploads[uploads.length - 1]) + " uploaded to S3 with 200 OK (" +
    timeOf(uploads[0]) + "–" + timeOf(uploads[uploads.length - 1]) + " UTC)"
  : "no successful uploads";

const note =
  "Agent memory edit: kept " + kept.length + " of " + lines.length + " log lines verbatim (original lines " +
  keptNumbers.join(", ") + "): every WARN, ERROR and FATAL line, every line about the failed part-00007, " +
  "and the exit line. Dropped INFO/DEBUG progress lines: run start, source and plan, heartbeats, and " +
  dropped + ".";

return state.map((item) =>
  item === result
    ? {
        ...item,
        output: [
          { type: "input_text", text: kept.join("\n") },
          { type: "input_text", text: note },
        ],
      }
    : item
);
