// Dialogue task: targeted compaction, the body of `function evolve(state)` (template: `//` lines
// are stripped before use). The oracle fills in PEOPLE (the attendees of the meetings asked for)
// and LONG (a length that no message with a requirement reaches).
// Kept: the task statement and the short user messages (requirements, short chatter; pasted texts
// are long and go), the oracle's own notes ("My notes ..."), every call, and outputs; a calendar
// or room output is cut to what a schedule depends on: its first line, the attendees' sections
// with their blocking entries, a room's capacity, equipment and bookings, each line without its
// " | ..." flavour text. Assistant chatter, harness requests ("[harness] ...") and earlier edits
// with their receipts go. Cutting again changes nothing; the pending evolve call stays last.
const P=/^## (__PEOPLE__)\b/,p=state.at(-1);let k;
return state.filter(x=>x==p||(x.role?x.role=='user'?x.content.length<__LONG__&&x.content[0]!='[':/^My/.test(x.content):x.name!='evolve'&&!/^\{"a/.test(x.output))).map(x=>/^(TEAM|ROOM)/.test(x.output)?(k=1,{...x,output:x.output.split('\n').filter(l=>/^##/.test(l)?k=P.test(l):k&&/^(TEAM|ROOM|Cap|Eq|Ex|- (\S+ busy|all|\w+ \S+ booked))/.test(l)).map(l=>l.replace(/ \|.*/,'')).join('\n')}):x);
