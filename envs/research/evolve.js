// Research task: targeted compaction, the body of `function evolve(state)` (template; `//` lines
// are stripped before use). The oracle fills in DROP: the call ids to remove with their outputs
// (old evolve calls, searches and pages no hop uses, cleared, cut-short or failed reads).
// A page keeps its three header lines, its end marker and the sentences that can state a fact of
// its subject: those naming it and the fact templates that do not ("Its ...", "The town ...");
// filler never does either. Every search keeps one line `DATE URL TITLE` per result titled with
// its query (main pages, archives, correction notices): the date decides the newest statement.
// Harness messages and reasoning items go. Cutting again changes nothing; the pending
// evolve call has no output and stays last.
const drop=new Set(__DROP__),query={};
for(const x of state)if(x.name=="search")query[x.call_id]=JSON.parse(x.arguments).query;
return state.filter(x=>x.call_id?!drop.has(x.call_id):x.role&&!/^\[harness/.test(x.content)).map(x=>
/^Title: /.test(x.output)?{...x,output:x.output.split(/\n+|(?<=\.) /).filter((s,i,a)=>i<3||/^(\[end|Its |The town )/.test(s)||s.includes(a[0].split(": ").pop())).join("\n")}:
/^{"results/.test(x.output)?{...x,output:JSON.parse(x.output).results.filter(r=>r.title.endsWith(query[x.call_id])).map(r=>r.excerpt.slice(0,10)+" "+r.url+" "+r.title).join("\n")}:x);
