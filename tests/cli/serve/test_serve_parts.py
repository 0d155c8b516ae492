"""Live updates send what changed: `split` cuts a main into parts, `Renders` diffs renders."""

from __future__ import annotations

import re
import threading
from html import escape, unescape
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from executionkit._cli._serve._markup import html, join
from executionkit._cli._serve._parts import Renders, _children, _closing, split, version_of


def rebuilt(skeleton: str, parts: dict[str, str]) -> str:
    """The main again: each marker of the skeleton (a key as escaped) replaced by its part."""
    pieces = skeleton.split("\x00")
    return "".join(
        piece if index % 2 == 0 else parts[unescape(piece)] for index, piece in enumerate(pieces)
    )


def test_split_cuts_the_outermost_parts_whatever_they_hold() -> None:
    main = (
        "<h2>Steps</h2><table><tbody>"
        '<tr class="step-row" data-part="step:a"><td><table><tr><td>x</td></tr></table></td></tr>'
        '<tr data-part="step:b"><td><br/><img src="x"/></td></tr>'
        "</tbody></table>"
        '<svg><g class="node" data-part="node:a"><rect/><g><text>a</text></g></g></svg>'
    )
    cut = split(main)
    assert cut is not None
    skeleton, parts = cut
    assert list(parts) == ["step:a", "step:b", "node:a"]
    assert parts["step:a"].startswith('<tr class="step-row"')
    assert parts["step:a"].endswith("</table></td></tr>")
    assert parts["node:a"] == '<g class="node" data-part="node:a"><rect/><g><text>a</text></g></g>'
    assert "step:a" in skeleton
    assert "<td>x</td>" not in skeleton
    assert rebuilt(skeleton, parts) == main


def test_keys_are_unescaped_and_hostile_names_stay_inside_their_part() -> None:
    name = '</tr><tr data-part="step:evil">&"<'
    row = html('<tr data-part="step:{}"><td>{}</td></tr>', name, name)
    cut = split(str(join([row, html("<p>after</p>")])))
    assert cut is not None
    _skeleton, parts = cut
    assert list(parts) == [f"step:{name}"]
    assert parts[f"step:{name}"] == str(row)


def test_no_parts_an_unclosed_part_or_a_repeated_key_sends_the_page_whole() -> None:
    assert split("<p>nothing to cut</p>") is None
    assert split('<div data-part="a"><div></div>') is None
    assert split('<p data-part="a">1</p><p data-part="a">2</p>') is None


def page(rows: dict[str, str], title: str = "Run") -> str:
    body = "".join(
        f'<tr data-part="step:{k}"><td>{k}</td><td>{v}</td></tr>' for k, v in rows.items()
    )
    return f"<h1>{title}</h1><table>{body}</table>"


def test_renders_send_only_the_parts_that_changed_since_the_page_s_version() -> None:
    renders = Renders()
    rows = {f"s{n}": "pending" for n in range(1000)}
    first = page(rows)
    version = renders.remember(first)
    assert version == version_of(first)
    rows["s500"] = "done"
    second = page(rows)
    answer = renders.since(second, version)
    assert answer == {"v": version_of(second), "parts": {"step:s500": rows_part("s500", "done")}}
    assert len(str(answer)) < 200
    # Nothing changed: the version alone.
    assert renders.since(second, answer["v"]) == {"v": answer["v"]}
    # The skeleton changed (the title), or a row came: the whole main.
    assert renders.since(page(rows, "Run 2"), answer["v"])["html"] == page(rows, "Run 2")
    more = {**rows, "s1000": "pending"}
    assert renders.since(page(more), answer["v"])["html"] == page(more)
    # A version the server does not know (a restart, or evicted): the whole main.
    assert Renders().since(second, version)["html"] == second
    assert renders.since(second, None)["html"] == second


def rows_part(key: str, value: str) -> str:
    return f'<tr data-part="step:{key}"><td>{key}</td><td>{value}</td></tr>'


def test_renders_forget_the_oldest_versions_beyond_what_they_keep() -> None:
    renders = Renders(keep=3)
    versions = [renders.remember(page({"a": str(n)})) for n in range(5)]
    assert "html" in renders.since(page({"a": "x"}), versions[0])
    assert "parts" in renders.since(page({"a": "y"}), versions[-1])


def test_renders_are_shared_by_threads_without_a_lost_or_wrong_answer() -> None:
    renders = Renders(keep=64)
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def follow(thread: int) -> None:
        try:
            barrier.wait()
            known = renders.remember(page({"a": "0", "b": str(thread)}))
            for n in range(1, 50):
                main = page({"a": str(n), "b": str(thread)})
                answer = renders.since(main, known)
                if "parts" in answer:
                    assert answer["parts"] == {"step:a": rows_part("a", str(n))}
                else:
                    assert answer["html"] == main
                known = answer["v"]
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=follow, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


# (No NUL: the skeleton marks a part with it; a key holding one still splits and diffs.)
names = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"], exclude_characters="\x00"),
    max_size=8,
)


@given(st.lists(st.tuples(names, names, st.booleans()), max_size=12, unique_by=lambda t: t[0]))
def test_any_page_of_escaped_parts_rebuilds_from_its_skeleton_and_parts(
    rows: list[tuple[str, str, bool]],
) -> None:
    main = str(
        join(
            [
                html("<h2>{}</h2>", "title"),
                *(
                    html('<div data-part="{}"><div>{}</div></div>', key, text)
                    if wrapped
                    else html('<tr data-part="{}"><td>{}</td></tr>', key, text)
                    for key, text, wrapped in rows
                ),
            ]
        )
    )
    cut = split(main)
    if not rows:
        assert cut is None
        return
    assert cut is not None
    skeleton, parts = cut
    assert list(parts) == [key for key, _text, _wrapped in rows]
    assert rebuilt(skeleton, parts) == main


# --- lists: children that come, go or move ------------------------------------------------


def listed(rows: dict[str, str], edges: list[str], title: str = "Run") -> str:
    """A page with two lists: table rows (parts), and an SVG of edges (not parts) and nodes."""
    body = "".join(
        str(html('<tr data-part="step:{}"><td>{}</td><td>{}</td></tr>', key, key, value))
        for key, value in rows.items()
    )
    drawn = "".join(html('<path d="{}"/>', edge) for edge in edges)
    nodes = "".join(
        str(html('<g data-part="node:{}"><text>{}</text></g>', key, key)) for key in rows
    )
    return (
        f'<h1>{title}</h1><table><tbody data-list="steps">{body}</tbody></table>'
        f'<div class="box"><svg data-list="graph" height="{len(rows) * 10}" role="img">'
        f"{drawn}{nodes}</svg></div>"
    )


def applied(old: str, answer: dict[str, Any]) -> str:
    """What the page's script makes of the main ``old`` with ``answer`` (serve.js, in Python)."""
    if "html" in answer:
        return str(answer["html"])
    text = old
    for key, change in answer.get("lists", {}).items():
        found = re.search(rf'<([a-z]+)\b[^>]*?\sdata-list="{re.escape(escape(key))}"[^>]*>', text)
        assert found is not None, key
        closing = _closing(text, found.end(), found.group(1))
        assert closing is not None
        children = _children(text[found.end() : closing[0]])
        assert children is not None
        shown: list[str] = []
        at = 0
        for kind, value in change["ops"]:
            if kind == "k":
                shown += [markup for _key, markup in children[at : at + value]]
                at += value
            elif kind == "d":
                at += value
            else:
                shown.append(value)
        assert at == len(children), change
        opening = found.group(0)
        if "attrs" in change:
            written = " ".join(f'{name}="{escape(v)}"' for name, v in change["attrs"].items())
            opening = f"<{found.group(1)} {written}>"
        text = text[: found.start()] + opening + "".join(shown) + text[closing[0] :]
    for key, markup in answer.get("parts", {}).items():
        cut = split(text)
        assert cut is not None
        assert key in cut[1], key
        text = text.replace(cut[1][key], markup, 1)
    return text


def test_a_row_added_to_a_list_is_sent_alone_with_its_node_and_edge() -> None:
    renders = Renders()
    rows = {f"s{n}": "done" for n in range(500)}
    edges = [f"M{n}" for n in range(499)]
    first = listed(rows, edges)
    version = renders.remember(first)
    rows["s499"] = "running"
    rows["s500"] = "running"
    edges.append("M499")
    second = listed(rows, edges)
    answer = renders.since(second, version)
    assert "html" not in answer
    assert answer["parts"] == {"step:s499": rows_part("s499", "running")}
    assert answer["lists"] == {
        "steps": {"ops": [["k", 500], ["i", rows_part("s500", "running")]]},
        "graph": {
            "ops": [
                ["k", 499],
                ["i", '<path d="M499"/>'],
                ["k", 500],
                ["i", '<g data-part="node:s500"><text>s500</text></g>'],
            ],
            "attrs": {"data-list": "graph", "height": "5010", "role": "img"},
        },
    }
    assert len(str(answer)) < 600
    assert applied(first, answer) == second


def test_rows_deleted_or_moved_and_an_edge_changed_are_list_operations() -> None:
    renders = Renders()
    first = listed({"a": "1", "b": "2", "c": "3"}, ["ab", "bc"])
    version = renders.remember(first)
    second = listed({"c": "3", "a": "1"}, ["ca"])
    answer = renders.since(second, version)
    assert "html" not in answer
    assert answer["lists"]["steps"]["ops"] == [
        ["i", rows_part("c", "3")],
        ["k", 1],
        ["d", 2],
    ]
    assert applied(first, answer) == second


def test_text_in_a_list_or_a_list_s_outline_changing_sends_the_main_whole() -> None:
    renders = Renders()
    first = listed({"a": "1"}, [])
    version = renders.remember(first)
    texty = first.replace('<tbody data-list="steps">', '<tbody data-list="steps">loose text')
    assert renders.since(texty, version)["html"] == texty
    retitled = listed({"a": "1"}, [], "Run 2")
    assert renders.since(retitled, version)["html"] == retitled
    unclosed = '<div data-list="x"><p data-part="p">1</p>'
    assert Renders().since(unclosed, None)["html"] == unclosed
    twice = '<ul data-list="x"><li data-part="a">1</li></ul><ul data-list="x"></ul>'
    known = renders.remember('<ul data-list="x"><li data-part="a">0</li></ul>')
    assert renders.since(twice, known)["html"] == twice


keys = st.text(alphabet="abcdefgh<&\"'/", min_size=1, max_size=4)


@given(
    st.dictionaries(keys, names, max_size=8),
    st.dictionaries(keys, names, max_size=8),
    st.lists(names, max_size=5),
    st.lists(names, max_size=5),
)
def test_any_change_of_lists_and_parts_rebuilds_the_new_main_from_the_old(
    old_rows: dict[str, str], new_rows: dict[str, str], old_edges: list[str], new_edges: list[str]
) -> None:
    """Applied as the page's script applies it, an answer turns the old main into the new one."""
    old = listed(old_rows, old_edges)
    new = listed(new_rows, new_edges)
    renders = Renders()
    answer = renders.since(new, renders.remember(old))
    assert applied(old, answer) == new
    if old_rows and new_rows:  # parts on both sides, the outline the same: never whole
        assert "html" not in answer


def test_an_element_holding_a_part_is_inserted_with_the_part_whole() -> None:
    def wrapped(items: list[tuple[str, str]]) -> str:
        boxes = "".join(f'<li class="w"><span data-part="{k}">{v}</span></li>' for k, v in items)
        return f'<h1>t</h1><ul data-list="l">{boxes}</ul>'

    renders = Renders()
    old = wrapped([("a", "1")])
    answer = renders.since(wrapped([("a", "1"), ("b", "2")]), renders.remember(old))
    assert answer["lists"] == {
        "l": {"ops": [["k", 1], ["i", '<li class="w"><span data-part="b">2</span></li>']]}
    }
    assert answer["parts"] == {}
    assert applied(old, answer) == wrapped([("a", "1"), ("b", "2")])
    # A part inside a kept element changes: the part alone, the list as it was.
    later = renders.since(wrapped([("a", "9"), ("b", "2")]), answer["v"])
    assert later == {"v": later["v"], "parts": {"a": '<span data-part="a">9</span>'}}
