"""Render ``geodrift explain``: each topic's title in bold, its paragraphs wrapped to the terminal."""

from __future__ import annotations

from geodrift.jobs.explain import Section
from geodrift.render import console, lit


def render_sections(sections: list[Section]) -> None:
    """Print each section: its title, then its paragraphs (wrapped between words), a blank line between."""
    for i, section in enumerate(sections):
        if i:
            console.print()
        console.print(lit(section.title, "bold"))
        for paragraph in section.paragraphs:
            console.print(lit(paragraph))
