"""HTML that runs nothing a student wrote: the sanitiser every page the kit makes from a notebook goes through.

A student writes much of what the course's pages show: markdown cells (raw HTML included) and outputs of any
type, on the feedback page they and the staff open and in formgrader, inside the Jupyter server's own origin.
nh3 (Rust's ammonia) keeps an allow-list of tags and attributes: no `<script>`, no event handler, no `<iframe>`,
`<svg>`, `<form>`, `<base>`, `<link>` or `<meta>`, no style of the student's, no URL but a `#` anchor, an http(s)
or mailto link and an image's own `data:image/...` (the plots). The round view's stylesheet is the kit's own
(`specdec_kit.rounds.view.STYLE`): where it appears it is kept as it is, so the rounds keep their colours.

    clean_fragment(html)   # a piece of HTML: a markdown cell's, an output's
    clean_page(page)       # a whole page: its head's stylesheets and title, a Content-Security-Policy that lets
                           # no script run and nothing be fetched, its body through clean_fragment
    unsafe(page)           # what a page holds outside the allow-list, read by a second parser: [] when safe

A page's head is the template's (nbconvert's and nbgrader's, or report.py's): nothing of a notebook is written
there. safe_nbconvert.py installs these into the course's nbconvert and nbgrader.
"""

from __future__ import annotations

import html
import re
import secrets
from html.parser import HTMLParser

import nh3

from specdec_kit.rounds.view import STYLE as ROUNDS_STYLE

TAGS = {"a", "abbr", "b", "blockquote", "br", "caption", "code", "col", "colgroup", "dd", "del", "details", "div",
        "dl", "dt", "em", "figcaption", "figure", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "ins", "kbd",
        "li", "main", "mark", "ol", "p", "pre", "q", "s", "samp", "small", "span", "strong", "sub", "summary", "sup",
        "table", "tbody", "td", "tfoot", "th", "thead", "tr", "u", "ul", "var", "wbr"}
ATTRIBUTES = {"*": {"class", "id", "title", "lang", "dir", "style"}, "a": {"href", "name"},
              "img": {"src", "alt", "width", "height"}, "td": {"colspan", "rowspan", "align"},
              "th": {"colspan", "rowspan", "align", "scope"}, "ol": {"start"}}
REMOVED_WITH_CONTENT = {"script", "style"}  # other tags outside TAGS go, their text stays (escaped)
# Inline colours, as nbconvert draws a 256-colour or RGB ANSI code; none of these properties takes a URL.
STYLE_PROPERTIES = {"color", "background-color", "font-weight", "font-style", "text-decoration", "text-align"}
_STYLE_VALUE = re.compile(r"[\w\s#%.,:;()-]*")  # no quote, backslash (CSS escapes) or slash
IMAGE_DATA = re.compile(r"data:image/(png|jpeg|gif|webp|svg\+xml);base64,[A-Za-z0-9+/=\s]*", re.I)
LINK = re.compile(r"(https?|mailto):", re.I)
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
CSP_META = f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
_BODY = re.compile(r"<body\b", re.I)


def _allowed_value(tag: str, attribute: str, value: str) -> str | None:
    """nh3's attribute_filter: URLs and inline styles the allow-list keeps (None drops the attribute)."""
    if attribute == "src":
        return value if IMAGE_DATA.fullmatch(value) else None
    if attribute == "href":
        return value if value.startswith("#") or LINK.match(value) else None
    if attribute == "style":
        return value if _STYLE_VALUE.fullmatch(value) and not any(w in value.lower() for w in ("url", "expression")) \
            else None
    return value


def _nh3(fragment: str) -> str:
    return nh3.clean(fragment, tags=TAGS, attributes=ATTRIBUTES, clean_content_tags=REMOVED_WITH_CONTENT,
                     url_schemes={"http", "https", "mailto", "data"}, attribute_filter=_allowed_value,
                     filter_style_properties=STYLE_PROPERTIES, link_rel="noopener noreferrer")


def clean_fragment(fragment: str) -> str:
    """`fragment` with only the allow-list's tags, attributes and URLs, the round view's stylesheet kept."""
    # The stylesheet is set aside as a word nobody can guess, which nh3 keeps as text, and put back after.
    token = f"sdstyle{secrets.token_hex(16)}"
    return _nh3(str(fragment).replace(ROUNDS_STYLE, token)).replace(token, ROUNDS_STYLE)


class _Head(HTMLParser):
    """A page head's title and stylesheets."""

    def __init__(self):
        super().__init__()
        self.title, self.styles, self._in = "", [], None

    def handle_starttag(self, tag, attrs):
        if tag in ("title", "style"):
            self._in = tag
            if tag == "style":
                self.styles.append("")

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in == "title":
            self.title += data
        elif self._in == "style":
            self.styles[-1] += data


def clean_page(page: str) -> str:
    """A whole page as safe to open: a new head (charset, the Content-Security-Policy, the old head's title and
    stylesheets, none of its scripts) and the old body through `clean_fragment`."""
    split = _BODY.search(page)
    head, body = (page[:split.start()], page[split.start():]) if split else ("", page)
    parts = _Head()
    parts.feed(head)
    styles = "".join(f"<style>{css}</style>" for css in parts.styles)
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8">{CSP_META}<title>{html.escape(parts.title)}</title>'
            f"{styles}</head><body>{clean_fragment(body)}</body></html>\n")


class _Audit(HTMLParser):
    """Every tag, attribute and URL of a page checked against the allow-list, by Python's own parser."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.problems, self.csp, self._in_body, self._style = [], False, False, None

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "body":
            self._in_body = True
        elif tag == "meta" and not self._in_body and (attributes.get("http-equiv") or "").lower() == \
                "content-security-policy" and attributes.get("content") == CSP:
            self.csp = True
        elif tag == "style":
            self._style = ""
        elif not (tag in TAGS or (tag in ("html", "head", "title", "meta") and not self._in_body
                                  and set(attributes) <= {"charset"})):
            self.problems.append(f"<{tag}>")
        for name, value in attrs:
            self._attribute(tag, name, value or "")

    def _attribute(self, tag: str, name: str, value: str) -> None:
        """Its own reading of the rules, not _allowed_value's: a second opinion on nh3's output."""
        if tag in ("meta", "html", "head", "body"):
            return  # the meta tag is checked above; the others are the template's, and nh3 keeps none
        allowed = name in ATTRIBUTES["*"] | ATTRIBUTES.get(tag, set()) or (tag, name) == ("a", "rel")
        lowered = value.strip().lower()
        if name == "rel":
            allowed = value == "noopener noreferrer"  # nh3 gives every link this one
        elif name == "src":
            allowed = allowed and lowered.startswith("data:image/") and ";base64," in lowered
        elif name == "href":
            allowed = allowed and (lowered.startswith("#") or lowered.startswith(("http://", "https://", "mailto:")))
        elif name == "style":
            declared = {d.split(":")[0].strip() for d in lowered.split(";") if d.strip()}
            allowed = declared <= STYLE_PROPERTIES and not any(s in lowered for s in ("url", "expression", "\\", "/*"))
        if not allowed:
            self.problems.append(f"<{tag} {name}={value[:40]!r}>")

    def handle_data(self, data):
        if self._style is not None:
            self._style += data

    def handle_endtag(self, tag):
        if tag == "style" and self._style is not None:
            if self._in_body and f"<style>{self._style}</style>" != ROUNDS_STYLE:
                self.problems.append(f"<style> in the body: {self._style[:40]!r}")
            self._style = None


def unsafe(page: str) -> list[str]:
    """What `page` holds outside the allow-list (a tag, an attribute, a URL, a stylesheet in the body but the round
    view's), and whether it lacks the Content-Security-Policy: [] for a page clean_page wrote."""
    audit = _Audit()
    audit.feed(page)
    audit.close()
    return audit.problems + ([] if audit.csp else ["no Content-Security-Policy"])
