"""Load an AMQP spec XML plus overlays into a small typed model; only tools/codegen imports it.

The XML shape is the one of ``amqp0-9-1.stripped.xml``: ``constant``, ``domain`` and
``class`` elements; a class holds property ``field``s and ``method``s, a method holds
``response``s and ``field``s (with ``domain=`` or ``type=``).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

PRIMITIVE_TYPES = frozenset(
    {"bit", "octet", "short", "long", "longlong", "timestamp", "shortstr", "longstr", "table"}
)


class SpecError(Exception):
    """The spec or an overlay is inconsistent."""


@dataclass(frozen=True, slots=True)
class Field:
    """A method argument or a content property."""

    name: str
    type: str
    reserved: bool


@dataclass(frozen=True, slots=True)
class Method:
    """One method of a class."""

    name: str
    index: int
    synchronous: bool
    content: bool
    responses: tuple[str, ...]
    fields: tuple[Field, ...]


@dataclass(frozen=True, slots=True)
class AmqpClass:
    """One class, its content properties and its methods (sorted by index)."""

    name: str
    index: int
    properties: tuple[Field, ...]
    methods: tuple[Method, ...]


@dataclass(frozen=True, slots=True)
class Constant:
    """A ``<constant>``; ``kind`` is ``soft-error``, ``hard-error`` or ``""``."""

    name: str
    value: int
    kind: str


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
    return int(value)


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
        if domain not in domains:
            raise SpecError(f"{where}.{name}: unknown domain {domain!r}")
        ftype = domains[domain]
    if ftype not in PRIMITIVE_TYPES:
        raise SpecError(f"{where}.{name}: unsupported type {ftype!r}")
    return Field(name=name, type=ftype, reserved=elem.get("reserved") == "1")


def load(spec_path: Path, overlays: tuple[Path, ...] = ()) -> Spec:
    """Parse ``spec_path``, apply ``overlays`` in order and build the model."""
    root = ET.parse(spec_path).getroot()
    for overlay in overlays:
        _merge(root, ET.parse(overlay).getroot(), overlay.name)

    domains: dict[str, str] = {}
    for d in root.findall("domain"):
        dtype = d.get("type", "")
        domains[d.get("name", "")] = domains.get(dtype, dtype)

    constants = tuple(
        Constant(name=c.get("name", ""), value=_int(c, "value"), kind=c.get("class", ""))
        for c in root.findall("constant")
    )

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
        revision=_int(root, "revision"),
        port=int(root.get("port", "5672")),
        constants=constants,
        classes=tuple(classes),
    )
