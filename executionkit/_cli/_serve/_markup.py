"""The one way text becomes HTML on the pages of ``executionkit serve``: escaped, unless markup.

Outputs, step names, questions, answers and errors are model or user text. A
page is built only from `Markup`, and a value becomes `Markup` only through
`markup` (which escapes it, quotes included, unless it already is markup), the
holes of a template filled by `html`, or `join`. So escaping is not a call to
remember at each value: a renderer that forgets it shows the value escaped, it
cannot put it on the page raw. The Content-Security-Policy the server sends
stays a second line, not the only one.

Trusted HTML comes only from the source: the templates of `html` are string
literals (``LiteralString``, which a type checker that knows it enforces).
"""

from __future__ import annotations

from html import escape as _escape
from typing import TYPE_CHECKING, LiteralString

if TYPE_CHECKING:
    from collections.abc import Iterable

_HOLE = "{}"


class Markup(str):
    """Text that is already HTML, to put on a page as it is.

    A `str` subclass rather than a frozen wrapper: a page goes on as a `str`
    to what serves it (encoded as the body, put in the JSON a live page
    polls, compared in tests) and all of that keeps working unchanged. The
    price is that `str`'s own methods (``+``, ``join``, slicing, ``format``)
    give a plain `str` back; that fails safe, since a plain `str` that
    meets `markup` is escaped: shown as text, never run. Build markup with
    `html`, `markup` and `join`; calling ``Markup(text)`` directly is a
    promise that ``text`` is HTML, which nothing but this module makes.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        """``Markup('...')``: tells markup from text in a failed assertion."""
        return f"Markup({str.__repr__(self)})"


def markup(value: object) -> Markup:
    """``value`` as markup: a `Markup` as it is, anything else ``str()``-ed and escaped.

    Escapes ``& < > " '``, so the result is safe between tags and inside a
    quoted attribute value alike.
    """
    if isinstance(value, Markup):
        return value
    return Markup(_escape(str(value), quote=True))


def html(template: LiteralString, *values: object) -> Markup:
    """The ``template`` (HTML, a literal) with each ``{}`` hole filled by `markup` of a value.

    Only the two characters ``{}`` make a hole: other braces stay as they are
    (``{"a": 1}`` in a hint needs no doubling).

    Raises:
        ValueError: If the template has not one hole per value.
    """
    pieces = template.split(_HOLE)
    if len(pieces) != len(values) + 1:
        msg = f"the template has {len(pieces) - 1} holes for {len(values)} values"
        raise ValueError(msg)
    filled = [pieces[0]]
    for value, piece in zip(values, pieces[1:], strict=True):
        filled += (markup(value), piece)
    return Markup("".join(filled))


def join(fragments: Iterable[object], separator: object = "") -> Markup:
    """The ``fragments`` one after the other, ``separator`` between: each through `markup`."""
    return Markup(markup(separator).join(markup(fragment) for fragment in fragments))
