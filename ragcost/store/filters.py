"""Metadata filters: a MongoDB-like JSON expression compiled to a bound-parameter SQLAlchemy clause.

Grammar (several keys in one object are ANDed)::

    {"field": value}                                  equality; a list field: contains value
    {"field": {"$eq"|"$ne"|"$gt"|"$gte"|"$lt"|"$lte": value}}
    {"field": {"$in": [...]}} / {"field": {"$nin": [...]}}   list field: contains any / contains none
    {"field": {"$all": [...]}}                        list field only: contains all
    {"field": {"$exists": true|false}}                 scalar: not null; list field: has any value
    {"field": {"$not": {<operators>}}}                 negation of a field's operators
    {"$and": [expr, ...]}, {"$or": [expr, ...]}, {"$not": expr}

Besides the declared metadata fields, ``id`` and ``title`` are filterable as ``str``.
Semantics follow MongoDB where SQL's NULL would differ: ``$ne``/``$nin`` also match documents
where the field is missing, and ``$not`` is a plain boolean negation. On a list field a
comparison (``$gt`` ...) matches when any element satisfies it. Values only ever reach SQL as
bound parameters.

Limits, each refused with one line: objects nested deeper than ``MAX_DEPTH`` (32),
more than ``MAX_LIST`` (10,000) values in one ``$in``/``$nin``/``$all``, and more than
``MAX_CONDITIONS`` (1,000) conditions in one filter, of which at most ``MAX_LIST_CONDITIONS`` (200)
on list fields. Values a store cannot hold (an int beyond
64 bits, NaN, Infinity, a NUL byte) are refused the same way, naming the field and the value.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from ragcost.config.fields import FieldType, OutOfRange, short_repr
from ragcost.errors import FilterError

EXAMPLE = '{"year": {"$gte": 2023}}'
COMPARE = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
FIELD_OPS = COMPARE + ("$in", "$nin", "$all", "$exists", "$not")
LOGIC_OPS = ("$and", "$or", "$not")
# id and title live on the documents table; exposing them as str costs nothing and is often wanted.
BUILTIN_FIELDS = {"id": FieldType("id", "str"), "title": FieldType("title", "str")}
VALUE_COLUMN = {"str": "v_str", "int": "v_int", "float": "v_float", "bool": "v_bool"}
SQL_BASE = {"str": sa.Text(), "int": sa.BigInteger(), "float": sa.Double(), "bool": sa.Boolean()}
MAX_DEPTH = 32  # nested objects (a list is not a level); real filters use three or four
MAX_LIST = 10_000  # values in one $in/$nin/$all: PostgreSQL binds at most 65,535 parameters per query
MAX_CONDITIONS = 1_000  # field conditions in one filter: each is a term the database plans
MAX_LIST_CONDITIONS = 200  # conditions on list fields: each is a subquery (DuckDB refuses about 500)


def parse_filter(value: str | dict | None) -> dict | None:
    """A filter dict from JSON text or a dict; None is no filter. Blank text is refused, as JSON ``null``
    and ``[]`` are: a filter that was meant but came out empty (an unset shell variable) must not
    quietly search every tenant's documents."""
    if value is None:
        return None
    if isinstance(value, str):
        if not value.strip():
            raise FilterError(f"filter {value!r} is empty; give a JSON object, e.g. {EXAMPLE}, or leave the filter "
                              "out to search every document")
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise FilterError(f"filter is not valid JSON: {e.msg} at char {e.pos}; example: {EXAMPLE}") from None
        except RecursionError:
            raise FilterError(f"filter nests deeper than {MAX_DEPTH} levels; flatten it (several keys in one object are ANDed)") from None
    if not isinstance(value, dict):
        raise FilterError(f"filter must be a JSON object, got {type(value).__name__} {short_repr(value)}; example: {EXAMPLE}")
    return value or None


def check_size(expr: Any, list_fields: frozenset = frozenset()) -> None:
    """Refuse a filter too deep or too large to plan (an iterative walk: no recursion, however deep)."""
    stack, conditions, on_lists = [(expr, 1)], 0, 0
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise FilterError(f"filter nests deeper than {MAX_DEPTH} levels; flatten it (several keys in one object are ANDed)")
        if isinstance(node, dict):
            for k, v in node.items():
                if isinstance(k, str) and k in LOGIC_OPS:
                    continue
                n = max(1, len(v)) if isinstance(v, dict) else 1
                conditions += n
                on_lists += n if k in list_fields else 0
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):  # a list is not a level of its own: {"$and": [...]} is one
            stack.extend((v, depth) for v in node if isinstance(v, (dict, list)))
        if conditions > MAX_CONDITIONS:
            raise FilterError(f"filter has more than {MAX_CONDITIONS} conditions; use $in with a list of values, or split the query")
        if on_lists > MAX_LIST_CONDITIONS:
            raise FilterError(f"filter has more than {MAX_LIST_CONDITIONS} conditions on list fields; combine them, "
                              'e.g. {"tags": {"$in": [...]}} matches any of several values')


def compile_filter(expr: dict | None, fields: dict[str, FieldType], docs_table: sa.Table, values_table: sa.Table) -> sa.ColumnElement:
    """A boolean clause over ``docs_table`` (``id IN (SELECT doc_id FROM values_table ...)`` for list fields)."""
    if not expr:
        return sa.true()
    check_size(expr, frozenset(n for n, f in fields.items() if f.is_list))
    return _Compiler({**BUILTIN_FIELDS, **fields}, docs_table, values_table).expr(expr)


class _Compiler:
    def __init__(self, fields: dict[str, FieldType], docs: sa.Table, values: sa.Table) -> None:
        self.fields, self.docs, self.values = fields, docs, values

    def expr(self, e: Any) -> sa.ColumnElement:
        if not isinstance(e, dict):
            raise FilterError(f"a filter expression must be an object, got {type(e).__name__} {short_repr(e)}; example: {EXAMPLE}")
        if not e:
            return sa.true()
        return sa.and_(*(self.key(k, v) for k, v in e.items()))

    def key(self, k: str, v: Any) -> sa.ColumnElement:
        if not isinstance(k, str):
            raise FilterError(f"filter keys are field names or operators, got {type(k).__name__} {short_repr(k)}")
        if k in ("$and", "$or"):
            if not isinstance(v, list):
                raise FilterError(f"{k} takes a list of expressions, got {type(v).__name__} {short_repr(v)}")
            if not v:
                if k == "$or":
                    raise FilterError("$or needs at least one expression, got []")
                return sa.true()
            parts = [self.expr(x) for x in v]
            return sa.and_(*parts) if k == "$and" else sa.or_(*parts)
        if k == "$not":
            return sa.not_(self.expr(v))
        if k.startswith("$"):
            raise FilterError(f"unknown operator {short_repr(k)}; known: {', '.join(LOGIC_OPS + FIELD_OPS)}")
        if k not in self.fields:
            known = ", ".join(sorted(self.fields))
            raise FilterError(f"unknown filter field {short_repr(k)}; declared fields: {known}")
        ft = self.fields[k]
        if isinstance(v, dict):
            if not v:
                raise FilterError(f"filter field {k!r} has an empty operator object; example: {EXAMPLE}")
            return sa.and_(*(self.op(ft, op, arg) for op, arg in v.items()))
        return self.op(ft, "$eq", v)

    def op(self, ft: FieldType, op: str, arg: Any) -> sa.ColumnElement:
        if not isinstance(op, str) or op not in FIELD_OPS:
            raise FilterError(f"unknown operator {short_repr(op)} on field {ft.name!r}; known: {', '.join(FIELD_OPS)}")
        if op == "$not":
            if not isinstance(arg, dict) or not arg:
                raise FilterError(f"$not on field {ft.name!r} takes an operator object like {{\"$gt\": 1}}, got {short_repr(arg)}")
            return sa.not_(sa.and_(*(self.op(ft, o, a) for o, a in arg.items())))
        if op == "$exists":
            if not isinstance(arg, bool):
                raise FilterError(f"$exists on field {ft.name!r} takes true or false, got {short_repr(arg)}")
            present = self._any(ft, None) if ft.is_list else self.docs.c[ft.name].is_not(None)
            return present if arg else sa.not_(present)
        if op in ("$in", "$nin", "$all"):
            if not isinstance(arg, list):
                raise FilterError(f"{op} on field {ft.name!r} takes a list, got {type(arg).__name__} {short_repr(arg)}")
            if len(arg) > MAX_LIST:
                raise FilterError(f"{op} on field {ft.name!r} has {len(arg):,} values; the limit is {MAX_LIST:,}: "
                                  "split the query or filter on a coarser field")
            if op == "$all" and not ft.is_list:
                raise FilterError(f"$all applies to list fields; {ft.name!r} is {ft.spec}; use $in or $eq")
            vals = [self.value(ft, x, op) for x in arg]
            if op == "$all":
                return self._all(ft, vals)
            return self._in(ft, vals) if op == "$in" else sa.not_(self._in(ft, vals))
        # comparisons; null only makes sense as "is missing" / "is present"
        if arg is None:
            if op not in ("$eq", "$ne"):
                raise FilterError(f"{op} on field {ft.name!r} needs a {ft.base} value, got null")
            return self.op(ft, "$exists", op == "$ne")
        # a bound parameter, never a literal: SQLAlchemy refuses > and < against a bare True/False
        val = sa.bindparam(None, self.value(ft, arg, op), type_=SQL_BASE[ft.base])
        if op == "$ne":
            return sa.not_(self.op(ft, "$eq", arg))
        cmp = {"$eq": lambda c: c == val, "$gt": lambda c: c > val, "$gte": lambda c: c >= val,
               "$lt": lambda c: c < val, "$lte": lambda c: c <= val}[op]
        if ft.is_list:
            return self._any(ft, cmp)
        col = self.docs.c[ft.name]
        # guarding with IS NOT NULL keeps every leaf two-valued, so $not/$ne never meet SQL's NULL logic
        return sa.and_(col.is_not(None), cmp(col))

    def _in(self, ft: FieldType, vals: list) -> sa.ColumnElement:
        if ft.is_list:
            return self._any(ft, lambda c: c.in_(vals))
        col = self.docs.c[ft.name]
        return sa.and_(col.is_not(None), col.in_(vals))

    def _all(self, ft: FieldType, vals: list) -> sa.ColumnElement:
        """The document's list holds every one of ``vals``: one grouped subquery, however many values."""
        distinct = list(dict.fromkeys(vals))
        if not distinct:
            return sa.true()
        v = self.values
        col = v.c[VALUE_COLUMN[ft.base]]
        holders = (sa.select(v.c.doc_id).where(v.c.field == ft.name, col.in_(distinct))
                   .group_by(v.c.doc_id).having(sa.func.count(sa.distinct(col)) == len(distinct)))
        return self.docs.c.id.in_(holders)

    def _any(self, ft: FieldType, cond) -> sa.ColumnElement:
        """The document has a value of this field (satisfying ``cond`` when given).

        An uncorrelated ``id IN (SELECT doc_id ...)``, not a correlated EXISTS: the database runs
        each once, so a filter ORing hundreds of list conditions stays fast (and within DuckDB's
        expression depth). ``id`` is never NULL, so negating it stays two-valued.
        """
        v = self.values
        col = v.c[VALUE_COLUMN[ft.base]]
        where = [v.c.field == ft.name]
        if cond is not None:
            where.append(cond(col))
        return self.docs.c.id.in_(sa.select(v.c.doc_id).where(*where))

    def value(self, ft: FieldType, x: Any, op: str) -> Any:
        try:
            return FieldType(ft.name, ft.base).check(x) if x is not None else _bad_null(ft, op)
        except OutOfRange as e:
            raise FilterError(f"filter {op}: {e}") from None
        except ValueError:
            raise FilterError(
                f"filter {op} on field {ft.name!r} expects {ft.base} values (field is {ft.spec}); "
                f"got {type(x).__name__} {short_repr(x)}"
            ) from None


def _bad_null(ft: FieldType, op: str) -> Any:
    raise FilterError(f"{op} on field {ft.name!r} needs {ft.base} values, got null; use $exists for missing fields")
