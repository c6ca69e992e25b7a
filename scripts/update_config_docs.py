"""Regenerate the reference part of docs/config.md from the config models."""

from __future__ import annotations

from pathlib import Path

from vixio.config.reference import BEGIN, END, render_reference

path = Path(__file__).resolve().parents[1] / "docs" / "config.md"
text = path.read_text(encoding="utf-8")
start, end = text.index(BEGIN), text.index(END) + len(END) + 1
path.write_text(text[:start] + render_reference() + text[end:], encoding="utf-8")
print(f"updated {path}")
