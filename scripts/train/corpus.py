#!/usr/bin/env python3
"""Gather the training corpus from Debian documentation packages.

    python3 scripts/train/corpus.py [--out corpus]

Downloads each package with `apt-get download` (no root install), unpacks it with `dpkg -x`,
extracts plain text (extract.py) and writes, under --out:
    text/<source>.jsonl   one {"text": ...} document a line
    chat.jsonl            {"messages": [...]} conversations derived from the text (chat.py)
    stats.json            documents and bytes per source, package versions
Sources and licences are listed in SOURCES below and in models/README.md.
"""

import argparse
import json
import random
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
import chat  # noqa: E402
import extract  # noqa: E402


@dataclass
class Source:
    name: str
    package: str
    licence: str
    extractor: Callable[[Path], list[str]]
    # Glob patterns relative to the unpacked package root.
    globs: tuple[str, ...]
    exclude: str = r"$^"  # regex on the relative path
    min_chars: int = 200


PY_HTML = "usr/share/doc/python3.11/html/_sources"
LINUX = "usr/share/doc/linux-doc-6.1/html/_sources"
FORTUNE_SKIP = r"/(ethnic|men-women|politics|drugs|art|ascii-art|translate-me|love|kids|medicine)$"

SOURCES = (
    Source("python-docs", "python3.11-doc", "PSF-2.0", extract.rst_doc, (f"{PY_HTML}/**/*.rst.txt",),
           exclude=r"/(license|copyright|changelog)\.rst\.txt$"),
    Source("perl-pod", "perl-doc", "GPL-1+ or Artistic-1.0", extract.pod_doc,
           ("usr/share/perl/5.36.0/pod/*.pod",), exclude=r"perl5\d+delta|perltoc"),
    Source("perl-modules", "perl-modules-5.36", "GPL-1+ or Artistic-1.0", extract.pod_doc,
           ("usr/share/perl/5.36.0/**/*.pm", "usr/share/perl/5.36.0/**/*.pod"),
           exclude=r"/pod/|Unicode/Collate|unicore"),
    Source("man-pages", "manpages", "Linux-man-pages-copyleft, GPL-2+, BSD (per page)", extract.man_doc,
           ("usr/share/man/man*/*.gz",)),
    Source("man-pages-dev", "manpages-dev", "Linux-man-pages-copyleft, GPL-2+, BSD (per page)",
           extract.man_doc, ("usr/share/man/man*/*.gz",)),
    Source("git-docs", "git-doc", "GPL-2", extract.asciidoc_doc, ("usr/share/doc/git-doc/*.txt",),
           exclude=r"RelNotes|howto-index"),
    Source("bash-manual", "bash-doc", "GFDL-1.3+ (manual), GPL-3+", extract.html_doc,
           ("usr/share/doc/bash-doc/bashref.html",)),
    Source("postgresql-docs", "postgresql-doc-15", "PostgreSQL", extract.html_doc,
           ("usr/share/doc/postgresql-doc-15/html/*.html",), exclude=r"release-|bookindex|index\.html$"),
    Source("django-docs", "python-django-doc", "BSD-3-Clause", extract.html_doc,
           ("usr/share/doc/python-django-doc/html/**/*.html",),
           exclude=r"/(_modules|releases|_static|_images)/|genindex|search\.html|py-modindex"),
    Source("debian-reference", "debian-reference-en", "GPL-2+", extract.html_doc,
           ("usr/share/debian-reference/*.en.html",)),
    Source("debian-handbook", "debian-handbook", "GPL-2+ or CC-BY-SA-3.0", extract.html_doc,
           ("usr/share/doc/debian-handbook/html/en-US/*.html",), exclude=r"index\.html$|ix01"),
    Source("linux-docs", "linux-doc-6.1", "GPL-2", extract.rst_doc, (f"{LINUX}/**/*.rst.txt",),
           exclude=r"/(translations|ABI|hwmon|sound/cards|media/v4l-drivers|arch/)/|/(MAINTAINERS|tables)"),
    Source("fortunes", "fortunes", "BSD-4-Clause (fortune-mod collection)", extract.fortune_doc,
           ("usr/share/games/fortunes/*",), exclude=FORTUNE_SKIP + r"|\.(dat|u8)$", min_chars=10),
    Source("fortunes-min", "fortunes-min", "BSD-4-Clause (fortune-mod collection)", extract.fortune_doc,
           ("usr/share/games/fortunes/*",), exclude=r"\.(dat|u8)$", min_chars=10),
)


def fetch(package: str, work: Path) -> tuple[Path, str]:
    """Download and unpack a package; returns its root and version."""
    debs = work / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    found = sorted(debs.glob(f"{package}_*.deb"))
    if not found:
        subprocess.run(["apt-get", "download", package], cwd=debs, check=True, capture_output=True)
        found = sorted(debs.glob(f"{package}_*.deb"))
    if not found:
        raise SystemExit(f"apt-get download {package} produced no .deb in {debs}")
    deb = found[-1]
    root = work / "unpacked" / package
    if not root.exists():
        # Unpack beside the final place and rename, so that an interrupted run leaves no half tree.
        tmp = root.with_name(root.name + ".partial")
        subprocess.run(["rm", "-rf", str(tmp)], check=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["dpkg", "-x", str(deb), str(tmp)], check=True)
        tmp.rename(root)
    version = deb.name.split("_")[1].replace("%3a", ":")
    return root, version


def documents(src: Source, root: Path) -> list[tuple[str, str]]:
    """(relative path, cleaned text) of each document of a source."""
    exclude = re.compile(src.exclude)
    paths = sorted({p for g in src.globs for p in root.glob(g) if p.is_file()})
    out = []
    for path in paths:
        rel = str(path.relative_to(root))
        if exclude.search("/" + rel):
            continue
        try:
            raw_docs = src.extractor(path)
        except (OSError, UnicodeError, ValueError, AssertionError, subprocess.SubprocessError) as e:
            print(f"  skip {rel}: {e}", file=sys.stderr)
            continue
        for doc in raw_docs:
            text = extract.clean(doc)
            if len(text) >= src.min_chars and extract.ascii_ratio(text) > 0.97:
                out.append((rel, text))
    return out


def chat_facts(name: str, docs: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    facts = []
    for rel, text in docs:
        fact = None
        if name in ("man-pages", "man-pages-dev"):
            fact = chat.from_man(text, re.search(r"man(\d)", rel).group(1))
        elif name == "git-docs":
            fact = chat.from_man(text, "1")
        elif name == "python-docs" and "/library/" in rel:
            fact = chat.from_python(text)
        elif name == "postgresql-docs" and "/sql-" in rel:
            fact = chat.from_postgres(text)
        if fact:
            facts.append(fact)
    return facts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("corpus"))
    ap.add_argument("--only", nargs="*", help="source names to (re)build; default all")
    args = ap.parse_args()
    text_dir = args.out / "text"
    text_dir.mkdir(parents=True, exist_ok=True)
    stats_path = args.out / "stats.json"
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else {}
    facts, fortunes = [], []
    for src in SOURCES:
        out_path = text_dir / f"{src.name}.jsonl"
        if args.only and src.name not in args.only and out_path.exists():
            docs = [(d.get("path", ""), d["text"]) for d in map(json.loads, out_path.open())]
        else:
            root, version = fetch(src.package, args.out)
            docs = documents(src, root)
            with out_path.open("w") as f:
                for rel, text in docs:
                    f.write(json.dumps({"path": rel, "text": text}) + "\n")
            stats[src.name] = {
                "package": src.package, "version": version, "licence": src.licence,
                "documents": len(docs), "bytes": sum(len(t.encode()) for _, t in docs),
            }
        print(f"{src.name:18} {stats[src.name]['documents']:7} docs {stats[src.name]['bytes'] / 1e6:7.2f} MB")
        facts += chat_facts(src.name, docs)
        if src.name.startswith("fortunes"):
            fortunes += [t for _, t in docs]
    convs = chat.conversations(facts, fortunes, seed=0)
    random.Random(1).shuffle(convs)
    with (args.out / "chat.jsonl").open("w") as f:
        for msgs in convs:
            f.write(json.dumps({"messages": msgs}) + "\n")
    chat_bytes = sum(len(chat.to_chatml(m).encode()) for m in convs)
    stats["chat"] = {"conversations": len(convs), "facts": len(facts), "bytes": chat_bytes}
    stats.pop("total_bytes", None)
    total = sum(v["bytes"] for v in stats.values())
    stats["total_bytes"] = total
    stats_path.write_text(json.dumps(stats, indent=1) + "\n")
    print(f"chat: {len(convs)} conversations from {len(facts)} facts, {chat_bytes / 1e6:.2f} MB")
    print(f"total: {total / 1e6:.1f} MB of text")


if __name__ == "__main__":
    main()
