"""Turn documentation files (HTML, reStructuredText, AsciiDoc, man, POD, fortune) into plain text.

Each extractor takes a path and returns a list of documents (strings). They aim for readable
English prose with code kept verbatim, not for a perfect rendering.
"""

import gzip
import html.parser
import re
import subprocess
from pathlib import Path

# The strings the tokenizer reserves for control; documentation never needs them literally.
SPECIAL_STRINGS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def read_text(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")


# Typographic punctuation to its ASCII spelling: fewer distinct byte sequences for a small vocabulary.
PUNCTUATION = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2010": "-", "\u2011": "-",
    "\u2013": "-", "\u2014": "--", "\u2026": "...", "\u00b6": "", "\u2022": "*", "\u00a0": " ",
})


def clean(text: str) -> str:
    """Normalise whitespace and punctuation, drop control characters, keep paragraph structure."""
    for s in SPECIAL_STRINGS:
        text = text.replace(s, "")
    text = text.translate(PUNCTUATION)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = text.expandtabs(8)
    text = "".join(c for c in text if c == "\n" or c >= " " or c == "\t")
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip() + "\n"


def ascii_ratio(text: str) -> float:
    if not text:
        return 0.0
    return sum(1 for c in text if c < "\x80") / len(text)


# ---------------------------------------------------------------------------------------------
# HTML


class _HtmlText(html.parser.HTMLParser):
    """Collects the visible text of a page, skipping navigation, scripts and permalinks."""

    BLOCK = {
        "p", "div", "br", "li", "ul", "ol", "dl", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6",
        "tr", "table", "section", "blockquote", "pre", "hr", "title", "article", "figure",
    }
    SKIP_TAGS = {"script", "style", "head", "nav", "footer", "noscript", "svg"}
    SKIP_CLASSES = {
        "navheader", "navfooter", "sphinxsidebar", "related", "footer", "headerlink",
        "toc", "breadcrumbs", "navigation", "rellink", "docnav", "legalnotice",
        "document-footer", "highlight-none-notranslate",
    }
    # Page chrome of the Django and Debian handbook themes.
    SKIP_IDS = {"hd", "ft", "global-nav", "searchbox", "sidebar", "banner", "title", "navigation"}
    VOID = {"br", "hr", "img", "meta", "link", "input", "area", "base", "col", "wbr", "source"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.stack: list[tuple[str, bool]] = []  # (tag, starts a skipped region)
        self.skip_depth = 0
        self.pre_depth = 0

    def handle_starttag(self, tag, attrs):
        if tag in self.VOID:
            if tag in ("br", "hr") and not self.skip_depth:
                self.out.append("\n")
            return
        attr = dict(attrs)
        classes = set((attr.get("class") or "").split())
        skip = tag in self.SKIP_TAGS or bool(classes & self.SKIP_CLASSES) or attr.get("id") in self.SKIP_IDS
        self.stack.append((tag, skip))
        if skip:
            self.skip_depth += 1
        if tag == "pre":
            self.pre_depth += 1
        if not self.skip_depth:
            if tag in self.BLOCK:
                self.out.append("\n\n" if tag in ("p", "pre", "h1", "h2", "h3", "h4") else "\n")
            if tag == "li":
                self.out.append("* ")

    def handle_endtag(self, tag):
        # Pop to the matching tag; tolerate unclosed elements as browsers do.
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                for t, skip in self.stack[i:]:
                    if skip:
                        self.skip_depth -= 1
                    if t == "pre":
                        self.pre_depth -= 1
                del self.stack[i:]
                break
        if not self.skip_depth and tag in self.BLOCK:
            self.out.append("\n")

    def handle_data(self, data):
        if self.skip_depth:
            return
        if not self.pre_depth:
            data = re.sub(r"\s+", " ", data)
        self.out.append(data)

    def text(self) -> str:
        lines = [line.strip() if not line.startswith("    ") else line for line in "".join(self.out).split("\n")]
        return "\n".join(lines)


def html_doc(path: Path) -> list[str]:
    raw = read_text(path)
    # Sphinx pages keep the article in role="main"; cut the rest when that marker exists.
    m = re.search(r'<div[^>]*role="main"[^>]*>', raw)
    if m:
        raw = raw[m.start():]
    parser = _HtmlText()
    parser.feed(raw)
    parser.close()
    return [parser.text()]


# ---------------------------------------------------------------------------------------------
# reStructuredText (Sphinx sources)

_RST_ROLE = re.compile(r":[a-zA-Z:+-]+:`~?!?([^`<]*?)(?:\s*<[^>]*>)?`")
_RST_DROP = re.compile(
    r"^\s*\.\. (index|_[^:]*|highlight|toctree|sectionauthor|moduleauthor|currentmodule|"
    r"testsetup|testcleanup|include|raw|only|SPDX|kernel-doc|contents|tabularcolumns|"
    r"literalinclude|image|figure|c:namespace|spelling)\b.*$"
)
_RST_OPTION = re.compile(r"^\s+:(maxdepth|glob|hidden|numbered|titlesonly|noindex|platform|"
                         r"synopsis|deprecated|audit-event|module|caption|name|class)\b.*$")


def rst_doc(path: Path) -> list[str]:
    lines = []
    for line in read_text(path).split("\n"):
        if _RST_DROP.match(line) or _RST_OPTION.match(line):
            continue
        if line.startswith(".. ") and "::" not in line:
            continue  # a comment
        line = _RST_ROLE.sub(r"\1", line)
        line = line.replace("``", "`")
        lines.append(line)
    return ["\n".join(lines)]


# ---------------------------------------------------------------------------------------------
# AsciiDoc (git)


def asciidoc_doc(path: Path) -> list[str]:
    text = read_text(path)
    text = re.sub(r"^(include|ifdef|ifndef|endif)::.*$", "", text, flags=re.M)
    text = re.sub(r"^\[(verse|literal|listing|quote)\]$", "", text, flags=re.M)
    text = re.sub(r"linkgit:([\w.-]+)\[(\d)\]", r"\1(\2)", text)
    return [text]


# ---------------------------------------------------------------------------------------------
# man pages and POD, rendered by the system's own tools


def man_doc(path: Path) -> list[str]:
    src = read_text(path)
    if src.lstrip().startswith(".so "):
        return []  # a link to another page
    src = ".ad l\n" + src  # ragged right: no padding spaces between words
    proc = subprocess.run(
        # ASCII output and no hyphenation: text as a person would type it.
        ["groff", "-t", "-mandoc", "-Tascii", "-P-cbou", "-rLL=78n", "-rcR=1", "-rHY=0"],
        input=src.encode(), capture_output=True, timeout=60,
    )
    if proc.returncode != 0:
        return []
    return [proc.stdout.decode("utf-8", errors="replace")]


def pod_doc(path: Path) -> list[str]:
    src = read_text(path)
    proc = subprocess.run(["pod2text", "-w", "78"], input=src.encode(), capture_output=True, timeout=60)
    if proc.returncode != 0:
        return []
    return [proc.stdout.decode("utf-8", errors="replace")]


# ---------------------------------------------------------------------------------------------
# fortune files: one document per quotation


def fortune_doc(path: Path) -> list[str]:
    return [f for f in re.split(r"\n%\n", read_text(path)) if f.strip()]
