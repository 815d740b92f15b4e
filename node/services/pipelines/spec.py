"""A pipeline file, parsed and checked before anything runs (docs/provenance.md "Pipelines").

YAML or JSON (JSON is read as YAML 1.2's subset; ``yaml.safe_load``: no tags, no objects)::

    name: sales
    steps:
      - name: clean
        sql: SELECT … FROM o WHERE …
        inputs: {o: orders}          # alias → a dataset ref (name, id, block CID, NAME@…) or an earlier step
      - name: by_city
        sql: SELECT … FROM c JOIN p …
        inputs: {c: clean, p: people}

An input naming a step of the file reads that step's result (a step name hides a dataset of the same name). Every
error is one line naming the step: unknown keys, duplicate names, a step that reads itself, a cycle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml  # type: ignore[import-untyped]  # no stubs in the lock; safe_load only

from node.support.errors import InvalidInput, quote

MAX_STEPS = 64
MAX_FILE_BYTES = 1 << 20
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}\Z")
_ALIAS = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}\Z")


@dataclass(frozen=True)
class Step:
    name: str
    sql: str
    inputs: dict[str, str]  # alias → dataset ref or step name, in the file's order

    def steps_read(self, names: set[str]) -> list[str]:
        return [ref for ref in self.inputs.values() if ref in names]


@dataclass(frozen=True)
class PipelineSpec:
    name: str
    steps: tuple[Step, ...]  # in dependency order (a step after every step it reads; else the file's order)

    def step_names(self) -> set[str]:
        return {s.name for s in self.steps}

    def datasets(self) -> list[str]:
        """The dataset refs the steps read, each once, in first-use order."""
        names, out = self.step_names(), []
        for s in self.steps:
            out += [r for r in s.inputs.values() if r not in names and r not in out]
        return out


def parse_spec(source: str | bytes | dict[str, Any]) -> PipelineSpec:
    """The checked pipeline of a file's text (YAML or JSON) or of an already-parsed map."""
    doc = _load(source) if isinstance(source, (str, bytes)) else source
    if not isinstance(doc, dict):
        raise InvalidInput('a pipeline is a map {"name": …, "steps": [{"name", "sql", "inputs"}, …]}')
    _only(doc, ("name", "steps"), "the pipeline")
    name = doc.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidInput(f'the pipeline needs a "name": letters, digits, _ . - (got {quote(str(name), 40)})')
    raw = doc.get("steps")
    if not isinstance(raw, list) or not raw:
        raise InvalidInput(f'pipeline {quote(name)}: "steps" must be a non-empty list')
    if len(raw) > MAX_STEPS:
        raise InvalidInput(f"pipeline {quote(name)}: {len(raw)} steps, at most {MAX_STEPS}")
    steps: list[Step] = []
    for i, s in enumerate(raw):
        step = _step(s, i)
        if step.name in {x.name for x in steps}:
            raise InvalidInput(f"step {quote(step.name)}: two steps have this name")
        steps.append(step)
    return PipelineSpec(name, _ordered(steps))


def _load(text: str | bytes) -> Any:
    if len(text) > MAX_FILE_BYTES:
        raise InvalidInput(f"a pipeline file is at most {MAX_FILE_BYTES} bytes")
    try:
        return yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as e:
        where = getattr(e, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise InvalidInput(f"the pipeline file is not YAML or JSON{at}: {getattr(e, 'problem', None) or e}") from None


def _only(m: dict[str, Any], keys: tuple[str, ...], what: str) -> None:
    extra = [str(k) for k in m if k not in keys]
    if extra:
        raise InvalidInput(f"{what}: unknown key {quote(extra[0], 40)} (known: {', '.join(keys)})")


def _step(s: Any, i: int) -> Step:
    if not isinstance(s, dict):
        raise InvalidInput(f'step {i + 1}: a step is a map {{"name", "sql", "inputs"}}')
    name = s.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidInput(f'step {i + 1}: "name" must be letters, digits, _ . - (got {quote(str(name), 40)})')
    _only(s, ("name", "sql", "inputs"), f"step {quote(name)}")
    sql, inputs = s.get("sql"), s.get("inputs", {})
    if not isinstance(sql, str) or not sql.strip():
        raise InvalidInput(f'step {quote(name)}: "sql" must be a non-empty string')
    if not isinstance(inputs, dict):
        raise InvalidInput(f'step {quote(name)}: "inputs" must map aliases to datasets or earlier steps')
    for alias, ref in inputs.items():
        if not isinstance(alias, str) or not _ALIAS.match(alias):
            raise InvalidInput(f"step {quote(name)}: input alias {quote(str(alias), 40)} is not a SQL table name")
        if not isinstance(ref, str) or not ref.strip():
            raise InvalidInput(f"step {quote(name)}: input {quote(alias)} must name a dataset or a step")
        if ref == name:
            raise InvalidInput(f"step {quote(name)}: input {quote(alias)} reads the step itself")
    return Step(name, sql, dict(inputs))


def _ordered(steps: list[Step]) -> tuple[Step, ...]:
    """Kahn's algorithm, taking the earliest ready step in file order each time (a stable topological order)."""
    names = {s.name for s in steps}
    deps = {s.name: set(s.steps_read(names)) for s in steps}
    done: list[Step] = []
    left = list(steps)
    while left:
        ready = next((s for s in left if deps[s.name] <= {d.name for d in done}), None)
        if ready is None:
            loop = _cycle(left[0].name, deps, {s.name for s in left})
            raise InvalidInput(f"step {quote(loop[0])}: the steps {' → '.join(map(quote, loop))} form a cycle")
        done.append(ready)
        left.remove(ready)
    return tuple(done)


def _cycle(start: str, deps: dict[str, set[str]], left: set[str]) -> list[str]:
    """``a → b → a``: every step left unordered reads another one left (else it would be ready), so following
    such a dependency from ``start`` must come back to a step already on the path."""
    path, at = [start], start
    while True:
        at = sorted(deps[at] & left)[0]
        if at in path:
            return [*path[path.index(at) :], at]
        path.append(at)
