#!/usr/bin/env python3
"""Renders every template in ../shared/templates with transformers' own renderer
(transformers.utils.chat_template_utils.render_jinja_template) and writes what it produced to
rendered_templates.json, which tests/chat_template_parity.rs compares kiln's renderings against.

Same conversation, special tokens and fixed clock as the Rust test. A template that rejects the
system message is rendered again with the system text folded into the first user message, the
fallback kiln's ChatTemplate::render applies.

Usage: python3 render_templates.py   (needs transformers and jinja2; /work/pyenv has both)
"""
import json
import pathlib
from datetime import datetime

import transformers.utils.chat_template_utils as ctu

HERE = pathlib.Path(__file__).resolve().parent
TEMPLATES = HERE.parents[4] / "shared" / "templates"  # ../shared from the repository root
FIXED_NOW = datetime(2024, 7, 26, 13, 5, 9)  # 1721999109 seconds after the epoch, UTC

CONVERSATION = [
    {"role": "system", "content": "You are a terse assistant."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": "And of Italy?"},
]


class FixedDatetime(datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


ctu.datetime = FixedDatetime  # strftime_now reads the clock through this name


def merged(conv):
    system, rest = conv[0]["content"], [dict(m) for m in conv[1:]]
    for m in rest:
        if m["role"] == "user":
            m["content"] = system + "\n\n" + m["content"]
            break
    return rest


def render(src, conv):
    out, _ = ctu.render_jinja_template([conv], chat_template=src, add_generation_prompt=True,
                                       bos_token="<s>", eos_token="</s>")
    return out[0]


def main():
    results = {}
    for path in sorted(TEMPLATES.glob("*.jinja")):
        src = path.read_text(encoding="utf-8")
        try:
            results[path.stem] = {"text": render(src, CONVERSATION), "folded_system": False}
        except Exception as first:
            try:
                results[path.stem] = {"text": render(src, merged(CONVERSATION)), "folded_system": True}
            except Exception:
                results[path.stem] = {"error": f"{type(first).__name__}: {first}"}
    out = HERE / "rendered_templates.json"
    out.write_text(json.dumps(results, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
    ok = sum("text" in r for r in results.values())
    print(f"{ok} of {len(results)} templates render in transformers; wrote {out}")


if __name__ == "__main__":
    main()
