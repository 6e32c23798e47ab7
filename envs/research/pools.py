"""Word pools for the research family, partitioned by split.

Every entity name contains a root whose first syllable (exactly three letters, consonant-vowel-
consonant) belongs to one split only, so no name of one split can occur in another. Given names,
organisation / object / place kinds and the filler grammar are partitioned the same way (each
pool is dealt round-robin into the three splits), so a test page never reuses training phrasing.
"""

from __future__ import annotations

from itertools import product

from rl_compaction.harness.tasks import SPLITS

_ONSETS = "bdfghklmnprstvz"
_VOWELS = "aeiou"
_CODAS = "lnrst"
_ALL_FIRST = ["".join(p).capitalize() for p in product(_ONSETS, _VOWELS, _CODAS)]

#: later syllables of a root (shared by all splits: the first syllable already fixes the split).
TAIL_SYLLABLES: tuple[str, ...] = tuple(
    """
    dran mor ket vin sa lo thar wen dis ra bel nock vas ric den ma lun tor sel ga rin hal mi cot fen ba
    wick do
    """.split()
)

_GIVEN = tuple(
    """
    Ilsa Maren Tovan Edda Corin Anselm Brigid Oskar Liesl Tamsin Ruben Greta Emrys Sabine Halvard Noor
    Caspian Wilma Teodor Ysolde Piet Aurelie Lorcan Mirela Fenna Jorund Clio Bastian Odile Kasimir Rhona
    Severin Ines Matthias Leontine Dario Sunniva Ewald Marisol Aksel Petra Ciaran Zofia Henrik Amara
    Lucan Thea Ottilie Stellan Veda Ambrose Katrin Idris Rosalind Gideon Elna Florian Yara Osric Linnea
    """.split()
)

# (name pattern, descriptor); {r} is the root.
_ORG_KINDS = (
    ("{r} Observatory", "astronomical research organisation"),
    ("{r} Society", "learned society"),
    ("{r} Trust", "charitable research trust"),
    ("{r} Institute", "research institute"),
    ("{r} Museum", "museum and research collection"),
    ("{r} Archive", "historical archive"),
    ("{r} Foundation", "scientific foundation"),
    ("{r} Survey", "geological survey office"),
    ("{r} Field Station", "field research station"),
    ("{r} Laboratory", "independent laboratory"),
    ("{r} Conservatory", "botanical conservatory"),
    ("{r} Workshop", "instrument-making workshop"),
)
_OBJECT_KINDS = (
    ("Comet {r}", "comet"),
    ("{r} Codex", "illuminated manuscript"),
    ("{r}ite", "mineral"),
    ("{r} Nebula", "emission nebula"),
    ("{r} Crater", "impact crater"),
    ("{r} Moth", "species of moth"),
)
_PLACE_KINDS = (
    ("{r}", "market town"),
    ("{r}", "hill town"),
    ("{r}", "cathedral town"),
    ("{r} Falls", "river town"),
    ("{r} Crossing", "railway town"),
    ("{r} Harbour", "harbour town"),
    ("{r} Heights", "upland town"),
    ("{r} Vale", "valley town"),
    ("{r} Ford", "river crossing town"),
)
#: words that turn a name into a different, similarly named entity.
_PREFIXES = ("Upper", "New", "Old", "North", "Lower", "Great", "East", "Little", "West")

_OPENERS = (
    "In the spring of 1931", "According to a staff newsletter", "During the long winter months",
    "For several decades", "In a letter to the editor", "By the late afternoon", "Over the following summers",
    "In an oral history interview", "Throughout the postwar years", "On most weekday mornings",
    "In a widely cited pamphlet", "After a stormy autumn", "Before the railway arrived",
    "Within the first few seasons", "In the minutes of one meeting", "At the start of each term",
    "Under a temporary arrangement", "As the local almanac notes", "In the autumn of 1962",
    "Following a modest appeal", "Long before the current building", "According to the visitor book",
    "In the winter of 1908", "During a quiet interval",
)  # fmt: skip
_SUBJECTS = (
    "a small group of volunteers", "the archive committee", "two visiting surveyors", "the evening staff",
    "a retired schoolteacher", "several apprentices", "the printing office", "a delegation of engineers",
    "the grounds keeper", "local amateur societies", "a travelling photographer", "the board of trustees",
    "a pair of cartographers", "the kitchen garden team", "several correspondents", "the night watch",
    "an itinerant lecturer", "the youth club", "a circle of translators", "the lending library",
    "a chamber choir", "the maintenance crew", "three bookbinders", "a regional newspaper",
)  # fmt: skip
_VERBS = tuple(
    """
    catalogued repainted photographed reviewed reorganised measured transcribed restored inspected
    rearranged documented sketched cleaned annotated insured relabelled inventoried repaired surveyed
    digitised rebound mapped audited polished
    """.split()
)
_OBJECTS = (
    "the western reading room", "a set of brass instruments", "the old boundary stones",
    "a shelf of weather diaries", "the iron footbridge", "several glass plates", "the clock tower mechanism",
    "a box of survey ledgers", "the lecture hall benches", "a collection of pressed flowers",
    "the copper roof panels", "the visitor book", "a drawer of lantern slides", "the rear courtyard",
    "a crate of field notebooks", "the stained glass windows", "the lower storerooms", "a series of wall maps",
    "the garden sundial", "a cabinet of mineral samples", "the entrance stairway", "a row of filing cabinets",
    "the north gallery", "a bundle of shipping manifests",
)  # fmt: skip
_MODIFIERS = (
    "with remarkable patience", "over three consecutive seasons", "despite a shortage of funds",
    "in time for the annual fair", "with help from neighbouring towns", "under difficult conditions",
    "before the first frost", "as part of a wider review", "at the request of the council",
    "using borrowed equipment", "in a single weekend", "without much public notice", "to general approval",
    "after lengthy discussion", "with a handful of helpers", "for a travelling exhibition",
    "while the roads were closed", "in careful stages", "at considerable expense", "during the summer recess",
    "with unusual care", "to mark an anniversary", "amid some controversy", "on a shoestring budget",
)  # fmt: skip


def _deal(pool: tuple | list) -> dict[str, tuple]:
    """Deal a pool round-robin into the three splits (disjoint by construction)."""
    return {split: tuple(pool[i :: len(SPLITS)]) for i, split in enumerate(SPLITS)}


#: POOLS[split][pool name] -> that split's share of the pool.
POOLS: dict[str, dict[str, tuple]] = {split: {} for split in SPLITS}
for _name, _pool in {
    "first_syllables": _ALL_FIRST,
    "given_names": _GIVEN,
    "org_kinds": _ORG_KINDS,
    "object_kinds": _OBJECT_KINDS,
    "place_kinds": _PLACE_KINDS,
    "prefixes": _PREFIXES,
    "openers": _OPENERS,
    "subjects": _SUBJECTS,
    "verbs": _VERBS,
    "objects": _OBJECTS,
    "modifiers": _MODIFIERS,
}.items():
    for _split, _share in _deal(_pool).items():
        POOLS[_split][_name] = _share


def split_of_root(word: str) -> str | None:
    """The split whose first-syllable pool starts `word` (a root, e.g. 'Veldran'), if any."""
    head = word[:3].capitalize()
    for split in SPLITS:
        if head in POOLS[split]["first_syllables"]:
            return split
    return None
