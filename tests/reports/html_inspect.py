"""Parse a rendered report with the standard library's HTMLParser (test helper).

Collects every start tag with its attributes, the text under each element id, and the text
inside <pre> elements, so tests can check structure and safety without a browser.
"""

from __future__ import annotations

from dataclasses import dataclass
from html.parser import HTMLParser

#: Every tag the report templates and the SVG builder emit. Anything else came from data.
ALLOWED_TAGS = frozenset({
    "html", "head", "meta", "title", "style", "body", "header", "main", "footer", "section", "div", "p", "h1", "h2",
    "h3", "h4", "span", "b", "i", "a", "table", "thead", "tbody", "tr", "th", "td", "code", "pre", "ul", "li", "dl",
    "dt", "dd", "details", "summary", "figure", "figcaption",
    "svg", "g", "rect", "line", "circle", "text", "polygon", "polyline",
})
VOID_TAGS = frozenset({"meta"})


@dataclass
class Tag:
    name: str
    attrs: dict[str, str | None]
    text: str = ""


class ParsedPage(HTMLParser):
    """Start tags in document order (with the text under each), and the texts of <pre> elements."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[Tag] = []
        self.pre_texts: list[str] = []
        self._stack: list[Tag] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        t = Tag(tag, dict(attrs))
        self.tags.append(t)
        if tag not in VOID_TAGS:
            self._stack.append(t)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(Tag(tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        while self._stack:
            t = self._stack.pop()
            if t.name == "pre":
                self.pre_texts.append(t.text)
            if t.name == tag:
                break

    def handle_data(self, data: str) -> None:
        for t in self._stack:
            t.text += data

    def by_id(self, element_id: str) -> Tag:
        for t in self.tags:
            if t.attrs.get("id") == element_id:
                return t
        raise KeyError(f"no element with id {element_id!r}")

    def find(self, name: str, cls: str | None = None) -> list[Tag]:
        return [t for t in self.tags if t.name == name and (cls is None or cls in (t.attrs.get("class") or "").split())]


def parse(html: str) -> ParsedPage:
    page = ParsedPage()
    page.feed(html)
    page.close()
    return page


def unsafe_markup(page: ParsedPage) -> list[str]:
    """Everything in the page that could run code or fetch something; empty for a safe page."""
    problems = []
    for t in page.tags:
        if t.name not in ALLOWED_TAGS:
            problems.append(f"unexpected tag <{t.name}>")
        for key, value in t.attrs.items():
            if key.startswith("on"):
                problems.append(f"event handler {key}= on <{t.name}>")
            if key in ("src", "srcset", "action", "formaction", "xlink:href", "background", "poster", "data"):
                problems.append(f"fetching attribute {key}= on <{t.name}>")
            if key == "href" and not (value or "").startswith("#"):
                problems.append(f"non-fragment link href={value!r}")
            if value is not None and ("://" in value or "javascript:" in value.lower()):
                problems.append(f"URL in attribute {key}={value!r} on <{t.name}>")
    for style in page.find("style"):
        if "url(" in style.text or "@import" in style.text:
            problems.append("stylesheet loads a resource")
    return problems
