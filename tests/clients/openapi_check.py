"""Checks mcpgw's OpenAPI document and the answers a real gateway gave against it.

    .peers/venv/bin/python tests/clients/openapi_check.py DOCUMENT [ANSWERS]

DOCUMENT is the document `GET /admin/v1/openapi.json` served. It is validated first with
`openapi-spec-validator` (the OpenAPI 3.1 schema and its rules: every `$ref` resolves, every
path parameter is declared, operation ids are unique). ANSWERS, if given, is a JSON file: a
list of `{"method", "path", "status", "body"}`, each an answer of the gateway to the operation
`method path` (the document's path, with its `{parameters}`); each is checked: the status must
be one the operation documents, and the body must validate against the schema the document
gives for that status (JSON Schema 2020-12, as OpenAPI 3.1 says). A `body` of null is an answer
without one (204).

Prints one JSON object: `{"valid": bool, "error": str|null, "answers": [{"method", "path",
"status", "problems": [...]}]}`. Exit 0 when it ran (the test judges the report), 2 on bad
arguments.
"""

import json
import sys

from jsonschema import Draft202012Validator
from openapi_spec_validator import OpenAPIV31SpecValidator, validate


def response_of(document, method, path, status):
    """The documented response of an operation for `status`, its `$ref` followed."""
    operation = document["paths"][path][method.lower()]
    response = operation["responses"].get(str(status))
    if response is None:
        return None
    while "$ref" in response:
        pointer = response["$ref"].removeprefix("#/").split("/")
        response = document
        for part in pointer:
            response = response[part]
    return response


def check_answer(document, answer):
    problems = []
    method, path, status = answer["method"], answer["path"], answer["status"]
    try:
        response = response_of(document, method, path, status)
    except KeyError:
        return [f"{method} {path} is not in the document"]
    if response is None:
        return [f"{method} {path} answered {status}, which it does not document"]
    content = response.get("content")
    body = answer["body"]
    if content is None:
        if body is not None:
            problems.append(f"documented without a body, answered {json.dumps(body)[:200]}")
        return problems
    schema = content.get("application/json", {}).get("schema")
    if schema is None:
        return [f"{status} is documented without a JSON schema"]
    # `#/components/...` resolves against the root: give the schema the document's components.
    root = {"allOf": [schema], "components": document.get("components", {})}
    for error in Draft202012Validator(root).iter_errors(body):
        where = "/".join(str(p) for p in error.absolute_path) or "(the body)"
        problems.append(f"{where}: {error.message[:300]}")
    return problems


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        document = json.load(f)
    report = {"valid": True, "error": None, "answers": []}
    try:
        validate(document, cls=OpenAPIV31SpecValidator)
    except Exception as error:  # the validator's own error types: all mean "not valid"
        report["valid"] = False
        report["error"] = f"{type(error).__name__}: {error}"[:2000]
    if len(sys.argv) == 3:
        with open(sys.argv[2]) as f:
            answers = json.load(f)
        for answer in answers:
            report["answers"].append({
                "method": answer["method"],
                "path": answer["path"],
                "status": answer["status"],
                "problems": check_answer(document, answer),
            })
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
