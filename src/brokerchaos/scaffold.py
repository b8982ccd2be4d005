"""`brokerchaos new`: a commented scenario for a system and a fault, or a cluster file for
external mode, written from the models and registries (so they cannot drift from what the
harness accepts) and checked by the same validation `run` uses before they are kept."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from .errors import ScenarioError
from .faults.registry import FAULTS
from .scenario import Scenario
from .systems.registry import SYSTEMS



def _comment(text: str, width: int = 96) -> list[str]:
    words, lines, line = text.split(), [], "#"
    for w in words:
        if len(line) + 1 + len(w) > width:
            lines.append(line)
            line = "#"
        line += " " + w
    return lines + [line]


def _settings(model, indent: str, given: dict) -> list[str]:
    """Every field of a settings model as a commented line with its description: the ones
    `given` sets as YAML, the others as comments holding their defaults."""
    out = []
    for name, f in model.model_fields.items():
        key = f.alias or name
        desc = (f.description or "").replace("\n", " ")
        if key in given:
            out.append(f"{indent}{key}: {json.dumps(given[key])}  # {desc}")
        elif not f.is_required():
            default = json.dumps(f.get_default(call_default_factory=True), default=str)
            out.append(f"{indent}# {key}: {default}  -- {desc}")
    return out


def _block(key: str, model, indent: str, given: dict) -> list[str]:
    """`key:` and its settings: one set (the given ones, else the first with a default), so
    that the others can be uncommented in place; `key: {}` when none can be."""
    given = dict(given)
    if not given:
        for name, f in model.model_fields.items():
            value = None if f.is_required() else f.get_default(call_default_factory=True)
            if value not in (None, {}, []):
                given[f.alias or name] = value
                break
    head = f"{indent[:-2]}{key}:" if given else f"{indent[:-2]}{key}: {{}}"
    return [head, *_settings(model, indent, given)]


def scenario_text(system: str, action: str, target: Optional[str] = None) -> str:
    if system not in SYSTEMS:
        raise ScenarioError(f"scenario field 'system': unknown system {system!r} (known: {', '.join(SYSTEMS.names())})")
    if action not in FAULTS:
        raise ScenarioError(f"scenario field 'fault.action': unknown fault {action!r} "
                            f"(known: {', '.join(FAULTS.names())})")
    sys_cls, fault_cls = SYSTEMS.get(system), FAULTS.get(action)
    target = target or fault_cls.example_target
    params = fault_cls.example  # values for the settings without a default
    nodes = fault_cls.example_nodes if fault_cls.needs <= sys_cls.offers else 3
    lines = [f"# A scenario written by `brokerchaos new {system} --fault {action}`: edit it, then",
             f"#   brokerchaos run {system}-{action}.yaml --dry-run   (checks it, starts nothing)",
             f"#   brokerchaos run {system}-{action}.yaml",
             f"# {system}: {sys_cls.description}",
             *_comment(f"{action}: {fault_cls.description}"),
             f"name: {system}-{action}", f"system: {system}",
             "runs: 3  # each run: a fresh cluster, the write, the fault, the read, a verdict",
             "cluster:", f"  nodes: {nodes}", "  replicas: 3",
             "# the system's own settings (`brokerchaos faults` lists them): uncomment one to set it",
             *_block("options", sys_cls.Options, "  ", {}),
             "workload:", "  messages: 20000  # per producer; each is 1, 2, 3, ... so loss and order can be read back",
             "  rate: 1000  # messages per second (0: as fast as acks come)",
             "fault:", f"  action: {action}", f"  target: {target}  # leader, follower, random, all, n2, ...",
             *_block("params", fault_cls.Params, "    ", params),
             "  trigger: {after_acks: 5000}  # or {at_seconds: 10}",
             "  duration: 5  # seconds until the heal (else before the read)"]
    return "\n".join(lines) + "\n"


def cluster_text(system: str, nodes: int = 3) -> str:
    """An external cluster file: each node's address and hooks, the services its roles ask."""
    if system not in SYSTEMS:
        raise ScenarioError(f"scenario field 'system': unknown system {system!r} (known: {', '.join(SYSTEMS.names())})")
    cls, scenario = SYSTEMS.get(system), Scenario(system=system)
    port = cls.local_cluster(scenario).ports["client"]
    services = cls.services_needed(scenario)  # what its roles ask besides the client port
    lines = [f"# A cluster file written by `brokerchaos new {system} --external`: the addresses of a",
             "# cluster you run, and the shell commands (hooks) that act on its nodes (docs/external.md).",
             f"#   brokerchaos run --system {system} --external {system}-cluster.yaml --fault kill-leader",
             f"system: {system}", "hook_timeout: 60", "nodes:"]
    for i in range(1, nodes + 1):
        lines += [f"  n{i}:", f"    address: localhost:{port + 10_000 * i}  # what clients connect to",
                  f"    kill: docker kill {system}{i}  # each hook: a shell command that exits 0",
                  f"    stop: docker stop {system}{i}", f"    start: docker start {system}{i}",
                  f"    # pause: docker pause {system}{i}", f"    # resume: docker unpause {system}{i}",
                  f"    # alive: test \"$(docker inspect -f '{{{{.State.Running}}}}' {system}{i})\" = true"]
        if services:
            lines.append("    services:  # what the roles ask besides the client port")
            lines += [f"      {s}: localhost:{20_000 + 1000 * i + k}" for k, s in enumerate(services)]
    return "\n".join(lines) + "\n"


def write(path: Path, text: str, check) -> None:
    """Write `text` to `path` (never over a file), then `check(path)`: kept only if it passes."""
    if path.exists():
        raise ScenarioError(f"scenario field 'out': {path} exists; name another file")
    path.write_text(text)
    try:
        check(path)
    except Exception:
        path.unlink()
        raise
