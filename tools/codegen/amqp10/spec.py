"""Load the AMQP 1.0 spec XML into a small typed model; only tools/codegen/amqp10 imports it.

Inputs: the ``*.bare.xml`` files of the 1.0 spec (``<amqp><section><type>…``, with
``<encoding>``, ``<descriptor>``, ``<field>`` and ``<choice>`` children, and
``<definition>`` constants) and the type-system document (the seed), whose primitive
encodings are the reference: the two must agree on every encoding or generation fails.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

NS = "{http://www.amqp.org/schema/amqp.xsd}"
CATEGORIES = frozenset({"fixed", "variable", "compound", "array"})


class SpecError(Exception):
    """The spec files are inconsistent or use something the generator does not know."""


@dataclass(frozen=True, slots=True)
class Encoding:
    """One format code of a primitive type."""

    type: str
    name: str  # "" for a type's unnamed encoding
    code: int
    category: str
    width: int


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a composite type."""

    name: str
    type: str
    mandatory: bool
    multiple: bool
    default: str | None
    requires: str | None


@dataclass(frozen=True, slots=True)
class Choice:
    name: str
    value: str


@dataclass(frozen=True, slots=True)
class TypeDef:
    """A ``<type>``: primitive, composite or restricted; described when it has a descriptor."""

    name: str
    kind: str  # primitive | composite | restricted
    source: str
    provides: tuple[str, ...]
    descriptor_name: str | None
    descriptor_code: int | None
    fields: tuple[Field, ...]
    choices: tuple[Choice, ...]
    section: str
    document: str


@dataclass(frozen=True, slots=True)
class Definition:
    name: str
    value: str
    document: str


@dataclass(frozen=True, slots=True)
class Spec:
    encodings: tuple[Encoding, ...]
    types: dict[str, TypeDef]
    definitions: tuple[Definition, ...]

    def primitive(self, type_name: str) -> str:
        """Follow restricted types down to their primitive (``handle`` → ``uint``)."""
        seen: set[str] = set()
        name = type_name
        while True:
            if name == "*":
                return "*"
            t = self.types.get(name)
            if t is None:
                raise SpecError(f"unknown type {name!r} (from {type_name!r})")
            if t.kind != "restricted" or t.descriptor_code is not None:
                return name
            if name in seen:
                raise SpecError(f"restricted type cycle at {name!r}")
            seen.add(name)
            name = t.source

    def described(self) -> list[TypeDef]:
        """Every type with a descriptor, in document order."""
        return [t for t in self.types.values() if t.descriptor_code is not None]


def _local(tag: str) -> str:
    return tag[len(NS) :] if tag.startswith(NS) else tag


def _children(elem: ET.Element, tag: str) -> list[ET.Element]:
    return [c for c in elem if _local(c.tag) == tag]


def _req(elem: ET.Element, attr: str) -> str:
    value = elem.get(attr)
    if value is None:
        raise SpecError(f"<{_local(elem.tag)} name={elem.get('name')!r}> has no {attr}=")
    return value


def _descriptor_code(text: str) -> int:
    """``0x00000000:0x00000010`` → ``(domain << 32) | id``."""
    try:
        domain, ident = text.split(":")
        return (int(domain, 16) << 32) | int(ident, 16)
    except ValueError as exc:
        raise SpecError(f"bad descriptor code {text!r}") from exc


def _parse_encodings(root: ET.Element) -> list[Encoding]:
    out = []
    for t in root.iter(f"{NS}type"):
        if t.get("class") != "primitive":
            continue
        for e in _children(t, "encoding"):
            category = _req(e, "category")
            if category not in CATEGORIES:
                raise SpecError(f"{t.get('name')}: unknown category {category!r}")
            out.append(
                Encoding(
                    type=_req(t, "name"),
                    name=e.get("name", ""),
                    code=int(_req(e, "code"), 16),
                    category=category,
                    width=int(_req(e, "width")),
                )
            )
    return out


def _parse_seed(path: Path) -> ET.Element:
    """The seed is the type-system XML behind one line of web-page scrape: skip to the XML."""
    text = path.read_text(encoding="utf-8")
    start = text.find("<?xml")
    if start < 0:
        raise SpecError(f"{path.name}: no XML declaration")
    return ET.fromstring(text[start:])


def load(documents: tuple[Path, ...], seed: Path) -> Spec:
    """Parse the spec ``documents`` (in order) and check their encodings against ``seed``."""
    types: dict[str, TypeDef] = {}
    definitions: list[Definition] = []
    encodings: list[Encoding] = []
    for path in documents:
        root = ET.parse(path).getroot()
        document = _req(root, "name")
        encodings.extend(_parse_encodings(root))
        for section in _children(root, "section"):
            sname = _req(section, "name")
            for t in _children(section, "type"):
                name = _req(t, "name")
                if name in types:
                    raise SpecError(f"type {name!r} defined twice")
                descs = _children(t, "descriptor")
                if len(descs) > 1:
                    raise SpecError(f"{name}: more than one descriptor")
                fields = tuple(
                    Field(
                        name=_req(f, "name"),
                        type=_req(f, "type"),
                        mandatory=f.get("mandatory") == "true",
                        multiple=f.get("multiple") == "true",
                        default=f.get("default"),
                        requires=f.get("requires"),
                    )
                    for f in _children(t, "field")
                )
                choices = tuple(
                    Choice(_req(c, "name"), _req(c, "value")) for c in _children(t, "choice")
                )
                provides = tuple(
                    p.strip() for p in (t.get("provides") or "").split(",") if p.strip()
                )
                types[name] = TypeDef(
                    name=name,
                    kind=_req(t, "class"),
                    source=t.get("source", ""),
                    provides=provides,
                    descriptor_name=_req(descs[0], "name") if descs else None,
                    descriptor_code=_descriptor_code(_req(descs[0], "code")) if descs else None,
                    fields=fields,
                    choices=choices,
                    section=sname,
                    document=document,
                )
            definitions.extend(
                Definition(_req(d, "name"), _req(d, "value"), document)
                for d in _children(section, "definition")
            )

    reference = _parse_encodings(_parse_seed(seed))
    if sorted(reference, key=lambda e: e.code) != sorted(encodings, key=lambda e: e.code):
        ours = {e.code: e for e in encodings}
        theirs = {e.code: e for e in reference}
        diff = sorted(
            code for code in ours.keys() | theirs.keys() if ours.get(code) != theirs.get(code)
        )
        raise SpecError(
            "the spec XML and the type-system reference disagree on format codes "
            + ", ".join(f"0x{c:02x}" for c in diff)
        )
    codes = [e.code for e in encodings]
    if len(set(codes)) != len(codes):
        raise SpecError("a format code is defined twice")

    spec = Spec(encodings=tuple(encodings), types=types, definitions=tuple(definitions))
    for typedef in spec.types.values():
        for f in typedef.fields:
            spec.primitive(f.type)  # every field type resolves
    return spec
