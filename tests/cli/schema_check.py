"""A small JSON-Schema (2020-12 subset) validator, so the docs/*.json schemas are tested
without a jsonschema dependency. Unknown keywords raise, so a schema using more than
this subset fails loudly instead of passing silently."""

from __future__ import annotations

import json
import pathlib
import re
from typing import Any

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"

_ANNOTATIONS = {"$schema", "$id", "title", "description", "$defs", "examples"}
_KEYWORDS = {
    "type",
    "const",
    "enum",
    "required",
    "properties",
    "additionalProperties",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "pattern",
    "minLength",
    "$ref",
}

_TYPES = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


class SchemaViolation(AssertionError):
    pass


def load_schema(name: str) -> dict:
    return json.loads((DOCS / name).read_text())


def validate(instance: Any, schema: dict, root: dict | None = None, path: str = "$") -> None:
    """Raise SchemaViolation naming the JSON path of the first violation."""
    root = schema if root is None else root
    unknown = set(schema) - _KEYWORDS - _ANNOTATIONS
    if unknown:
        raise ValueError(f"schema at {path} uses unsupported keywords {sorted(unknown)}")
    if "$ref" in schema:
        ref = schema["$ref"]
        assert ref.startswith("#/"), ref
        target = root
        for part in ref[2:].split("/"):
            target = target[part]
        validate(instance, target, root, path)
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[t](instance) for t in types):
            raise SchemaViolation(f"{path}: expected {types}, got {instance!r}")
    if "const" in schema and instance != schema["const"]:
        raise SchemaViolation(f"{path}: expected {schema['const']!r}, got {instance!r}")
    if "enum" in schema and instance not in schema["enum"]:
        raise SchemaViolation(f"{path}: {instance!r} not in {schema['enum']}")
    is_num = _TYPES["number"](instance)
    if is_num and "minimum" in schema and instance < schema["minimum"]:
        raise SchemaViolation(f"{path}: {instance} < minimum {schema['minimum']}")
    if is_num and "maximum" in schema and instance > schema["maximum"]:
        raise SchemaViolation(f"{path}: {instance} > maximum {schema['maximum']}")
    if is_num and "exclusiveMinimum" in schema and instance <= schema["exclusiveMinimum"]:
        raise SchemaViolation(f"{path}: {instance} <= exclusiveMinimum {schema['exclusiveMinimum']}")
    if isinstance(instance, str):
        if "pattern" in schema and not re.search(schema["pattern"], instance):
            raise SchemaViolation(f"{path}: {instance!r} does not match {schema['pattern']}")
        if "minLength" in schema and len(instance) < schema["minLength"]:
            raise SchemaViolation(f"{path}: {instance!r} shorter than {schema['minLength']}")
    if isinstance(instance, dict):
        for key in schema.get("required", ()):
            if key not in instance:
                raise SchemaViolation(f"{path}: missing required key {key!r}")
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, value in instance.items():
            if key in props:
                validate(value, props[key], root, f"{path}.{key}")
            elif extra is False:
                raise SchemaViolation(f"{path}: unexpected key {key!r}")
            elif isinstance(extra, dict):
                validate(value, extra, root, f"{path}.{key}")
    if isinstance(instance, list):
        if "minItems" in schema and len(instance) < schema["minItems"]:
            raise SchemaViolation(f"{path}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(instance) > schema["maxItems"]:
            raise SchemaViolation(f"{path}: more than {schema['maxItems']} items")
        prefix = schema.get("prefixItems", [])
        for i, item in enumerate(instance):
            if i < len(prefix):
                validate(item, prefix[i], root, f"{path}[{i}]")
            elif "items" in schema:
                validate(item, schema["items"], root, f"{path}[{i}]")
