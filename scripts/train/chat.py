"""Derive ChatML conversations from the corpus so that the model learns the chat format.

The questions come from a few templates; every answer is text of the documentation itself (a
command's one-line summary plus the first paragraph of its description, or a fortune). This teaches
the turn structure and when to emit <|im_end|>; it does not make a capable assistant.
"""

import random
import re
import textwrap

SYSTEM_PROMPTS = (
    "You are a helpful assistant.",
    "You are kiln's small demo model. Answer briefly.",
    "You answer questions about software documentation.",
)

COMMAND_QUESTIONS = (
    "What does the {name} command do?",
    "What is {name}?",
    "Explain {name}.",
    "Tell me about {name}.",
    "What is {name} used for?",
    "Describe the {name} command.",
)
FUNCTION_QUESTIONS = (
    "What does the C function {name} do?",
    "What is {name} in C?",
    "Explain the {name} function.",
    "Tell me about {name}.",
)
MODULE_QUESTIONS = (
    "What is the Python module {name} for?",
    "What does the {name} module do?",
    "Explain Python's {name} module.",
    "Tell me about the {name} module.",
)
SQL_QUESTIONS = (
    "What does the SQL command {name} do?",
    "Explain {name} in PostgreSQL.",
    "What is {name} for?",
)
FORTUNE_QUESTIONS = (
    "Tell me a fortune.",
    "Give me a quote.",
    "Say something wise.",
    "Tell me something interesting.",
    "Share a saying.",
)
GREETINGS = (
    ("Hello", "Hello! I am a small language model trained on software documentation. Ask me about a command, a C function or a Python module."),
    ("Hi!", "Hi! I know a little about Unix commands, C, Python, Perl, Git and PostgreSQL. What would you like to know?"),
    ("Who are you?", "I am kiln's small demo model: a few million parameters trained on free documentation. My answers are short and often wrong."),
    ("What can you do?", "I can describe Unix commands, C library functions, Python modules and SQL commands, and tell you a fortune. I am small, so check what I say."),
    ("Thanks!", "You are welcome."),
    ("Thank you.", "You are welcome. Ask me anything else about commands or modules."),
)


def first_paragraph(text: str, limit: int = 600) -> str:
    """The first paragraph as one line, cut at a sentence end within `limit` characters."""
    para = text.strip().split("\n\n", 1)[0]
    para = " ".join(para.split())
    if len(para) <= limit:
        return para
    cut = para[:limit]
    end = cut.rfind(". ")
    return cut[: end + 1] if end > 100 else ""


def _section(text: str, name: str) -> str:
    """The body of a man-style section (NAME, DESCRIPTION), dedented."""
    m = re.search(rf"^{name}\n(-+\n)?(.*?)(?=^[A-Z][A-Z ]+\n|\Z)", text, flags=re.M | re.S)
    return textwrap.dedent(m.group(2)).strip() if m else ""


def from_man(doc: str, section_hint: str) -> tuple[str, str, str] | None:
    """(kind, name, answer) from a rendered man page or git AsciiDoc page."""
    name_line = " ".join(_section(doc, "NAME").split())
    m = re.match(r"^([\w.+-]+(?:, [\w.+-]+)*) \\?-{1,2} (.+)$", name_line)
    if not m:
        return None
    names, summary = m.group(1), m.group(2).rstrip(".")
    name = names.split(", ")[0]
    desc = first_paragraph(_section(doc, "DESCRIPTION"))
    answer = f"{name}: {summary}."
    if desc:
        answer += "\n\n" + desc
    kind = "function" if section_hint in ("2", "3") else "command"
    return kind, name, answer


def from_python(doc: str) -> tuple[str, str, str] | None:
    m = re.match(r"^\s*([\w.]+) --- (.+)\n[=*#-]+\n", doc)
    if not m:
        return None
    name, summary = m.group(1), m.group(2).strip().rstrip(".")
    body = doc[m.end():]
    # Skip option lines and source links to reach the first prose paragraph.
    paras = [p for p in body.split("\n\n") if p.strip() and not p.lstrip().startswith((".", ":", "*", "-", "="))]
    desc = first_paragraph(paras[0]) if paras else ""
    answer = f"The {name} module: {summary[0].lower() + summary[1:]}."
    if desc:
        answer += "\n\n" + desc
    return "module", name, answer


def from_postgres(doc: str) -> tuple[str, str, str] | None:
    m = re.search(r"^([A-Z][A-Z ]{2,}) -- (.+)$", doc, flags=re.M)
    if not m:
        return None
    name, summary = m.group(1).strip(), m.group(2).strip().rstrip(".")
    desc_m = re.search(r"^Description\n\n(.+?)(\n\n|\Z)", doc, flags=re.M | re.S)
    answer = f"{name}: {summary}."
    if desc_m:
        desc = first_paragraph(desc_m.group(1))
        if desc:
            answer += "\n\n" + desc
    return "sql", name, answer


def _question(rng: random.Random, kind: str, name: str) -> str:
    table = {"command": COMMAND_QUESTIONS, "function": FUNCTION_QUESTIONS,
             "module": MODULE_QUESTIONS, "sql": SQL_QUESTIONS}[kind]
    return rng.choice(table).format(name=name)


def to_chatml(messages: list[dict]) -> str:
    """The exact text the chat template renders (without a generation prompt)."""
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)


def conversations(facts: list[tuple[str, str, str]], fortunes: list[str], seed: int = 0) -> list[list[dict]]:
    """Conversations of one or two question/answer turns, some with a system prompt."""
    rng = random.Random(seed)
    # Two phrasings of each question; fortunes capped so that documentation answers dominate.
    pairs = [(_question(rng, kind, name), answer) for kind, name, answer in facts for _ in range(2)]
    short = [f.strip() for f in fortunes if 20 < len(f) < 400]
    short = rng.sample(short, min(len(short), len(facts)))
    pairs += [(rng.choice(FORTUNE_QUESTIONS), f) for f in short]
    pairs += [g for g in GREETINGS for _ in range(40)]
    rng.shuffle(pairs)
    convs = []
    i = 0
    while i < len(pairs):
        turns = 2 if rng.random() < 0.2 and i + 1 < len(pairs) else 1
        msgs = []
        if rng.random() < 0.3:
            msgs.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
        for q, a in pairs[i:i + turns]:
            msgs.append({"role": "user", "content": q})
            msgs.append({"role": "assistant", "content": a})
        convs.append(msgs)
        i += turns
    return convs
