"""Load the AMQP 0-10 spec XML into a small typed model; only tools/codegen/amqp010 imports it.

The XML (namespace ``http://www.amqp.org/schema/amqp.xsd``) has top-level ``type``,
``constant`` and ``domain`` elements, then ``class`` elements holding ``domain``, ``struct``,
``control`` and ``command``; a command may hold a ``result`` (a struct type or an inline
``struct``) and ``segments`` (``header`` entries, ``body``).  Field and domain types are
resolved as Qpid resolves them: ``<class>.<type>`` first, then the top-level name, following
domains until a primitive type or a struct.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

NS = "{http://www.amqp.org/schema/amqp.xsd}"

# Domains whose arrays hold str16 items (the spec says so in their docs, not in the XML).
STR16_ARRAYS = frozenset({"str16-array", "connection.amqp-host-array"})


class SpecError(Exception):
    """The spec is inconsistent or uses something the generator does not support."""


@dataclass(frozen=True, slots=True)
class Type:
    """A ``<type>``: code (``None`` for the types that never appear in maps) and width."""

    name: str
    code: int | None
    fixed_width: int | None
    variable_width: int | None


@dataclass(frozen=True, slots=True)
class Choice:
    name: str
    value: int


@dataclass(frozen=True, slots=True)
class Enum:
    """A domain with an ``<enum>``; ``qualified`` is ``class.domain`` or the domain name."""

    qualified: str
    type: str
    choices: tuple[Choice, ...]


@dataclass(frozen=True, slots=True)
class Field:
    """A struct/control/command field.

    ``kind`` is the resolved primitive type name, ``"struct"`` (then ``struct`` names the
    qualified struct) or ``"str16-array"``; ``domain`` is the enum domain it uses, if any.
    """

    name: str
    kind: str
    struct: str | None
    required: bool
    default: bool
    domain: str | None


@dataclass(frozen=True, slots=True)
class Struct:
    """A struct (class-level or a command's result); ``code`` includes the class code."""

    qualified: str
    name: str
    class_name: str
    code: int | None
    size: int
    pack: int
    fields: tuple[Field, ...]


@dataclass(frozen=True, slots=True)
class Op:
    """A control or a command."""

    class_name: str
    name: str
    code: int
    is_command: bool
    fields: tuple[Field, ...]
    responses: tuple[str, ...]
    result: str | None
    header_entries: tuple[str, ...]
    header_required: bool
    has_body: bool


@dataclass(frozen=True, slots=True)
class Spec:
    major: int
    minor: int
    port: int
    types: tuple[Type, ...]
    constants: tuple[tuple[str, int], ...]
    enums: tuple[Enum, ...]
    structs: tuple[Struct, ...]
    controls: tuple[Op, ...]
    commands: tuple[Op, ...]
    classes: tuple[tuple[str, int], ...]


def _tag(elem: ET.Element) -> str:
    return elem.tag.removeprefix(NS)


def _children(elem: ET.Element, tag: str) -> list[ET.Element]:
    return [c for c in elem if _tag(c) == tag]


def _num(value: str | None) -> int | None:
    return None if value is None else int(value, 0)


def _req(elem: ET.Element, attr: str) -> str:
    value = elem.get(attr)
    if value is None:
        raise SpecError(f"<{_tag(elem)} name={elem.get('name')!r}> has no {attr}=")
    return value


class _Resolver:
    def __init__(self, root: ET.Element) -> None:
        self.primitives = {_req(t, "name") for t in _children(root, "type")}
        self.domains: dict[str, str] = {}
        self.structs: set[str] = set()
        for d in _children(root, "domain"):
            self.domains[_req(d, "name")] = _req(d, "type")
        for c in _children(root, "class"):
            cname = _req(c, "name")
            for d in _children(c, "domain"):
                self.domains[f"{cname}.{_req(d, 'name')}"] = _req(d, "type")
            for s in _children(c, "struct"):
                self.structs.add(f"{cname}.{_req(s, 'name')}")
            for cmd in _children(c, "command"):
                for r in _children(cmd, "result"):
                    for s in _children(r, "struct"):
                        self.structs.add(f"{cname}.{_req(s, 'name')}")

    def resolve(self, cname: str, tname: str, where: str) -> tuple[str, list[str]]:
        """Return (final name, domains passed through) for type ``tname`` used in ``cname``."""
        seen: list[str] = []
        name = tname
        scope = cname
        for _ in range(20):
            candidates = [f"{scope}.{name}", name] if scope else [name]
            for cand in candidates:
                if cand in self.structs:
                    return cand, seen
                if cand in self.domains:
                    seen.append(cand)
                    name = self.domains[cand]
                    scope = cand.split(".")[0] if "." in cand else ""
                    break
                if cand in self.primitives:
                    return cand, seen
            else:
                raise SpecError(f"{where}: unknown type {tname!r}")
        raise SpecError(f"{where}: domain loop at {tname!r}")


def _field(f: ET.Element, cname: str, res: _Resolver, enums: set[str], where: str) -> Field:
    name = _req(f, "name")
    final, seen = res.resolve(cname, _req(f, "type"), f"{where}.{name}")
    domain = next((d for d in seen if d in enums), None)
    if any(d in STR16_ARRAYS for d in seen):
        kind, struct = "str16-array", None
    elif final in res.structs:
        kind, struct = "struct", final
    else:
        kind, struct = final, None
    default = f.get("default")
    if default is not None and kind != "bit":
        raise SpecError(f"{where}.{name}: default= is only supported on bit fields")
    return Field(
        name=name,
        kind=kind,
        struct=struct,
        required=f.get("required") == "true",
        default=default == "1",
        domain=domain,
    )


def _struct(s: ET.Element, cname: str, ccode: int, res: _Resolver, enums: set[str]) -> Struct:
    name = _req(s, "name")
    code = _num(s.get("code"))
    return Struct(
        qualified=f"{cname}.{name}",
        name=name,
        class_name=cname,
        code=None if code is None else ccode << 8 | code,
        size=int(_req(s, "size")),
        pack=int(_req(s, "pack")),
        fields=tuple(
            _field(f, cname, res, enums, f"{cname}.{name}") for f in _children(s, "field")
        ),
    )


def load(path: Path) -> Spec:
    """Parse the spec at ``path``."""
    root = ET.parse(path).getroot()
    if _tag(root) != "amqp":
        raise SpecError(f"{path}: root element is <{_tag(root)}>, not <amqp>")
    res = _Resolver(root)

    types = tuple(
        Type(
            name=_req(t, "name"),
            code=_num(t.get("code")),
            fixed_width=_num(t.get("fixed-width")),
            variable_width=_num(t.get("variable-width")),
        )
        for t in _children(root, "type")
    )
    constants = tuple(
        (_req(c, "name"), int(_req(c, "value"), 0)) for c in _children(root, "constant")
    )

    enums: list[Enum] = []

    def collect_enums(parent: ET.Element, prefix: str) -> None:
        enums.extend(
            Enum(
                qualified=prefix + _req(d, "name"),
                type=_req(d, "type"),
                choices=tuple(
                    Choice(_req(ch, "name"), int(_req(ch, "value"), 0))
                    for ch in _children(e, "choice")
                ),
            )
            for d in _children(parent, "domain")
            for e in _children(d, "enum")
        )

    collect_enums(root, "")
    for c in _children(root, "class"):
        collect_enums(c, f"{_req(c, 'name')}.")
    enum_names = {e.qualified for e in enums}

    structs: list[Struct] = []
    controls: list[Op] = []
    commands: list[Op] = []
    classes: list[tuple[str, int]] = []
    for c in _children(root, "class"):
        cname = _req(c, "name")
        ccode = int(_req(c, "code"), 0)
        classes.append((cname, ccode))
        structs.extend(_struct(s, cname, ccode, res, enum_names) for s in _children(c, "struct"))
        for tag, out in (("control", controls), ("command", commands)):
            for op in _children(c, tag):
                oname = _req(op, "name")
                where = f"{cname}.{oname}"
                result: str | None = None
                for r in _children(op, "result"):
                    inline = _children(r, "struct")
                    if inline:
                        inline_struct = _struct(inline[0], cname, ccode, res, enum_names)
                        structs.append(inline_struct)
                        result = inline_struct.qualified
                    else:
                        rtype, _ = res.resolve(cname, _req(r, "type"), f"{where} result")
                        if rtype not in res.structs:
                            raise SpecError(f"{where}: result type {rtype!r} is not a struct")
                        result = rtype
                entries: list[str] = []
                header_required = False
                has_body = False
                for segs in _children(op, "segments"):
                    for h in _children(segs, "header"):
                        header_required = h.get("required") == "true"
                        for e in _children(h, "entry"):
                            etype, _ = res.resolve(cname, _req(e, "type"), f"{where} header")
                            entries.append(etype)
                    has_body = bool(_children(segs, "body"))
                out.append(
                    Op(
                        class_name=cname,
                        name=oname,
                        code=ccode << 8 | int(_req(op, "code"), 0),
                        is_command=tag == "command",
                        fields=tuple(
                            _field(f, cname, res, enum_names, where) for f in _children(op, "field")
                        ),
                        responses=tuple(_req(r, "name") for r in _children(op, "response")),
                        result=result,
                        header_entries=tuple(entries),
                        header_required=header_required,
                        has_body=has_body,
                    )
                )

    for kind, ops in (("control", controls), ("command", commands)):
        codes = [op.code for op in ops]
        if len(codes) != len(set(codes)):
            raise SpecError(f"duplicate {kind} codes")
    coded = [s.code for s in structs if s.code is not None]
    if len(coded) != len(set(coded)):
        raise SpecError("duplicate struct codes")
    by_name = {s.qualified: s for s in structs}
    for s in structs:
        for f in s.fields:
            if f.kind == "bit" and s.pack == 0:
                raise SpecError(f"{s.qualified}.{f.name}: bit field in an unpacked struct")
            if f.struct is not None and f.struct not in by_name:
                raise SpecError(f"{s.qualified}.{f.name}: unknown struct {f.struct}")

    return Spec(
        major=int(_req(root, "major")),
        minor=int(_req(root, "minor")),
        port=int(root.get("port", "5672")),
        types=types,
        constants=constants,
        enums=tuple(enums),
        structs=tuple(structs),
        controls=tuple(controls),
        commands=tuple(commands),
        classes=tuple(classes),
    )
