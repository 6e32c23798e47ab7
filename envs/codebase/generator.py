"""Generate a small JavaScript utility repository with injected bugs, visible and hidden tests.

Every function documents its intended behaviour in a `spec: result = <expr>` line of its doc
comment; its body computes `const result = <expr>;`. A bug is a mutation of that one line
(wrong operator, off-by-one, swapped arguments, wrong constant). At level 2-3 CHANGELOG.md also
revises some specs: the newest changelog entry for a function supersedes its doc comment, and
a "stale" bug is code that still follows the superseded doc comment.

Entity and prose pools are partitioned by split (see `POOLS`) so a test instance never reuses a
module, function or prose template seen in training. The expression templates are the shared
"grammar" of the generator: their operators are generic JavaScript, not entities.

Why one module of ~700 lines: the expression templates are the generator's grammar and the split
pools its vocabulary; both are read only by `_Gen`, and a template's arity, its bug mutations and
its evaluation check belong together.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from itertools import product

import quickjs

from rl_compaction.harness.tasks import SPLITS

# --------------------------------------------------------------------------- split pools


@dataclass(frozen=True)
class SplitPools:
    """The names and prose one split may use; the three splits' pools are pairwise disjoint."""

    syllables: tuple[str, ...]
    nouns: tuple[str, ...]
    doc_templates: tuple[str, ...]
    comment_templates: tuple[str, ...]
    changelog_templates: tuple[str, ...]
    people: tuple[str, ...]


def _syllables_by_split() -> dict[str, tuple[str, ...]]:
    every = [c + v for c, v in product("bdfgklmnprstvz", "aeiou")]
    return {split: tuple(every[i::3]) for i, split in enumerate(SPLITS)}


_SYL = _syllables_by_split()

POOLS: dict[str, SplitPools] = {
    "train": SplitPools(
        syllables=_SYL["train"],
        nouns=(
            "invoice",
            "sensor",
            "ticket",
            "parcel",
            "voucher",
            "meter",
            "badge",
            "ledger line",
            "shipment",
            "coupon",
            "reading",
            "booking",
        ),
        doc_templates=(
            "Combines the {noun} inputs into a single {noun2} figure.",
            "Derives the {noun} value that the {noun2} report expects.",
            "Normalises a {noun} before it is stored next to the {noun2}.",
            "Computes the {noun} field used by the {noun2} exporter.",
            "Maps raw {noun} data onto the {noun2} format.",
        ),
        comment_templates=(
            "keep this pure: the {noun} cache relies on it",
            "hot path for the {noun} batch job",
            "inputs were validated upstream by the {noun} loader",
            "do not inline; the {noun} profiler hooks this call",
        ),
        changelog_templates=(
            "{func}: docs: reword the {noun} example.",
            "{func}: perf: avoid a temporary {noun} array.",
            "{module}: chore: bump the {noun} fixtures.",
            "{module}: refactor: share the {noun} guard helpers.",
        ),
        people=("Ada Brink", "Joel Marsh", "Priya Sethi", "Tom Keller"),
    ),
    "validation": SplitPools(
        syllables=_SYL["validation"],
        nouns=(
            "order",
            "gauge",
            "permit",
            "crate",
            "token",
            "dial",
            "receipt",
            "journal entry",
            "freight",
            "rebate",
            "sample",
            "reservation",
        ),
        doc_templates=(
            "Folds the {noun} arguments into one {noun2} quantity.",
            "Produces the {noun} number consumed by the {noun2} dashboard.",
            "Cleans up a {noun} ahead of the {noun2} merge.",
            "Returns the {noun} column for the {noun2} feed.",
            "Translates a {noun} record into {noun2} terms.",
        ),
        comment_templates=(
            "side-effect free by contract with the {noun} service",
            "called once per {noun} in the nightly run",
            "callers already checked the {noun} bounds",
            "kept separate so the {noun} tracer can wrap it",
        ),
        changelog_templates=(
            "{func}: docs: fix a typo in the {noun} note.",
            "{func}: perf: skip a redundant {noun} copy.",
            "{module}: chore: regenerate the {noun} snapshots.",
            "{module}: refactor: move the {noun} checks together.",
        ),
        people=("Lena Vogt", "Marco Ruiz", "Sade Okafor", "Ivan Petrov"),
    ),
    "test": SplitPools(
        syllables=_SYL["test"],
        nouns=(
            "claim",
            "probe",
            "licence",
            "pallet",
            "credit",
            "counter",
            "statement",
            "audit row",
            "cargo",
            "discount",
            "measurement",
            "appointment",
        ),
        doc_templates=(
            "Merges the {noun} parameters into a {noun2} score.",
            "Works out the {noun} amount shown on the {noun2} page.",
            "Tidies a {noun} so the {noun2} index accepts it.",
            "Yields the {noun} entry needed by the {noun2} sync.",
            "Recasts a {noun} payload in {noun2} units.",
        ),
        comment_templates=(
            "must stay deterministic for the {noun} replay",
            "runs inside the {noun} request loop",
            "the {noun} parser guarantees well-formed input",
            "wrapped by the {noun} metrics decorator",
        ),
        changelog_templates=(
            "{func}: docs: expand the {noun} remarks.",
            "{func}: perf: reuse the {noun} buffer.",
            "{module}: chore: refresh the {noun} golden files.",
            "{module}: refactor: extract the {noun} validation.",
        ),
        people=("Nora Lind", "Kofi Mensah", "Yuki Tanaka", "Raul Ortega"),
    ),
}


# --------------------------------------------------------------------------- expression templates


@dataclass(frozen=True)
class Template:
    """One function shape: `expr` and its bug `mutations` are format strings over the constants."""

    verb: str
    kind: str  # num (a, b) | range (x, lo, hi) | text (s, n) | list (xs, n)
    expr: str
    mutations: tuple[str, ...]


PARAMS = {"num": ("a", "b"), "range": ("x", "lo", "hi"), "text": ("s", "n"), "list": ("xs", "n")}
PARAM_DOCS = {
    "a": ("number", "first operand"),
    "b": ("number", "second operand"),
    "x": ("number", "value to place"),
    "lo": ("number", "lower bound"),
    "hi": ("number", "upper bound"),
    "s": ("string", "input text"),
    "n": ("number", "count or position"),
    "xs": ("number[]", "input values"),
}
DOMAINS = {"math": ("num", "range"), "text": ("text",), "list": ("list",)}

TEMPLATES: tuple[Template, ...] = (
    Template("blend", "num", "a * {k1} + b", ("a * {k1} - b", "a * {k1p} + b", "b * {k1} + a")),
    Template(
        "bucket",
        "num",
        "Math.floor((a + b) / {k1})",
        ("Math.floor((a - b) / {k1})", "Math.ceil((a + b) / {k1})", "Math.floor((a + b) / {k1p})"),
    ),
    Template("spread", "num", "(a - b) % {k1}", ("(b - a) % {k1}", "(a - b) % {k1p}", "(a + b) % {k1}")),
    Template(
        "offset",
        "num",
        "(a + {k1}) * (b - {k2})",
        ("(a - {k1}) * (b - {k2})", "(b + {k1}) * (a - {k2})", "(a + {k1}) * (b - {k2p})"),
    ),
    Template(
        "gap",
        "num",
        "Math.abs(a - b) * {k1}",
        ("Math.abs(a + b) * {k1}", "Math.abs(a - b) * {k1p}", "(a - b) * {k1}"),
    ),
    Template(
        "tier",
        "num",
        "a < b + {k1} ? a * {k2} : a - b",
        (
            "a > b + {k1} ? a * {k2} : a - b",
            "a < b + {k1} ? a * {k2p} : a - b",
            "a < b + {k1} ? a * {k2} : b - a",
        ),
    ),
    Template("square", "num", "a ** 2 - b * {k1}", ("a ** 2 + b * {k1}", "b ** 2 - a * {k1}", "a ** 2 - b * {k1p}")),
    Template(
        "weigh",
        "num",
        "Math.max(a, b) * {k1} - Math.min(a, b)",
        (
            "Math.min(a, b) * {k1} - Math.max(a, b)",
            "Math.max(a, b) * {k1p} - Math.min(a, b)",
            "Math.max(a, b) * {k1} + Math.min(a, b)",
        ),
    ),
    Template(
        "clamp",
        "range",
        "Math.max(lo, Math.min(hi, x + {k1}))",
        (
            "Math.min(lo, Math.max(hi, x + {k1}))",
            "Math.max(lo, Math.min(hi, x + {k1p}))",
            "Math.max(hi, Math.min(lo, x + {k1}))",
        ),
    ),
    Template(
        "clip",
        "text",
        "s.slice({k0}, {k0} + n)",
        ("s.slice({k0}, {k0} + n + 1)", "s.slice({k0p}, {k0} + n)", "s.slice({k0} + n, {k0})"),
    ),
    Template(
        "pad",
        "text",
        's.padStart(n + {k1}, "{c}")',
        ('s.padEnd(n + {k1}, "{c}")', 's.padStart(n + {k1p}, "{c}")', 's.padStart({k1}, "{c}")'),
    ),
    Template(
        "echo",
        "text",
        "s.repeat(n % {k1} + 1)",
        ("s.repeat(n % {k1})", "s.repeat(n % {k1p} + 1)", "s.repeat({k1} % (n + 1) + 1)"),
    ),
    Template(
        "code",
        "text",
        "s.charCodeAt(n % s.length) + {k1}",
        (
            "s.charCodeAt((n + 1) % s.length) + {k1}",
            "s.charCodeAt(n % s.length) - {k1}",
            "s.charCodeAt(n % s.length) + {k1p}",
        ),
    ),
    Template(
        "shout",
        "text",
        "s.toUpperCase().slice(0, n) + s.length",
        (
            "s.toUpperCase().slice(0, n + 1) + s.length",
            "s.toUpperCase().slice(0, n) + n",
            "s.toLowerCase().slice(0, n) + s.length",
        ),
    ),
    Template(
        "locate",
        "text",
        's.indexOf("{v}") + n * {k1}',
        ('s.lastIndexOf("{v}") + n * {k1}', 's.indexOf("{v}") - n * {k1}', 's.indexOf("{v}") + n * {k1p}'),
    ),
    Template(
        "mirror",
        "text",
        's.split("").reverse().join("{c}") + n',
        (
            's.split("").join("{c}") + n',
            's.split("").reverse().join("") + n',
            's.split("").reverse().join("{c}") + (n + 1)',
        ),
    ),
    Template(
        "count",
        "list",
        "xs.filter((v) => v % {k1} === 0).length + n",
        (
            "xs.filter((v) => v % {k1} === 1).length + n",
            "xs.filter((v) => v % {k1p} === 0).length + n",
            "xs.filter((v) => v % {k1} !== 0).length + n",
        ),
    ),
    Template(
        "fold",
        "list",
        "xs.reduce((acc, v) => acc + v * {k1}, n)",
        (
            "xs.reduce((acc, v) => acc - v * {k1}, n)",
            "xs.reduce((acc, v) => acc + v * {k1p}, n)",
            "xs.reduce((acc, v) => acc + v * n, {k1})",
        ),
    ),
    Template(
        "shift",
        "list",
        "xs.slice(1, n + 1).map((v) => v + {k1})",
        (
            "xs.slice(0, n + 1).map((v) => v + {k1})",
            "xs.slice(1, n).map((v) => v + {k1})",
            "xs.slice(1, n + 1).map((v) => v - {k1})",
        ),
    ),
    Template(
        "span",
        "list",
        "Math.max(...xs) - Math.min(...xs) + n",
        (
            "Math.min(...xs) - Math.max(...xs) + n",
            "Math.max(...xs) - Math.min(...xs) - n",
            "Math.max(...xs) + Math.min(...xs) + n",
        ),
    ),
    Template(
        "pick",
        "list",
        "[...xs].sort((p, q) => p - q)[n % xs.length]",
        (
            "[...xs].sort((p, q) => q - p)[n % xs.length]",
            "[...xs].sort((p, q) => p - q)[(n + 1) % xs.length]",
            "xs[n % xs.length]",
        ),
    ),
    Template(
        "keep",
        "list",
        "xs.map((v) => v * {k1}).filter((v) => v > n)",
        (
            "xs.map((v) => v * {k1}).filter((v) => v < n)",
            "xs.map((v) => v * {k1p}).filter((v) => v > n)",
            "xs.map((v) => v + {k1}).filter((v) => v > n)",
        ),
    ),
    Template(
        "tail",
        "list",
        "xs.slice(n).reduce((acc, v) => acc + v, {k1})",
        (
            "xs.slice(n + 1).reduce((acc, v) => acc + v, {k1})",
            "xs.slice(0, n).reduce((acc, v) => acc + v, {k1})",
            "xs.slice(n).reduce((acc, v) => acc - v, {k1})",
        ),
    ),
)

# --------------------------------------------------------------------------- generated model


@dataclass
class Case:
    """One test call: JS argument literals and the expected value as a JSON literal."""

    args: str
    expected: str


@dataclass
class Function:
    name: str
    module: str  # path under src/
    template: Template
    spec: str  # the behaviour tests check (newest spec)
    doc_spec: str  # what the doc comment says
    code: str  # what the body computes
    role: str  # ok | bug | stale | revised (doc superseded, code right)
    mutations: list[str] = field(default_factory=list)  # candidate bugs / superseded specs
    revisions: list[str] = field(default_factory=list)  # changelog specs, oldest first; last == spec
    visible: list[Case] = field(default_factory=list)
    hidden: list[Case] = field(default_factory=list)

    @property
    def buggy(self) -> bool:
        return self.role in ("bug", "stale")


@dataclass
class Repo:
    name: str
    files: dict[str, list[str]]  # path -> lines
    functions: list[Function]
    hidden_tests: str  # JS source of the hidden suite (never shown)
    page_lines: int


# --------------------------------------------------------------------------- generation

VISIBLE_CASES = 3
HIDDEN_CASES = 5
CANDIDATES = 48


def bug_counts(level: int, scale: float) -> tuple[int, int, int]:
    """(plain bugs, stale-spec bugs, revised-but-correct distractors). Level adds bugs, revisions and
    distractors; scale >= 0.5 adds plain bugs (3 per unit of scale), since each fix means another
    test run: the horizon grows with the scale, not only the size of each test log (which grows with
    the number of functions). A fixed number of runs would keep every log about 1/8 of an unlimited
    context's peak, so no compaction could bring the peak much below that."""
    bugs, stale, revised = {1: (2, 0, 0), 2: (2, 1, 2), 3: (3, 2, 3)}[level]
    extra = round(3 * scale) if scale >= 0.5 else 0
    return bugs + extra, stale, revised


class _Gen:
    def __init__(self, rng: random.Random, split: str, scale: float, level: int) -> None:
        self.rng, self.pools, self.scale, self.level = rng, POOLS[split], scale, level
        self.used_words: set[str] = set()
        self.visible_cases = VISIBLE_CASES if scale >= 0.25 else 2

    # ---- names and inputs

    def word(self) -> str:
        while True:
            w = "".join(self.rng.choice(self.pools.syllables) for _ in range(2 + (len(self.used_words) > 40)))
            if w not in self.used_words:
                self.used_words.add(w)
                return w

    def text_input(self) -> str:
        return "".join(self.rng.choice(self.pools.syllables) for _ in range(self.rng.randint(2, 4)))

    def inputs(self, kind: str) -> str:
        r = self.rng
        if kind == "num":
            return f"{r.randint(-9, 25)}, {r.randint(-9, 25)}"
        if kind == "range":
            lo = r.randint(-5, 5)
            return f"{r.randint(-9, 25)}, {lo}, {lo + r.randint(3, 15)}"
        if kind == "text":
            return f"{json.dumps(self.text_input())}, {r.randint(0, 7)}"
        xs = [r.randint(-9, 25) for _ in range(r.randint(3, 7))]
        return f"{json.dumps(xs)}, {r.randint(0, 6)}"

    def constants(self) -> dict[str, object]:
        r = self.rng
        k0, k1, k2 = r.randint(0, 2), r.randint(2, 9), r.randint(1, 9)
        return {
            "k0": k0,
            "k0p": k0 + 1,
            "k1": k1,
            "k1p": k1 + 1,
            "k2": k2,
            "k2p": k2 + 1,
            "c": r.choice("0*-.#"),
            "v": r.choice("aeiou"),
        }

    # ---- repository

    def build(self) -> Repo:
        n_bug, n_stale, n_revised = bug_counts(self.level, self.scale)
        special = n_bug + n_stale + n_revised
        n_funcs = min(240, max(special + 3, round(45 * self.scale)))
        repo_name = f"{self.word()}-utils"
        page_lines = 60 if self.scale >= 0.25 else 30

        functions: list[Function] = []
        modules: list[tuple[str, str, list[Function]]] = []  # (path, domain, functions)
        while len(functions) < n_funcs:
            domain = self.rng.choice(sorted(DOMAINS))
            word = self.word()
            path = f"src/{word}_{domain}.js"
            templates = [t for t in TEMPLATES if t.kind in DOMAINS[domain]]
            self.rng.shuffle(templates)
            take = min(len(templates), n_funcs - len(functions), self.rng.randint(4, 7))
            mod_funcs = []
            for t in templates[:take]:
                consts = self.constants()
                expr = t.expr.format(**consts)
                f = Function(
                    name=t.verb + word.capitalize(),
                    module=path,
                    template=t,
                    spec=expr,
                    doc_spec=expr,
                    code=expr,
                    role="ok",
                    mutations=[m.format(**consts) for m in t.mutations],
                )
                mod_funcs.append(f)
            functions.extend(mod_funcs)
            modules.append((path, domain, mod_funcs))

        self._assign_roles(functions, n_bug, n_stale, n_revised)
        files: dict[str, list[str]] = {}
        for path, domain, funcs in modules:
            files[path] = self._render_module(path, domain, repo_name, funcs)
            test_path = path.replace("src/", "test/").replace(".js", ".test.js")
            files[test_path] = self._render_tests(path, funcs)
        files["CHANGELOG.md"] = self._render_changelog(repo_name, functions, modules)
        files["README.md"] = self._render_readme(repo_name, modules)
        hidden = "\n".join(
            f"test({json.dumps(f'{f.name} #{i + 1}')}, () => {f.name}({c.args}), {c.expected});"
            for f in functions
            for i, c in enumerate(f.hidden)
        )
        return Repo(repo_name, files, functions, hidden, page_lines)

    def _assign_roles(self, functions: list[Function], n_bug: int, n_stale: int, n_revised: int) -> None:
        """Pick mutations that visibly and hiddenly change behaviour; evaluate every case in QuickJS."""
        order = list(range(len(functions)))
        self.rng.shuffle(order)
        wanted = ["bug"] * n_bug + ["stale"] * n_stale + ["revised"] * n_revised
        ctx = _eval_context()
        for idx in order:
            f = functions[idx]
            cands = list(dict.fromkeys(self.inputs(f.template.kind) for _ in range(CANDIDATES)))
            truth = _evaluate(ctx, f, f.spec, cands)
            if wanted:
                role = wanted[0]
                muts = list(f.mutations)
                self.rng.shuffle(muts)
                for m in muts:
                    alt = _evaluate(ctx, f, m, cands)
                    differs = [i for i in range(len(cands)) if alt[i] != truth[i] and truth[i] is not None]
                    if len(differs) < HIDDEN_CASES + 1:
                        continue
                    wanted.pop(0)
                    f.role = role
                    if role == "bug":
                        f.code = m
                    else:
                        f.doc_spec = m
                        f.code = m if role == "stale" else f.spec
                        f.revisions = [f.spec]
                        others = [x for x in f.mutations if x != m]
                        if self.level == 3 and self.rng.random() < 0.5 and others:
                            f.revisions = [self.rng.choice(others), f.spec]
                    self._cases(f, cands, truth, differs)
                    break
            if f.role == "ok":
                self._cases(f, cands, truth, None)
        if wanted:
            raise RuntimeError(f"could not place {len(wanted)} bug(s); too few functions")

    def _cases(self, f: Function, cands: list[str], truth: list[str | None], differs: list[int] | None) -> None:
        """Choose hidden and visible cases among candidates with a defined result (never the same one)."""
        valid = [i for i in range(len(cands)) if truth[i] is not None]
        if differs is None:
            hidden = valid[:HIDDEN_CASES]
            visible = valid[HIDDEN_CASES : HIDDEN_CASES + self.visible_cases]
        else:
            # hidden cases all tell the spec apart from the mutation; one visible case does too
            hidden = differs[:HIDDEN_CASES]
            rest = [i for i in valid if i not in hidden]
            first = differs[HIDDEN_CASES]
            visible = [first] + [i for i in rest if i != first][: self.visible_cases - 1]
            self.rng.shuffle(visible)
        f.hidden = [Case(cands[i], str(truth[i])) for i in hidden]
        f.visible = [Case(cands[i], str(truth[i])) for i in visible]

    # ---- rendering

    def _prose(self, template: str) -> str:
        a, b = self.rng.sample(self.pools.nouns, 2)
        return template.format(noun=a, noun2=b)

    def _render_module(self, path: str, domain: str, repo: str, funcs: list[Function]) -> list[str]:
        word = path[4:].split("_")[0]
        r = self.rng
        lines = [
            "/*",
            f" * {path} - {domain} helpers for {repo}.",
            f" * Maintainer: {r.choice(self.pools.people)}. Every function is pure and documented by a",
            " * `spec:` line; CHANGELOG.md may revise a spec later (the newest entry wins).",
            " */",
            "",
            f"const {word.upper()}_DEFAULTS = Object.freeze({{ retries: {r.randint(1, 5)}, "
            f'label: "{word}", budget: {r.randint(10, 99)} }});',
            "",
        ]
        for f in funcs:
            lines += self._render_function(f)
            lines.append("")
        return lines

    def _render_function(self, f: Function) -> list[str]:
        r = self.rng
        params = PARAMS[f.template.kind]
        lines = ["/**", f" * {self._prose(r.choice(self.pools.doc_templates))}"]
        if self.scale >= 0.25:
            lines.append(f" * Note: {self._prose(r.choice(self.pools.comment_templates))}.")
        lines.append(" *")
        for p in params:
            typ, desc = PARAM_DOCS[p]
            lines.append(f" * @param {{{typ}}} {p} - {desc}")
        lines += [
            " * @returns {*} result",
            f" * spec: result = {f.doc_spec}",
            " */",
            f"function {f.name}({', '.join(params)}) {{",
        ]
        tag = "".join("-" + c.lower() if c.isupper() else c for c in f.name)
        filler = [
            f'  const _tag = "{tag}";',
            f"  // {self._prose(r.choice(self.pools.comment_templates))}",
            f"  const _arity = {len(params)};",
            "  if (_arity < 0) {",
            '    throw new Error("unreachable: " + _tag);',
            "  }",
            f"  const _seen = [{', '.join(params)}].filter((v) => v !== undefined).length;",
        ]
        lines += filler if self.scale >= 0.25 else filler[1:2]
        lines += [f"  const result = {f.code};", "  return result;", "}"]
        return lines

    def _render_tests(self, src: str, funcs: list[Function]) -> list[str]:
        lines = [f"// Visible tests for {src}: test(name, call, expected); compared as JSON.", ""]
        for f in funcs:
            for i, c in enumerate(f.visible):
                lines.append(f"test({json.dumps(f'{f.name} #{i + 1}')}, () => {f.name}({c.args}), {c.expected});")
        return lines

    def _render_changelog(
        self, repo: str, functions: list[Function], modules: list[tuple[str, str, list[Function]]]
    ) -> list[str]:
        r = self.rng
        entries: list[str] = [f"initial import of {len(modules)} modules."]
        noise = max(2, round(len(functions) * 0.3))
        for _ in range(noise):
            f = r.choice(functions)
            entries.append(
                r.choice(self.pools.changelog_templates).format(
                    func=f.name, module=f.module, noun=r.choice(self.pools.nouns)
                )
            )
        # insert revisions in order, each later than the previous one for the same function
        for f in functions:
            pos = 1
            for spec in f.revisions:
                pos = r.randint(pos, len(entries))
                entries.insert(pos, f"{f.name}: spec changed to `result = {spec}` (doc comment not updated).")
                pos += 1
        lines = [
            f"# Changelog - {repo}",
            "",
            "Entries are in release order. For a function, the newest `spec changed` entry supersedes",
            "its doc comment and any earlier entry.",
            "",
        ]
        for i, e in enumerate(entries):
            lines.append(f"- [v1.{i // 4}.{i % 4}] {e}")
        return lines

    def _render_readme(self, repo: str, modules: list[tuple[str, str, list[Function]]]) -> list[str]:
        lines = [
            f"# {repo}",
            "",
            "Small pure helper functions, tested with the QuickJS runner (`run_tests`).",
            "",
            "## Modules",
            "",
        ]
        for path, domain, funcs in modules:
            lines.append(f"- `{path}` ({domain}): {', '.join(f.name for f in funcs)}")
        return lines


def _eval_context() -> quickjs.Context:
    ctx = quickjs.Context()
    ctx.set_time_limit(5)
    ctx.set_memory_limit(64 * 1024 * 1024)
    return ctx


def _evaluate(ctx: quickjs.Context, f: Function, expr: str, cands: list[str]) -> list[str | None]:
    """JSON of `expr` on each candidate argument list (None where it is not a finite JSON value)."""
    params = ", ".join(PARAMS[f.template.kind])
    calls = ",".join(f"[{c}]" for c in cands)
    src = (
        f"(() => {{ const fn = ({params}) => {{ return {expr}; }}; return JSON.stringify([{calls}].map((args) => {{"
        " const v = fn(...args); if (typeof v === 'number' && !Number.isFinite(v)) return null;"
        " return v === undefined ? null : JSON.stringify(v); })); })()"
    )
    return json.loads(ctx.eval(src))


def generate(rng: random.Random, split: str, scale: float, level: int) -> Repo:
    """Build one repository instance (deterministic in `rng`)."""
    return _Gen(rng, split, scale, level).build()
