"""What both servers accept as input, and how strictly.

A request body is JSON read by :func:`load_json`: UTF-8, no duplicate keys (parsers disagree on
which one wins, so a proxy and the server could read different requests), no ``NaN`` or
``Infinity`` (not JSON), nested at most :data:`MAX_DEPTH` deep (the inputs need 2; a body nested
30,000 deep is refused at once instead of running the parser out of stack). It is then
validated by :func:`parse_input` as JSON, strictly: ``k`` must be a JSON integer, so ``"5"``,
``5.0`` and ``true`` are refused. URL parameters (GET /v1/home's query string, the citation's
path) are text by nature and validated by :func:`parse_params`, which refuses a repeated name.
Every refusal is :class:`~groundkit.errors.InvalidArgument` (GK005), naming the field and never
echoing the value.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from groundkit.errors import InvalidArgument

_M = TypeVar("_M", bound=BaseModel)

MAX_DEPTH = 32  # arrays and objects inside each other
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,18}")
log = logging.getLogger("groundkit.serve")


class _Refused(ValueError):
    pass


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"the key {key[:64]!r} appears twice in one object")
        out[key] = value
    return out


def _constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON number")


def _depth(value: object) -> int:
    """How deep arrays and objects nest in ``value`` (iterative: no recursion to run out of)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            break
        stack.extend((child, depth + 1) for child in children)
    return deepest


def load_json(raw: bytes) -> object:
    """The JSON value of a request body, strictly (see the module's doc); GK005 otherwise."""
    try:
        value = json.loads(raw.decode("utf-8"), object_pairs_hook=_object, parse_constant=_constant)
    except _Refused as exc:
        raise InvalidArgument(f"the body is not acceptable JSON: {exc}") from None
    except RecursionError:
        # the C parser gives up around the interpreter's recursion limit: one line, no traceback
        log.info("refused a request body nested deeper than the JSON parser goes")
        raise InvalidArgument(f"the body nests arrays or objects deeper than {MAX_DEPTH} levels") from None
    except (UnicodeDecodeError, ValueError):
        raise InvalidArgument("the body must be JSON (UTF-8)") from None
    if _depth(value) > MAX_DEPTH:
        log.info("refused a request body nested deeper than %d levels", MAX_DEPTH)
        raise InvalidArgument(f"the body nests arrays or objects deeper than {MAX_DEPTH} levels")
    return value


def _problems(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors())


def parse_input(model: type[_M], data: object) -> _M:
    """``data`` (a JSON value: a parsed body, an MCP tool's arguments) as the input model, with
    JSON's types and no coercion: a string is not a number, a float or a bool not an integer."""
    try:
        text = json.dumps(data, allow_nan=False)
    except (TypeError, ValueError):
        raise InvalidArgument("input: not a JSON value") from None
    try:
        return model.model_validate_json(text, strict=True)
    except ValidationError as exc:
        raise InvalidArgument(_problems(exc)) from None


def parse_params(model: type[_M], items: Iterable[tuple[str, str]]) -> _M:
    """URL parameters (text) as the input model: an integer field takes plain decimal digits
    (not ``5.0``, ``+5`` or ``1_0``), and a name given twice is refused."""
    data: dict[str, object] = {}
    for name, value in items:
        if name in data:
            raise InvalidArgument(f"{name[:64]}: given more than once")
        field = model.model_fields.get(name)
        if field is not None and field.annotation is int:
            if not _DECIMAL.fullmatch(value):
                raise InvalidArgument(f"{name}: must be a whole number in decimal digits")
            data[name] = int(value)
        else:
            data[name] = value
    return parse_input(model, data)


def refuse_query_string(query_string: bytes | str) -> None:
    """For endpoints whose input is the body or the path: a query string is refused, not
    ignored (``POST /v1/search?reader=m3`` must not look as if it did something)."""
    if query_string:
        raise InvalidArgument("this endpoint takes no query-string parameters; its input is the JSON body "
                              "or the path")
