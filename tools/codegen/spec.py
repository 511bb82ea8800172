"""Load an AMQP spec XML plus overlays into a small typed model; only tools/codegen imports it.

The XML shape is the one of ``amqp0-9-1.stripped.xml``: ``constant``, ``domain`` and
``class`` elements; a class holds property ``field``s and ``method``s, a method holds
``response``s and ``field``s (with ``domain=`` or ``type=``) and, in the 0-9 working draft, a
``result`` struct.

The older spec files differ in spelling only, and are normalised here: 0-8 writes names with
spaces (``frame method``, ``soft error``), which become hyphens; the working draft carries an
XML namespace, hexadecimal constant values and no ``revision``. The draft itself is vendored
as scraped from a web view (:func:`clean_scraped` undoes that, see its docstring).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

PRIMITIVE_TYPES = frozenset(
    {"bit", "octet", "short", "long", "longlong", "timestamp", "shortstr", "longstr", "table"}
)
# Types only the 0-9 specs use: message.transfer's ``content`` (0-9), and the working draft's
# ``uuid``, ``rfc1982-long-set`` (ranges of serial numbers), ``long-struct`` (a typed result
# struct) and ``array`` (inside result structs).
LEGACY_TYPES = frozenset({"content", "uuid", "rfc1982-long-set", "long-struct", "array"})
ALL_TYPES = PRIMITIVE_TYPES | LEGACY_TYPES
ERROR_KINDS = ("soft-error", "hard-error")


class SpecError(Exception):
    """The spec or an overlay is inconsistent."""


@dataclass(frozen=True, slots=True)
class Field:
    """A method argument or a content property."""

    name: str
    type: str
    reserved: bool


@dataclass(frozen=True, slots=True)
class Result:
    """A method's ``<result>`` struct (working draft): sent back in ``execution.result``."""

    type_code: int
    fields: tuple[Field, ...]


@dataclass(frozen=True, slots=True)
class Method:
    """One method of a class."""

    name: str
    index: int
    synchronous: bool
    content: bool
    responses: tuple[str, ...]
    fields: tuple[Field, ...]
    result: Result | None = None


@dataclass(frozen=True, slots=True)
class AmqpClass:
    """One class, its content properties and its methods (sorted by index)."""

    name: str
    index: int
    properties: tuple[Field, ...]
    methods: tuple[Method, ...]


@dataclass(frozen=True, slots=True)
class Constant:
    """A ``<constant>``; ``kind`` is ``soft-error``, ``hard-error``, ``""`` or another class.

    ``datatype``, ``width`` and ``lfwidth`` describe the working draft's field-table type codes
    (``kind`` ``field-table-type``): a fixed width in octets, or the width of a length prefix.
    """

    name: str
    value: int
    kind: str
    datatype: str = ""
    width: int = 0
    lfwidth: int = 0


@dataclass(frozen=True, slots=True)
class Spec:
    """The merged spec; classes sorted by index."""

    major: int
    minor: int
    revision: int
    port: int
    constants: tuple[Constant, ...]
    classes: tuple[AmqpClass, ...]


def _int(elem: ET.Element, attr: str) -> int:
    value = elem.get(attr)
    if value is None:
        raise SpecError(f"<{elem.tag} name={elem.get('name')!r}> has no {attr}=")
    return int(value, 0)


_STRAY_LT = re.compile(r"<(?![A-Za-z/!?])")
_STRAY_AMP = re.compile(r"&(?!(?:lt|gt|amp|quot|apos|#\d+);)")


def clean_scraped(text: str) -> str:
    """Undo what the web view did to the vendored 0-9 working draft, nothing more.

    The scrape put a line holding only ``|`` between the lines of the file and a few lines of
    page text before ``<?xml``, and shows ``<=`` and ``&`` in ``<doc>`` text unescaped. Those
    lines are dropped and the two characters escaped, so the XML parses; no element or
    attribute is changed.
    """
    lines = [line for line in text.splitlines() if line.strip() != "|"]
    body = "\n".join(lines)
    start = body.find("<?xml")
    if start < 0:
        raise SpecError("scraped spec: no <?xml declaration")
    body = _STRAY_LT.sub("&lt;", body[start:])
    return _STRAY_AMP.sub("&amp;", body)


_NAMED_ATTRS = ("name", "domain", "type", "class", "replaces")


def _normalise(root: ET.Element) -> None:
    """Drop XML namespaces and write 0-8's spaced names with hyphens, in place."""
    for elem in root.iter():
        if isinstance(elem.tag, str) and elem.tag.startswith("{"):
            elem.tag = elem.tag.split("}", 1)[1]
        for attr in _NAMED_ATTRS:
            value = elem.get(attr)
            if value is not None and " " in value:
                elem.set(attr, value.strip().replace(" ", "-"))


def _parse(path: Path, *, scraped: bool = False) -> ET.Element:
    if scraped:
        root = ET.fromstring(clean_scraped(path.read_text(encoding="utf-8")))
    else:
        root = ET.parse(path).getroot()
    _normalise(root)
    return root


def _find_named(parent: ET.Element, tag: str, name: str) -> ET.Element | None:
    for child in parent.findall(tag):
        if child.get("name") == name:
            return child
    return None


def _merge(root: ET.Element, overlay: ET.Element, origin: str) -> None:
    """Apply one overlay to the spec tree in place (rules in overlays/rabbitmq.xml)."""
    for elem in overlay:
        name = elem.get("name", "")
        if elem.tag in ("constant", "domain"):
            old = _find_named(root, elem.tag, name)
            if old is None:
                # Keep constants before domains and domains before classes.
                anchor = root.findall(elem.tag)
                pos = list(root).index(anchor[-1]) + 1 if anchor else 0
                root.insert(pos, elem)
            else:
                old.attrib.update(elem.attrib)
        elif elem.tag == "class":
            target = _find_named(root, "class", name)
            if target is None:
                root.append(elem)
                continue
            for child in elem:
                if child.tag == "method":
                    mname = child.get("name", "")
                    if _find_named(target, "method", mname) is not None:
                        raise SpecError(f"{origin}: method {name}.{mname} already exists")
                    index = child.get("index")
                    if any(m.get("index") == index for m in target.findall("method")):
                        raise SpecError(f"{origin}: method index {name}/{index} already taken")
                    target.append(child)
                elif child.tag == "field":
                    replaces = child.get("replaces")
                    if replaces is None:
                        target.append(child)
                        continue
                    old = _find_named(target, "field", replaces)
                    if old is None:
                        raise SpecError(f"{origin}: {name} has no property {replaces}")
                    old.attrib.clear()
                    old.attrib.update({k: v for k, v in child.attrib.items() if k != "replaces"})
                else:
                    raise SpecError(f"{origin}: unsupported <{child.tag}> in <class>")
        else:
            raise SpecError(f"{origin}: unsupported top-level <{elem.tag}>")


def _field(elem: ET.Element, domains: dict[str, str], where: str) -> Field:
    name = elem.get("name")
    if not name:
        raise SpecError(f"{where}: field without a name")
    domain = elem.get("domain")
    ftype = elem.get("type")
    if domain is not None:
        if domain in domains:
            ftype = domains[domain]
        elif domain in LEGACY_TYPES:
            # 0-9 uses domain="content" without declaring it; the draft declares it as a type.
            ftype = domain
        else:
            raise SpecError(f"{where}.{name}: unknown domain {domain!r}")
    if ftype not in ALL_TYPES:
        raise SpecError(f"{where}.{name}: unsupported type {ftype!r}")
    return Field(name=name, type=ftype, reserved=elem.get("reserved") == "1")


def _result(method: ET.Element, domains: dict[str, str], where: str) -> Result | None:
    result = method.find("result")
    if result is None:
        return None
    struct = result.find("struct")
    if struct is None:
        raise SpecError(f"{where}: <result> without a <struct>")
    return Result(
        type_code=_int(struct, "type"),
        fields=tuple(_field(f, domains, f"{where} result") for f in struct.findall("field")),
    )


def _constant(c: ET.Element) -> Constant:
    return Constant(
        name=c.get("name", ""),
        value=_int(c, "value"),
        kind=c.get("class", ""),
        datatype=c.get("datatype", ""),
        width=int(c.get("width", "0")),
        lfwidth=int(c.get("lfwidth", "0")),
    )


def load(spec_path: Path, overlays: tuple[Path, ...] = (), *, scraped: bool = False) -> Spec:
    """Parse ``spec_path``, apply ``overlays`` in order and build the model.

    ``scraped`` marks the web-view copy of the 0-9 working draft (:func:`clean_scraped`).
    """
    root = _parse(spec_path, scraped=scraped)
    for overlay in overlays:
        _merge(root, _parse(overlay), overlay.name)

    # Struct-valued domains (the draft's message headers) have no type=; a field that used
    # one would fail below as an unknown domain.
    domains: dict[str, str] = {}
    for d in root.findall("domain"):
        dtype = d.get("type")
        if dtype is not None:
            domains[d.get("name", "")] = domains.get(dtype, dtype)

    constants = tuple(_constant(c) for c in root.findall("constant"))

    classes: list[AmqpClass] = []
    for c in root.findall("class"):
        cname = c.get("name", "")
        props = tuple(_field(f, domains, cname) for f in c.findall("field"))
        methods: list[Method] = []
        for m in c.findall("method"):
            mname = m.get("name", "")
            where = f"{cname}.{mname}"
            methods.append(
                Method(
                    name=mname,
                    index=_int(m, "index"),
                    synchronous=m.get("synchronous") == "1",
                    content=m.get("content") == "1",
                    responses=tuple(r.get("name", "") for r in m.findall("response")),
                    fields=tuple(_field(f, domains, where) for f in m.findall("field")),
                    result=_result(m, domains, where),
                )
            )
        methods.sort(key=lambda meth: meth.index)
        classes.append(
            AmqpClass(name=cname, index=_int(c, "index"), properties=props, methods=tuple(methods))
        )
    classes.sort(key=lambda cls: cls.index)

    seen: set[tuple[int, int]] = set()
    for cls in classes:
        for meth in cls.methods:
            key = (cls.index, meth.index)
            if key in seen:
                raise SpecError(f"duplicate method index {key}")
            seen.add(key)

    return Spec(
        major=_int(root, "major"),
        minor=_int(root, "minor"),
        revision=int(root.get("revision", "0")),
        port=int(root.get("port", "5672")),
        constants=constants,
        classes=tuple(classes),
    )
