"""The search server's corpus: ~230 short original documents about fictional companies, products, towns and people.

Every fact is invented (checkable against the corpus only); the eight listed companies are the fictional tickers of
the market server (same name, ticker, exchange and headcount), so cross-server tasks can go from a web search to a
price. ``build_corpus()`` is deterministic; the shipped ``corpus.jsonl`` is its output, regenerated with
``python -m skyrl_integrations.mcp.servers.search.corpus`` (a test checks the two agree).

Each record: ``url``, ``title``, ``summary`` (what ``web_search`` shows), ``body`` (the rest, shown by
``fetch_page``), and for question generation ``kind``, ``entity`` and ``facts`` (never shown by the tools).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from ..market.data import COMPANIES

CORPUS_PATH = Path(__file__).with_name("corpus.jsonl")

_REGIONS = (
    "Oregon", "Maine", "Vermont", "Idaho", "Montana", "Ohio", "Minnesota", "Colorado", "Nevada", "Kansas",
    "Manitoba", "Ontario", "Tasmania", "Cornwall", "Jutland", "Bavaria", "Galicia", "Otago", "Alberta", "Wales",
)  # fmt: skip
_TOWN_HEADS = (
    "Ash", "Bel", "Brin", "Cal", "Dun", "Elm", "Fal", "Glen", "Har", "Kel", "Lin", "Mar", "Nor", "Or", "Pen",
    "Quen", "Ros", "Sel", "Tarn", "Vel", "Wick", "Yar", "Zel", "Brack", "Cor", "Dray", "Fen", "Gor", "Hol", "Ivel",
)  # fmt: skip
_TOWN_TAILS = ("brook", "ford", "haven", "mere", "wick", "stead", "ton", "holm", "vale", "moor", "by", "field")
_RIVERS = (
    "Alder", "Brisk", "Coldwater", "Dunmere", "Elver", "Fallow", "Greywash", "Heron", "Isel", "Juniper",
    "Kestrel", "Lorne", "Millrace", "Nettle", "Otter", "Pike", "Quarry", "Reedy", "Silt", "Tamber",
)  # fmt: skip
_KNOWN_FOR = (
    "its annual lantern festival", "a 19th-century covered bridge", "cider orchards", "a glassblowing museum",
    "a narrow-gauge heritage railway", "its winter ice-fishing derby", "a clifftop lighthouse", "wool mills",
    "a botanical garden of alpine plants", "a jazz week held every August", "salt marshes full of wading birds",
    "a stone observatory built in 1911", "its farmers' market", "a kite-flying championship", "slate quarries",
)  # fmt: skip
_FIRST_NAMES = (
    "Amara", "Bjorn", "Celine", "Dario", "Esme", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Kalani", "Leona",
    "Mateo", "Nadia", "Oskar", "Priya", "Quentin", "Rosa", "Soren", "Talia", "Umar", "Vera", "Wendell", "Ximena",
    "Yusuf", "Zora", "Anouk", "Bram", "Cosima", "Idris",
)  # fmt: skip
_LAST_NAMES = (
    "Abernathy", "Brightwater", "Castellan", "Delacroix-Moss", "Eriksdottir", "Fairweather", "Galloway", "Hadley",
    "Ishikawa", "Jankowski", "Kowalczyk", "Lindqvist", "Marchetti", "Nakagawa", "Okonkwo", "Pemberton", "Quarles",
    "Rautio", "Sandoval", "Thornbury", "Underhill", "Valdivia", "Whitcombe", "Yamamura", "Zeller",
)  # fmt: skip
_COMPANY_HEADS = (
    "Amber", "Blue", "Copper", "Driftwood", "Ember", "Fern", "Granite", "Harbor", "Iron", "Juniper", "Kite",
    "Lumen", "Maple", "North", "Opal", "Pebble", "Quartz", "River", "Silver", "Timber", "Umber", "Violet",
    "Willow", "Zephyr", "Basalt", "Cobalt", "Dune", "Falcon", "Glacier", "Heather",
)  # fmt: skip
_COMPANY_TAILS = ("field", "stone", "light", "works", "gate", "line", "crest", "forge", "wind", "path")
_INDUSTRIES = (
    ("bicycle maker", "e-bike", ("Trail", "Commuter", "Cargo")),
    ("coffee roaster", "espresso blend", ("Dawn", "Velvet", "Ember")),
    ("drone manufacturer", "survey drone", ("Hawk", "Swift", "Kestrel")),
    ("outdoor-gear company", "tent", ("Ridge", "Summit", "Hollow")),
    ("battery startup", "home battery", ("Volt", "Cell", "Reserve")),
    ("software company", "scheduling app", ("Planner", "Shift", "Roster")),
    ("kitchenware brand", "cast-iron skillet", ("Hearth", "Forge", "Griddle")),
    ("toy company", "building-block set", ("Castle", "Harbor", "Rocket")),
    ("audio company", "pair of headphones", ("Echo", "Tide", "Pulse")),
    ("seed company", "tomato variety", ("Sunburst", "Ruby", "Goldrush")),
)
# ticker -> (what the company is, kind of flagship product, flagship product)
_LISTED_DETAILS = {
    "HLXR": ("maker of warehouse robots", "warehouse robot", "Strider"),
    "NWGD": ("renewable power and storage utility", "grid-scale storage system", "Tidewell"),
    "QBTL": ("biotechnology company", "diagnostic test", "Quillcheck"),
    "SRVN": ("packaged-food company", "oat-milk brand", "Meadowpour"),
    "TRLX": ("copper miner", "copper mine", "Redfern Pit"),
    "VLMR": ("aircraft manufacturer", "regional jet", "Altair 90"),
    "CDRW": ("business-software company", "accounting suite", "Ledgerly"),
    "PMBK": ("regional bank", "savings account", "Evergreen Saver"),
}
_PROFESSIONS = (
    ("marine biologist", "studied kelp forests", "the Halden Medal for ocean science"),
    ("architect", "designed timber libraries", "the Corriveau Prize for architecture"),
    ("chef", "ran a noodle bar", "the Golden Ladle award"),
    ("astronomer", "catalogued variable stars", "the Orrery Medal"),
    ("novelist", "wrote a trilogy set on a canal boat", "the Wren Fiction Prize"),
    ("violinist", "recorded folk sonatas", "the Tallis Strings Award"),
)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def _unique_names(rng: random.Random, heads: tuple[str, ...], tails: tuple[str, ...], count: int) -> list[str]:
    names: list[str] = []
    pairs = [(h, t) for h in heads for t in tails]
    rng.shuffle(pairs)
    for head, tail in pairs:
        name = head + tail
        if name not in names:
            names.append(name)
        if len(names) == count:
            return names
    raise ValueError(f"only {len(names)} distinct names available, {count} requested")


def _people(rng: random.Random, count: int) -> list[str]:
    pairs = [f"{first} {last}" for first in _FIRST_NAMES for last in _LAST_NAMES]
    rng.shuffle(pairs)
    return pairs[:count]


def _doc(url: str, title: str, summary: str, body: str, kind: str, entity: str, facts: dict) -> dict:
    return {
        "url": url,
        "title": title,
        "summary": summary,
        "body": body,
        "kind": kind,
        "entity": entity,
        "facts": facts,
    }


def _towns(rng: random.Random, names: list[str]) -> list[dict]:
    docs = []
    for i, name in enumerate(names):
        region = _REGIONS[i % len(_REGIONS)]
        population = rng.randrange(1200, 98000)
        founded = rng.randrange(1650, 1920)
        river = _RIVERS[rng.randrange(len(_RIVERS))]
        known_for = _KNOWN_FOR[rng.randrange(len(_KNOWN_FOR))]
        elevation = rng.randrange(3, 1900)
        facts = {"population": population, "founded": founded, "river": river, "region": region,
                 "elevation_m": elevation, "known_for": known_for}  # fmt: skip
        url = f"https://wiki.example/{_slug(name)}"
        summary = (
            f"{name} is a town in {region} on the {river} River, with a population of {population:,} "
            f"at the last census. It was founded in {founded}."
        )
        body = (
            f"The town centre sits at an elevation of {elevation} metres. {name} is best known for {known_for}. "
            f"Its economy grew around river trade on the {river} before the railway arrived."
        )
        docs.append(_doc(url, f"{name} - town in {region}", summary, body, "town", name, facts))
        if i % 2 == 0:
            visitors = rng.randrange(5, 400) * 1000
            guide_summary = (
                f"A visitor's guide to {name}, {region}: about {visitors:,} people visit each year, most of them "
                f"for {known_for}."
            )
            guide_body = (
                f"The best time to visit {name} is late spring. Walking trails follow the {river} River, and the "
                f"old town hall, built in {founded + rng.randrange(10, 60)}, houses the tourist office."
            )
            docs.append(
                _doc(f"https://travel-notes.example/guides/{_slug(name)}", f"Visiting {name}", guide_summary,
                     guide_body, "town_guide", name, {"visitors_per_year": visitors, "known_for": known_for})
            )  # fmt: skip
    return docs


def _private_companies(rng: random.Random, names: list[str], towns: list[str], people: list[str]) -> list[dict]:
    docs = []
    for i, name in enumerate(names):
        industry, product_kind, product_heads = _INDUSTRIES[i % len(_INDUSTRIES)]
        town = towns[rng.randrange(len(towns))]
        founded = rng.randrange(1978, 2021)
        ceo = people[i]
        employees = rng.randrange(12, 4800)
        product = f"{name} {product_heads[rng.randrange(3)]} {rng.randrange(2, 9)}"
        price = rng.randrange(9, 2400) + 0.99 if product_kind != "tomato variety" else rng.randrange(3, 9) + 0.49
        launched = rng.randrange(max(founded, 2005), 2025)
        domain = f"{_slug(name)}.example"
        facts = {"industry": industry, "hq": town, "founded": founded, "ceo": ceo, "employees": employees,
                 "product": product, "product_kind": product_kind}  # fmt: skip
        summary = (
            f"{name} is {_a(industry)} headquartered in {town}. Founded in {founded}, it is led by chief executive "
            f"{ceo} and employs about {employees:,} people."
        )
        body = (
            f"{name} started as a small workshop and now sells across several countries. Its best-known product "
            f"is the {product}, {_a(product_kind)} launched in {launched}."
        )
        docs.append(_doc(f"https://{domain}/about", f"About {name}", summary, body, "company", name, facts))
        product_summary = f"The {product} is {_a(product_kind)} from {name}, launched in {launched} at ${price:,.2f}."
        warranty = rng.randrange(1, 6)
        product_body = (
            f"Reviewers praised the {product} for its build quality. {name} makes it at its plant near {town} "
            f"and offers a {warranty}-year warranty."
        )
        product_facts = {"maker": name, "launched": launched, "price_usd": price, "product_kind": product_kind,
                         "warranty_years": warranty}  # fmt: skip
        docs.append(
            _doc(f"https://{domain}/products/{_slug(product)}", f"{product} - {product_kind}", product_summary,
                 product_body, "product", product, product_facts)
        )  # fmt: skip
    return docs


def _listed_companies(rng: random.Random, towns: list[str], people: list[str]) -> list[dict]:
    docs = []
    for i, company in enumerate(c for c in COMPANIES if c.fictional):
        description, product_kind, product = _LISTED_DETAILS[company.ticker]
        town = towns[rng.randrange(len(towns))]
        founded = rng.randrange(1952, 2012)
        ipo = rng.randrange(max(founded + 3, 1990), 2022)
        ceo = people[i]
        domain = f"{_slug(company.name.split(' ')[0] + ' ' + company.name.split(' ')[1])}.example"
        facts = {"ticker": company.ticker, "exchange": company.exchange, "hq": town, "founded": founded,
                 "ipo_year": ipo, "ceo": ceo, "employees": company.employees, "product": product,
                 "product_kind": product_kind, "sector": company.sector}  # fmt: skip
        summary = (
            f"{company.name} ({company.exchange}: {company.ticker}) is {_a(description)} "
            f"headquartered in {town}. It was founded in {founded} and went public in {ipo}."
        )
        body = (
            f"Chief executive {ceo} has led the company since {max(ipo, 2015)}. {company.name} employs "
            f"{company.employees:,} people; its flagship product is the {product} {product_kind}."
        )
        docs.append(
            _doc(f"https://{domain}/investors", f"{company.name} investor relations", summary, body, "listed_company",
                 company.name, facts)
        )  # fmt: skip
        product_summary = (
            f"The {product} is the {product_kind} made by {company.name}, the company listed as {company.ticker} "
            f"on the {company.exchange}."
        )
        product_body = f"{company.name} first shipped the {product} in {rng.randrange(max(founded, 2000), 2024)}."
        docs.append(
            _doc(f"https://{domain}/{_slug(product)}", f"{product} by {company.name}", product_summary, product_body,
                 "listed_product", product, {"maker": company.name, "ticker": company.ticker})
        )  # fmt: skip
        jobs = rng.randrange(40, 900)
        news_town = towns[rng.randrange(len(towns))]
        news_summary = f"{company.name} will open a new facility in {news_town}, creating {jobs} jobs."
        news_body = (
            f"The {company.name} site in {news_town} is due to open in {rng.randrange(2025, 2028)}, "
            f"the company said, and will support production of the {product}."
        )
        docs.append(
            _doc(f"https://dailyledger.example/news/{_slug(company.name)}-{_slug(news_town)}",
                 f"{company.name} to open {news_town} facility", news_summary, news_body, "news", company.name,
                 {"town": news_town, "jobs": jobs})
        )  # fmt: skip
    return docs


def _notable_people(rng: random.Random, people: list[str], towns: list[str]) -> list[dict]:
    docs = []
    for i, person in enumerate(people):
        profession, work, award = _PROFESSIONS[i % len(_PROFESSIONS)]
        born = rng.randrange(1931, 1995)
        award_year = born + rng.randrange(28, 29 + min(2024 - born - 28, 40))
        town = towns[rng.randrange(len(towns))]
        summary = f"{person} (born {born}) is {_a(profession)} from {town} who {work}."
        body = f"{person} received {award} in {award_year}, and later taught a summer course in {town}."
        facts = {"born": born, "profession": profession, "hometown": town, "award": award, "award_year": award_year}
        docs.append(
            _doc(f"https://wiki.example/people/{_slug(person)}", f"{person} - {profession}", summary, body, "person",
                 person, facts)
        )  # fmt: skip
    return docs


def build_corpus() -> list[dict]:
    """The corpus records, in a fixed order (deterministic)."""
    rng = random.Random("search-corpus-v1")
    towns = _unique_names(rng, _TOWN_HEADS, _TOWN_TAILS, 50)
    companies = _unique_names(rng, _COMPANY_HEADS, _COMPANY_TAILS, 40)
    people = _people(rng, 78)
    docs = _towns(rng, towns)
    docs += _private_companies(rng, companies, towns, people[:40])
    docs += _listed_companies(rng, towns, people[40:48])
    docs += _notable_people(rng, people[48:], towns)
    urls = [d["url"] for d in docs]
    if len(set(urls)) != len(urls):
        raise AssertionError("corpus URLs must be unique")
    return docs


def corpus_text(docs: list[dict]) -> str:
    """JSON Lines text of ``docs`` (the exact content of ``corpus.jsonl``)."""
    return "".join(json.dumps(d, ensure_ascii=False, sort_keys=True) + "\n" for d in docs)


def load_corpus(path: Path = CORPUS_PATH) -> list[dict]:
    """Records of a JSONL corpus file; a bad line raises ``ValueError`` naming the file and line."""
    docs = []
    required = ("url", "title", "summary", "body")
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: invalid JSON ({exc.msg})") from None
            missing = [k for k in required if not isinstance(doc.get(k), str)]
            if missing:
                raise ValueError(f"{path}:{number}: record lacks string field(s) {missing}")
            docs.append(doc)
    return docs


if __name__ == "__main__":
    from skyrl_gym.common.fs import atomic_write_text

    atomic_write_text(CORPUS_PATH, corpus_text(build_corpus()))
    print(f"wrote {CORPUS_PATH}")
