"""The validated scenario model: YAML files and CLI flags both end up here.

Validation happens before anything is started: a bad scenario is one line naming the
field and exit code 2 (see cli.py).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class ScenarioError(ValueError):
    """A scenario that cannot run; the message names the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ClusterSpec(_Strict):
    nodes: int = Field(3, ge=1, le=9, description="broker nodes, one namespace each")
    replicas: int = Field(3, ge=1, le=9, description="replication factor of the stream/topic/queue")
    reuse: bool = Field(
        True, description="let the next run use this run's cluster when it ends healthy (fresh stream/queue); "
                          "false: a new cluster per run")


class WorkloadSpec(_Strict):
    messages: int = Field(100_000, ge=1, description="messages per producer per run")
    in_flight: int = Field(10_000, ge=1, description="max messages sent but not yet answered, per producer")
    producers: int = Field(1, ge=1, le=64)
    message_size: int = Field(0, ge=0, le=1_048_576, description="pad payloads to this many bytes")
    retries: int = Field(0, ge=0, le=100, description="resends of a message after a nack or unknown outcome")
    retry_backoff: float = Field(
        0.1, ge=0, le=60, description="seconds before the first resend; doubles per attempt up to retry_backoff_max"
    )
    retry_backoff_max: float = Field(1.0, ge=0, le=600)
    dedup: bool = Field(False, description="ask the broker to deduplicate (NATS: Nats-Msg-Id)")
    ack_timeout: float = Field(5.0, gt=0, le=600, description="seconds without an answer before the outcome is unknown")
    write_timeout: float = Field(600.0, gt=0, description="bound on the whole write phase, seconds")
    read_timeout: float = Field(300.0, gt=0, description="bound on the whole read phase, seconds")
    read_idle: float = Field(10.0, gt=0, description="seconds the read may make no progress before it gives up")


class TriggerSpec(_Strict):
    after_acks: Optional[int] = Field(None, ge=1, description="fire on the N-th positive ack (all producers)")
    at_seconds: Optional[float] = Field(None, ge=0, description="fire this long after the write phase starts")

    @model_validator(mode="after")
    def _one(self) -> "TriggerSpec":
        if (self.after_acks is None) == (self.at_seconds is None):
            raise ValueError("give exactly one of after_acks, at_seconds")
        return self


class RepeatSpec(_Strict):
    """Fault windows again and again: every X seconds, or after random gaps drawn from the
    scenario's seed (the same seed replays the same schedule), for a total span."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)
    every: Optional[float] = Field(None, gt=0, description="seconds from one window's start to the next")
    gap: Optional[tuple[float, float]] = Field(
        None, description="[min, max] seconds between a heal and the next window, drawn with the seed"
    )
    for_: float = Field(..., alias="for", gt=0, le=86_400, description="windows start within this many seconds")
    max_windows: int = Field(1000, ge=1, le=100_000)

    @model_validator(mode="after")
    def _one(self) -> "RepeatSpec":
        if (self.every is None) == (self.gap is None):
            raise ValueError("give exactly one of every, gap")
        if self.gap is not None and not (0 <= self.gap[0] <= self.gap[1]):
            raise ValueError("gap must be [min, max] with 0 <= min <= max")
        return self


class FaultSpec(_Strict):
    action: str = Field("none", description="fault action, see `brokerchaos faults`")
    target: str = Field(
        "leader",
        description="which node(s): leader, follower(s), random, client-node, coordinator, a node name, "
        "a list (n1,n2), n of a role (followers[1]), or groups for partition (n1|n2,n3)",
    )
    params: dict[str, Any] = Field(default_factory=dict, description="the action's own settings (see `faults`)")
    trigger: TriggerSpec = Field(default_factory=lambda: TriggerSpec(after_acks=20_000))
    duration: Optional[float] = Field(
        None, gt=0, description="heal this many seconds after injecting (else at `heal`)"
    )
    heal: Literal["before-read", "after-read"] = Field(
        "before-read", description="when a fault without duration is healed"
    )
    repeat: Optional[RepeatSpec] = None


class Scenario(_Strict):
    name: str = Field("scenario", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    system: str = "nats"
    runs: int = Field(5, ge=1, le=100_000)
    seed: int = Field(0, ge=0)
    sandbox: Literal["auto", "netns", "loopback"] = "auto"
    external: Optional[str] = Field(
        None, description="cluster file of a real cluster to test instead of starting one (kafka, pulsar): "
                          "addresses and kill/stop/start/pause hooks per node; see docs/external.md")
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    options: dict[str, Any] = Field(default_factory=dict, description="the system's own settings (see `faults`)")
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)
    fault: FaultSpec = Field(default_factory=FaultSpec)
    faults: list[FaultSpec] = Field(
        default_factory=list, description="several faults, each with its own trigger (instead of `fault`)"
    )

    @model_validator(mode="after")
    def _fault_or_faults(self) -> "Scenario":
        if self.faults and "fault" in self.model_fields_set:
            raise ValueError("give either fault or faults, not both")
        return self

    @property
    def fault_list(self) -> list[FaultSpec]:
        return list(self.faults) if self.faults else [self.fault]

    def fault_fields(self) -> list[tuple[str, FaultSpec]]:
        """(field path for error messages, spec) of every fault."""
        if self.faults:
            return [(f"faults.{i}", f) for i, f in enumerate(self.faults)]
        return [("fault", self.fault)]


# CLI flag -> dotted path in the scenario document.
FLAG_PATHS = {
    "name": "name",
    "system": "system",
    "runs": "runs",
    "seed": "seed",
    "sandbox": "sandbox",
    "external": "external",
    "nodes": "cluster.nodes",
    "replicas": "cluster.replicas",
    "messages": "workload.messages",
    "in_flight": "workload.in_flight",
    "producers": "workload.producers",
    "message_size": "workload.message_size",
    "retries": "workload.retries",
    "dedup": "workload.dedup",
    "ack_timeout": "workload.ack_timeout",
    "write_timeout": "workload.write_timeout",
    "read_timeout": "workload.read_timeout",
    "target": "fault.target",
    "duration": "fault.duration",
    "heal": "fault.heal",
}


def _set_path(doc: dict, path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    node = doc
    for p in parents:
        child = node.get(p)
        if child is None:
            child = node[p] = {}
        elif not isinstance(child, dict):
            raise ScenarioError(f"scenario field '{p}': expected a mapping")
        node = child
    node[leaf] = value


def split_fault(value: str, targets: list[str]) -> tuple[str, Optional[str]]:
    """`kill-leader` -> ("kill", "leader"); `kill` -> ("kill", None).

    Action names may contain dashes (tcp-kill), so only a known target name is split off.
    """
    for t in sorted(targets, key=len, reverse=True):
        if value.endswith("-" + t) and len(value) > len(t) + 1:
            return value[: -len(t) - 1], t
    return value, None


def _first_error(e: ValidationError, within: str = "") -> str:
    """One line for the first error; `within` is the field path of a nested model
    validated on its own (a fault's params, a system's options)."""
    err = e.errors()[0]
    loc = ".".join([within] * bool(within) + [str(p) for p in err["loc"]])
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown field"
    return f"scenario field '{loc}': {msg}" if loc else f"scenario: {msg}"


def load_document(path: Optional[str | Path]) -> dict:
    if path is None:
        return {}
    p = Path(path)
    if not p.is_file():
        raise ScenarioError(f"scenario file '{p}': not found")
    try:
        doc = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise ScenarioError(f"scenario file '{p}': invalid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(doc, dict):
        raise ScenarioError(f"scenario file '{p}': expected a mapping at the top level")
    doc.setdefault("name", re.sub(r"[^A-Za-z0-9_.-]", "-", p.stem)[:64])
    return doc


FAULT_FLAGS = ("fault", "target", "after_acks", "at_seconds", "duration", "heal", "fault_param")


def _param_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def build(doc: dict, overrides: Optional[dict[str, Any]] = None) -> Scenario:
    """Validate a scenario document with CLI overrides applied (flags win)."""
    doc = {k: (dict(v) if isinstance(v, dict) else v) for k, v in doc.items()}
    if isinstance(doc.get("fault"), dict):
        for sub in ("trigger", "params"):
            if isinstance(doc["fault"].get(sub), dict):
                doc["fault"][sub] = dict(doc["fault"][sub])
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None and v != []}
    if doc.get("faults") and any(k in overrides for k in FAULT_FLAGS):
        flags = ", ".join("--" + k.replace("_", "-") for k in FAULT_FLAGS if k in overrides)
        raise ScenarioError(f"scenario field 'faults': {flags} apply to a single `fault`, and this scenario lists several")
    for key, value in overrides.items():
        if key == "fault":
            from .faults import TARGETS

            action, target = split_fault(value, TARGETS.names())
            _set_path(doc, "fault.action", action)
            if target is not None and "target" not in overrides:
                _set_path(doc, "fault.target", target)
        elif key == "after_acks":
            _set_path(doc, "fault.trigger", {"after_acks": value})
        elif key == "at_seconds":
            _set_path(doc, "fault.trigger", {"at_seconds": value})
        elif key == "fault_param":
            for item in value:
                k, sep, v = item.partition("=")
                if not sep or not k.strip():
                    raise ScenarioError(f"scenario field 'fault.params': expected KEY=VALUE, got {item!r}")
                _set_path(doc, f"fault.params.{k.strip()}", _param_value(v))
        elif key == "option":
            if isinstance(doc.get("options"), dict):
                doc["options"] = dict(doc["options"])
            for item in value:
                k, sep, v = item.partition("=")
                if not sep or not k.strip():
                    raise ScenarioError(f"scenario field 'options': expected KEY=VALUE, got {item!r}")
                _set_path(doc, f"options.{k.strip()}", _param_value(v))
        else:
            _set_path(doc, FLAG_PATHS[key], value)
    try:
        scenario = Scenario.model_validate(doc)
    except ValidationError as e:
        raise ScenarioError(_first_error(e)) from None
    check_cross_fields(scenario)
    check_registries(scenario)
    return scenario


def check_cross_fields(s: Scenario) -> None:
    if s.cluster.replicas > s.cluster.nodes:
        raise ScenarioError(
            f"scenario field 'cluster.replicas': {s.cluster.replicas} replicas cannot fit on {s.cluster.nodes} nodes"
        )
    total = s.workload.messages * s.workload.producers
    for path, f in s.fault_fields():
        n = f.trigger.after_acks
        if f.action != "none" and n is not None and n > total:
            raise ScenarioError(
                f"scenario field '{path}.trigger.after_acks': {n} is more than the messages sent per run ({total})"
            )
        if f.repeat is not None and f.repeat.every is not None and f.duration is not None \
                and f.repeat.every <= f.duration:
            raise ScenarioError(
                f"scenario field '{path}.repeat.every': {f.repeat.every}s leaves no time between windows of "
                f"{f.duration}s"
            )


def check_registries(s: Scenario) -> None:
    """Names must exist and the system must support each fault: checked before anything starts."""
    from .faults import FAULTS
    from .faults.targets import TargetError, check_expression
    from .systems import SYSTEMS

    if s.system not in SYSTEMS:
        raise ScenarioError(f"scenario field 'system': unknown system {s.system!r} (known: {', '.join(SYSTEMS.names())})")
    system = SYSTEMS.get(s.system)
    try:
        system.Options.model_validate(s.options)
    except ValidationError as e:
        raise ScenarioError(_first_error(e, "options")) from None
    system.check(s)
    if s.external is not None:
        from .systems import external

        if not system.external_ok:
            raise ScenarioError(f"scenario field 'external': system {s.system!r} has no external mode "
                                f"(kafka and pulsar have)")
        ext = external.load(s.external)
        if ext.system is not None and ext.system != s.system:
            raise ScenarioError(f"scenario field 'external': the cluster file is for {ext.system!r}, not {s.system!r}")
        if len(ext.nodes) != s.cluster.nodes:
            raise ScenarioError(f"scenario field 'cluster.nodes': the external cluster has {len(ext.nodes)} nodes")
    node_names = [f"n{i}" for i in range(1, s.cluster.nodes + 1)] + list(system.service_hosts)
    for path, f in s.fault_fields():
        if f.action not in FAULTS:
            raise ScenarioError(
                f"scenario field '{path}.action': unknown fault {f.action!r} (known: {', '.join(FAULTS.names())})"
            )
        cls = FAULTS.get(f.action)
        if f.action not in system.supported_faults:
            raise ScenarioError(
                f"scenario field '{path}.action': system {s.system!r} does not support fault {f.action!r} "
                f"(it supports: {', '.join(sorted(system.supported_faults))})"
            )
        if cls.needs_netns and s.external is not None:
            raise ScenarioError(
                f"scenario field '{path}.action': {f.action!r} works inside the sandbox only; on an external "
                f"cluster use action 'command' with a hook of the cluster file"
            )
        if cls.needs_netns and s.sandbox == "loopback":
            raise ScenarioError(
                f"scenario field 'sandbox': fault {f.action!r} changes the network and needs the netns sandbox"
            )
        try:
            params = cls.Params.model_validate(f.params)
        except ValidationError as e:
            raise ScenarioError(_first_error(e, f"{path}.params")) from None
        try:
            check_expression(f.target, node_names, system, groups=cls.takes_groups)
            cls.check(params, node_names, system, s)
        except TargetError as e:
            raise ScenarioError(f"scenario field '{path}.{e.field}': {e}") from None
        if f.target == "follower" and s.cluster.replicas < 2:
            raise ScenarioError(f"scenario field '{path}.target': a stream with 1 replica has no follower")
        if f.repeat is not None and f.duration is None and cls.recoverable:
            raise ScenarioError(
                f"scenario field '{path}.duration': a repeated {f.action!r} needs a duration to heal each window"
            )


def load(path: Optional[str | Path] = None, overrides: Optional[dict[str, Any]] = None) -> Scenario:
    return build(load_document(path), overrides)
