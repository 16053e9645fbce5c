"""Parse the text of a YAML or JSON document safely: no duplicate keys, bounded nesting, bounded aliases.

- YAML is read with the safe constructor only (no Python objects), events from libyaml when it is
  installed (``yaml.CSafeLoader``'s parser, about 5x faster than the pure-Python one) composed in Python, so
  that a document nested 200,000 deep is a RecursionError here, caught, and never a crash inside libyaml.
- A mapping that names a key twice is refused with both lines named (YAML and JSON); YAML merge keys
  (``<<: *base``) may still be overridden by the mapping's own keys, as YAML intends.
- Nesting deeper than ``MAX_DEPTH`` collections and aliases that expand past ``MAX_EXPANDED_NODES`` nodes
  (the "billion laughs") are refused. JSON's NaN and Infinity are refused: they are not JSON.
- Fast path (``_parse_yaml_fast``): libyaml's events turned straight into dicts, lists and scalars in one
  loop with an explicit stack (no node objects, no recursion), scalars resolved and constructed exactly as
  the safe loader does. It handles plain documents (a 50,000-table workload in about a third of the time);
  anything else (anchors, aliases, merge keys, complex keys, unusual tags, several documents, a duplicate
  key, a value that cannot be read, a syntax error) sends the text to the composed path above, which then
  gives today's value or today's error.

Every failure is a SpecError naming the file; ``parse_document`` returns the parsed value (any type).
"""
from __future__ import annotations

import json
import re
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import (DocumentEndEvent, DocumentStartEvent, MappingEndEvent, MappingStartEvent, ScalarEvent,
                         SequenceEndEvent, SequenceStartEvent, StreamEndEvent, StreamStartEvent)
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from placer.errors import SpecError

#: deepest nesting of mappings and lists accepted (a spec needs about 8)
MAX_DEPTH = 100
#: most nodes a YAML document may expand to through aliases (a 50,000-table workload has about 500,000)
MAX_EXPANDED_NODES = 20_000_000

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _DuplicateKey(Exception):
    def __init__(self, key: Any, first_line: int | None = None, second_line: int | None = None):
        super().__init__(key)
        self.key, self.first_line, self.second_line = key, first_line, second_line


class _TooDeep(Exception):
    def __init__(self, line: int):
        super().__init__(line)
        self.line = line


class _GuardedComposer(Composer):
    """Composer that counts nesting as it goes (refusing more than MAX_DEPTH before Python's recursion
    limit is near) and notes whether the document defines anchors (only then is the expanded size walked)."""

    def __init__(self):
        super().__init__()
        self.depth = 0
        self.saw_anchor = False

    def _enter(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _TooDeep(self.peek_event().start_mark.line + 1)

    def compose_sequence_node(self, anchor):
        self._enter()
        try:
            return super().compose_sequence_node(anchor)
        finally:
            self.depth -= 1

    def compose_mapping_node(self, anchor):
        self._enter()
        try:
            return super().compose_mapping_node(anchor)
        finally:
            self.depth -= 1

    def compose_document(self):
        self.get_event()  # DocumentStartEvent
        node = self.compose_node(None, None)
        self.get_event()  # DocumentEndEvent
        self.saw_anchor = bool(self.anchors)
        self.anchors = {}
        return node


class _NoDuplicateKeys(SafeConstructor):
    """SafeConstructor that refuses a mapping naming the same key twice (merged keys excepted)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # unhashable: the base class reports it
                    continue
                line = key_node.start_mark.line + 1
                if first is not None:
                    raise _DuplicateKey(key, first, line)
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


if hasattr(yaml, "CSafeLoader"):
    from yaml._yaml import CParser
    from yaml.resolver import Resolver

    class _Loader(_GuardedComposer, CParser, _NoDuplicateKeys, Resolver):
        """libyaml's parser (events), Python's composer (recursion-checked), the safe constructor."""

        def __init__(self, stream):
            CParser.__init__(self, stream)
            _GuardedComposer.__init__(self)
            _NoDuplicateKeys.__init__(self)
            Resolver.__init__(self)
else:  # pragma: no cover - PyYAML built without libyaml
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.resolver import Resolver
    from yaml.scanner import Scanner

    class _Loader(Reader, Scanner, Parser, _GuardedComposer, _NoDuplicateKeys, Resolver):
        def __init__(self, stream):
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)
            _GuardedComposer.__init__(self)
            _NoDuplicateKeys.__init__(self)
            Resolver.__init__(self)


def _check_node_graph(root, file: str) -> None:
    """Depth and alias-expanded size of a composed YAML node graph that uses aliases (an alias may repeat a
    deep subtree), walked without recursion; refuses a cycle (an alias inside the collection it names)."""
    sizes: dict[int, int] = {}
    depth_of: dict[int, int] = {}
    in_progress: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        if isinstance(node, SequenceNode):
            kids = node.value
        elif isinstance(node, MappingNode):
            kids = [n for pair in node.value for n in pair]
        else:
            kids = []
        if not done:
            if key in in_progress:
                line = node.start_mark.line + 1
                raise SpecError(f"an alias refers to a list or mapping that contains it (line {line}): "
                                "the document would be infinite", file=file)
            in_progress.add(key)
            stack.append((node, True))
            stack.extend((k, False) for k in kids if id(k) not in sizes)
            if len(stack) > 4 * MAX_EXPANDED_NODES:  # pragma: no cover - bounded by the file size cap
                raise SpecError("document too large", file=file)
            continue
        in_progress.discard(key)
        sizes[key] = 1 + sum(sizes[id(k)] for k in kids)
        depth_of[key] = (1 + max(depth_of[id(k)] for k in kids)) if kids else 0
        if depth_of[key] > MAX_DEPTH:
            line = node.start_mark.line + 1
            raise SpecError(f"nested more than {MAX_DEPTH} lists and mappings deep (at line {line})", file=file)
        if sizes[key] > MAX_EXPANDED_NODES:
            raise SpecError(f"aliases expand the document to more than {MAX_EXPANDED_NODES:,} values "
                            "(an alias bomb?); write the values out", file=file)


class _Fallback(Exception):
    """The fast path met something it does not implement (or an error): the composed path decides."""


_STR_TAG = "tag:yaml.org,2002:str"
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
#: scalar tags the fast path constructs itself (with the safe constructor's own functions)
_FAST_SCALAR_TAGS = frozenset(f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null",
                                                                          "timestamp"))


def _scalar_maker(constructor: SafeConstructor):
    """A function from (tag, text) to the value the safe constructor gives a scalar node of that tag;
    raises _Fallback for a tag outside _FAST_SCALAR_TAGS."""
    table = type(constructor).yaml_constructors

    def make(tag: str, text: str) -> Any:
        if tag == _STR_TAG:
            return text
        if tag not in _FAST_SCALAR_TAGS:
            raise _Fallback(tag)
        return table[tag](constructor, ScalarNode(tag, text))

    return make


def _plain_resolver(make):
    """A function from a plain scalar's text to its value, resolved as the safe loader's Resolver would
    (implicit resolvers keyed by the first character, then the wildcard ones), memoised per document."""
    resolvers = _Loader.yaml_implicit_resolvers
    wildcard = resolvers.get(None, [])
    memo: dict[str, Any] = {}

    def resolve(text: str) -> Any:
        try:
            return memo[text]
        except KeyError:
            pass
        tag = _STR_TAG
        for candidate, regexp in resolvers.get(text[0] if text else "", []) + wildcard:
            if regexp.match(text):
                tag = candidate
                break
        value = memo[text] = make(tag, text)
        return value

    return resolve


#: a mapping waiting for its next key (distinct from every YAML value)
_NO_KEY = object()


def _build_from_events(get_event, resolve_plain, make_scalar) -> Any:
    """The value of one document's root node, read from ``get_event`` (positioned after DocumentStartEvent)
    with an explicit stack. Raises _TooDeep past MAX_DEPTH, _Fallback for anything not implemented here."""
    containers: list = []  # the open dicts and lists, outermost first
    keys: list = []  # per open container: the key awaiting its value (_NO_KEY for lists and between pairs)
    while True:
        event = get_event()
        kind = event.__class__
        if kind is ScalarEvent:
            if event.anchor is not None:
                raise _Fallback("anchor")
            tag = event.tag
            if tag is None:
                value = resolve_plain(event.value) if event.implicit[0] else event.value
            else:
                value = make_scalar(tag, event.value)
        elif kind is MappingStartEvent or kind is SequenceStartEvent:
            if event.anchor is not None:
                raise _Fallback("anchor")
            if event.tag is not None and event.tag != (_MAP_TAG if kind is MappingStartEvent else _SEQ_TAG):
                raise _Fallback(event.tag)
            if containers and keys[-1] is _NO_KEY and containers[-1].__class__ is dict:
                raise _Fallback("complex key")
            containers.append({} if kind is MappingStartEvent else [])
            keys.append(_NO_KEY)
            if len(containers) > MAX_DEPTH:
                raise _TooDeep(event.start_mark.line + 1)
            continue
        elif kind is MappingEndEvent or kind is SequenceEndEvent:
            keys.pop()
            value = containers.pop()
        else:  # AliasEvent (or an event out of place)
            raise _Fallback(kind.__name__)
        if not containers:
            return value
        parent = containers[-1]
        if parent.__class__ is list:
            parent.append(value)
            continue
        key = keys[-1]
        if key is _NO_KEY:
            if value in parent:  # the composed path names both lines
                raise _Fallback("duplicate key")
            keys[-1] = value
        else:
            parent[key] = value
            keys[-1] = _NO_KEY


def _parse_yaml_fast(text: str) -> Any:
    """The document's value built straight from libyaml's events; _Fallback when the composed path must
    decide (see the module docstring), _TooDeep past MAX_DEPTH."""
    if not hasattr(yaml, "CSafeLoader"):  # pragma: no cover - PyYAML built without libyaml
        raise _Fallback("no libyaml")
    from yaml._yaml import CParser

    parser = CParser(text)
    make_scalar = _scalar_maker(_NoDuplicateKeys())
    try:
        if parser.get_event().__class__ is not StreamStartEvent:  # pragma: no cover - libyaml always starts so
            raise _Fallback("stream")
        first = parser.get_event()
        if first.__class__ is StreamEndEvent:
            return None
        if first.__class__ is not DocumentStartEvent:  # pragma: no cover
            raise _Fallback("document")
        value = _build_from_events(parser.get_event, _plain_resolver(make_scalar), make_scalar)
        if parser.get_event().__class__ is not DocumentEndEvent or not parser.check_event(StreamEndEvent):
            raise _Fallback("several documents")
        return value
    except (_Fallback, _TooDeep):
        raise
    except Exception as exc:  # syntax errors, unreadable values: the composed path reports them as today
        raise _Fallback(type(exc).__name__) from None
    finally:
        parser.dispose()


#: how libyaml words its own nesting limit ("exceeded maximum nesting depth"); reported as placer's limit
_LIBYAML_DEPTH_PROBLEM = re.compile(r"nesting depth|too deep", re.IGNORECASE)


def _too_deep_error(line: int, file: str) -> SpecError:
    return SpecError(f"nested more than {MAX_DEPTH} lists and mappings deep (at line {line})", file=file)


def parse_yaml(text: str, file: str) -> Any:
    """Parse YAML text (safe constructor, no duplicate keys, bounded depth and aliases): the fast path when
    the document is plain, else the composed path."""
    try:
        return _parse_yaml_fast(text)
    except _TooDeep as exc:
        raise _too_deep_error(exc.line, file) from None
    except _Fallback:
        return _parse_yaml_composed(text, file)


def _parse_yaml_composed(text: str, file: str) -> Any:
    """Parse YAML text through the composer and the duplicate-refusing safe constructor (any document)."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if loader.saw_anchor:
            _check_node_graph(node, file)
        return loader.construct_document(node)
    except _DuplicateKey as exc:
        raise SpecError(f"duplicate key {exc.key!r} at lines {exc.first_line} and {exc.second_line} (a second "
                        "value would silently replace the first)", file=file) from None
    except _TooDeep as exc:
        raise _too_deep_error(exc.line, file) from None
    except RecursionError:
        raise SpecError(f"nested too deeply (placer reads at most {MAX_DEPTH} levels of lists and mappings)",
                        file=file) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        if _LIBYAML_DEPTH_PROBLEM.search(problem):  # libyaml >= 0.2.6 (PyYAML 6.0.4) has a depth limit of its own
            raise _too_deep_error(mark.line + 1 if mark else 1, file) from None
        raise SpecError(f"YAML syntax error{where}: {problem}", file=file) from None
    except (ValueError, OverflowError, KeyError, TypeError, AttributeError, IndexError) as exc:
        # a value its tag cannot construct: 4,301 digits, '!!bool maybe', '!!timestamp 12 GiB', ...
        fits = isinstance(exc, (ValueError, OverflowError))
        tagged = "" if fits else " (an explicit !!tag on a value it does not fit?)"
        raise SpecError(f"YAML value cannot be read{tagged}: {type(exc).__name__}: {exc}", file=file) from None
    finally:
        loader.dispose()


def _pairs_without_duplicates(pairs):
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _json_duplicate_lines(text: str, key: str) -> tuple[int, int] | None:
    """Lines of the first two occurrences of ``key`` in the first object that repeats it, found with the
    pure-Python scanner (only called once a duplicate is known)."""
    from json.decoder import WHITESPACE, JSONObject, scanstring
    from json.scanner import py_make_scanner

    plain = json.JSONDecoder().scan_once

    def locate(s: str, start: int) -> tuple[int, int] | None:
        pos, first = start, {}
        while True:
            pos = WHITESPACE.match(s, pos).end()
            if pos >= len(s) or s[pos] != '"':
                return None
            name, end = scanstring(s, pos + 1)
            line = s.count("\n", 0, pos) + 1
            if name in first:
                return first[name], line
            first[name] = line
            end = WHITESPACE.match(s, end).end() + 1  # past ':'
            end = WHITESPACE.match(s, end).end()
            _, end = plain(s, end)
            end = WHITESPACE.match(s, end).end()
            if end >= len(s) or s[end] != ",":
                return None
            pos = end + 1

    def parse_object(s_and_end, strict, scan_once, object_hook, object_pairs_hook, memo=None, *args):
        s, start = s_and_end
        try:
            return JSONObject(s_and_end, strict, scan_once, object_hook, object_pairs_hook, memo, *args)
        except _DuplicateKey as exc:
            if exc.first_line is None:
                exc.first_line, exc.second_line = locate(s, start) or (None, None)
            raise

    decoder = json.JSONDecoder(object_pairs_hook=_pairs_without_duplicates)
    decoder.parse_object = parse_object
    try:
        py_make_scanner(decoder)(text, WHITESPACE.match(text, 0).end())
    except _DuplicateKey as exc:
        if exc.key == key and exc.first_line is not None:
            return exc.first_line, exc.second_line
    except (RecursionError, ValueError):
        return None
    return None


def _check_json_depth(data: Any, file: str) -> None:
    stack = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise SpecError(f"nested more than {MAX_DEPTH} lists and mappings deep", file=file)
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values() if isinstance(v, (dict, list)))
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value if isinstance(v, (dict, list)))


def parse_json(text: str, file: str) -> Any:
    """Parse JSON text: no duplicate keys, no NaN or Infinity, bounded depth."""
    try:
        data = json.loads(text, object_pairs_hook=_pairs_without_duplicates, parse_constant=_reject_constant)
    except _DuplicateKey as exc:
        lines = _json_duplicate_lines(text, exc.key)
        where = f" at lines {lines[0]} and {lines[1]}" if lines else ""
        raise SpecError(f"duplicate key {exc.key!r}{where} (a second value would silently replace the first)",
                        file=file) from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"JSON syntax error at line {exc.lineno}, column {exc.colno}: {exc.msg}", file=file) from None
    except RecursionError:
        raise SpecError(f"nested too deeply (placer reads at most {MAX_DEPTH} levels of lists and mappings)",
                        file=file) from None
    except ValueError as exc:  # NaN/Infinity, an integer of more than 4,300 digits
        raise SpecError(f"JSON value cannot be read: {exc}", file=file) from None
    _check_json_depth(data, file)
    return data


def parse_document(text: str, file: str, *, json_syntax: bool) -> Any:
    """Parse a document's text as JSON (``json_syntax``) or YAML; SpecError naming ``file`` on any failure."""
    return parse_json(text, file) if json_syntax else parse_yaml(text, file)
