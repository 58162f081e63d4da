"""MkDocs hook: the configuration reference is generated from `GSPOConfig`'s fields, so it cannot drift.

A page that holds the marker `<!-- gspo-config-fields -->` gets, in its place, one table per topic of GSPOConfig's
own fields (name, type, default, the field's `metadata["help"]`), grouped by the `> Topic` headings of the config
module's docstring, then one table of the fields GSPOConfig inherits from TRL's GRPOConfig. The hook also publishes
the benchmark figures (`benchmarks/*.png`) under `benchmarks/`, so pages link to the committed files instead of copies.
"""

from __future__ import annotations

import dataclasses
import html
import inspect
import re
from pathlib import Path

from mkdocs.structure.files import File

MARKER = "<!-- gspo-config-fields -->"
ROOT = Path(__file__).resolve().parents[2]
TRAINING_ARGUMENTS_DOCS = "https://huggingface.co/docs/transformers/main_classes/trainer#transformers.TrainingArguments"


def on_files(files, config):
    for path in sorted((ROOT / "benchmarks").glob("*.png")):
        files.append(File.generated(config, f"benchmarks/{path.name}", abs_src_path=str(path)))
    return files


def on_page_markdown(markdown, page, config, files):
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, config_reference())


def config_reference() -> str:
    from gspo_recipes import GSPOConfig  # the public name; the module behind it may move

    grpo_config = GSPOConfig.__mro__[1]
    own = [f for f in dataclasses.fields(GSPOConfig) if f.name in vars(GSPOConfig).get("__annotations__", {})]
    parent_defaults = {f.name: default_of(f) for f in dataclasses.fields(grpo_config)}
    out = []
    for topic, names in topics(inspect.getmodule(GSPOConfig).__doc__ or "", [f.name for f in own]):
        out += [f"### {topic}", "", "| field | type | default | what it does |", "| --- | --- | --- | --- |"]
        for f in sorted((f for f in own if f.name in names), key=lambda f: names.index(f.name)):
            help_text = cell(f.metadata.get("help", ""))
            if f.name in parent_defaults and parent_defaults[f.name] != default_of(f):
                help_text += f" (GRPOConfig's default: {code(parent_defaults[f.name])})"
            out.append(f"| `{f.name}` | {code(str(f.type))} | {code(default_of(f))} | {help_text} |")
        out.append("")
    inherited = [
        f
        for f in dataclasses.fields(GSPOConfig)
        if f.name in vars(grpo_config).get("__annotations__", {}) and f.name not in {g.name for g in own}
    ]
    out += [
        f"### Inherited from TRL's `{grpo_config.__name__}`",
        "",
        f"Unchanged by GSPOConfig: TRL's help text, as installed. The fields of `TrainingArguments` "
        f"(`learning_rate`, `output_dir`, `logging_steps`, ...) are documented by "
        f"[transformers]({TRAINING_ARGUMENTS_DOCS}).",
        "",
        "| field | type | default | what it does |",
        "| --- | --- | --- | --- |",
    ]
    out += [
        f"| `{f.name}` | {code(str(f.type))} | {code(default_of(f))} | {cell(f.metadata.get('help', ''))} |"
        for f in inherited
    ]
    return "\n".join(out) + "\n"


def topics(docstring: str, names: list[str]) -> list[tuple[str, list[str]]]:
    """(topic, field names) in the order of the docstring's `> Topic` headings; fields it lists nowhere go last."""
    grouped: list[tuple[str, list[str]]] = []
    for line in docstring.splitlines():
        heading = re.match(r"^>\s*(.+?)\s*$", line)
        if heading:
            grouped.append((re.sub(r"\s*\(.*\)$", "", heading.group(1)), []))
            continue
        entry = re.match(r"^\s{4}(\w+) \(", line)
        if entry and grouped and entry.group(1) in names:
            grouped[-1][1].append(entry.group(1))
    listed = {name for _, group in grouped for name in group}
    rest = [name for name in names if name not in listed]
    return [(topic, group) for topic, group in grouped if group] + ([("Other fields", rest)] if rest else [])


def default_of(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return repr(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return repr(f.default_factory())
    return "required"


def cell(text: str) -> str:
    """Help text safe inside a Markdown table cell: one line, no pipes, no HTML; `code spans` stay code, and an
    asterisk outside them stays an asterisk (not emphasis)."""
    parts = re.split(r"(`[^`]*`)", " ".join(str(text).split()))
    return "".join(
        part.replace("|", "&#124;") if part.startswith("`") else html.escape(part, quote=False).replace("*", "&#42;")
        for part in parts
    ).replace("|", "&#124;")


def code(text: str) -> str:
    """A value or type as inline code inside a table cell (an HTML code element, so a pipe cannot split the cell)."""
    return "<code>" + html.escape(" ".join(text.split()), quote=False).replace("|", "&#124;") + "</code>"
