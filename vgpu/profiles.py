"""Load profiles: a shipped name or a YAML file, ``extends`` resolved, validated into a Profile.

This is the edge where profile text becomes a typed :class:`~vgpu.model.profile.Profile`;
every failure is a :class:`ProfileError` (an InputError, exit code 5) whose lines each read
``FILE: field.path: problem``. Shipped profiles live in the repository's ``profiles/``, which
the package carries as ``vgpu/shipped_profiles`` (a link, so ``profiles/`` stays the single
source) and reads through importlib.resources, so an installed wheel finds them too.

Defences against hostile files: a size cap, UTF-8 text only, no YAML aliases (billion-laughs
bombs), bounded nesting, duplicate keys refused, ``extends`` chains bounded and cycle-checked.
"""

from __future__ import annotations

import functools
import json
import re
import types
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from vgpu import inputs
from vgpu.catalog import DEFAULT, Catalog
from vgpu.errors import InputError
from vgpu.model.profile import FieldError, Profile

MAX_BYTES = inputs.LIMITS["profile"]  # the largest shipped profile is under 2 KiB
MAX_NESTING = 16  # the schema nests 4 levels deep
MAX_EXTENDS = 8
SHIPPED_DIR = "shipped_profiles"
# Replaced whole when a child sets them, never merged key by key: merging two selections or two
# VM maps would build a combination nobody wrote.
_ATOMIC = {("gpu", "select"), ("vms", "assign")}
_NOT_INHERITED = ("name", "description", "extends")


class ProfileError(InputError):
    """A profile that cannot be used. ``problems`` holds one ``FILE: path: problem`` line per problem."""

    def __init__(self, problems: list[str]):
        self.problems = tuple(problems)
        super().__init__("; ".join(problems), hint="see docs/profiles.md for every field and rule")


@dataclass
class _Doc:
    label: str  # how messages name the file
    key: str  # identity for cycle detection
    data: dict[str, Any]
    base: Path | None  # directory for a relative ``extends``; None for shipped profiles
    stem: str


@dataclass
class _Merged:
    data: dict[str, Any] = field(default_factory=dict)
    blame: dict[tuple, str] = field(default_factory=dict)  # field path -> file that set it
    lineage: list[str] = field(default_factory=list)


def shipped_dir() -> Traversable:
    return resources.files("vgpu").joinpath(SHIPPED_DIR)


def shipped_names() -> list[str]:
    """Names of the profiles shipped with vgpu, sorted."""
    return sorted(p.name[:-5] for p in shipped_dir().iterdir() if p.name.endswith(".yaml"))


def list_profiles(catalog: Catalog = DEFAULT) -> list[Profile]:
    """Every shipped profile, loaded and validated (a broken one raises ProfileError)."""
    return [load_profile(name, catalog=catalog) for name in shipped_names()]


def load_profile(ref: str | Path, *, catalog: Catalog = DEFAULT) -> Profile:
    """Load a shipped profile by name, or a profile file by path; resolve ``extends``; validate.

    A ``ref`` with a '/' or a .yaml/.yml suffix is a path; otherwise a shipped name is tried
    first, then a file of that name. Raises ProfileError (an InputError) for every problem.
    """
    if isinstance(ref, str) and not _looks_like_path(ref) and ref in shipped_names():
        return _finish(_resolve(_shipped_doc(ref, f"profile {ref!r}")), catalog)
    path = Path(ref)
    if isinstance(ref, str) and not _looks_like_path(ref) and not path.exists():
        raise ProfileError([f"{ref}: no shipped profile and no file of that name (shipped: "
                            f"{', '.join(shipped_names())})"])
    return _finish(_resolve(_file_doc(path, str(ref))), catalog)


def load_profile_text(text: str | bytes, *, source: str = "<text>", base_dir: Path | None = None,
                      catalog: Catalog = DEFAULT) -> Profile:
    """Validate profile text (a recorded profile, a test case). A relative ``extends`` resolves from base_dir."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    data = _parse(raw, source)
    stem = Path(source).stem if source.endswith((".yaml", ".yml")) else "profile"
    doc = _Doc(source, f"text:{source}", data, base_dir or Path.cwd(), stem)
    return _finish(_resolve(doc), catalog)


def load_profile_data(data: Any, *, source: str, catalog: Catalog = DEFAULT) -> Profile:
    """Validate a resolved profile that is already data (the one a state record carries, read as JSON): the
    checks of a file after its YAML is parsed. Being resolved, it has no ``extends`` (which would make vgpu
    read whatever file a tampered record names)."""
    if not isinstance(data, dict):
        raise ProfileError([f"{source}: a profile is a mapping (key: value), not a {type(data).__name__}"])
    if "extends" in data:
        raise ProfileError([f"{source}: extends: not allowed here (a recorded profile is already resolved)"])
    return _finish(_resolve(_Doc(source, f"data:{source}", data, None, "profile")), catalog)


def dump_profile(profile: Profile) -> str:
    """The resolved profile as YAML, which load_profile_text() reads back to an equal profile."""
    import yaml  # here: reading profiles goes through vgpu.inputs, and status reads its record as JSON

    data = profile.to_dict()
    if not data.get("validation"):
        data.pop("validation", None)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=False, width=1000)


def profile_json_schema() -> dict[str, Any]:
    """JSON schema of the profile file format, for editors (committed as vgpu/schemas/profile-v1.json).

    Generated from the model, with changes for files that use ``extends``: only ``version`` is
    required (a child may leave out what its parent sets), ``extends`` is allowed, and
    ``select: all`` is accepted as the shorthand the model takes.
    """
    return json.loads(schema_text())


@functools.lru_cache(maxsize=1)
def schema_text() -> str:
    return json.dumps(_build_schema(), indent=2, sort_keys=True) + "\n"


def _build_schema() -> dict[str, Any]:
    schema = Profile.model_json_schema()
    for definition in [schema, *schema.get("$defs", {}).values()]:
        definition.pop("required", None)
    schema["required"] = ["version"]
    schema["properties"]["extends"] = {
        "type": "string", "maxLength": 1024, "title": "Extends",
        "description": "a shipped profile name, or a path to a .yaml file relative to this one"}
    schema["properties"]["name"]["description"] = "defaults to the file name without .yaml"
    select = schema["$defs"]["GpuSpec"]["properties"]["select"]
    select["anyOf"] = [{"const": "all"}, {"$ref": select.pop("$ref")}]
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://vgpu.invalid/schemas/profile-v1.json"
    return schema


def _looks_like_path(ref: str) -> bool:
    return "/" in ref or ref.endswith((".yaml", ".yml"))


def _shipped_doc(name: str, requested_by: str) -> _Doc:
    if name not in shipped_names():
        raise ProfileError([f"{requested_by}: extends: no shipped profile named {name!r} "
                            f"(shipped: {', '.join(shipped_names())})"])
    label = f"profiles/{name}.yaml"
    return _Doc(label, f"shipped:{name}", _parse(shipped_dir().joinpath(f"{name}.yaml").read_bytes(), label),
                None, name)


def _file_doc(path: Path, label: str) -> _Doc:
    """A profile file, read through vgpu.inputs (regular files only, size cap, no blocking)."""
    try:
        raw = inputs.read_input(path, "profile")
    except inputs.InputFileError as exc:
        raise ProfileError([f"{label}: {exc.problem}"]) from None
    return _Doc(label, f"file:{path.resolve()}", _parse(raw, label), path.parent, path.stem)


def _parse(raw: bytes, label: str) -> dict[str, Any]:
    """One YAML mapping from ``raw`` under vgpu.inputs' rules: size cap, UTF-8 text, no aliases,
    no duplicate keys, bounded nesting. Each problem is one ``FILE: problem`` line."""
    try:
        data = inputs.parse_yaml(inputs.decode_text(raw, "profile", label, limit=MAX_BYTES), "profile", label,
                                 max_depth=MAX_NESTING)
    except inputs.InputFileError as exc:
        raise ProfileError([f"{label}: {exc.problem}"]) from None
    if data is None:
        raise ProfileError([f"{label}: empty; a profile is a YAML mapping starting with 'version: v1'"])
    if not isinstance(data, dict):
        raise ProfileError([f"{label}: a profile is a YAML mapping (key: value lines), not a "
                            f"{type(data).__name__}"])
    return data


def _resolve(doc: _Doc, chain: tuple[_Doc, ...] = ()) -> _Merged:
    """Merge ``doc`` over its ``extends`` ancestors; raises ProfileError for cycles and bad parents."""
    chain = chain + (doc,)
    _check_header(doc)
    parent_ref = doc.data.get("extends")
    if parent_ref is None:
        merged = _Merged()
    else:
        merged = _resolve(_parent(doc, parent_ref, chain), chain)
        for key in _NOT_INHERITED:
            merged.data.pop(key, None)
    own = {k: v for k, v in doc.data.items() if k != "extends"}
    own.setdefault("name", doc.stem)
    merged.data = _merge(merged.data, own, doc.label, merged.blame, ())
    merged.lineage.insert(0, doc.label)
    return merged


def _check_header(doc: _Doc) -> None:
    version = doc.data.get("version")
    if version != "v1":
        shown = "missing" if "version" not in doc.data else f"{version!r}"
        raise ProfileError([f"{doc.label}: version: {shown}; this vgpu reads profile format v1 "
                            "(add 'version: v1')"])
    parent = doc.data.get("extends")
    if parent is not None and (not isinstance(parent, str) or not parent.strip() or len(parent) > 1024
                               or any(c in parent for c in "\x00\n\r")):
        raise ProfileError([f"{doc.label}: extends: must be a shipped profile name or a path to a .yaml file, "
                            f"not {str(parent)[:60]!r}"])


def _parent(doc: _Doc, ref: str, chain: tuple[_Doc, ...]) -> _Doc:
    if len(chain) > MAX_EXTENDS:
        raise ProfileError([f"{chain[0].label}: extends: chain longer than {MAX_EXTENDS} profiles"])
    if _looks_like_path(ref):
        if doc.base is None:
            raise ProfileError([f"{doc.label}: extends: a shipped profile extends only shipped names, "
                                f"not {ref!r}"])
        path = doc.base / ref
        parent = _file_doc(path, str(path)) if path.exists() else None  # a directory: "is a directory"
        if parent is None:
            raise ProfileError([f"{doc.label}: extends: parent file {str(path)!r} not found"])
    else:
        parent = _shipped_doc(ref, doc.label)
    if any(parent.key == d.key for d in chain):
        cycle = " -> ".join([d.label for d in chain] + [parent.label])
        raise ProfileError([f"{chain[0].label}: extends: cycle {cycle}"])
    return parent


def _merge(base: dict[Any, Any], over: dict[Any, Any], label: str, blame: dict[tuple, str],
           path: tuple) -> dict[Any, Any]:
    """``over`` on top of ``base``: mappings merge key by key, a null removes the key, the rest replaces."""
    out = dict(base)
    for key, value in over.items():
        here = path + (key,)
        if isinstance(value, dict) and isinstance(out.get(key), dict) and here not in _ATOMIC:
            out[key] = _merge(out[key], value, label, blame, here)
            continue
        for stale in [p for p in blame if p[:len(here)] == here]:
            del blame[stale]
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
            blame[here] = label
    return out


def _finish(merged: _Merged, catalog: Catalog) -> Profile:
    top = merged.lineage[0]
    try:
        profile = Profile.model_validate(merged.data, context={"catalog": catalog})
    except ValidationError as exc:
        raise ProfileError(render_errors(exc, lambda loc: _blame(merged.blame, loc, top))) from None
    profile._source = top
    profile._lineage = tuple(merged.lineage)
    return profile


def _blame(blame: dict[tuple, str], loc: tuple, top: str) -> str:
    """The file that set the value at ``loc`` (or the nearest enclosing key), else the profile's own file."""
    for end in range(len(loc), 0, -1):
        if loc[:end] in blame:
            return blame[loc[:end]]
    return top


# How pydantic's error types read to an operator; the rest keep pydantic's own sentence.
_TYPE_WORDS = {"model_type": "must be a mapping of keys", "model_attributes_type": "must be a mapping of keys",
               "dict_type": "must be a mapping", "list_type": "must be a list", "int_type": "must be a whole number",
               "float_type": "must be a number", "string_type": "must be a string",
               "bool_type": "must be true or false", "missing": "is required"}
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def render_errors(exc: ValidationError, blame: Any) -> list[str]:
    """One ``FILE: field.path: problem`` line per pydantic error; ``blame(loc)`` names the file."""
    lines = []
    for err in exc.errors(include_url=False):
        loc, message = _explain(err)
        path = _path(loc) or "(top level)"
        lines.append(_one_line(f"{blame(loc)}: {path}: {message}"))
    return lines


def _explain(err: dict[str, Any]) -> tuple[tuple, str]:
    loc, kind, raw = tuple(err["loc"]), err["type"], err.get("ctx", {}).get("error")
    if kind != "extra_forbidden" and loc[-1:] == ("[key]",):
        loc = loc[:-1]  # pydantic's marker for "the key of this mapping entry", not a user's key
    if isinstance(raw, FieldError):
        return loc + raw.field, raw.message
    if kind in ("value_error", "assertion_error"):
        return loc, str(raw) if raw is not None else err["msg"]
    if kind == "extra_forbidden":
        return loc, _unknown_key(loc)
    got = "" if kind == "missing" else f" (got {_short(err.get('input'))})"
    text = err["msg"].replace("Input should", "should")
    words = _TYPE_WORDS.get(kind) or text[:1].lower() + text[1:]
    return loc, f"{words}{got}"


def _unknown_key(loc: tuple) -> str:
    import difflib  # only for a profile with an unknown key

    allowed = _fields_at(loc[:-1])
    close = difflib.get_close_matches(str(loc[-1:] and loc[-1]), allowed, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown key{hint} (allowed here: {', '.join(allowed)})"


def _fields_at(loc: tuple) -> list[str]:
    """Field names of the model at ``loc`` inside Profile (only models nest models in this schema)."""
    model: Any = Profile
    for part in loc:
        info = model.model_fields.get(part) if isinstance(part, str) else None
        model = _unwrap(info.annotation) if info else None
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return []
    return list(model.model_fields)


def _unwrap(annotation: Any) -> Any:
    while get_origin(annotation) in (Union, types.UnionType, Annotated):
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    return annotation


def _path(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = str(part)
            shown = text if re.fullmatch(r"[A-Za-z0-9_-]{1,40}", text) else repr(text[:40])
            out += f".{shown}" if out else shown
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _one_line(text: str) -> str:
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
