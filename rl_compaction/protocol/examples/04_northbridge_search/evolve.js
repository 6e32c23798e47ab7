// The web-search edit from the seed paper's Chapter 3: keep only the search records from the
// observatory's own website, unchanged, in the tool's JSON schema, and explain the selection.
const call = state.find((item) => {
  if (item.type !== "function_call" || item.name !== "web_search") return false;
  const args = JSON.parse(item.arguments);
  return typeof args.query === "string" && /Northbridge Observatory.*restoration/i.test(args.query);
});
if (!call) throw new Error("Search call not found");

const result = state.find((item) => item.type === "function_call_output" && item.call_id === call.call_id);
if (!result) throw new Error("Search result not found");
if (typeof result.output !== "string") throw new Error("Expected a JSON string");

const data = JSON.parse(result.output);
if (!Array.isArray(data.results)) throw new Error("Search records not found");

// The host must be exactly northbridge-observatory.org: look-alikes such as
// northbridge-observatory.org.example.co or northbridgeobservatory-friends.org do not match.
data.results = data.results.filter((record) =>
  /^https?:\/\/northbridge-observatory\.org(?:\/|$)/i.test(record.url)
);
if (data.results.length !== 2) throw new Error("Expected two official records, found " + data.results.length);

return state.map((item) =>
  item === result
    ? {
        ...item,
        output: [
          { type: "input_text", text: JSON.stringify(data) },
          {
            type: "input_text",
            text: "Agent memory edit: retained the two results from the observatory's website.",
          },
        ],
      }
    : item
);
