// Probe task: targeted compaction, the body of `function evolve(state)` (template; `//` lines are
// stripped before use). The oracle fills in DROP, the call ids to remove with their outputs (old
// evolve calls, cleared or broken batch reads, older copies of a batch), and KEYS, the tracked keys
// as a regex alternation. Every batch output keeps its header, its footer (with the full line
// count) and the update and correction lines of tracked keys, values exact; harness messages go.
// Cutting a cut batch changes nothing; the pending evolve call has no output and stays last.
const drop=new Set(__DROP__);
return state.filter(x=>!drop.has(x.call_id)&&!/^\[harness/.test(x.content)).map(x=>/^batch \d+\n/.test(x.output)?{...x,output:x.output.replace(/\n(?!(correction: )?(__KEYS__)[= ]).*(?=\n)/g,"")}:x);
