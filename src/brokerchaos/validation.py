"""A scenario checked against the registries, before anything starts: the system exists and
takes these options, and the deployment it describes offers what each fault needs.

Sits above scenario.py (the model), systems/ and faults/, so that none of them imports
another to validate (tests/test_layers.py holds the import graph acyclic).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from pydantic import ValidationError

from .errors import ScenarioError, first_error
from .faults import FAULTS, TARGETS
from .faults.targets import CONSUMER_TARGETS, TargetError, check_expression
from .faults.targets import names as names_in
from .history.schema import MECHANISMS
from .scenario import Scenario, check_cross_fields, load_document, split_fault
from .scenario import build as build_model
from .systems import SYSTEMS
from .systems.base import LOCAL_VERBS, NETNS, node_names
from .systems.roles import Roles

__all__ = ["ScenarioError", "build", "load", "load_document", "split_fault", "offers"]


def offers(scenario: Scenario) -> frozenset[str]:
    """What the deployment a scenario describes will offer, known before anything starts.
    (`auto` is taken to give namespaces; the CLI checks that they can be made.)"""
    system = SYSTEMS.get(scenario.system)
    if scenario.external is not None:
        from .systems.external import load as load_file

        return load_file(scenario.external).offers() | system.roles_offers(scenario)
    return (LOCAL_VERBS | (set() if scenario.sandbox == "loopback" else {NETNS}) | system.roles_offers(scenario)
            | getattr(system.local_cluster(scenario), "extra_offers", frozenset()))


def build(doc: dict, overrides: Optional[dict[str, Any]] = None) -> Scenario:
    """Validate a scenario document with CLI overrides applied (flags win)."""
    scenario = build_model(doc, overrides, tuple(TARGETS.names()))
    check(scenario)
    return scenario



def accepts(doc: dict) -> bool:
    """Whether `doc` is a scenario the harness runs (a search's candidates are tried here
    first: one it would refuse is not drawn, or not probed)."""
    try:
        build(doc)
    except ScenarioError:
        return False
    return True

def load(path: Optional[str | Path] = None, overrides: Optional[dict[str, Any]] = None) -> Scenario:
    return build(load_document(path), overrides)


def check(s: Scenario) -> None:
    """Names must exist and the deployment must offer what each fault needs."""
    if s.system not in SYSTEMS:
        raise ScenarioError(f"scenario field 'system': unknown system {s.system!r} "
                            f"(known: {', '.join(SYSTEMS.names())})")
    for path, f in s.fault_fields():  # a misspelt name first: what follows from it would hide it
        if f.action not in FAULTS:
            raise ScenarioError(
                f"scenario field '{path}.action': unknown fault {f.action!r} (known: {', '.join(FAULTS.names())})"
            )
    for i, name in enumerate(s.requires):
        if name not in MECHANISMS:
            raise ScenarioError(f"scenario field 'requires.{i}': unknown mechanism {name!r} "
                                f"(known: {', '.join(MECHANISMS)})")
    check_cross_fields(s)
    system = SYSTEMS.get(s.system)
    try:
        system.Options.model_validate(s.options)
    except ValidationError as e:
        raise ScenarioError(first_error(e, "options")) from None
    system.check(s)
    _check_group(s, system)
    _check_txn(s, system)
    if s.workload.read_replicas and not system.Client.replica_reads:
        having = ", ".join(n for n in SYSTEMS.names() if SYSTEMS.get(n).Client.replica_reads)
        raise ScenarioError(f"scenario field 'workload.read_replicas': {s.system} cannot read its replicas one by one "
                            f"in this harness yet (systems that can: {having})")
    if s.workload.topics > 1 and not system.Client.many_topics:
        raise ScenarioError(f"scenario field 'workload.topics': {s.system}'s end reader reads during the write, "
                            "one topic at a time in this harness; give 1")
    why = system.version_error(s)
    if why:
        raise ScenarioError(f"scenario field 'cluster.version': {why}")
    names = node_names(s.cluster.nodes)
    if s.external is not None:
        _check_external(s, system)
    else:
        names += list(system.service_hosts(s))
    have = offers(s)
    for path, f in s.fault_fields():
        _check_fault(s, path, f, names, have)


def _check_group(s: Scenario, system) -> None:
    """A consumer group needs a system whose client has one, of a kind it has."""
    g = s.workload.group
    if g is None:
        return
    kinds = system.Client.group_kinds
    if not kinds:
        having = ", ".join(n for n in SYSTEMS.names() if SYSTEMS.get(n).Client.group_kinds)
        raise ScenarioError(f"scenario field 'workload.group': {s.system} has no consumer group in this harness yet "
                            f"(systems with one: {having})")
    if g.kind is not None and g.kind not in kinds:
        raise ScenarioError(f"scenario field 'workload.group.kind': {s.system} has {', '.join(kinds)}, not {g.kind!r}")
    if g.abort and g.commit != "transaction":
        raise ScenarioError("scenario field 'workload.group.abort': only a group with commit: transaction aborts")
    if g.commit == "transaction" and not system.Client.group_transactions:
        having = ", ".join(n for n in SYSTEMS.names() if SYSTEMS.get(n).Client.group_transactions)
        raise ScenarioError(f"scenario field 'workload.group.commit': {s.system} has no consume-transform-produce "
                            f"in this harness yet (transaction: {having})")
    why = system.Client.group_error(s)
    if why:
        raise ScenarioError(f"scenario field 'workload.group.{why[0]}': {why[1]}")


def _check_txn(s: Scenario, system) -> None:
    """Transactions need a system whose producer has them; a message resent after a failed
    transaction would belong to two (not built)."""
    if s.workload.transactions is None:
        return
    if not system.Client.transactions:
        having = ", ".join(n for n in SYSTEMS.names() if SYSTEMS.get(n).Client.transactions)
        raise ScenarioError(f"scenario field 'workload.transactions': {s.system} has no transactional producer in "
                            f"this harness yet (systems with one: {having})")
    if s.workload.retries:
        raise ScenarioError("scenario field 'workload.retries': a resend would write a message of a failed "
                            "transaction in another one; give 0 with workload.transactions")
    why = system.Client.txn_error(s)
    if why:
        raise ScenarioError(f"scenario field '{why[0]}': {why[1]}")


def _check_external(s: Scenario, system) -> None:
    """The cluster file is for this system, has its nodes, and gives what its roles ask."""
    from .systems.external import load as load_file

    ext = load_file(s.external)
    if ext.system is not None and ext.system != s.system:
        raise ScenarioError(f"scenario field 'external': the cluster file is for {ext.system!r}, not {s.system!r}")
    if len(ext.nodes) != s.cluster.nodes:
        raise ScenarioError(f"scenario field 'cluster.nodes': the external cluster has {len(ext.nodes)} nodes")
    field = ext.missing_services(system.services_needed(s))
    if field:
        raise ScenarioError(f"scenario field 'external.{field}': missing; {s.system}'s roles ask every node for "
                            f"{', '.join(system.services_needed(s))} (docs/external.md)")


def _check_fault(s: Scenario, path: str, f, names: list[str], have: frozenset[str]) -> None:
    """A fault's settings, what it needs of the deployment, its target and its schedule."""
    cls = FAULTS.get(f.action)
    try:
        params = cls.Params.model_validate(f.params)
    except ValidationError as e:
        raise ScenarioError(first_error(e, f"{path}.params")) from None
    missing = cls.needs_for(params) - have
    if missing:
        raise ScenarioError(f"scenario field '{_field_of(missing, path, s, cls)}': fault {f.action!r} needs "
                            f"{', '.join(sorted(missing))}, which {_where(s)} does not offer "
                            f"({', '.join(sorted(have)) or 'nothing'})" + _why_not(missing, s))
    try:
        check_expression(f.target, names, have, groups=cls.takes_groups)
        cls.check(params, names, have, s)
        cls.check_target(params, f.target)
    except TargetError as e:
        raise ScenarioError(f"scenario field '{path}.{e.field}': {e}") from None
    _check_consumer_target(s, path, f)
    _check_coordinator_targets(s, path, f)
    named = names_in(f.target)
    if named & {"follower", "followers"} and s.cluster.replicas < 2:
        raise ScenarioError(f"scenario field '{path}.target': a stream with 1 replica has no follower")
    if "minority" in named and len(names) < 3:
        raise ScenarioError(f"scenario field '{path}.target': {len(names)} nodes have no minority (of 1 or more)")
    if f.repeat is not None and f.duration is None and cls.recoverable:
        raise ScenarioError(
            f"scenario field '{path}.duration': a repeated {f.action!r} needs a duration to heal each window"
        )


def _check_consumer_target(s: Scenario, path: str, f) -> None:
    """The `consumer` targets are workload.group's members: processes of the harness's, which
    a kill, a stop (the member leaves the group), a restart or a pause acts on."""
    named = names_in(f.target)
    if not named & set(CONSUMER_TARGETS):
        return
    if s.workload.group is None:
        raise ScenarioError(f"scenario field '{path}.target': {f.target!r} names a consumer, and the scenario has no "
                            "consumer group (workload.group)")
    if "holding-consumer" in named and s.workload.group.hold_after is None:
        raise ScenarioError(f"scenario field '{path}.target': no member holds its work: give "
                            "workload.group.hold_after")
    if not FAULTS.get(f.action).acts_on_consumers:
        acting = ", ".join(name for name, cls in FAULTS.items() if cls.acts_on_consumers)
        raise ScenarioError(f"scenario field '{path}.action': {acting} act on a consumer "
                            f"group's members, not {f.action!r}")


# a target naming a coordinator of something the scenario must have: (what it needs, the
# workload field that gives it, the roles' method that names it)
COORDINATOR_TARGETS = {
    "group-coordinator": ("a consumer group", "group", "group_coordinator"),
    "txn-coordinator": ("transactions", "transactions", "txn_coordinator"),
}


def _check_coordinator_targets(s: Scenario, path: str, f) -> None:
    """`group-coordinator` needs workload.group, `txn-coordinator` workload.transactions, and
    each a system whose roles can name it."""
    named = names_in(f.target)
    for target in sorted(named & set(COORDINATOR_TARGETS)):
        what, field, method = COORDINATOR_TARGETS[target]
        if getattr(s.workload, field) is None:
            raise ScenarioError(f"scenario field '{path}.target': {target} needs {what} (workload.{field})")
        if getattr(SYSTEMS.get(s.system).roles_class(s), method) is getattr(Roles, method):
            raise ScenarioError(f"scenario field '{path}.target': {s.system} has no "
                                f"{target.replace('-', ' ').replace('txn', 'transaction')} to name")


def _field_of(missing: frozenset[str], path: str, s: Scenario, fault=None) -> str:
    # namespaces are a matter of the sandbox when the scenario asks for loopback
    if missing == {NETNS} and s.sandbox == "loopback" and s.external is None:
        return "sandbox"
    by_param = getattr(fault, "needs_by_param", {})
    if missing and all(c in by_param for c in missing):
        return f"{path}.params.{by_param[min(missing)]}"
    return f"{path}.action"


def _why_not(missing: frozenset[str], s: Scenario) -> str:
    """Why the system's servers cannot have what is missing, where its cluster says."""
    if s.external is not None:
        return ""
    refuses = getattr(SYSTEMS.get(s.system).local_cluster(s), "refuses", {})
    said = [f"{c}: {refuses[c]}" for c in sorted(missing) if c in refuses]
    return f"; {'; '.join(said)}" if said else ""


def _where(s: Scenario) -> str:
    if s.external is not None:
        return "the external cluster file"
    if s.sandbox == "loopback":
        return "the loopback sandbox"
    return f"system {s.system!r}"
