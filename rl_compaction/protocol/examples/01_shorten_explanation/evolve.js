// Shorten the long token-bucket explanation: keep its conclusion word for word and replace the
// derivation above it with a short one. The simulation output it relies on stays in the State.
const marker = "**Conclusion:**";
const matches = state.filter(
  (item) =>
    item.type === "message" &&
    item.role === "assistant" &&
    typeof item.content === "string" &&
    item.content.includes(marker) &&
    /token bucket/i.test(item.content)
);
if (matches.length !== 1) {
  throw new Error("expected one assistant explanation with a conclusion, found " + matches.length);
}
const explanation = matches[0];
const conclusion = explanation.content.slice(explanation.content.indexOf(marker));

const derivation = [
  "Derivation (shortened by the agent; the full working is in the history):",
  "- C = 120, r = 2 tokens/s, N = 300 requests over T = 60 s, one every 0.2 s from t = 0.2 s; lazy refill,",
  "  bucket full at the start. Arrivals (5/s) outpace refill, so the bucket never caps during the burst.",
  "- Continuous estimate C + r·T = 240; but the first 0.2 s of refill is lost to the cap, so the real bound",
  "  is C + r·(T − T/N) = 120 + 2 × 59.8 = 239.6 → 239 admitted. The run_python simulation above agrees.",
  "- Admitting all 300 needs C + 59.8·r ≥ 300: C ≥ 181 at r = 2, or r ≥ 3.1 (0.1 steps) at C = 120,",
  "  or the burst spread over ≥ 91 s. Capacity is the narrower change: the sustained rate stays 2/s.",
  "- Caveat: if earlier traffic leaves the bucket below full, 181 is not enough; a per-key override for",
  "  Quillmate’s key would isolate them. Retries honour Retry-After (0.5 s at 2/s).",
].join("\n");

return state.map((item) =>
  item === explanation ? { ...item, content: derivation + "\n\n" + conclusion } : item
);
