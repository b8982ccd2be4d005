"""The scenario model: YAML files and CLI flags both end up here.

This module is the model only: types, ranges and checks between its own fields. What needs
the systems and faults registries (does the system offer what the fault needs?) is in
validation.py, above both. A field marked `cli=True` is also a `brokerchaos run` flag
(named after the field, its help the field's description): one place per setting.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import ScenarioError, first_error
from .inputs import read_yaml

CLI = {"cli": True}  # json_schema_extra of a field that is also a flag of `brokerchaos run`


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ClusterSpec(_Strict):
    nodes: int = Field(3, ge=1, le=9, description="broker nodes, one namespace each (default 3)",
                       json_schema_extra=CLI)
    replicas: int = Field(3, ge=1, le=9, description="replication factor of the stream/topic/queue (default 3)",
                          json_schema_extra=CLI)
    version: Optional[str] = Field(
        None, description="server version where a system offers several (Kafka: 3.9 with ZooKeeper, 4.1 with "
                          "KRaft; NATS: system, the Debian package, or a release such as 2.12.1, installed once); "
                          "default: the system's pinned one", json_schema_extra={"cli": "server_version"})
    reuse: bool = Field(
        True, description="let the next run use this run's cluster when it ends healthy (fresh stream/queue); "
                          "false: a new cluster per run")

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, v):
        return release_text(v)


def release_text(v: Any) -> Any:
    """A release as written: YAML reads `4.3` as a number, and `2.10` as 2.1, so a number is
    refused with how to write it (a string such as '4.3')."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        raise ValueError(f"a release in quotes, such as '{v}' (YAML reads an unquoted X.Y as a number: 2.10 as 2.1)")
    return v


class GroupStep(_Strict):
    """A change of the group's size on a schedule: members join (new ones) or leave (the
    last started first, as a scale-in or a deployment does: they leave the group, they are
    not killed)."""

    at_seconds: float = Field(..., ge=0, le=86_400, description="seconds into the write phase")
    consumers: int = Field(..., ge=1, le=16, description="members running from then on")


class GroupSpec(_Strict):
    """A consumer group reading during the write phase as an application would (format 1.6):
    members in processes of their own, each processing what it is handed and making its
    position durable as `commit` says; the group verdicts judge what it processed."""

    name: str = Field("g1", pattern=r"^[a-z][a-z0-9-]{0,30}$", description="the group's name (default g1)")
    consumers: int = Field(2, ge=1, le=16, description="members, one process each (default 2)")
    kind: Optional[str] = Field(None, description="the system's kind of group (Kafka: classic, the default, or "
                                                  "consumer, KIP-848's protocol on Kafka 4.x; NATS: durable, one "
                                                  "durable pull consumer the members share; Redis: stream, a "
                                                  "Streams consumer group; MQTT: shared, a shared subscription; "
                                                  "Pulsar: shared, failover or key-shared)")
    commit: Literal["auto", "after", "before", "transaction"] = Field(
        "after", description="how a member makes its position durable: auto (Kafka: the library, every "
                             "auto_commit_ms; NATS: no acks; Redis: XREADGROUP NOACK), after processing each batch "
                             "or message (default), before processing it (at most once), or transaction (Kafka: "
                             "consume-transform-produce, each batch copied to the output topic <stream>-out and its "
                             "offsets committed in the same transaction: exactly once, read back at the end)")
    process_ms: float = Field(0.0, ge=0, le=60_000, description="the work per message, milliseconds (default 0)")
    hold_after: Optional[int] = Field(
        None, ge=1, le=10_000_000,
        description="the first member to have processed this many messages (first incarnations only) holds what "
                    "it has in hand until "
                    "it is killed, at most 60 s (commit after or transaction: the N-th processed, not committed or "
                    "acked; before or auto: the next one handed over, acked or its offset stored, not processed): "
                    "a fault on it (trigger member_holding, target holding-consumer) lands with work in hand "
                    "whatever the machine's load; its next incarnation does not hold")
    abort: float = Field(0.0, ge=0, le=1, description="commit: transaction: the share of a member's transactions "
                                                      "it aborts on purpose once its copies are written, drawn with "
                                                      "the seed; their batches are processed again (default 0)")
    auto_commit_ms: int = Field(5000, ge=10, le=600_000, description="commit: auto's interval (default 5000, "
                                                                     "librdkafka's)")
    session_timeout_ms: int = Field(10_000, ge=1000, le=300_000,
                                    description="how long the group waits for a silent member (default 10000; "
                                                "NATS: the consumer's ack_wait, after which an unacked message "
                                                "comes again; Redis: how long an unacked entry waits before "
                                                "another member claims it)")
    schedule: list[GroupStep] = Field(default_factory=list, description="scale out and in during the write: "
                                                                         "[{at_seconds, consumers}, …]")


class TxnSpec(_Strict):
    """Each producer writes in transactions (history format 1.7): `size` messages each,
    committed, or aborted on purpose in a seeded share of them; the checking read reads
    only what was committed (Kafka: isolation.level read_committed)."""

    size: int = Field(5, ge=1, le=10_000, description="messages per transaction (default 5)")
    abort: float = Field(0.0, ge=0, le=1, description="the share of transactions aborted on purpose, drawn with "
                                                      "the seed (default 0)")
    linger_ms: float = Field(100.0, gt=0, le=60_000, description="a transaction not yet full ends this long after "
                                                                 "its first message (the write's tail; default 100)")
    commit_timeout: float = Field(30.0, gt=0, le=600, description="seconds a commit or an abort may take before "
                                                                  "its outcome is unknown (default 30)")


def topic_names(n: int) -> list[str]:
    """`workload.topics`' names, `t1`…`tn`, for a run of several topics; none for a run of one
    (its rows carry no topic, its names are as before topics existed)."""
    return [f"t{k}" for k in range(1, n + 1)] if n > 1 else []


class WorkloadSpec(_Strict):
    messages: int = Field(100_000, ge=1, description="messages per producer per run (default 100000)",
                          json_schema_extra=CLI)
    in_flight: int = Field(10_000, ge=1, description="max messages sent but not yet answered, per producer "
                                                    "(default 10000)", json_schema_extra=CLI)
    producers: int = Field(1, ge=1, le=64, description="concurrent producers (default 1)", json_schema_extra=CLI)
    processes: int = Field(
        1, ge=1, le=64, description="operating-system processes the producers are spread over (default 1: all in "
                                    "the harness's own); more where one Python process cannot keep up with the broker",
        json_schema_extra=CLI)
    topics: int = Field(
        1, ge=1, le=10_000, description="topics (streams, queues) the producers write to, each producer to every "
                                        "one: `messages` and `rate` are then per producer per topic, and every "
                                        "verdict is also given per topic (default 1)", json_schema_extra=CLI)
    consumers: int = Field(0, ge=0, le=16, description="live consumers reading during the write phase, besides the "
                                                      "end read (default 0)", json_schema_extra=CLI)
    group: Optional[GroupSpec] = Field(None, description="a consumer group reading during the write phase, judged "
                                                         "by the group verdicts (default: none)")
    transactions: Optional[TxnSpec] = Field(
        None, description="write in transactions, committed or aborted (Kafka; Pulsar with options.client java; "
                          "default: none)")
    rate: Optional[float] = Field(
        None, gt=0, le=10_000_000, description="messages per second per producer, a steady pace (default: as fast "
                                               "as in_flight allows)", json_schema_extra=CLI)
    message_size: int = Field(0, ge=0, le=1_048_576, description="pad payloads to this many bytes",
                              json_schema_extra=CLI)
    retries: int = Field(0, ge=0, le=100, description="resends of a message after a nack or unknown outcome "
                                                      "(default 0)", json_schema_extra=CLI)
    retry_backoff: float = Field(
        0.1, ge=0, le=60, description="seconds before the first resend; doubles per attempt up to retry_backoff_max"
    )
    retry_backoff_max: float = Field(1.0, ge=0, le=600)
    dedup: bool = Field(False, description="ask the broker to deduplicate (NATS: Nats-Msg-Id; default false)",
                        json_schema_extra=CLI)
    ack_timeout: float = Field(5.0, gt=0, le=600, description="seconds without an answer before the outcome is "
                                                              "unknown (default 5)", json_schema_extra=CLI)
    write_timeout: float = Field(600.0, gt=0, description="bound on the whole write phase, seconds (default 600)",
                                 json_schema_extra=CLI)
    read_timeout: float = Field(300.0, gt=0, description="bound on the whole read phase, seconds (default 300)",
                                json_schema_extra=CLI)
    read_idle: float = Field(10.0, gt=0, description="seconds the read may make no progress before it gives up "
                                                     "(default 10)", json_schema_extra=CLI)
    read_replicas: bool = Field(
        False, description="after the end read, read each replica's copy of the stream on its own, node by node: "
                           "the replica verdicts (replicas diverge, acked on no replica; default false)",
        json_schema_extra=CLI)

    @model_validator(mode="after")
    def _topics(self) -> "WorkloadSpec":
        if self.topics > 1:
            what = [k for k, on in (("group", self.group is not None),
                                    ("transactions", self.transactions is not None),
                                    ("read_replicas", self.read_replicas)) if on]
            if what:
                raise ValueError(f"topics > 1 is not yet combined with {', '.join(what)} (one topic there)")
        return self


WHEN = ("after_acks", "at_seconds", "member_holding")  # a trigger's condition: one of these
HOLD_S = 60.0  # how long a member told to hold (`hold_after`) waits to be killed before it goes on


class TriggerSpec(_Strict):
    after_acks: Optional[int] = Field(None, ge=1, description="fire on the N-th positive ack (all producers)")
    at_seconds: Optional[float] = Field(None, ge=0, description="fire this long after the write phase starts")
    member_holding: Optional[float] = Field(
        None, ge=0, le=HOLD_S / 2,
        description="fire this many seconds after the consumer group's holding member began to hold its work in "
                    "hand (workload.group.hold_after; target holding-consumer): a control whose fault must find "
                    "work in hand, whatever the machine's load")
    after_fault: Optional[int] = Field(
        None, ge=1, description="and not before the fault at this position of `faults` (1: the first) has healed "
                                "its last window: one fault after another, however long the first one's heal takes")
    jitter: float = Field(0.0, ge=0, le=3600, description="then wait a further delay drawn uniformly from "
                                                         "[0, jitter) seconds with the seed (a fault off the "
                                                         "beat of the acks or of a steady rate)")

    @model_validator(mode="after")
    def _one(self) -> "TriggerSpec":
        given = [k for k in WHEN if getattr(self, k) is not None]
        if len(given) > 1 or not (given or self.after_fault):
            raise ValueError(f"give exactly one of {', '.join(WHEN)} (or after_fault alone)")
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
        json_schema_extra=CLI,
    )
    params: dict[str, Any] = Field(default_factory=dict, description="the action's own settings (see `faults`)")
    # a scenario without a trigger fires on the ack of a fifth of the run's messages (Scenario._default_triggers)
    trigger: TriggerSpec = Field(default_factory=lambda: TriggerSpec(after_acks=20_000),
                                 description="when the fault fires (default: on the positive ack of a fifth of the "
                                             "messages of a run)")
    duration: Optional[float] = Field(
        None, gt=0, description="heal this many seconds after injecting (else at `heal`)", json_schema_extra=CLI
    )
    heal: Literal["before-read", "after-read"] = Field(
        "before-read", description="when a fault without duration is healed", json_schema_extra=CLI
    )
    repeat: Optional[RepeatSpec] = None


DEFAULT_TRIGGER_SHARE = 5  # a fault with no trigger fires on the ack of 1/5 of a run's messages


class Scenario(_Strict):
    name: str = Field("scenario", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
                      description="session name (default: the scenario file's name)", json_schema_extra=CLI)
    system: str = Field("nats", description="broker under test (default nats; see `brokerchaos faults`)",
                        json_schema_extra=CLI)
    runs: int = Field(5, ge=1, le=100_000, description="number of runs (default 5)", json_schema_extra=CLI)
    seed: int = Field(0, ge=0, description="seed for random choices (targets, schedules)", json_schema_extra=CLI)
    sandbox: Literal["auto", "netns", "loopback"] = Field("auto", description="where nodes run (default auto)",
                                                          json_schema_extra=CLI)
    external: Optional[str] = Field(
        None, description="test a real cluster through the hooks of this cluster file instead of starting one "
                          "(addresses and kill/stop/start/pause hooks per node; see docs/external.md)",
        json_schema_extra=CLI)
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    options: dict[str, Any] = Field(default_factory=dict, description="the system's own settings (see `faults`)")
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)
    fault: FaultSpec = Field(default_factory=FaultSpec)
    faults: list[FaultSpec] = Field(
        default_factory=list, description="several faults, each with its own trigger (instead of `fault`)"
    )
    fault_mix: list[FaultSpec] = Field(
        default_factory=list,
        description="one of these faults per run, drawn with the seed (instead of `fault`): a soak's mix of "
                    "graceful and crash faults")
    requires: list[str] = Field(
        default_factory=list,
        description="what must happen in a run for its question to be asked at all (owner-moved, "
                    "unsynced-dropped, duplicates, unknown-outcomes; docs/history-format.md): a run where one did not "
                    "is unknown, `the mechanism under test did not occur`")

    @model_validator(mode="after")
    def _fault_or_faults(self) -> "Scenario":
        given = [k for k in ("fault", "faults", "fault_mix") if k in self.model_fields_set and getattr(self, k)]
        if len(given) > 1:
            raise ValueError(f"give one of fault, faults and fault_mix, not {' and '.join(given)}")
        return self

    @model_validator(mode="after")
    def _default_triggers(self) -> "Scenario":
        """A fault given no trigger fires inside the run, whatever its size: on the positive
        ack of a fifth of the messages (20,000 of the default 100,000)."""
        share = max(1, self.workload.messages * self.workload.producers // DEFAULT_TRIGGER_SHARE)
        for f in (self.fault, *self.faults, *self.fault_mix):
            if "trigger" not in f.model_fields_set:
                f.trigger = TriggerSpec(after_acks=share)
        return self

    @property
    def fault_list(self) -> list[FaultSpec]:
        return list(self.faults) if self.faults else [self.fault]

    def faults_for_run(self, run_id: str) -> list[FaultSpec]:
        """The faults of one run: `fault_mix` draws one per run from (seed, run id), so a
        resumed soak or a replay draws the same; otherwise `fault_list`."""
        if not self.fault_mix:
            return self.fault_list
        import random

        return [random.Random(f"{self.seed}/{run_id}/fault_mix").choice(self.fault_mix)]

    def fault_fields(self) -> list[tuple[str, FaultSpec]]:
        """(field path for error messages, spec) of every fault."""
        if self.fault_mix:
            return [(f"fault_mix.{i}", f) for i, f in enumerate(self.fault_mix)]
        if self.faults:
            return [(f"faults.{i}", f) for i, f in enumerate(self.faults)]
        return [("fault", self.fault)]


def flag_of(path: str, f: Any) -> str:
    """The flag of a setting (without dashes): the field's name, or the name its `cli` mark
    gives (cluster.version is --server-version: --version would be the program's)."""
    mark = (f.json_schema_extra or {}).get("cli")
    return mark if isinstance(mark, str) else path.rsplit(".", 1)[-1]


def cli_fields() -> list[tuple[str, Any]]:
    """(dotted path, field) of every setting that is also a `brokerchaos run` flag, in the
    models' order; the flag is flag_of(path, field)."""
    out = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, f in model.model_fields.items():
            sub = {"cluster": ClusterSpec, "workload": WorkloadSpec, "fault": FaultSpec}.get(name) \
                if model is Scenario else None
            if sub is not None:
                walk(sub, f"{prefix}{name}.")
            elif (f.json_schema_extra or {}).get("cli"):
                out.append((prefix + name, f))

    walk(Scenario, "")
    return out


# flag (field name, or its `cli` mark) -> dotted path in the scenario document
FLAG_PATHS = {flag_of(path, f): path for path, f in cli_fields()}


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


def load_document(path: Optional[str | Path]) -> dict:
    if path is None:
        return {}
    p = Path(path)
    doc = read_yaml(p, "scenario file")
    if not isinstance(doc, dict):
        raise ScenarioError(f"scenario file '{p}': expected a mapping at the top level")
    doc.setdefault("name", re.sub(r"[^A-Za-z0-9_.-]", "-", p.stem)[:64])
    return doc


FAULT_FLAGS = ("fault", "target", "after_acks", "at_seconds", "duration", "heal", "fault_param")


def _param_value(text: str, key: str = "") -> Any:
    if key.endswith("version"):  # a release, as written (2.10 is not 2.1)
        return text.strip()
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def build(doc: dict, overrides: Optional[dict[str, Any]] = None, target_names: tuple[str, ...] = ()) -> Scenario:
    """The model of a scenario document with CLI overrides applied (flags win); `target_names`
    are the roles `--fault ACTION-TARGET` may end with. The checks between fields
    (check_cross_fields) and against the registries: validation.py, names first."""
    doc = {k: (dict(v) if isinstance(v, dict) else v) for k, v in doc.items()}
    if isinstance(doc.get("fault"), dict):
        for sub in ("trigger", "params"):
            if isinstance(doc["fault"].get(sub), dict):
                doc["fault"][sub] = dict(doc["fault"][sub])
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None and v != []}
    if doc.get("faults") and any(k in overrides for k in FAULT_FLAGS):
        flags = ", ".join("--" + k.replace("_", "-") for k in FAULT_FLAGS if k in overrides)
        raise ScenarioError(f"scenario field 'faults': {flags} apply to a single `fault`, and this scenario "
                            f"lists several")
    # `fault` first: a flag naming another action drops the file's params (they were that
    # action's), and `fault_param` then sets the new one's
    for key, value in sorted(overrides.items(), key=lambda kv: kv[0] != "fault"):
        _apply_flag(doc, key, value, overrides, target_names)
    try:
        return Scenario.model_validate(doc)
    except ValidationError as e:
        raise ScenarioError(first_error(e)) from None


def _apply_flag(doc: dict, key: str, value: Any, overrides: dict, target_names: tuple[str, ...]) -> None:
    """One CLI flag set in the document (flags win over the file)."""
    if key == "fault":
        action, target = split_fault(value, list(target_names))
        if isinstance(doc.get("fault"), dict) and doc["fault"].get("action") not in (None, action):
            doc["fault"].pop("params", None)
        _set_path(doc, "fault.action", action)
        if target is not None and "target" not in overrides:
            _set_path(doc, "fault.target", target)
    elif key in ("after_acks", "at_seconds"):
        _set_path(doc, "fault.trigger", {key: value})
    elif key == "fault_param":
        _set_pairs(doc, "fault.params", value)
    elif key == "option":
        if isinstance(doc.get("options"), dict):
            doc["options"] = dict(doc["options"])
        _set_pairs(doc, "options", value)
    else:
        _set_path(doc, FLAG_PATHS[key], value)


def _set_pairs(doc: dict, path: str, items: list[str]) -> None:
    """`--option K=V` / `--fault-param K=V` items under `path`; a value is read as YAML."""
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise ScenarioError(f"scenario field '{path}': expected KEY=VALUE, got {item!r}")
        _set_path(doc, f"{path}.{k.strip()}", _param_value(v, k.strip()))


def check_cross_fields(s: Scenario) -> None:
    if s.cluster.replicas > s.cluster.nodes:
        raise ScenarioError(
            f"scenario field 'cluster.replicas': {s.cluster.replicas} replicas cannot fit on {s.cluster.nodes} nodes"
        )
    if s.workload.processes > s.workload.producers:
        raise ScenarioError(
            f"scenario field 'workload.processes': {s.workload.processes} processes for {s.workload.producers} "
            "producer(s): each process runs at least one producer"
        )
    total = s.workload.messages * s.workload.producers
    for i, (path, f) in enumerate(s.fault_fields()):
        _check_trigger(s, path, i, f.trigger)
        if f.trigger.member_holding is not None and f.repeat is not None:
            raise ScenarioError(f"scenario field '{path}.repeat': a member holds its work once a run "
                                "(trigger.member_holding), so a second window would find no holder: drop `repeat`")
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


def _check_trigger(s: Scenario, path: str, i: int, t: TriggerSpec) -> None:
    """An `after_fault` names an earlier fault of `faults`; `member_holding` a group that holds."""
    if t.after_fault is not None and not (path.startswith("faults.") and t.after_fault <= i):
        where = f"one of faults 1..{i}" if path.startswith("faults.") and i else "an earlier fault of `faults`"
        raise ScenarioError(f"scenario field '{path}.trigger.after_fault': {t.after_fault} is not {where}")
    if t.after_fault is not None and s.faults[t.after_fault - 1].duration is None:
        raise ScenarioError(f"scenario field '{path}.trigger.after_fault': fault {t.after_fault} has no duration, "
                            "so it heals after the write: give it one")
    g = s.workload.group
    if t.member_holding is not None and (g is None or g.hold_after is None):
        raise ScenarioError(f"scenario field '{path}.trigger.member_holding': no member holds: give "
                            "workload.group.hold_after")
