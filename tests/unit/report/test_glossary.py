"""The report page's glossary and the one in docs/commands.md say the same, term by term."""

from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path

from app.report.figures import Params
from app.report.glossary import glossary

DOCS = Path(__file__).resolve().parents[3] / "docs" / "commands.md"


def _docs_glossary() -> list[tuple[str, str]]:
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("### Glossary of the report"):]
    section = section[:section.index("\n## ")]
    items = re.findall(r"^- \*\*(.+?)\*\*: (.+?)(?=^- |\Z)", section, re.MULTILINE | re.DOTALL)
    return [(term, " ".join(meaning.split())) for term, meaning in items]


def test_docs_glossary_is_the_page_glossary() -> None:
    assert _docs_glossary() == glossary(asdict(Params()))
