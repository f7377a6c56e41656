"""Build the documentation retrieval dataset, at benchmark time, from the documentation installed here.

Each *project* is one body of documentation that a package installed on this
machine (see SOURCES.md). Every paragraph or list item becomes a memory of that
project; every section heading with one to six such items directly beneath it
becomes a query, and exactly those items are its relevant memories. The heading
never appears in the memory text, so the labels are judge-free: they come from
how the authors laid out their own documents, not from a model or from us.

Nothing it makes is committed: the documentation's text stays the packages'.
``benchmarks/memory.py`` calls :func:`build` and keeps the result in a cache
outside the repository; to look at it:

    python benchmarks/data/memory/build.py OUT_DIR   # writes OUT_DIR/memories.jsonl and OUT_DIR/queries.jsonl

The sources are read from where Debian's packages and the Rust toolchain put
them on a machine of this project's kind; the paths are in ``SOURCES``. A
project whose documentation is not installed is left out (``missing()`` names it).
"""

from __future__ import annotations

import gzip
import html
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

HERE = Path(__file__).parent
RUST = Path("/root/.rustup/toolchains/stable-x86_64-unknown-linux-gnu/share/doc/rust/html")
NODE = Path("/usr/share/doc/nodejs")
PIP = Path("/usr/share/doc/python3-pip/html")

SOURCES: dict[str, list[Path]] = {
    "nodejs": [NODE / "CONTRIBUTING.md", *sorted((NODE / "contributing").glob("*.md")),
               *sorted((NODE / "contributing" / "maintaining").glob("*.md"))],
    "cargo": [RUST / "cargo" / "faq.html", *sorted((RUST / "cargo" / "guide").glob("*.html")),
              *sorted((RUST / "cargo" / "reference").glob("*.html"))],
    "rust-style": sorted(p for p in (RUST / "style-guide").glob("*.html") if p.name not in ("print.html", "toc.html")),
    "pip": sorted(p for p in (PIP / "development").rglob("*") if p.suffix in (".rst", ".md", ".gz")),
    "rustc": sorted(p for p in (RUST / "rustc").rglob("*.html") if p.name not in ("print.html", "toc.html")),
    "rust-book": sorted((RUST / "book").glob("ch*.html")),
}
# Where each source tree came from, as written into the dataset (machine paths are left out).
ORIGINS: dict[Path, str] = {
    RUST: "rust-docs-1.95.0",
    NODE: "nodejs-20.20.2-docs",
    PIP: "pip-23.0.1-docs",
}
MIN_CHARS, MAX_CHARS = 40, 700
MAX_RELEVANT = 6
GENERIC = {"example", "examples", "note", "notes", "overview", "introduction", "summary", "see also", "usage",
           "background", "details", "contents", "table of contents", "description", "options", "synopsis"}


@dataclass
class Section:
    heading: str
    level: int
    items: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- parsers


def markdown_sections(text: str) -> Iterator[Section]:
    section = Section("", 0)
    block: list[str] = []
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        heading = re.match(r"^(#{1,6})\s+(.*)$", line)
        if heading:
            section.items.extend(_flush(block))
            yield section
            section = Section(_clean(heading.group(2)), len(heading.group(1)))
        elif not line.strip() or re.match(r"^\s*([*+-]|\d+\.)\s+", line):
            section.items.extend(_flush(block))
            if line.strip():
                block.append(re.sub(r"^\s*([*+-]|\d+\.)\s+", "", line))
        elif not line.startswith("    ") and not line.startswith("[") and not line.startswith("|"):
            block.append(line)
    section.items.extend(_flush(block))
    yield section


def rst_sections(text: str) -> Iterator[Section]:
    lines = text.splitlines()
    section = Section("", 0)
    block: list[str] = []
    underlines = "=-~^\"'`#*+"
    literal = False
    for index, line in enumerate(lines):
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if following and len(set(following.strip())) == 1 and following.strip()[0] in underlines \
                and len(following.strip()) >= len(line.strip()) > 0 and not line.startswith(" "):
            section.items.extend(_flush(block))
            yield section
            section = Section(_clean(line), underlines.index(following.strip()[0]) + 1)
            continue
        if line.strip() and len(set(line.strip())) == 1 and line.strip()[0] in underlines:
            continue
        if literal and (not line.strip() or line.startswith(" ")):
            continue
        literal = False
        if not line.strip() or re.match(r"^\s*([*+-]|\d+\.|#\.)\s+", line):
            section.items.extend(_flush(block))
            if line.strip():
                block.append(re.sub(r"^\s*([*+-]|\d+\.|#\.)\s+", "", line))
        elif line.startswith(".. "):
            literal = True
        else:
            block.append(line)
            if line.rstrip().endswith("::"):
                literal = True
    section.items.extend(_flush(block))
    yield section


class _MdBook(HTMLParser):
    """Headings, paragraphs and list items of an mdBook page's <main>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections = [Section("", 0)]
        self.depth = 0
        self.capture: str | None = None
        self.buffer: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "main":
            self.depth += 1
        if not self.depth:
            return
        if tag in ("pre", "script", "style"):
            self.skip += 1
        elif tag in ("h1", "h2", "h3", "h4", "h5", "p", "li") and not self.skip:
            self._end()
            self.capture = tag
            self.buffer = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("pre", "script", "style") and self.skip:
            self.skip -= 1
        elif tag == self.capture:
            self._end()
        elif tag == "main":
            self._end()
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.capture and not self.skip:
            self.buffer.append(data)

    def _end(self) -> None:
        if not self.capture:
            return
        text = _clean(" ".join(self.buffer))
        if self.capture.startswith("h"):
            self.sections.append(Section(text, int(self.capture[1])))
        elif text:
            self.sections[-1].items.append(text)
        self.capture = None
        self.buffer = []


def html_sections(text: str) -> Iterator[Section]:
    parser = _MdBook()
    parser.feed(text)
    parser.close()
    yield from parser.sections


def _flush(block: list[str]) -> list[str]:
    text = _clean(" ".join(block))
    block.clear()
    return [text] if text else []


def _clean(text: str) -> str:
    text = html.unescape(text)
    text = re.sub(r"\[([^\]]+)\]\[[^\]]*\]", r"\1", text)  # [text][ref]
    text = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", text)  # [text](url)
    text = re.sub(r":\w+:`([^`<]*)(<[^>]*>)?`", r"\1", text)  # :role:`text <target>`
    text = re.sub(r"`([^`<]*) <[^>]*>`_+", r"\1", text)  # `text <url>`_
    text = re.sub(r"\s+", " ", text.replace("¶", "").replace("§", "")).strip()
    return redact_hosts(text.strip("# ").strip())


# Host names in the quoted documentation become a neutral placeholder: the project writes
# no package registry's host name, and a generic rule needs no list of them.
_HOST = re.compile(r"\b(?:[a-z0-9-]+\.)+(?:io|org|com|net|dev)\b", re.IGNORECASE)


def redact_hosts(text: str) -> str:
    return _HOST.sub("[host]", text)


# ---------------------------------------------------------------- dataset


def read(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")


def sections(path: Path) -> Iterator[Section]:
    name = path.name.removesuffix(".gz")
    text = read(path)
    if name.endswith(".html"):
        return html_sections(text)
    if name.endswith(".rst"):
        return rst_sections(text)
    return markdown_sections(text)


def build() -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    memories: list[dict[str, object]] = []
    queries: list[dict[str, object]] = []
    for project, paths in SOURCES.items():
        seen: dict[str, str] = {}
        by_heading: dict[str, list[tuple[str, str, list[str]]]] = {}
        for path in paths:
            if not path.is_file():
                continue
            source = origin(path)
            for section in sections(path):
                ids = []
                for item in section.items:
                    if not MIN_CHARS <= len(item) <= MAX_CHARS or item in seen:
                        continue
                    memory_id = f"{project}-{len(seen) + 1}"
                    seen[item] = memory_id
                    memories.append({"id": memory_id, "project": project, "text": item, "source": source})
                    ids.append(memory_id)
                heading = section.heading
                if section.level >= 2 and ids and len(ids) <= MAX_RELEVANT and _usable(heading):
                    by_heading.setdefault(heading.lower(), []).append((heading, source, ids))
        for _key, found in sorted(by_heading.items()):
            if len(found) != 1:  # the same heading twice in one project: no single right answer
                continue
            heading, source, ids = found[0]
            queries.append({"id": f"{project}-q{len(queries) + 1}", "project": project, "query": heading,
                            "relevant": ids, "source": source})
    return memories, queries


def origin(path: Path) -> str:
    for root, label in ORIGINS.items():
        if path.is_relative_to(root):
            return f"{label}/{path.relative_to(root)}"
    raise ValueError(f"{path} is under no known source tree")


def _usable(heading: str) -> bool:
    words = re.findall(r"\w+", heading.lower())
    # Identifier-like headings (lint names, config keys such as "mtime-on-use") are look-ups, not questions.
    identifier = re.fullmatch(r"[\w.:-]*[-_:.][\w.:-]*", heading.strip("`")) is not None
    return bool(words) and not identifier and heading.lower() not in GENERIC and len(heading) <= 120


def missing() -> list[str]:
    """The projects whose documentation is not installed on this machine."""
    return [project for project, paths in SOURCES.items() if not any(path.is_file() for path in paths)]


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    if out is None:
        sys.exit("usage: build.py OUT_DIR  (outside the repository: the text is the packages', not ours)")
    out.mkdir(parents=True, exist_ok=True)
    memories, queries = build()
    for name, rows in (("memories.jsonl", memories), ("queries.jsonl", queries)):
        with (out / name).open("w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    projects = sorted({str(row["project"]) for row in memories})
    for project in projects:
        count = sum(row["project"] == project for row in memories)
        asked = sum(row["project"] == project for row in queries)
        print(f"{project:12} {count:6} memories {asked:5} queries")
    for project in missing():
        print(f"{project:12} not installed here, left out")


if __name__ == "__main__":
    main()
