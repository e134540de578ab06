"""Validate MCP results against the specification's own JSON Schema of each version
(tests/deps/mcp/schema/<version>.json), with the `jsonschema` package of the mcp1 environment.

Reads JSON lines {"version": "2025-06-18", "type": "CallToolResult", "value": {...}} on stdin;
prints one line per invalid value and exits 1 if there was any.
"""

import json
import pathlib
import sys

import jsonschema
from referencing import Registry, Resource

HERE = pathlib.Path(__file__).parent
validators = {}


def validator(version, type_name):
    key = (version, type_name)
    if key not in validators:
        document = json.loads((HERE / "schema" / f"{version}.json").read_text())
        defs = "definitions" if "definitions" in document else "$defs"
        uri = f"urn:mcp-schema:{version}"
        registry = Registry().with_resource(uri, Resource.from_contents(document))
        cls = jsonschema.validators.validator_for(document)
        validators[key] = cls({"$ref": f"{uri}#/{defs}/{type_name}"}, registry=registry)
    return validators[key]


failures = 0
checked = 0
for line in sys.stdin:
    if not line.strip():
        continue
    item = json.loads(line)
    errors = list(validator(item["version"], item["type"]).iter_errors(item["value"]))
    checked += 1
    for error in errors:
        failures += 1
        print(f"{item['version']} {item['type']} ({item.get('what', '')}): {error.message} at {list(error.absolute_path)}")
print(f"checked {checked}, {failures} errors", file=sys.stderr)
sys.exit(1 if failures else 0)
