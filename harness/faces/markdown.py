"""User text inside GitHub-flavoured Markdown (the ``--summary-md`` summary), escaped so it stays text.

A case id, an engine spec or a command line comes from the user. Put into Markdown as it is, a
backtick ends its code span and whatever follows is rendered: raw HTML lands in a pull-request
comment, a ``|`` splits a table cell. These helpers keep every such string literal:

- :func:`code_span`: an inline code span whose backtick fence is longer than any backtick run
  inside (CommonMark), padded when the text starts or ends with a backtick or a space;
- :func:`plain_text`: ordinary text with HTML's ``& < >`` as entities and Markdown's inline
  punctuation backslash-escaped;
- :func:`code_block`: a fenced block whose fence is longer than any backtick run inside.

In a table cell (``table_cell=True``) a ``|`` is written ``\\|``, which GitHub reads as a literal
``|`` also inside a code span, and line breaks become spaces.
"""

from __future__ import annotations

import html
import re

#: Inline Markdown punctuation that can start emphasis, links, code or strikethrough.
_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_\[\]~|])")


def _longest_backtick_run(text: str) -> int:
    return max((len(m) for m in re.findall(r"`+", text)), default=0)


def code_span(text: str, *, table_cell: bool = True) -> str:
    """``text`` as one inline code span that nothing inside can close."""
    text = " ".join(str(text).splitlines()) or " "
    fence = "`" * (_longest_backtick_run(text) + 1)
    if text[0] in "` " or text[-1] in "` ":
        text = f" {text} "  # CommonMark strips one space on each side, so a backtick at the edge cannot join the fence
    if table_cell:
        text = text.replace("|", "\\|")
    return f"{fence}{text}{fence}"


def plain_text(text: str, *, table_cell: bool = True) -> str:
    """``text`` as literal Markdown text: no HTML, no emphasis, links or code; one line in a table cell."""
    text = str(text)
    if table_cell:
        text = " ".join(text.splitlines())
    return _MARKDOWN_PUNCTUATION.sub(r"\\\1", html.escape(text, quote=False))


def code_block(text: str, info: str = "") -> list[str]:
    """The lines of a fenced code block holding ``text`` as it is (its fence longer than any backtick run)."""
    fence = "`" * max(3, _longest_backtick_run(text) + 1)
    return [f"{fence}{info}", *str(text).splitlines(), fence]


__all__ = ["code_block", "code_span", "plain_text"]
