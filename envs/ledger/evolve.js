// Ledger task: the oracle's edit, the body of `function evolve(state)` (template: `//` lines are
// stripped before use; short on purpose, as every token of it is generated). The oracle fills in
// X, the first bank id that is not settled yet, and K, the lines to mark `*` (keep for good) now.
// Harness requests go. In every output, free text and column padding go, then:
// - a line marked `*` stays;
// - a bank line stays if its id is X or later, with " +" added when an entry names it (that entry
//   goes: the line is booked within tolerance);
// - an entry stays unless it names a visible unmarked bank line;
// - everything else goes (page titles, headers, footers, receipts).
// A call whose output ends up empty goes with it (old edits too), unless it is the last call of its
// tool: pages are read in order, so the pages before it were read. Cutting again changes nothing
// that is not settled; the pending evolve call has no output and stays last.
const X='__X__',K=/^(__K__)\b/,s=state.filter(x=>!/^\[h/.test(x.content)),L={},
o=s.map(x=>x.output??(L[x.name]=x.call_id,'')).join('\n'),B=new Set(o.match(/^B-\d+/gm)),R=new Set(o.match(/(?<=^L.*)B-\d+/gm)),
n=s.map(x=>x.output?{...x,output:x.output.replace(/(\.\d\d)  .*| +(?= )/g,'$1').split('\n').map(l=>K.test(l)?'*'+l:R.has(l.slice(0,8))?l+' +':l).filter(l=>l[0]=='*'||/^B-/.test(l)&&l>X||/^L/.test(l)&&!B.has(l.split(' ')[3])).join('\n')}:x),V=Object.values(L);
return n.filter(x=>V.includes(x.call_id)||!n.some(y=>y.output===''&&y.call_id==x.call_id));
