"""The offline Slack workspace: 11 users (9 people, 2 bots), 6 channels and 160 top-level messages plus thread replies.

Built by :func:`build_workspace` from fixed tables and a fixed-seed ``random.Random``, so every run (and every
machine) gets the same workspace; dataset generators can call it to compute ground truth. Four working weeks from
Monday 2024-06-03, eight top-level messages per day between 09:00 and 18:00 UTC. The facts are meant to be asked
about: deploys carry increasing version numbers per service, incidents have numbered ids with root cause and
resolution replies, deals have customers and amounts, pull requests have numbers and reviewers.
"""

from __future__ import annotations

import datetime as dt
import functools
import random
from dataclasses import dataclass

SEED = 20240603
FIRST_DAY = dt.date(2024, 6, 3)
WORKDAYS = 20
MESSAGES_PER_DAY = 8


@dataclass(frozen=True)
class User:
    id: str
    name: str
    real_name: str
    title: str
    tz: str
    is_bot: bool = False


@dataclass(frozen=True)
class Channel:
    id: str
    name: str
    topic: str
    members: tuple[str, ...]  # user ids


@dataclass(frozen=True)
class Message:
    channel: str  # channel id
    ts: str  # Slack timestamp "<unix seconds>.<6 digits>", unique in the workspace
    user: str  # user id
    text: str
    thread_ts: str | None = None  # the parent's ts for a thread reply


@dataclass(frozen=True)
class Workspace:
    users: tuple[User, ...]
    channels: tuple[Channel, ...]
    messages: tuple[Message, ...]  # in time order


USERS = (
    User("U01ALICE", "alice", "Alice Chen", "Engineering Manager", "America/Los_Angeles"),
    User("U02BOB", "bob", "Bob Martinez", "Backend Engineer", "America/New_York"),
    User("U03CAROL", "carol", "Carol Okafor", "Site Reliability Engineer", "Europe/London"),
    User("U04DAVE", "dave", "Dave Kim", "Frontend Engineer", "Asia/Seoul"),
    User("U05ERIN", "erin", "Erin Walsh", "Product Manager", "America/Chicago"),
    User("U06FRANK", "frank", "Frank Novak", "Sales Director", "Europe/Berlin"),
    User("U07GRACE", "grace", "Grace Liu", "Data Scientist", "America/Los_Angeles"),
    User("U08HENRY", "henry", "Henry Adeyemi", "Account Executive", "Africa/Lagos"),
    User("U09IRENE", "irene", "Irene Rossi", "Product Designer", "Europe/Rome"),
    User("U10DEPLOYBOT", "deploybot", "Deploy Bot", "Release automation", "UTC", is_bot=True),
    User("U11ASSISTANT", "assistant", "Assistant", "AI assistant (posts made through the tools)", "UTC", is_bot=True),
)
AGENT_USER_ID = "U11ASSISTANT"  # author of every message posted through the tools
_ALL = tuple(user.id for user in USERS)
_PEOPLE = _ALL[:9]
_ENGINEERS = ("U02BOB", "U03CAROL", "U04DAVE", "U07GRACE")

CHANNELS = (
    Channel("C01GENERAL", "general", "Company-wide announcements", _ALL),
    Channel(
        "C02ENGINEERING",
        "engineering",
        "Pull requests, RFCs and technical discussion",
        ("U01ALICE", *_ENGINEERS, "U09IRENE"),
    ),
    Channel("C03DEPLOYS", "deploys", "Staging and production deploy log", ("U01ALICE", *_ENGINEERS, "U10DEPLOYBOT")),
    Channel("C04INCIDENTS", "incidents", "Active incidents and their resolution", ("U01ALICE", *_ENGINEERS, "U05ERIN")),
    Channel(
        "C05SALES", "sales", "Deals, pipeline and customer updates", ("U01ALICE", "U05ERIN", "U06FRANK", "U08HENRY")
    ),
    Channel("C06RANDOM", "random", "Lunch, pets and everything else", _ALL),
)
_CHANNEL_WEIGHTS = {"general": 2, "engineering": 3, "deploys": 4, "incidents": 2, "sales": 3, "random": 2}

_SERVICES = ("api-gateway", "auth", "billing", "search", "web-app")
_SYMPTOMS = (
    "is returning 502s",
    "p99 latency is above 2 s",
    "is failing health checks",
    "error rate is at 5%",
    "is dropping webhooks",
)
_CAUSES = (
    "an expired TLS certificate",
    "connection pool exhaustion",
    "a bad feature flag rollout",
    "a full disk on a database replica",
    "a retry storm from a misconfigured client",
)
_CUSTOMERS = (
    "Acme Corp",
    "Globex",
    "Initech",
    "Umbrella Health",
    "Stark Logistics",
    "Wayne Foods",
    "Hooli",
    "Vandelay Imports",
    "Tyrell Labs",
    "Soylent",
)
_PLANS = ("Starter", "Team", "Enterprise")
_PR_TITLES = (
    "Add retries to the billing webhook consumer",
    "Cache search results per tenant",
    "Migrate auth sessions to Redis",
    "Dark mode for the settings page",
    "Paginate the invoices endpoint",
    "Speed up the nightly metrics job",
    "Rate-limit password reset emails",
    "Accessible labels on the checkout form",
)
_RFC_TOPICS = ("multi-region failover", "event sourcing for billing", "a design token system", "feature flag cleanup")
_LUNCH_PLACES = ("the ramen place", "Taqueria Lupe", "the falafel truck", "Green Bowl")
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")

Post = tuple[str, str, list[tuple[str, str]]]  # (user id, text, [(reply user id, reply text), ...])


class _Writer:
    """Per-channel message makers sharing one random stream and the running counters (versions, ids)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.versions = {service: [1 + i % 3, 2 * i, 0] for i, service in enumerate(_SERVICES)}
        self.incident = 100
        self.pull_request = 4200

    def general(self) -> Post:
        rng = self.rng
        kind = rng.randrange(3)
        if kind == 0:
            text = f"Reminder: all-hands on {rng.choice(_WEEKDAYS)} at {rng.choice((15, 16, 17))}:00 UTC."
        elif kind == 1:
            text = f"The Q3 planning doc is open for comments until {rng.choice(_WEEKDAYS)}."
        else:
            text = f"Welcome our new customer {rng.choice(_CUSTOMERS)}! Thanks to everyone who helped."
        return rng.choice(("U01ALICE", "U05ERIN")), text, []

    def engineering(self) -> Post:
        rng = self.rng
        author = rng.choice((*_ENGINEERS, "U09IRENE"))
        if rng.random() < 0.25:
            return author, f"RFC: {rng.choice(_RFC_TOPICS)}. Please comment by {rng.choice(_WEEKDAYS)}.", []
        self.pull_request += rng.randrange(1, 9)
        reviewer = rng.choice([user for user in _ENGINEERS if user != author])
        text = f"PR #{self.pull_request}: {rng.choice(_PR_TITLES)}. Ready for review."
        return author, text, [(reviewer, rng.choice(("Approved.", "Left a few comments.", "LGTM after CI passes.")))]

    def deploys(self) -> Post:
        rng = self.rng
        service = rng.choice(_SERVICES)
        version = self.versions[service]
        if rng.random() < 0.2:
            version[1:] = [version[1] + 1, 0]
        else:
            version[2] += 1
        environment = "production" if rng.random() < 0.6 else "staging"
        person = rng.choice(("alice", "bob", "carol", "dave", "grace"))
        tag = ".".join(map(str, version))
        return "U10DEPLOYBOT", f"Deployed {service} v{tag} to {environment} (triggered by @{person}).", []

    def incidents(self) -> Post:
        rng = self.rng
        self.incident += 1
        service = rng.choice(_SERVICES)
        responder = rng.choice(_ENGINEERS)
        text = f"INC-{self.incident} (SEV{rng.choice((1, 2, 2, 3))}): {service} {rng.choice(_SYMPTOMS)}. Investigating."
        replies = [
            (responder, f"Root cause: {rng.choice(_CAUSES)}."),
            ("U03CAROL", f"Resolved after {rng.randrange(15, 180)} minutes. Postmortem to follow."),
        ]
        return "U03CAROL", text, replies

    def sales(self) -> Post:
        rng = self.rng
        seller = rng.choice(("U06FRANK", "U08HENRY"))
        customer = rng.choice(_CUSTOMERS)
        kind = rng.randrange(3)
        if kind == 0:
            amount = 10 * rng.randrange(3, 40)
            text = f"Closed {customer}: ${amount}k ARR on the {rng.choice(_PLANS)} plan."
            return seller, text, [(rng.choice(("U01ALICE", "U05ERIN")), "Great work!")]
        if kind == 1:
            return seller, f"Demo with {customer} on {rng.choice(_WEEKDAYS)}. Need a solutions engineer.", []
        return seller, f"{customer} renewal at risk: they are asking for a {rng.choice((10, 15, 20))}% discount.", []

    def random(self) -> Post:
        rng = self.rng
        if rng.random() < 0.5:
            return rng.choice(_PEOPLE), f"Anyone up for lunch at {rng.choice(_LUNCH_PLACES)}?", []
        return rng.choice(_PEOPLE), f"The coffee machine on floor {rng.randrange(2, 6)} is broken again.", []


@functools.cache
def build_workspace() -> Workspace:
    """The deterministic seed workspace (cached: build once per process)."""
    rng = random.Random(SEED)
    writer = _Writer(rng)
    channel_ids = {channel.name: channel.id for channel in CHANNELS}
    names, weights = zip(*_CHANNEL_WEIGHTS.items(), strict=True)
    drafts: list[tuple[int, str, str, str, int | None]] = []  # (unix seconds, channel id, user, text, parent's)
    day = FIRST_DAY
    for _ in range(WORKDAYS):
        start = int(dt.datetime.combine(day, dt.time(9), tzinfo=dt.UTC).timestamp())
        for offset in sorted(rng.sample(range(9 * 3600), MESSAGES_PER_DAY)):
            name = rng.choices(names, weights)[0]
            user, text, replies = getattr(writer, name)()
            posted = start + offset
            drafts.append((posted, channel_ids[name], user, text, None))
            reply_at = posted
            for reply_user, reply_text in replies:
                reply_at += rng.randrange(120, 3600)
                drafts.append((reply_at, channel_ids[name], reply_user, reply_text, posted))
        day += dt.timedelta(days=3 if day.weekday() == 4 else 1)
    drafts.sort(key=lambda draft: draft[0])
    messages = []
    parent_ts: dict[tuple[str, int], str] = {}
    for index, (seconds, channel, user, text, parent) in enumerate(drafts):
        ts = f"{seconds}.{index:06d}"  # numbering the sub-second part in time order keeps every ts unique
        if parent is None:
            parent_ts[(channel, seconds)] = ts
        thread_ts = None if parent is None else parent_ts[(channel, parent)]  # replies come after their parent
        messages.append(Message(channel=channel, ts=ts, user=user, text=text, thread_ts=thread_ts))
    return Workspace(users=USERS, channels=CHANNELS, messages=tuple(messages))
