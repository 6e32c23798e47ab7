"""Word, name and phrasing pools of the dialogue family, partitioned by split.

Nothing here is shared between train, validation and test: person and codename initials,
meeting kinds, room names, requirement phrasings, chatter and pasted-noise sentences all
come from per-split pools, so a test instance never reuses a name or a phrasing seen in
training. Only weekdays, times and equipment names (the problem's vocabulary) are common.
"""

from __future__ import annotations

from dataclasses import dataclass

from rl_compaction.harness.tasks import SPLITS

DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
#: equipment a room may have: the phrase used in requirements -> the word used in room_info.
FEATURES = {
    "a projector": "projector",
    "a whiteboard": "whiteboard",
    "video conferencing": "video conferencing",
    "a speakerphone": "speakerphone",
    "step-free access": "step-free access",
}

_VOWELS = "aeiou"
_CONSONANTS = "bdfghjklmnprstvz"
#: names are built from consonant-vowel syllables; the first consonant of every generated
#: name (persons and codenames) is split-specific, so names of two splits never coincide.
_INITIALS = {"train": "bdgkm", "validation": "fhlp", "test": "nrstvz"}


@dataclass(frozen=True)
class SplitPools:
    """Everything the generator draws from for one split."""

    initials: str  # consonants a person name or codename may start with
    meeting_kinds: tuple[str, ...]
    rooms: tuple[str, ...]
    templates: dict[str, tuple[str, ...]]  # requirement kind -> phrasings
    openers: tuple[str, ...]  # start of a requirement message
    revision_openers: tuple[str, ...]  # start of a message that changes an earlier requirement
    closers: tuple[str, ...]
    chatter: tuple[str, ...]  # short off-topic messages
    noise_intros: tuple[str, ...]  # "here are the notes from ..." before a pasted text
    email_subjects: tuple[str, ...]
    noise_sentences: tuple[str, ...]  # pasted text; slots {p} {p2} {proj} {n} {day} {t} {room} {meeting}
    event_titles: tuple[str, ...]  # calendar entries; slots {p} {proj}
    room_notes: tuple[str, ...]  # facilities notes in room_info; slots {p} {n} {day}
    teams: tuple[str, ...]

    def syllables(self) -> tuple[str, ...]:
        """First syllables a name of this split may start with."""
        return tuple(c + v for c in self.initials for v in _VOWELS)


def all_syllables() -> tuple[str, ...]:
    """Syllables allowed after the first one (any split)."""
    return tuple(c + v for c in _CONSONANTS for v in _VOWELS)


POOLS: dict[str, SplitPools] = {
    "train": SplitPools(
        initials=_INITIALS["train"],
        meeting_kinds=("standup", "retro", "sync", "planning", "review", "demo", "triage"),
        rooms=("Orion", "Lyra", "Vega", "Draco", "Pavo", "Cetus", "Hydra", "Aquila"),
        templates={
            "new": (
                'Please set up the "{m}" with {people}.',
                'We need a new meeting called "{m}"; attendees: {people}.',
            ),
            "minutes": ('The "{m}" should take {n} minutes.', 'Book {n} minutes for the "{m}".'),
            "minutes_fix": ('Actually, make the "{m}" {n} minutes, not {old}.',),
            "add": ('Also invite {person} to the "{m}".',),
            "drop": ('{person} no longer needs to attend the "{m}".',),
            "on_day": ('The "{m}" has to be on {day}.', 'Put the "{m}" on {day}.'),
            "not_day": ('The "{m}" cannot be on {day}.', 'Keep the "{m}" off {day}.'),
            "forget_day": ('Forget what I said about {day} for the "{m}".',),
            "not_before": ('The "{m}" should start no earlier than {t}.',),
            "not_after": ('The "{m}" has to finish by {t}.',),
            "needs": ('The "{m}" needs a room with {feature}.',),
            "before": ('The "{m}" must happen on an earlier day than the "{m2}".',),
            "lunch": ("Keep {t}-{t2} free for lunch every day.",),
            "done": ("That's all, please submit the schedule.",),
        },
        openers=(
            "Next one.",
            "Okay, another requirement.",
            "Right, moving on.",
            "One more thing:",
            "Noting this down for you:",
            "Here's the next bit.",
        ),
        revision_openers=("Change of plan:", "Update:", "Sorry, I need to change something.", "Small correction."),
        closers=("Thanks!", "Cheers.", "Hope that makes sense.", ""),
        chatter=(
            "Sorry for the delay, back-to-back calls all morning.",
            "Is it just me or is the office freezing today?",
            "Did you see the email about the new coffee machine? Finally.",
            "Give me a second, I'm digging through my inbox.",
            "By the way, thanks for helping with this, it always takes me ages.",
            "My laptop just decided to restart for updates. Classic.",
        ),
        noise_intros=(
            "Pasting the notes from last week's all-hands in case they help:",
            "Here is the thread I mentioned, not sure if it matters:",
            "FYI, the minutes from the steering meeting:",
            "Forwarding this in case there's something relevant in it:",
        ),
        email_subjects=(
            "Re: migration timeline",
            "Fwd: budget numbers",
            "Re: onboarding backlog",
            "Parking passes",
            "Re: staging freeze",
        ),
        noise_sentences=(
            "{p} walked everyone through the migration plan for {proj} and flagged {n} open risks.",
            "Budget for {proj} is still pending; finance wants a revised estimate by {day}.",
            "{p2} asked whether the staging cluster could be frozen until {t} on {day}.",
            "We spent most of the session on the onboarding backlog, which has grown to {n} tickets.",
            "{p} will circulate the vendor comparison spreadsheet once legal signs off.",
            "There was some debate about moving the offsite, but nothing was decided yet.",
            "The {proj} dashboard now refreshes every {n} minutes instead of hourly.",
            "{p2} reminded the group that parking passes expire at the end of the month.",
            "Action item: {p} to follow up with facilities about the broken blinds in {room}.",
            "The customer pilot for {proj} slipped by {n} days because of a data export issue.",
            "Several people asked for the slides from {day}; {p2} will upload them to the shared drive.",
            "Headcount planning is on hold until the quarterly review wraps up.",
            "Last month the {meeting} was held on {day} at {t}, which nobody liked.",
        ),
        event_titles=(
            "Interview loop",
            "Vendor call about {proj}",
            "Focus time",
            "1:1 with {p}",
            "Code review block",
            "Dentist appointment",
            "Incident postmortem prep",
            "Quarterly roadmap session",
            "Lunch with {p}",
            "Security training",
        ),
        room_notes=(
            "The HDMI adapter is kept in the drawer under the screen; please return it after use.",
            "Cleaning crew visits on {day} evenings; leave the tables clear.",
            "If the door badge reader fails, call the front desk on extension {n}.",
            "The thermostat is shared with the neighbouring room, so please do not change it.",
            "Whiteboard markers run out often; spares are in the supply cupboard near {p}'s desk.",
            "Booking changes made less than {n} minutes in advance may not show on the door panel.",
            "Food is allowed, but please take rubbish to the kitchen afterwards.",
            "The blinds on the south side are broken; a repair was requested by {p}.",
        ),
        teams=("Platform", "Payments", "Mobile", "Data", "Infra", "Growth"),
    ),
    "validation": SplitPools(
        initials=_INITIALS["validation"],
        meeting_kinds=("huddle", "checkpoint", "walkthrough", "kickoff", "debrief"),
        rooms=("Birch", "Cedar", "Maple", "Alder", "Rowan", "Hazel", "Aspen"),
        templates={
            "new": (
                'Add a meeting named "{m}" for {people}.',
                'There is a new meeting, "{m}", and it is for {people}.',
            ),
            "minutes": ('Plan {n} minutes for the "{m}".', 'The "{m}" runs for {n} minutes.'),
            "minutes_fix": ('Correction: the "{m}" is {n} minutes long, not {old}.',),
            "add": ('{person} should join the "{m}" too.',),
            "drop": ('Take {person} off the "{m}".',),
            "on_day": ('The "{m}" must take place on {day}.', 'Hold the "{m}" on {day}.'),
            "not_day": ('Do not hold the "{m}" on {day}.', 'The "{m}" must avoid {day}.'),
            "forget_day": ('Ignore my earlier note about {day} for the "{m}".',),
            "not_before": ('Do not start the "{m}" before {t}.',),
            "not_after": ('The "{m}" must be over by {t}.',),
            "needs": ('Book the "{m}" in a room that has {feature}.',),
            "before": ('Hold the "{m}" on a day before the "{m2}".',),
            "lunch": ("Lunch is {t}-{t2}; no meetings then.",),
            "done": ("That is everything; go ahead and submit the schedule.",),
        },
        openers=(
            "Another one for the list.",
            "Okay.",
            "Next up:",
            "Here is another requirement.",
            "Writing this before I forget:",
        ),
        revision_openers=("Heads up, this changes things:", "New information:", "I have to revise this:"),
        closers=("Thank you.", "Much appreciated.", ""),
        chatter=(
            "The trade fair stand still hasn't been packed up, what a week.",
            "Hang on, someone is at the door.",
            "I'm typing this from the train, so bear with me.",
            "Quick question unrelated to this: do you know a good sandwich place nearby? Never mind.",
            "The printer on our floor is jammed again.",
        ),
        noise_intros=(
            "Here are the notes from the marketing sync, just for context:",
            "Copying the email chain below:",
            "These are my scribbles from the brand workshop:",
        ),
        email_subjects=(
            "Re: booth logistics",
            "Fwd: campaign assets",
            "Re: newsletter draft",
            "Catering order",
            "Re: press release",
        ),
        noise_sentences=(
            "{p} summarised the feedback from the trade fair booth, roughly {n} leads in total.",
            "The {proj} campaign assets are due at the printer on {day} morning.",
            "{p2} suggested trimming the newsletter to {n} sections to improve open rates.",
            "Catering for the launch event needs a final headcount by {t} on {day}.",
            "The agency sent three logo variants for {proj}; nobody liked the green one.",
            "{p} is still waiting for the translated brochures from the vendor.",
            "We agreed to pause paid social spend for {proj} until the attribution bug is fixed.",
            "{p2} will draft the press release and share it with {p} for review.",
            "The photo shoot in {room} went over by {n} minutes because of lighting issues.",
            "Survey responses came in at {n} percent, better than last quarter.",
            "The sponsorship deck needs fresh numbers before it goes to the partners.",
            "Someone should check whether the banner stands survived the shipping.",
            "Someone suggested moving the {meeting} to {day} at {t}, but that idea was dropped.",
        ),
        event_titles=(
            "Agency review",
            "Campaign sync about {proj}",
            "Deep work",
            "Coffee with {p}",
            "Copy editing block",
            "Doctor appointment",
            "Press briefing prep",
            "Brand workshop",
            "Partner call with {p}",
            "Compliance training",
        ),
        room_notes=(
            "The projector remote lives in the box on the windowsill.",
            "Chairs from this room must not be taken to the lounge; {p} keeps count.",
            "The wifi repeater here restarts every {day} night around midnight.",
            "Please report spills to facilities on extension {n} right away.",
            "The key for the AV cabinet is with reception.",
            "Recording equipment may only be used after a booking of at least {n} minutes.",
            "Plants are watered by the building team; please leave them be.",
        ),
        teams=("Brand", "Events", "Content", "Partnerships", "Research"),
    ),
    "test": SplitPools(
        initials=_INITIALS["test"],
        meeting_kinds=("briefing", "roundtable", "clinic", "showcase", "catchup"),
        rooms=("Volga", "Rhine", "Loire", "Tagus", "Douro", "Elbe", "Oder"),
        templates={
            "new": (
                'Schedule a meeting "{m}" including {people}.',
                'I would like a "{m}" with these people: {people}.',
            ),
            "minutes": ('Give the "{m}" a length of {n} minutes.', 'The "{m}" needs {n} minutes.'),
            "minutes_fix": ('Scratch the {old} minutes for the "{m}"; it should be {n} minutes.',),
            "add": ('Put {person} on the "{m}" invite list as well.',),
            "drop": ('Remove {person} from the "{m}" attendees.',),
            "on_day": ('Run the "{m}" on {day}.', 'The "{m}" belongs on {day}.'),
            "not_day": ('No "{m}" on {day}, please.', 'The "{m}" is impossible on {day}.'),
            "forget_day": ('Disregard the {day} remark for the "{m}".',),
            "not_before": ('The "{m}" may begin at {t} at the earliest.',),
            "not_after": ('Wrap up the "{m}" no later than {t}.',),
            "needs": ('For the "{m}" the room must offer {feature}.',),
            "before": ('The "{m2}" has to come on a later day than the "{m}".',),
            "lunch": ("Nobody meets during lunch, {t}-{t2}.",),
            "done": ("Nothing more from me, please submit the schedule now.",),
        },
        openers=("Also:", "Another point.", "Okay, so.", "Listen, this one matters.", "Adding to the pile:"),
        revision_openers=("Things changed:", "Please revise this:", "Turns out I was wrong earlier."),
        closers=("Thanks a lot.", "Appreciate it.", ""),
        chatter=(
            "The lab fridge alarm went off again, sorry for the silence.",
            "I just spilled tea on my notebook. Great start.",
            "Our grant report is due soon, so I'm a bit scattered today.",
            "Random thought: we should get a second espresso machine.",
            "Back now, the fire drill took forever.",
        ),
        noise_intros=(
            "Dumping the lab meeting notes here, probably irrelevant:",
            "This thread landed in my inbox, pasting it:",
            "Notes from the reading group, in case:",
        ),
        email_subjects=(
            "Re: sample storage",
            "Fwd: grant report",
            "Re: instrument booking",
            "Conference travel",
            "Re: reagent order",
        ),
        noise_sentences=(
            "{p} reported that the spectrometer calibration drifted by {n} units overnight.",
            "The {proj} samples must move to the cold room before {t} on {day}.",
            "{p2} proposed rerunning the {proj} assay with {n} replicates instead of three.",
            "The reading group will discuss two preprints; {p} picks the second one.",
            "Reagent orders above {n} euros now need a second signature.",
            "{p} is drafting the methods section and wants figures by {day}.",
            "The centrifuge in {room} is out of service until further notice.",
            "{p2} asked everyone to log instrument time in the shared sheet.",
            "Conference travel requests for {proj} go through the new portal from {day}.",
            "We lost about {n} hours of cluster time to the storage outage.",
            "The ethics amendment for {proj} was approved with minor comments.",
            "Somebody keeps leaving pipette tips next to the sink.",
            "In the old rota the {meeting} ran {n} minutes on {day} in {room}.",
        ),
        event_titles=(
            "Instrument slot",
            "Data review for {proj}",
            "Writing block",
            "Supervision with {p}",
            "Seminar",
            "Dentist",
            "Safety induction",
            "Grant panel prep",
            "Site visit with {p}",
            "Journal club",
        ),
        room_notes=(
            "The microphone batteries are in the top drawer; please switch it off after use.",
            "This room doubles as an exam venue on {day} afternoons.",
            "Ask {p} before moving the large table.",
            "In case of a fire alarm, assemble at point {n} by the car park.",
            "The screen needs a USB-C cable; adapters are at reception.",
            "Heating switches off automatically {n} minutes after the last booking.",
            "Please keep the window closed when the air conditioning runs.",
        ),
        teams=("Imaging", "Genomics", "Modelling", "Field Work", "Statistics"),
    ),
}
assert set(POOLS) == set(SPLITS)
