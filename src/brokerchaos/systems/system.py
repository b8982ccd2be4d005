"""The registry entry of a broker (`SYSTEMS.register("name")` on a `System`): its settings,
static checks, what its machine needs, and the classes of its three parts (base.py's
cluster and client, roles.py's roles)."""
from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Optional

from pydantic import BaseModel
from .base import LOCAL_VERBS, NETNS, Client, Cluster, NoOptions
from .needs import Need
from .roles import Roles

if TYPE_CHECKING:
    from ..scenario import Scenario
    from .pyclients import PyClient

# the workload's shape, which no server is configured from: how much, how fast, how many
# clients and how long they wait
WORKLOAD_SHAPE = frozenset({
    "messages", "in_flight", "producers", "processes", "topics", "consumers", "rate", "message_size", "retries",
    "retry_backoff", "retry_backoff_max", "ack_timeout", "write_timeout", "read_timeout", "read_idle"})


class System:
    """A broker as the registry knows it: its settings, static checks and the classes of its
    three parts. `SYSTEMS.register("name")` sets `name`."""

    name: ClassVar[str]
    description: ClassVar[str]
    # the system's own scenario settings (`options:` in the YAML)
    Options: ClassVar[type[BaseModel]] = NoOptions
    LocalCluster: ClassVar[type[Cluster]]
    Client: ClassVar[type[Client]]
    Roles: ClassVar[type[Roles]]
    # what the roles can look up beyond a leader (faults and targets ask for these)
    offers: ClassVar[frozenset[str]] = frozenset()
    # a healthy cluster may serve the next run (with a fresh stream/queue) instead of a new one
    reusable: ClassVar[bool] = True
    # producer names carry the run id, for systems where one run can read another's messages
    tags_runs: ClassVar[bool] = False
    # options that only the clients and the roles read, never a server's configuration: a
    # cluster kept from another session (runner/pool.py) may serve a scenario that differs
    # from its own in these alone. An option not named here is taken to shape the servers
    # (the safe side: a wrong omission costs a cluster start, a wrong entry a wrong cluster)
    client_options: ClassVar[frozenset[str]] = frozenset()
    # the same for the workload's settings beyond its shape (WORKLOAD_SHAPE): a consumer
    # group, transactions, deduplication, which some servers are configured for (Pulsar)
    client_workload: ClassVar[frozenset[str]] = frozenset()
    # and for the cluster's spec: `replicas` is the stream's where clients create it
    client_cluster: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def server_config(cls, scenario: "Scenario") -> dict:
        """What a local cluster's servers are configured from for this scenario: two
        scenarios with the same may share a cluster (runner/pool.py)."""
        options = cls.Options.model_validate(scenario.options).model_dump(mode="json")
        workload = scenario.workload.model_dump(mode="json")
        return {"system": cls.name, "class": cls.local_cluster(scenario).__qualname__,
                "cluster": scenario.cluster.model_dump(mode="json", exclude={"reuse", *cls.client_cluster}),
                "service_hosts": list(cls.service_hosts(scenario)),
                "options": {k: v for k, v in options.items() if k not in cls.client_options},
                "workload": {k: v for k, v in workload.items()
                             if k not in WORKLOAD_SHAPE and k not in cls.client_workload}}

    @classmethod
    def check(cls, scenario: "Scenario") -> None:
        """Static checks of a scenario for this system (raise scenario.ScenarioError)."""

    @classmethod
    def variants(cls) -> tuple[tuple[str, dict, Optional[str]], ...]:
        """Each way it can be deployed, as `brokerchaos doctor` lists them: (label, options,
        cluster.version); one, with the defaults, unless the system says more. A version of
        `releases.ANY` is a row for every release fetched by cluster.version (what those
        need of the machine), not one to run."""
        return ((cls.name, {}, None),)

    # the needs of the machine this system brings (needs.py: its server programs, its
    # releases' jars), by name; doctor lists them beside the machine's own (Java, root, …)
    machine_setup: ClassVar[tuple[Need, ...]] = ()

    @classmethod
    def machine_needs(cls, options: dict, version: Optional[str]) -> tuple[str, ...]:
        """What a local cluster with these options needs of the machine, by name (its own
        `machine_setup`, another system's, or the machine's: doctor.NEEDS); nothing unless it says."""
        return ()

    @classmethod
    def server_versions(cls) -> tuple[str, ...]:
        """The servers it runs as resolved on this machine, a line each (`brokerchaos --version`)."""
        return ()

    @classmethod
    def versions(cls, scenario: "Scenario") -> tuple[str, ...]:
        """The server versions `cluster.version` may name here, the default first; () when
        the system runs the one version its package provides."""
        return ()

    @classmethod
    def releases(cls, scenario: "Scenario", fetch: bool = True, of: str = "server") -> list[str]:
        """The releases `cluster.version` (of "server") or `options.client_version` (of
        "client") may name for this scenario, oldest first, as the registry lists them
        (`bisect` walks them); [] when it cannot list them."""
        return []

    @classmethod
    def python_client(cls, scenario: "Scenario") -> Optional["PyClient"]:
        """The release of a Python client library `options.client_version` names for the
        producers and readers in the harness's own process (None: the one installed)."""
        return None

    @classmethod
    def version_error(cls, scenario: "Scenario") -> Optional[str]:
        """Why `cluster.version` cannot be run here (None if it can)."""
        v, known = scenario.cluster.version, cls.versions(scenario)
        if v is None or v in known:
            return None
        return (f"{scenario.system} here runs " + (f"one of {', '.join(known)}" if known else
                                                   "the version its package provides") + f", not {v!r}")

    @classmethod
    def install(cls, scenario: "Scenario") -> None:
        """Fetch what this scenario's servers need that is not there yet (a release named by
        `cluster.version`), before anything starts; bounded. ScenarioError when what the
        scenario names does not exist, SystemError_ when it cannot be fetched."""

    @classmethod
    def local_cluster(cls, scenario: "Scenario") -> type[Cluster]:
        """The local cluster class for this scenario (MQTT picks a backend, Kafka a server)."""
        return cls.LocalCluster

    @classmethod
    def roles_class(cls, scenario: "Scenario") -> type[Roles]:
        return cls.Roles

    @classmethod
    def roles_offers(cls, scenario: "Scenario") -> frozenset[str]:
        """What the roles of this scenario's deployment can look up (`offers`, unless the
        options choose a server without them)."""
        return cls.offers

    @classmethod
    def end_check_s(cls, scenario: "Scenario") -> float:
        """The longest a run's end check of the copies may take with these settings (the run's
        bound grows by it): 0 where there is none (Roles.copies_wait)."""
        return 0.0

    @classmethod
    def local_offers(cls) -> frozenset[str]:
        """Verbs beyond LOCAL_VERBS the default local cluster offers (the `faults` table)."""
        return getattr(getattr(cls, "LocalCluster", None), "extra_offers", frozenset())

    @classmethod
    def refusal(cls, needs: frozenset[str]) -> str:
        """Why this system's servers cannot have what `needs` asks beyond what they offer (its
        default local cluster's `refuses`); empty where they can, or where nothing says why."""
        refuses = getattr(getattr(cls, "LocalCluster", None), "refuses", {})
        missing = needs - cls.local_capabilities()
        return "; ".join(refuses[c] for c in sorted(missing) if c in refuses)

    @classmethod
    def local_capabilities(cls) -> frozenset[str]:
        """Everything a local cluster of this system offers faults, in the namespace sandbox."""
        return frozenset(LOCAL_VERBS | {NETNS} | cls.offers | cls.local_offers())

    @classmethod
    def service_hosts(cls, scenario: "Scenario") -> tuple[str, ...]:
        return cls.local_cluster(scenario).service_hosts

    # the services besides the client port that the roles ask each node of an external
    # cluster for (`services:` in its file; docs/external.md): checked with the scenario
    external_services: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def services_needed(cls, scenario: "Scenario") -> tuple[str, ...]:
        return cls.external_services
