"""Supersession (SPEC section 6): a newer memory stating a newer value of the same fact.

Only memories of one scope are compared: the same ``user_id`` and ``agent_id`` (an unscoped
memory with unscoped ones only), whatever their sessions: a fact restated in a later session
supersedes, one said of another end user or by another agent never does.

The deterministic rule: both memories are short single statements that parse as
``subject · relation · value`` (``Alice lives in Osaka`` / ``Alice now lives in Lisbon``), with the
same subject and relation, different values, and cosine similarity at least
:attr:`SupersessionPolicy.min_cosine` (:attr:`SupersessionPolicy.speaker_min_cosine` for a fact
its speaker states of themselves and says is new, "I live in Lisbon now"). The older (by event
time) is superseded by the newer.
Each must name one value of one subject's attribute and nothing else (:func:`_firm`), and
neither value may hold or spell the other (:func:`_restated`: "Acme Inc" and "NYC" restate "Acme"
and "New York City"). Anything else is
left alone: a missed update costs an ordering, a false one would hide a memory (rule zero), so
the rule only fires on plain statements.

When the worker has an LLM endpoint, it asks the LLM instead (:func:`llm_prompt`,
:func:`parse_llm_answer`) about every new write with close older neighbours; :func:`decide` falls
back to the rule whenever the LLM gives no usable answer.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from memcore.errors import InvalidField
from memcore.types import Lifecycle, require_unit

SUPERSEDABLE = (Lifecycle.ACTIVE, Lifecycle.ARCHIVED)
"""The lifecycle states in which an older memory can be superseded: a forgotten or deleted one is
no candidate (it is out of recall, and its content must not reach an LLM's prompt)."""
GONE = (Lifecycle.FORGOTTEN, Lifecycle.DELETED)
"""The lifecycle states out of recall for good: a successor in one of them reinstates the
versions it superseded."""
MAX_NEIGHBOURS = 1024
"""The most neighbours a write is compared with (:attr:`SupersessionPolicy.searched`): a search
returns at most 16,384 hits, and each neighbour is parsed and compared. The admin API and CLI
refuse a larger ``neighbours``; a record already on the topic with one is read as it is."""

MAX_WORDS = 64
"""The longest statement parsed (:attr:`SupersessionPolicy.max_words`): the admin API and CLI
refuse a larger ``max_words``; a record already on the topic with one is read as this."""

MAX_WORD_CHARS = 64
"""Text longer than this many characters per word of ``max_words`` is no statement the rule
reads, and is refused before it is normalised (a 64 KB write costs no more than a short one)."""


@dataclass(frozen=True)
class SupersessionPolicy:
    """When the write-time rule runs.

    Attributes:
        enabled: run the rule on writes.
        min_cosine: the two memories' cosine must be at least this.
        speaker_min_cosine: the cosine a fact its speaker states of themselves or theirs
            (:func:`_by_its_speaker`: "I live in ...", "Lives in ...", "my phone number is ...")
            is enough instead (at or above ``min_cosine`` it changes nothing) when the newer
            statement says its value is new
            (:func:`states_an_update`: "I live in Hanoi now."). Such statements are short, and
            their value's words make up most of them, so MiniLM puts two values of one fact far
            apart ("I live in Toronto." / "I live in Hanoi now." .234, where "Alice lives in
            ..." pairs are .6-.8); below ``min_cosine`` the parse and the marker decide, as for
            a many-valued relation ("I live in Excel." or "I work at Starbucks." replace
            nothing: a habit, a seat), and this floor only keeps out texts with nothing in
            common.
        max_words: only statements of at most this many words are parsed (at most
            :data:`MAX_WORDS` are).
        neighbours: how many of the nearest memories of the tenant, of the new write's user and
            agent (:attr:`Version.scope`), a new write is compared with (at most
            :data:`MAX_NEIGHBOURS` are).
    """

    enabled: bool = True
    min_cosine: float = 0.5
    max_words: int = 16
    neighbours: int = 10
    speaker_min_cosine: float = 0.1

    def __post_init__(self) -> None:
        require_unit("policy.supersession.min_cosine", self.min_cosine)
        require_unit("policy.supersession.speaker_min_cosine", self.speaker_min_cosine)
        if not isinstance(self.enabled, bool):
            raise InvalidField("policy.supersession.enabled", self.enabled, "expected a boolean")
        for name in ("max_words", "neighbours"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidField(f"policy.supersession.{name}", value, "expected an integer >= 1")

    @property
    def searched(self) -> int:
        """How many nearest memories to search for one write: its neighbours (at most
        :data:`MAX_NEIGHBOURS`) and the write itself.
        """
        return min(self.neighbours, MAX_NEIGHBOURS) + 1


@dataclass(frozen=True)
class Fact:
    """A statement parsed as ``subject · relation · value`` (all normalised, lower case)."""

    subject: str
    relation: str
    value: str


@dataclass(frozen=True)
class Version:
    """A memory as the rule sees it.

    Attributes:
        memory_id: id within the tenant.
        content: its text.
        at: event time of its write (creation).
        similarity: cosine to the new memory (1 for the new memory itself).
        scope: its ``(agent_id, user_id)``, "" for none: only memories of one scope supersede
            each other (the session is no part of it: a fact restated in a later session
            supersedes).
        session: its ``session_id``, "" for none: part of the scope of a fact the speaker
            states of themselves ("I", "we", "you", "my ...") without a ``user_id``, where two
            sessions may be two people (:func:`_by_its_speaker`).
    """

    memory_id: str
    content: str
    at: datetime
    similarity: float = 1.0
    scope: tuple[str, str] = ("", "")
    session: str = ""


def comparable(new: Version, other: Version) -> bool:
    """``other`` is another memory of ``new``'s scope: one of another user or agent (or scoped,
    where ``new`` is not) is never superseded by it, nor supersedes it.
    """
    return other.memory_id != new.memory_id and other.scope == new.scope


@dataclass(frozen=True)
class Supersession:
    """``older`` is valid until ``at`` (the newer's event time), superseded by ``newer``.

    ``chains``: the two state one fact each, so a version that raced this one is put in one
    chain with them (:func:`memcore.relink`). False for the LLM's answers: it may supersede one
    of the facts an older memory states, and another version may replace another of them.
    """

    older: str
    newer: str
    at: datetime
    reason: str
    chains: bool = True


# relation (canonical) -> the phrases that state it; a phrase matches between whole words. Not
# "moved to" (a team, a company, an app: "moved to Marketing"), "works for" (a person, a
# department: "works for Tom", "works for Sales"), "is employed by" (an agency, a family), "is
# driving" (a rental, a loan) or "is based in".
_RELATIONS: dict[str, tuple[str, ...]] = {
    "lives in": (
        "lives in",
        "live in",
        "is living in",
        "relocated to",
        "resides in",
        "reside in",
    ),
    "works at": (
        "works at",
        "work at",
        "is working at",
        "is employed at",
        "am employed at",
        "are employed at",
        "started working at",
        "got a job at",
        "got a new job at",
        "took a job at",
        "took a new job at",
        "started a job at",
        "started a new job at",
    ),
    "drives": ("drives", "drive"),
    "is married to": ("is married to", "am married to", "are married to"),
    "is dating": ("is dating", "am dating", "are dating"),
    "prefers": ("prefers", "prefer"),
}
_PERSONAL = frozenset(
    {"live in", "reside in", "work at", "am employed at", "are employed at", "drive"}
    | {"am married to", "are married to", "am dating", "are dating", "prefer"}
)
"""Phrases of the first or second person: said of "I", "we" or "you" only (not "Docs live in
Notion", "Backups work at night", "Cats prefer fish for dinner": things, or many). Not "I'm
living in" or "I'm working at": where one stays or sits for now ("I'm living in the Hilton",
"I'm working at WeWork"), not one's home or employer."""
_FOR_NOW = frozenset({"is living in", "is working at"})
"""Not read as the user's own when they open a statement ("Is living in the Hilton", "Is working
at WeWork"): where one stays or sits for now, as "I'm living in" is (:data:`_PERSONAL`)."""
_NOT_OPENING = _PERSONAL | _FOR_NOW
"""Phrases that make no statement of the user's own by opening it (:data:`_SPEAKER`)."""
_SPEAKER = "i"
"""The subject of a statement that opens with its relation, capitalised ("Lives in Paris",
"Works at Acme", as mem0 writes what a user said of themselves): the user's, as "I live in
Paris" is (not "lives in Paris", which may be a piece of a sentence)."""
_CONTRACTED = re.compile(r"\b(i)'m\b|\b(we|you)'re\b", re.IGNORECASE)
""""I'm", "we're", "you're": read as "I am", "we are", "you are" ("I'm living in Berlin")."""
_MANY_VALUED = frozenset({"drives", "prefers", "is dating"})
"""Relations someone may hold several values of at once ("drives a Tesla" and "drives a Kia";
"prefers tea for breakfast" and "prefers eggs for breakfast"; "I'm dating Sam" and "I'm dating
Alex"): a newer value supersedes only when its statement says it is an update
(:func:`states_an_update`: "Alice drives a Kia now")."""
_AT_HOME = re.compile(r"(home|noon|midnight|dawn|head office|corporate|reception|campus|downtown)$")
"""Values of "works at" that say where or when, capitalised too ("works at Home", "Head Office";
"Home Depot" is a value); the other whens are :data:`_NOT_NAMES`. After an article, a site's
last word (:data:`_SITES`) is refused too ("the London Office", "The Office")."""
_SITES = frozenset(
    {"office", "campus", "store", "branch", "site", "plant", "factory"}
    | {"warehouse", "hq", "building", "shop", "centre", "center", "lab", "labs"}
)
"""Last words of a site of an employer after an article ("works at the London Office", "the
Main Campus"): where one works, not for whom ("the BBC", "the Guardian" are employers)."""
_IN_TOWN = re.compile(r"(town|halls|dorms?|campus|residence|barracks)$")
"""Values of "lives in" that say where in a place, not which ("lives in Halls now")."""
_MAKES = frozenset(
    {"toyota", "honda", "ford", "chevrolet", "chevy", "tesla", "kia", "hyundai", "nissan"}
    | {"mazda", "subaru", "volkswagen", "vw", "audi", "bmw", "mercedes", "mercedes-benz", "benz"}
    | {"porsche", "volvo", "jeep", "dodge", "gmc", "buick", "cadillac", "lincoln", "chrysler"}
    | {"lexus", "acura", "infiniti", "genesis", "mitsubishi", "suzuki", "fiat", "alfa", "jaguar"}
    | {"land", "range", "mini", "lotus", "ferrari", "lamborghini", "maserati", "bentley", "rolls"}
    | {"rolls-royce", "aston", "mclaren", "bugatti", "peugeot", "renault", "citroen", "citroën"}
    | {"skoda", "škoda", "seat", "cupra", "dacia", "opel", "vauxhall", "lancia", "saab", "smart"}
    | {"polestar", "rivian", "lucid", "byd", "geely", "nio", "xpeng", "daihatsu", "isuzu", "lada"}
    | {"tata", "mahindra", "holden", "pontiac", "saturn", "plymouth", "oldsmobile", "mercury"}
    | {"hummer", "scion", "mg", "rover", "datsun", "chery", "proton", "perodua", "ds", "ram"}
    | {"merc", "lambo", "beemer", "bimmer", "abarth", "alpine", "ssangyong", "daewoo", "maruti"}
    | {"vinfast", "fisker", "zeekr", "morgan", "caterham", "koenigsegg", "pagani", "trabant"}
    | {"amg", "mercedes-amg", "haval", "ineos", "delorean", "yugo", "studebaker", "lynk"}
)
"""Car makes: a car is named from its make ("drives a Kia Niro", "a Mercedes-Benz C-Class").
Not a lorry, a bus, a motorbike, a digger or a rental ("drives a Peterbilt", "a Routemaster",
"a Harley", "a JCB", "a Zipcar" now), which one may drive beside one's car, nor a model alone
("a Model 3", "a Prius" after "a Toyota": the same car said again)."""
_NOT_CARS = frozenset(
    {"sprinter", "transit", "crafter", "ducato", "vito", "actros", "citaro", "forklift", "truck"}
    | {"lorry", "van", "minibus", "bus", "coach", "taxi", "cab", "ambulance", "interceptor"}
    | {"tractor", "motorbike", "motorcycle", "scooter", "moped", "wing", "trike", "hearse"}
)
"""Words after a make that say it is no car of one's own: a van, a lorry, a bus, a taxi or a
motorbike of that make ("a Mercedes Sprinter", "a Toyota Forklift", "a Honda Gold Wing")."""
_COPULAS = ("is",)
_SPELLING = {"favorite": "favourite", "color": "colour"}
"""American spellings read as British ones: "Alice's favorite food" names the attribute "Alice's
favourite food" does."""
_SPELT = re.compile(r"\b(" + "|".join(_SPELLING) + r")\b")
_ATTRIBUTE = (
    r"(favourite \w+( \w+)?|phone number|(mobile |cell )number|((home|postal) )?address"
    r"|job( title)?|boss|manager|password)"
)
"""Attributes one holds a single value of at a time. Not an email or a username (one has
several), a bare "phone" (a handset or a number), "number" (a shirt's, a room's) or "title" (a
job's or "Dr")."""
_SINGLE_ATTRIBUTE = re.compile(
    rf"(?:the wifi (?=password$)|(?:my|our|your|\S+'s) (?:(?:work|home|mobile|cell) )?)"
    rf"{_ATTRIBUTE}"
)
"""The subject of an ``X is Y`` statement the rule reads (:func:`_copula`): an owned attribute
held one value at a time ("Alice's favourite food", "my work phone number", "the wifi
password"); not of "his", "her" or "their" (whose?)."""
_VAGUE_SUBJECT = re.compile(
    r"^(he|she|they|it|his|her|their|its|this|that|these|those|there|a|an|one|someone|somebody"
    r"|some|another|if|when|maybe|perhaps|nobody|anybody|everybody|anyone|noone|no-one)\b"
    r"|\b(\w*friends?|\w*sisters?|\w*brothers?|siblings?|cousins?|colleagues?|co-?workers?"
    r"|neighbou?rs?|kids?|child|children|(step|god)?(sons?|daughters?)|\w*mates?|\w*parents?|grand\w*"
    r"|aunts?|uncles?|nephews?|nieces?|ex|exes|partners?|clients?|patients?|students?|pupils?"
    r"|customers?|tenants?|interns?|employees?|reports?|doctors?|teachers?|tutors?|coach(es)?"
    r"|lawyers?|therapists?|mentors?|god\w+|in-laws?|team|people|everyone)\b"
)
"""Subjects that may name another in each statement: a pronoun ("she", "her boss", "that"), an
indefinite ("a friend of mine", "one of my friends", "someone on my team"), a relation one
has several of or may change ("my sister", "my grandson", "my ex", "my client", "my doctor"),
or a condition ("if Alice"). Also "the ..." but an attribute of its own ("the boss", not "the
wifi password": :func:`_firm`)."""
_ARTICLES = frozenset({"a", "an", "the"})
_TOPICAL = re.compile(
    r"\bfavourite (character|episode|scene|part|bit|track|level|player|chapter|line|moment"
    r"|season|verse|map|song on)\b|\bfavourite \w+ (today|tonight|lately|atm|rn)$"
)
"""Favourites within one show, game, book or sport, or of one day ("my favourite character",
"my favourite food today"): two may be of two shows or days, so neither is read."""
_OWNERS = frozenset({"my", "our", "your", "mein", "meine", "mon", "mes", "mi", "mis", "mijn"})
"""Owners of a subject: one's own (in English, German, French, Spanish, Dutch; not "ma", also a
name): of a role, "My GP", "Mein Bruder", only one's mother, father or spouse is read."""
_ROLES = re.compile(
    r"\b(speakers?|callers?|candidates?|applicants?|guests?|visitors?|interviewees?|participants?"
    r"|respondents?|witness(es)?|suspects?|victims?|leads?|prospects?|contacts?|recruiters?"
    r"|senders?|recipients?|buyers?|sellers?|owners?|winners?|drivers?|protagonists?|narrators?"
    r"|villains?|heroe?s?|characters?|players?|boss(es)?|managers?|landlord|landlady|dentists?"
    r"|bf|gf|^(?:hey )?bae(?:[ -]?bae)?$|fianc[eé]e?|former|old|previous|late|new)\b"
)
"""Role and label words: who holds them changes ("Caller's phone number", "Speaker A lives in",
"Landlord lives in", "Former Boss works at"): refused in the subject of a relation and in the
owner of an attribute ("my boss is Tom" names the attribute, not a role's holder)."""
_REQUESTS = frozenset(
    {"confirm", "verify", "check", "double-check", "whether", "why", "how", "ask"}
)
"""Words before a subject that make the statement a request or a question ("Confirm Alice lives
in Lisbon", "Whether Bob works at Acme"): it states nothing."""
_KIN = re.compile(
    r"(?:(?:my|our|your|[\w-]+'s) )?(?:mother|mom|mum|mama|father|dad|papa|husband|wife"
    r"|spouse|hubby)|i|we"
)
"""Subjects other than a name that name one person each time (:func:`_firm`)."""
_DEICTIC = re.compile(r"\b(here|there|this|that|these|those|it|them|one|ones)\b")
"""Words whose referent changes with the conversation ("my favourite dish here", "prefers Go
for this"): two statements with them may be of two things."""
_NOT_VALUES = re.compile(
    r"same|unchanged|secret|private|confidential|hidden|default|usual|saved|stored|mine|yours"
    r"|his|hers|ours|theirs|whatever|obvious|different|changed|unknown|forgotten|expired"
    r"|tba|n\.?a\.?|none|null|nil|pending|vacant|undisclosed|withheld|anonymous|anon"
    r"|[\w-]*redacted[\w-]*"
)
"""Words a value may not be made of alone: they restate, hide or leave out the value ("my
password is still the same", "... is a secret", "Alice works at REDACTED", "My manager is
TBA")."""
_BLANKS = re.compile(r"X{2,}|CITY|COMPANY|EMPLOYER|PLACE|PERSON|NAME")
"""A template's blanks, as written (in capitals): "Alice lives in XXXX", "... in CITY" (not
"City", "Company", "The xx", which may be names)."""
_PROPER = frozenset({"lives in", "works at", "is married to", "is dating"})
"""Relations whose value is a name: of a place, an employer, a person."""
_OPEN_VALUED = re.compile(r"\b(favourite \w+( \w+)?|password)$")
"""Attributes whose value may open with any word ("sushi", "blue", "swordfish")."""
_NUMBERED = re.compile(r"\b(number|address)$")
"""Attributes whose value may be a number ("555-9876", "5 Oak Rd")."""
_JOINERS = frozenset({"of", "the", "&", "de", "del", "da", "la", "le", "van", "von"})
"""Lower-case words inside a name ("Bank of America", "Procter & Gamble"), never its first or
last."""
_WORD = re.compile(r"[^\W_](?:[^\W_]|['.&-])*")
"""A word of a name or a number: letters and digits, maybe joined by ', ., & or - (not _: a
markdown "_Lisbon_")."""
_CASED_SCRIPTS = frozenset({"LATIN", "CYRILLIC", "GREEK", "ARMENIAN", "GEORGIAN"})
_HEDGES = frozenset(
    {"also", "sometimes", "occasionally", "usually", "often", "maybe", "perhaps", "probably"}
    | {"possibly", "presumably", "apparently", "allegedly", "reportedly", "supposedly"}
    | {"hopefully", "ideally", "hypothetically", "theoretically", "technically", "officially"}
    | {"honestly", "basically", "originally", "previously", "formerly", "eventually", "unless"}
    | {"then", "if", "when", "once"}
    | {"suppose", "assume", "imagine", "say", "pretend", "likely", "surely", "rarely", "seasonally"}
    | {"typically", "generally", "normally", "mainly", "kinda", "sorta", "arguably"}
)
"""Words that make a statement a maybe, a habit, a wish or a condition ("Sometimes Mom lives in
Florida", "Hypothetically Alice lives in Lisbon", "Lisbon Apparently"): in a subject, or past
a value's first word ("Imagine Dragons", "Say Media" are values), the statement is not read."""
_NOT_NAMES = re.compile(
    r"jan(uary)?|feb(ruary)?|mar(ch)?|apr(il)?|may|june?|july?|aug(ust)?|sept?(ember)?"
    r"|oct(ober)?|nov(ember)?|dec(ember)?|(mon|tues?|wed(nes)?|thu(rs?)?|fri|sat(ur)?|sun)(day)?s?"
    r"|week(day|end)s?|christmas|easter|thanksgiving|halloween|ramadan|diwali|summer|winter"
    r"|spring|autumn|fall|hq|pt|ft|tbd|tbc|jk|iirc|afaik|imo|imho|tbh|lol|btw|fyi|asap|eta|wfh"
    r"|last|next|this|(year|month|week|day|hour|night|morning|evening|time)s?|ago|today|tonight"
    r"|tomorrow|yesterday|soon|later|then|maybe|probably|perhaps|too|also|again|once|twice"
    r"|in|on|at|with|for|from|to|by|of|about|into|near|over|under|like|as|still|while|during"
    r"|until|till|after|before|starting|when|sometimes|occasionally|temporarily|mostly|usually"
    r"|often|temp|atm|i|think|guess|remote|remotely|freelance|online|abroad|overseas|locally"
    r"|full-time|part-time|fulltime|parttime|ish|soonish|rn|xd|lmf?ao|rofl|omf?g|idk|ngl|fwiw|tho"
    r"|though|(ha){2,}h?|(he){2,}h?|eo[ydmw]|ytd"
)
"""Words that say when, how sure or where, not what, capitalised too ("Globex Saturdays",
"Lisbon June-August", "Lisbon Last Year", "Globex PT", "Lisbon JK", "Lisbon XD", "Globex EOY",
"Lisbon Apparently": :data:`_HEDGES`, past a value's first word), also as a whole value or
its first word ("works at Christmas", "my password is in Bitwarden"); but "of", "the" and
the like inside a name (:data:`_JOINERS`)."""
_FILLER = re.compile(
    r"\b(now|currently|nowadays|these days|recently|still|actually|anymore|already|just|"
    r"since then)\b|\binstead(?=\W*$)",
    re.I,
)
_NEGATION = re.compile(r"\b(no longer|not|never|no)\b|n't\b")
"""Said of the subject or the value ("Alice no longer lives in Osaka", "Alice's car is not a
Prius"): the statement denies a value and states none, so it supersedes nothing."""
_PURPOSE = " for "
"""Joins a preference and what it is for ("prefers Python for backend work"): the purpose belongs
to the attribute, so a preference for frontend work does not replace one for backend work."""
_UPDATE_MARKER = re.compile(r"\b(now|currently|nowadays|these days)\b", re.I)
_ONE_AT_A_TIME = frozenset({"plays"})
"""The verbs a ``Name verb value`` statement is read with (:func:`_generic`): a sport
(:data:`_SPORTS`), which a newer one said to be an update replaces ("Alice plays squash now").
Not the verbs of what one has several of or more of ("knows", "likes", "supports", "teaches"),
nor an instrument, a game or a part ("plays the piano", "plays chess", "plays Hamlet")."""
_SPORTS = frozenset(
    {"tennis", "squash", "football", "soccer", "basketball", "baseball", "volleyball", "cricket"}
    | {"rugby", "badminton", "golf", "hockey", "handball", "netball", "softball", "lacrosse"}
    | {"padel", "pickleball", "polo", "table tennis", "ping pong", "water polo", "ice hockey"}
    | {"field hockey", "american football", "beach volleyball", "bowling", "darts", "snooker"}
)
_VALUE_END = re.compile(r",|;| because | since | but | and | with | near | which | who ")
"""Words that go on past a value ("Osaka and Kyoto", "Globex, I think"): no fact."""
_FOR_WORK = re.compile(r" for (work|good)$")
"""How long or why one relocated ("relocated to Lisbon for work"): a move all the same. Said of
anything else, it is a second value ("my phone number is 555-9876 for work")."""
_MODALS = frozenset({"used", "would", "could", "can", "might", "will", "should", "must", "shall"})
"""Words that make a subject's statement a past, a wish or a maybe ("Alice used to live in",
"Alice could live in"): not read (:func:`_firm`)."""
_SENTENCE_END = re.compile(r"[.!?](\s|$)")


def _normalised(text: str, *, cased: bool = False) -> str:
    """``text`` lower-cased, without fillers, in British spelling; ``cased``: in its own case,
    word for word the same (the words a value is read from, to tell names from other words).
    """
    text = text.strip().replace("\u2019", "'")
    text = _CONTRACTED.sub(_uncontracted, text)
    if cased:
        return " ".join(_FILLER.sub(" ", text).split())
    text = _FILLER.sub(" ", text.lower())
    text = _SPELT.sub(lambda m: _SPELLING[m.group(1)], text)
    return " ".join(text.split())


def _as_written(content: str) -> list[str]:
    """The statement's words as written, contractions too ("I'M", not "I am": the case of an
    expanded "am" tells nothing), without fillers and its closing stop.
    """
    plain = _FILLER.sub(" ", content.strip().replace("\u2019", "'"))
    return plain.rstrip(".! ").split()


def _uncontracted(found: re.Match[str]) -> str:
    pronoun = found.group(1)
    return f"{pronoun} am" if pronoun else f"{found.group(2)} are"


def states_an_update(content: str) -> bool:
    """The statement says its value is new ("... now", "currently", "these days")."""
    return _UPDATE_MARKER.search(content) is not None


def newer_says_new(at: datetime, content: str, other_at: datetime, other_content: str) -> bool:
    """The newer of two statements of one fact (``content`` said at ``at``, ``other_content`` at
    ``other_at``) says its value is new (:func:`states_an_update`): the pairs the marker rule
    reads as a change, a speaker's own down to :attr:`SupersessionPolicy.speaker_min_cosine`.
    False for two of one time (neither is newer). The worker keeps only such pairs of what a
    fact's stem finds (:func:`fact_stem`), so the stem reaches the same pairs whichever of the
    two is written first; a pair whose newer side does not say so is left to the statement's
    own nearest at ``min_cosine``.
    """
    if at == other_at:
        return False
    return states_an_update(other_content if other_at > at else content)


def states_fact(content: str, rules: SupersessionPolicy) -> bool:
    """``content`` states one fact that a later statement can supersede under ``rules`` (the
    ``Name plays value`` reading included: an update says it is one); never when the rules are
    off.
    """
    return rules.enabled and fact_of(content, rules.max_words, generic=True) is not None


def fact_of(content: str, max_words: int = 16, *, generic: bool = False) -> Fact | None:
    """The fact a short single statement states, or None when it is not one the rule knows or
    it says more than one value of one subject's attribute (:func:`_firm`).

    ``generic``: when no known relation matches, read ``Name plays value`` (``Alice plays
    squash``): for a pair whose newer statement says it is an update, and to ask whether a
    statement may be one of such a pair (:func:`states_fact`, the worker's check).
    """
    max_words = min(max_words, MAX_WORDS)
    if len(content) > max_words * MAX_WORD_CHARS:
        return None
    text = _normalised(content).rstrip(".! ")
    if not text or len(text.split()) > max_words or _SENTENCE_END.search(text) or "?" in text:
        return None
    padded = f" {text} "
    best = _relation(padded) or _copula(padded) or (_generic(text) if generic else None)
    if best is None:
        return None
    at, relation, phrase = best
    written = padded[:at].strip()
    # a single-valued attribute's "new" is dropped from a copula's subject only ("my new boss
    # lives in Paris" is of another person)
    subject = _without_new(written) if relation in _COPULAS else written
    if not written and relation not in _COPULAS and phrase not in _NOT_OPENING:
        # "Lives in Paris": the user's own, as mem0 writes it; not a piece cut from a sentence
        subject = _SPEAKER if content.strip()[:1].isupper() else ""
    rest = padded[at + len(phrase) + 2 :]
    value = rest.strip()
    if not subject or not value or len(subject.split()) > 6 or _NEGATION.search(subject):
        return None
    if phrase in _PERSONAL and subject not in ("i", "we", "you"):
        return None  # "Docs live in Notion", "Backups work at night": things, not people
    moved = phrase == "relocated to"
    words = text.split()
    if _VALUE_END.search(f" {value} ") or not _firm(
        content, words, subject, relation, value, moved
    ):
        return None
    if moved:
        value = _FOR_WORK.sub("", value)
    if relation == "prefers":
        value, _, purpose = value.partition(_PURPOSE)
        if not purpose:
            return None  # "prefers tea" may be held beside "prefers Python"
        relation = f"{relation}{_PURPOSE}{purpose}"
    return Fact(subject, relation, value)


def _relation(padded: str) -> tuple[int, str, str] | None:
    """The first phrase of :data:`_RELATIONS` in ``padded`` (`` text ``), the longest of those
    at one place: (its position, its relation, the phrase).
    """
    best: tuple[int, str, str] | None = None
    for relation, phrases in _RELATIONS.items():
        for phrase in phrases:
            at = padded.find(f" {phrase} ")
            if at >= 0 and phrase in _PERSONAL and padded[:at].strip() not in ("i", "we", "you"):
                continue  # "my favourite drive is ...": a copula's, not a person's "drive"
            if at >= 0 and (best is None or (at, -len(phrase)) < (best[0], -len(best[2]))):
                best = (at, relation, phrase)
    return best


def _without_new(subject: str) -> str:
    """``subject`` without the "new" of a single-valued attribute (:data:`_SINGLE_ATTRIBUTE`):
    "Alice's new favourite food" names the attribute whose value it replaces; not "Alice's new
    friend" (one has several), nor "the new intern" (no one's).
    """
    plain = subject.replace(" new ", " ", 1)
    return plain if plain != subject and _SINGLE_ATTRIBUTE.fullmatch(plain) else subject


def _firm(
    content: str, words: list[str], subject: str, relation: str, value: str, moved: bool
) -> bool:
    """The statement names one value of one subject's attribute, and nothing else.

    Only such statements replace one another (``content``: the statement as written; ``words``:
    its normalised words, as :func:`fact_of` read them; ``moved``: a relocation, which may end
    "for work"): a replacement read wrongly hides a true memory (rule zero), while one missed
    costs an ordering. So each of two statements must be:

    - of a definite subject (:data:`_VAGUE_SUBJECT`: not "she", "a friend", "my sister", who
      may be another than the older statement's), said plainly (not "Alice used to", "Alice
      could", "Alice sometimes", "Alice also", "Sometimes Mom", "Hypothetically Alice", "I'd":
      :data:`_MODALS`, :data:`_HEDGES`); outside ``X is Y``, a name as written ("Alice", "Bob
      Smith"), "I", "we" or one's mother, father or spouse (:data:`_KIN`), so not "my old
      boss", "my buddy", "Ann says Bob", nor a role however written ("My GP", "Alice's PA");
    - of nothing that points into the conversation (:data:`_DEICTIC`: "my favourite dish
      here", "prefers Go for this");
    - with a value that denies nothing ("is definitely not a Prius", "Lisbon no more") and is
      all name (:func:`_named_value`), in a statement whose case tells names from other words
      (not all capitals or every word capitalised).
    """
    single = _SINGLE_ATTRIBUTE.fullmatch(subject) is not None
    if single and _TOPICAL.search(subject):
        return False  # "my favourite character" (of which show?), "my favourite food today"
    if _VAGUE_SUBJECT.search(subject) or (subject.startswith("the ") and not single):
        return False
    named = subject.split()
    owner = subject.partition("'s ")[0] if single and "'s " in subject else subject
    if (not single or owner != subject) and _ROLES.search(owner):
        return False  # "Caller's phone number", "Speaker A", "Landlord": a role, not a name
    if not single and (
        any(_not_a_name(w) or w in _MODALS or w in _HEDGES for w in named[1:])
        or named[0] in _HEDGES
        or named[0] in _REQUESTS
        or (named[0].endswith("s") and _not_a_name(named[0]))  # "Weekends Mom lives in"
        or any(w.endswith(("'d", "'ll")) for w in named)
    ):
        return False  # "Alice used to", "Sometimes Mom", "Hypothetically Alice", "I'd"
    purpose = value.partition(_PURPOSE)[2] if relation == "prefers" else ""
    if _DEICTIC.search(subject) or _DEICTIC.search(purpose):
        return False
    if _NEGATION.search(value):
        return False
    said = _normalised(content, cased=True).rstrip(".! ").split()
    if len(said) != len(words):
        return False  # a filler matched in one case alone ("İnstead"): the words do not line up
    if not all(_WORD.fullmatch(w) for w in said[: len(named)]):
        return False  # "Hypothetically, Alice", "Example: Alice", "**Alice**", "'Alice"
    plain = relation in _COPULAS or _KIN.fullmatch(subject) is not None
    if not plain and (named[0] in _OWNERS or "'s" in subject):
        return False  # "My GP", "My CEO", "Alice's PA": of roles, one's parents and spouse only
    if not plain and not all(_capitalised(w) for w in said[: len(named)]):
        return False  # "my buddy", "my old boss", "Ann says Bob", "Nobody here"
    if all(_capitalised(w) for w in _as_written(content)):
        return False  # "ALICE LIVES IN LISBON DURING THE SUMMER", "I'M MARRIED TO TOM"
    # the value ends the statement: its last words, as written (a preference's purpose cut)
    value_said = said[-len(value.split()) :]
    if relation == "prefers":
        value_said = value_said[: len(value.partition(_PURPOSE)[0].split())]
    return _named_value(relation, subject, value_said, moved)


def _named_value(relation: str, subject: str, words: list[str], moved: bool) -> bool:
    """``words`` (as written) name a value of ``relation`` and say nothing else: no when, how
    long, how often or how sure ("Globex temporarily", "a cafe part-time", "Lisbon during the
    summer", "Globex Saturdays", "Lisbon 2019", "Tom probably", "Globex (PT)", "Globex too").

    After an article (and, with ``moved``, before "for work" or "for good"), each word is
    capitalised, or a joiner inside a name ("Bank of America"), and none says a time, a hedge
    or a where (:data:`_NOT_NAMES`, in any case); :func:`_value_kind` says which words may be
    lower case or numbers. A car is a make after "a" or "an" (:func:`_car`); a sport is one of
    :data:`_SPORTS`; a job is "at" a name ("my job is at Globex"); an employer or a home is no
    site of one (:func:`_a_site`); a value that is a name (:func:`_value_kind`: a place, an
    employer, a person, a job title) is no description after a lower-case "a" or "an" ("a
    Doctor", "a Bank"; "A Coruña", "An Post" are names).
    """
    if moved and words[-2:] in (["for", "work"], ["for", "good"]):
        words = words[:-2]
    job = relation in _COPULAS and re.search(r"\bjob$", subject) is not None
    if job:
        if words[:1] != ["at"]:
            return False  # "my job is at Globex", not "my job is Teaching"
        words = words[1:]
    article = words[0].lower() if words and words[0].lower() in _ARTICLES else ""
    described = words[:1] in (["a"], ["an"])  # as written: "A Coruña", "An Post" are names
    if article:
        words = words[1:]
    if relation == "drives":
        return _car(article, words) and _all_name(relation, subject, words)
    if relation in _ONE_AT_A_TIME:
        return not article and " ".join(words).lower() in _SPORTS  # not "the piano", "chess"
    employer = job or relation == "works at"
    if described and _value_kind(relation, subject) == (0, False):
        return False  # "married to a Doctor", "works at a Bank": a description, maybe of the old
    if _a_site(relation, employer, article, words):
        return False
    return _all_name(relation, subject, words)


def _car(article: str, words: list[str]) -> bool:
    """A car's make after "a" or "an" ("a Kia Niro", "a Mazda3"; not "Uber", "the kids", "an
    Uber", "a Harley", nor a van, a lorry or a motorbike of a make, "a Ford Transit",
    :data:`_NOT_CARS`).
    """
    return (
        article in ("a", "an")
        and bool(words)
        and words[0].lower().rstrip("0123456789") in _MAKES
        and not any(w.lower() in _NOT_CARS for w in words[1:])
    )


def _a_site(relation: str, employer: bool, article: str, words: list[str]) -> bool:
    """The value says where in an employer or a place, not which: "works at the London Office",
    "Head Office", "Home"; "lives in Halls" (but "works at the BBC" names an employer).
    """
    said = " ".join(words).lower()
    if employer:
        return bool(
            (article and (not words or words[-1].lower() in _SITES)) or _AT_HOME.match(said)
        )
    return relation == "lives in" and _IN_TOWN.match(said) is not None


def _all_name(relation: str, subject: str, words: list[str]) -> bool:
    """Every word of the value (after its article) is of a name, or a number where the
    attribute's value is one (:func:`_value_kind`, :func:`_a_number`).
    """
    if not words or not all(
        (_WORD.fullmatch(w) or w in _JOINERS) and _one_script(w) for w in words
    ):
        return False  # brackets, slashes, "%", dashes, emoji, a Latin word with a Cyrillic letter
    last = len(words) - 1
    if any(
        (_not_a_name(w) and not (0 < i < last and w in _JOINERS))
        or (i and _when(w))
        or ((i or w.islower()) and w.lower() in _HEDGES)
        for i, w in enumerate(words)
    ):
        return False
    if relation in _COPULAS and not _a_number(subject, words):
        return False
    loose, digits = _value_kind(relation, subject)
    if all(_NOT_VALUES.fullmatch(w.lower()) or _BLANKS.fullmatch(w) for w in words):
        return False
    return all(
        i < loose
        or (_capitalised(w) and (digits or i == 0 or not any(c.isdigit() for c in w)))
        or (digits and any(c.isdigit() for c in w))
        or (0 < i < last and w in _JOINERS)
        for i, w in enumerate(words)
    )  # a digit in a name's later word only where numbers are values: not "Globex Q3"


def _a_number(subject: str, words: list[str]) -> bool:
    """A phone number is digits (not "Ext 42", "1-800-FLOWERS"); an address is where one lives,
    in two words or more, not all numbers (not a wallet, an IP, a postcode, a PO box or a
    flat). True for any other attribute.
    """
    if subject.endswith("number"):
        return _NUMBER.fullmatch(" ".join(words)) is not None
    if subject.endswith("address"):
        return not (
            len(words) < 2
            or words[0].lower() in _NOT_HOMES
            or all(any(c.isdigit() for c in w) for w in words)
        )
    return True


_NOT_HOMES = frozenset(
    {"po", "p.o.", "flat", "apt", "apartment", "unit", "suite", "ste", "box", "room", "rm", "dorm"}
    | {"floor", "fl", "level", "bldg", "building", "desk", "lot", "locker", "gate", "pmb"}
)
"""First words of an address inside an address, not of a home ("PO Box 12", "Flat 3", "Room
204", "Desk 14")."""


def _one_script(word: str) -> bool:
    """The word's cased letters are of one script ("Lisbon", "Москва"; not a Latin "Lisbon" with
    a Cyrillic "o", which reads as another value and says the same).
    """
    scripts = {unicodedata.name(c, "").partition(" ")[0] for c in word if c.isalpha()}
    return len(scripts & _CASED_SCRIPTS) <= 1


def _not_a_name(word: str) -> bool:
    """A word of :data:`_NOT_NAMES`, or a range of them ("Mon-Fri"; not "In-N-Out")."""
    word = word.lower()
    parts = word.split("-")
    return bool(_NOT_NAMES.fullmatch(word)) or all(_NOT_NAMES.fullmatch(part) for part in parts)


def _when(word: str) -> bool:
    """A time before or after something ("Pre-Covid", "Mid-2025"), refused past a value's first
    word ("Mid-Wales" is a value).
    """
    parts = word.lower().split("-")
    return len(parts) > 1 and parts[0] in _WHEN_PREFIXES


_WHEN_PREFIXES = frozenset({"pre", "post", "mid", "early", "late"})


def _value_kind(relation: str, subject: str) -> tuple[int, bool]:
    """How many of a value's first words may be lower case, and whether its words may be
    numbers: a place, an employer, a person (lives in, works at, is married to, is dating, a
    boss, a job, a job title) is a name from its first word ("Lisbon", not "a flat", "the
    office", "him", "someone", "my boss is strict"); a phone number or an address may be numbers
    ("555-9876", "5 Oak Rd"); a car is a make, maybe with a model ("a Mazda 3"); a favourite, a
    password or a preference may open with any word ("sushi", "swordfish").
    """
    if relation in _COPULAS:
        if _NUMBERED.search(subject):
            return 0, True
        return (1, True) if _OPEN_VALUED.search(subject) else (0, False)
    if relation in _PROPER:
        return 0, False
    return (0, True) if relation == "drives" else (1, True)


def _capitalised(word: str) -> bool:
    """The word's first letter or digit is an upper-case letter (in any script)."""
    first = next((c for c in word if c.isalnum()), "")
    return first.isupper()


def _generic(text: str) -> tuple[int, str, str] | None:
    """``Name verb value``: a one-word subject and a verb of :data:`_ONE_AT_A_TIME`."""
    words = text.split()
    if len(words) < 3 or words[1] not in _ONE_AT_A_TIME:
        return None
    return len(words[0]) + 1, words[1], words[1]  # positions in " text "


def _copula(padded: str) -> tuple[int, str, str] | None:
    """``X is Y`` only where X is an attribute one holds one value of at a time
    (:data:`_SINGLE_ATTRIBUTE`: ``Alice's favourite food``, ``the wifi password``, maybe called
    new): a plain ``Alice is …`` says too many different things to compare.
    """
    at = padded.find(" is ")
    if at > 0 and _SINGLE_ATTRIBUTE.fullmatch(_without_new(padded[:at].strip())):
        return at, "is", "is"
    return None


def detect(
    new: Version, neighbours: Sequence[Version], policy: SupersessionPolicy
) -> list[Supersession]:
    """The supersessions between ``new`` and its ``neighbours`` (either may be the older one: a
    write can arrive after a newer version of its fact). Neighbours with the same id, another
    scope (:func:`comparable`), the same event time, a value restated (:func:`_restated`), a
    different fact or a cosine under the policy's ``min_cosine`` (or not a number) are left
    alone, but a fact the speaker states of themselves whose newer statement says it is an
    update ("I live in Hanoi now.") needs only ``speaker_min_cosine``; a neighbour listed twice
    is compared once.

    Cost: ``new`` is parsed at most twice and each neighbour once per call, whatever their
    number; a ``new`` that states no fact is compared with none.
    """
    if not policy.enabled:
        return []
    new_facts = {True: fact_of(new.content, policy.max_words, generic=True)}
    if new_facts[True] is None:  # the generic reading reads all the other does, and more
        return []
    out = []
    seen = {new.memory_id}
    floor = min(policy.min_cosine, policy.speaker_min_cosine)
    for other in neighbours:
        if other.memory_id in seen or not comparable(new, other) or other.at == new.at:
            continue
        seen.add(other.memory_id)
        if not other.similarity >= floor:  # NaN too
            continue
        older, newer = (other, new) if other.at < new.at else (new, other)
        generic = states_an_update(newer.content)
        if generic not in new_facts:
            new_facts[generic] = fact_of(new.content, policy.max_words, generic=generic)
        own, theirs = new_facts[generic], fact_of(other.content, policy.max_words, generic=generic)
        old_fact, new_fact = (theirs, own) if older is other else (own, theirs)
        if old_fact is None or new_fact is None:
            continue
        if (old_fact.subject, old_fact.relation) != (new_fact.subject, new_fact.relation):
            continue
        speakers = _by_its_speaker(new_fact)
        if speakers and not new.scope[1] and other.session != new.session:
            continue  # "I'm married to Tom" and "... Ben now" of two sessions: maybe two people
        if not (other.similarity >= policy.min_cosine or (speakers and generic)):
            continue  # far apart: only a speaker's value said to be new ("... now") replaces
        if _restated(old_fact.value, new_fact.value, initials=not _of_a_person(new_fact)):
            continue
        if new_fact.relation.partition(_PURPOSE)[0] in _MANY_VALUED and not generic:
            continue  # a second value held beside the first, unless said to replace it
        reason = f"{_named(new_fact.relation)} (cosine {other.similarity:.3f})"
        out.append(Supersession(older.memory_id, newer.memory_id, newer.at, reason))
    return out


def fact_stem(fact: Fact) -> str:
    """The words every version of ``fact`` shares, its subject and relation ("i lives in", "my
    favourite food is", "alice prefers for breakfast"): embedded, the query that finds a fact's
    other versions (older, or newer ones written first) among many memories of one user, where
    the value's words put them past the
    nearest of the new statement's own vector ("I live in Toronto." is the 96th nearest of
    "I live in Hanoi now." among 177 short first-person statements, and within the 10 nearest of
    "i lives in").
    """
    return f"{fact.subject} {fact.relation}"


def _by_its_speaker(fact: Fact) -> bool:
    """The fact's subject is whoever states it, or theirs: "I", "we", "you" (the user, to an
    assistant), none ("Lives in Paris"), one owned by them ("my phone number", "our address",
    "your boss", in any language of :data:`_OWNERS`), a kin word alone ("Mom", "Wife": one's
    own) or "the wifi password" (one's home's); not "Alice's mother".
    """
    subject = fact.subject
    return (
        subject in ("i", "we", "you")
        or subject.split()[0] in _OWNERS
        or subject.startswith("the ")
        or (_KIN.fullmatch(subject) is not None and "'s " not in subject)
    )


def _of_a_person(fact: Fact) -> bool:
    """The fact's value is a person (a spouse, a date, a boss, a manager): initials of one
    ("Ann Lee", "Al") are no restatement.
    """
    return fact.relation in ("is married to", "is dating") or (
        fact.relation in _COPULAS and re.search(r"\b(boss|manager)$", fact.subject) is not None
    )


def _restated(older: str, newer: str, *, initials: bool = True) -> bool:
    """One value holds the other: the same fact said with more or fewer words ("Acme Inc" and
    "Acme", "Lisbon & Osaka" and "Osaka", "Ōsaka" and "Osaka"), spelt or spaced otherwise
    ("McDonald's" and "McDonalds", "JP Morgan" and "JPMorgan", "Zürich" and "Zuerich", "5 Oak
    Rd" and "5 Oak Road"), as its initials of three letters or more ("NYC" and "New York City";
    not with ``initials`` off, for a person), or the same number ("555-1234" and "5551234",
    "07700 900123" and "+44 7700 900123").

    Only what cannot be two values: a restatement read as a new value hides a memory whose
    newer version says the same, while two values read as one leave both current. So not two
    letters ("PA" may be Palo Alto or Pennsylvania) nor a title ("Mr Kim" and "Jenny Kim").
    """
    old_words, new_words = _tokens(older), _tokens(newer)
    if old_words <= new_words or new_words <= old_words:
        return True
    (old_spelt, old_initials), (new_spelt, new_initials) = _forms(older), _forms(newer)
    if old_spelt & new_spelt:
        return True
    if initials and (old_initials & new_spelt or new_initials & old_spelt):
        return True
    numbers = [re.sub(r"\D", "", v).lstrip("0") for v in (older, newer) if _NUMBER.fullmatch(v)]
    if len(numbers) == 2:
        short, long = sorted(numbers, key=len)
        return short == long or (len(short) >= 7 and long.endswith(short))
    return False


_NUMBER = re.compile(r"[\d\s().+-]+")
_SHORT_FORMS = {
    "st": "saint",
    "mt": "mount",
    "ft": "fort",
    "rd": "road",
    "ave": "avenue",
    "corp": "corporation",
    "inc": "incorporated",
    "ltd": "limited",
    "co": "company",
}
_UMLAUTS = str.maketrans({"ä": "ae", "ö": "oe", "ü": "ue", "ß": "ss"})


def _tokens(value: str) -> set[str]:
    """The words of ``value`` without accents or articles: "Ōsaka" is "Osaka"."""
    return set(_words(value)) - _ARTICLES


def _words(value: str) -> list[str]:
    """The words of ``value`` (lower case), without accents."""
    plain = "".join(c for c in unicodedata.normalize("NFKD", value) if not unicodedata.combining(c))
    return re.findall(r"[^\W_]+", plain.lower())


def _forms(value: str) -> tuple[set[str], set[str]]:
    """``value`` written without spaces, marks or articles, short forms spelt out, with
    umlauts dropped or spelt "ae", "oe", "ue" ("mcdonalds", "zurich" and "zuerich"); and its
    initials of three letters or more ("nyc" of "New York City"; with and without its joiners:
    "boa" of "Bank of America"), which only a value spelt so matches ("Senior Engineer" and
    "Staff Engineer" are two values).
    """
    spelt, initials = set(), set()
    for text in (value, value.lower().translate(_UMLAUTS)):
        words = [_SHORT_FORMS.get(w, w) for w in _words(text) if w not in _ARTICLES]
        if not words:
            continue
        spelt.add("".join(words))
        for kept in (words, [w for w in words if w not in _JOINERS]):
            if len(kept) >= 3:
                initials.add("".join(w[0] for w in kept))
    return spelt, initials


def _named(relation: str) -> str:
    """The reason a supersession records, with no word of either memory in it: the reason goes
    in the clear on the log and the audit, where an erasure cannot reach (README, "Erasure");
    only the rule's own relation names (a fixed list) are shown.
    """
    base = relation.partition(_PURPOSE)[0]
    if base in _RELATIONS or base in _COPULAS:
        return f"a newer value of the same fact ('{base}')"
    return "a newer value of the same fact (a statement of an update)"


# -- the LLM path (SPEC section 6: "the LLM when configured") ---------------------------------------

LLM_PROMPT = (
    "A memory store keeps short statements about people and things. A NEW statement was just "
    "written. Which of the OLDER statements below does it replace, because it gives a newer value "
    "of the same fact about the same subject (e.g. a new city someone lives in)? A statement that "
    "adds information, repeats it, or is about something else replaces nothing. Answer only JSON: "
    '{"replaces": [<numbers of the older statements it replaces>], "reason": "<short>"}\n\n'
)


def llm_candidates(
    new: Version, neighbours: Sequence[Version], policy: SupersessionPolicy
) -> list[Version]:
    """The neighbours an LLM is asked about: other memories of ``new``'s scope
    (:func:`comparable`: another user's or agent's content never reaches the prompt) written
    before ``new``, at least the policy's ``min_cosine`` apart, or one the rule would supersede
    (:func:`detect`: a fact its speaker states, under ``speaker_min_cosine``; a write that
    arrives after a newer version is left to the rule); each once, however often the search
    lists it. Without a ``user_id``, those of ``new``'s session only: the model cannot tell
    whether "I" of two sessions is one person (:func:`_by_its_speaker`).
    """
    fresh: list[Version] = []
    seen: set[str] = set()
    for n in neighbours:
        one_speaker = bool(new.scope[1]) or n.session == new.session
        if n.memory_id not in seen and comparable(new, n) and n.at < new.at and one_speaker:
            fresh.append(n)
        seen.add(n.memory_id)
    far = [n for n in fresh if not n.similarity >= policy.min_cosine]  # NaN too
    read = {s.older for s in detect(new, far, policy)} if far else set()  # new parsed once
    return [n for n in fresh if n.similarity >= policy.min_cosine or n.memory_id in read]


def llm_prompt(new: Version, candidates: Sequence[Version]) -> str:
    """The question for :data:`LLM_PROMPT`'s model: the new statement and numbered older ones."""
    older = "\n".join(f"{i}. {c.content}" for i, c in enumerate(candidates, start=1))
    return f"{LLM_PROMPT}NEW: {new.content}\n\nOLDER:\n{older}\n"


def parse_llm_answer(
    answer: str, new: Version, candidates: Sequence[Version]
) -> list[Supersession] | None:
    """The supersessions an LLM answer names, or None when the answer is not the JSON asked for
    (the caller then falls back to the rule), however malformed (nested too deep to parse
    included). Numbers outside the list are ignored.
    """
    # from the first "{" to the last "}" (what a greedy search for \{.*\} finds, in linear time)
    start, end = answer.find("{"), answer.rfind("}")
    if start == -1 or end < start:
        return None
    try:
        parsed = json.loads(answer[start : end + 1])
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        return None
    entries = parsed.get("replaces") if isinstance(parsed, dict) else None
    numbers = _answer_numbers(entries) if isinstance(entries, list) else None
    if numbers is None:
        return None
    # the answer's own "reason" is not kept: it quotes the memories, and the reason goes in the
    # clear on the log and the audit, where an erasure cannot reach
    chosen = sorted(numbers & set(range(1, len(candidates) + 1)))
    return [
        Supersession(
            candidates[n - 1].memory_id,
            new.memory_id,
            new.at,
            "llm: a newer value of the same fact",
            chains=False,
        )
        for n in chosen
    ]


def _answer_numbers(entries: list[object]) -> set[int] | None:
    """The numbers an answer's ``replaces`` lists, a number written as a string ("2") included;
    None when an entry is neither (a true, a null, "two", 2.0): the answer is then not the one
    asked for, and the rule decides (an answer read as "replaces nothing" would silently turn
    supersession off for the write).
    """
    numbers = set()
    for entry in entries:
        if isinstance(entry, str) and _ANSWER_NUMBER.fullmatch(entry.strip()):
            numbers.add(int(entry.strip()))
        elif isinstance(entry, int) and not isinstance(entry, bool):
            numbers.add(entry)
        else:
            return None
    return numbers


_ANSWER_NUMBER = re.compile(r"[0-9]{1,9}")


def decide(
    new: Version,
    neighbours: Sequence[Version],
    policy: SupersessionPolicy,
    llm_answer: str | None = None,
) -> list[Supersession]:
    """The supersessions of ``new``: what the LLM answered about :func:`llm_candidates` when it
    answered as asked (with the rule's for neighbours newer than ``new``, which the LLM is not
    asked about), else the deterministic rule (:func:`detect`): an LLM that times out, fails or
    answers out of format never blocks or loses a write's supersession.
    """
    if not policy.enabled:
        return []
    if llm_answer is not None:
        parsed = parse_llm_answer(llm_answer, new, llm_candidates(new, neighbours, policy))
        if parsed is not None:
            # the LLM is asked of older neighbours only: a newer version already written
            # (a back-dated import) still supersedes ``new`` by the rule
            later = [n for n in neighbours if n.at > new.at]
            return parsed + detect(new, later, policy)
    return detect(new, neighbours, policy)
