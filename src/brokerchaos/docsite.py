"""The documentation site's generated pages, written from the code at every build so they
cannot drift from it: the CLI (from the parser), the scenario's fields (from the pydantic
models), the faults and targets (from the registries), the verdicts (from the policy
table), and the systems x fault families matrix the README shows too.

MkDocs loads this module as a hook (mkdocs.yml `hooks:`); `on_files` adds the pages.
`python -m brokerchaos.docsite --readme` rewrites the README's matrix between its markers
(tests/test_docs.py fails when it no longer matches).
"""
from __future__ import annotations

import sys
import typing
from pathlib import Path

from pydantic import BaseModel

MATRIX_START, MATRIX_END = "<!-- matrix:start (python -m brokerchaos.docsite --readme) -->", "<!-- matrix:end -->"
def families() -> list[tuple[str, tuple[str, ...]]]:
    """The matrix's columns: each family (faults/base.FAMILIES) and the actions that declare it."""
    from brokerchaos.faults import FAULTS
    from brokerchaos.faults.base import FAMILIES

    return [(fam, tuple(name for name, cls in FAULTS.items() if cls.family == fam)) for fam in FAMILIES]


def _offers() -> dict[str, frozenset[str]]:
    from brokerchaos.systems import SYSTEMS

    return {name: cls.local_capabilities() for name, cls in SYSTEMS.items()}


def matrix() -> str:
    """Systems x fault families: which actions of each family a local cluster offers."""
    from brokerchaos.faults import FAULTS
    from brokerchaos.faults.base import supported

    cols = families()
    head = "| system | " + " | ".join(c for c, _ in cols) + " |"
    rows = [head, "|---" * (len(cols) + 1) + "|"]
    for system, offers in _offers().items():
        cells = []
        for _, actions in cols:
            have = [a for a in actions if supported(FAULTS.get(a), offers)]
            cells.append("all" if have == list(actions) and len(actions) > 1 else ", ".join(have) or "—")
        rows.append(f"| {system} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def cli_page() -> str:
    from brokerchaos.cli import build_parser

    p = build_parser()
    out = ["# Command line", "", "Every command's `--help`, as the parser gives it.", "", "```", p.format_help(), "```"]
    sub = next(a for a in p._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, sp in sub.choices.items():
        out += ["", f"## brokerchaos {name}", "", "```", sp.format_help().rstrip(), "```"]
    return "\n".join(out) + "\n"


def _type_name(t) -> str:
    if isinstance(t, type):
        return t.__name__
    text = str(t).replace("typing.", "").replace("brokerchaos.scenario.", "")
    return text.replace("|", "\\|")


def _model_table(model: type[BaseModel], title: str, seen: set) -> list[str]:
    out = ["", f"## {title}", "", (model.__doc__ or "").strip().split("\n\n")[0], "",
           "| field | type | default | what it is |", "|---|---|---|---|"]
    nested = []
    for name, f in model.model_fields.items():
        value = None if f.is_required() else f.get_default(call_default_factory=True)
        default = "required" if f.is_required() else "below" if isinstance(value, BaseModel) else repr(value)
        desc = (f.description or "").replace("|", "\\|").replace("\n", " ")
        out.append(f"| `{f.alias or name}` | `{_type_name(f.annotation)}` | `{default}` | {desc} |")
        for t in (f.annotation, *typing.get_args(f.annotation)):
            if isinstance(t, type) and issubclass(t, BaseModel) and t not in seen:
                seen.add(t)
                nested.append((t, f"{title}.{f.alias or name}"))
    for t, path in nested:
        out += _model_table(t, path, seen)
    return out


def scenario_page() -> str:
    from brokerchaos.scenario import Scenario

    out = ["# Scenario fields", "", "A scenario file's fields, from the models `brokerchaos run` validates it "
           "with (`src/brokerchaos/scenario.py`). A system's own settings (`options`) and a fault's (`params`) "
           "are on the [faults and systems](faults.md) page."]
    out += _model_table(Scenario, "scenario", {Scenario})
    return "\n".join(out).replace("| `list[", "| `list[") + "\n"


def _params(model) -> list[str]:
    rows = []
    for name, f in model.model_fields.items():
        default = "required" if f.is_required() else repr(f.get_default(call_default_factory=True))
        rows.append(f"    - `{f.alias or name}` ({default}): {(f.description or '').strip()}")
    return rows


def _written_by(c) -> str:
    return (f"`Roles.{c.role_method}`" if c.role_method else f"`Cluster.{c.cluster_method}`" if c.cluster_method
            else "—")


def faults_page() -> str:
    from brokerchaos.faults import FAULTS, TARGETS
    from brokerchaos.faults.base import supported
    from brokerchaos.systems import SYSTEMS
    from brokerchaos.systems.base import CAPABILITIES

    offers = _offers()
    out = ["# Faults, targets and systems", "", "From the registries (`brokerchaos faults` prints the same); "
           "[Faults in depth](../faults.md) explains each.", "", "## Fault actions", ""]
    for name, cls in FAULTS.items():
        where = ", ".join(s for s, o in offers.items() if supported(cls, o)) or "external clusters (hooks)"
        out += [f"- **`{name}`**: {cls.description}", f"    - needs: {', '.join(sorted(cls.needs)) or 'nothing'}; "
                f"systems: {where}", f"    - seen by: {cls.observes}", *_params(cls.Params)]
    out += ["", "## Capabilities", "", "What a fault `needs` and a deployment offers (`systems/base.py`), the "
            "method a system offering it writes, and what it needs of the machine.", "",
            "| capability | means | written by the system | machine |", "|---|---|---|---|"]
    out += [f"| `{c.name}` | {c.meaning} | {_written_by(c)} | {', '.join(c.machine) or '—'} |"
            for c in CAPABILITIES.values()]
    out += ["", "## Targets", ""] + [f"- **`{n}`**: {(fn.__doc__ or '').strip()}" for n, fn in TARGETS.items()]
    out += ["", "## Systems and their options", ""]
    for name, cls in SYSTEMS.items():
        out += [f"- **`{name}`**: {cls.description}", *_params(cls.Options)]
    out += ["", "## Which system offers which family", "", matrix()]
    return "\n".join(out) + "\n"


def verdicts_page() -> str:
    from brokerchaos.analysis.policy import CHECKS

    out = ["# Verdicts", "", "Each check a run is held to, from the policy table (`analysis/policy.py`): "
           "what a violation is, what it does to the run's result (fails it, or leaves it unknown: the run did "
           "not test what it names), and its `--expect` name.", "",
           "| check | reads | kind | a violation makes the run | a violation is | `--expect` |",
           "|---|---|---|---|---|---|"]
    for c in CHECKS:
        does = "unknown" if c.undecides else "fail" if c.fails_run else "— (counted)"
        out.append(f"| {c.name} | `{c.key}` | {c.kind} | {does} | {c.meaning} | "
                   f"{'`' + c.expect + '`' if c.expect else '—'} |")
    return "\n".join(out) + "\n"


def _columns(columns) -> list[str]:
    return ["| column | holds |", "|---|---|"] + [f"| `{c}` | {what} |" for c, what in columns]


def outputs_page() -> str:
    """Every file a session writes that a tool or a CI reads, with its columns, from the code
    that writes them (report/files.py, session_table.py, expect.py; analysis/verdicts.py)."""
    from brokerchaos.analysis.policy import CHECKS
    from brokerchaos.analysis.verdicts import Verdict, type_words
    from brokerchaos.report import expect, files, session_table

    meaning = {**{c.key: c.meaning for c in CHECKS}, **dict(files.EXTRA)}
    out = ["# Outputs", "", "What a session writes beside its histories (`OUT/<name>-<time>/`; `analyze` writes "
           "the same next to the history it reads), column by column, from the code that writes it. Each figure "
           "is defined in [the history format](../history-format.md).", "", "## results.csv", "",
           "One row a run: the seeds' columns first (as their programs print them), then ours.", "",
           "| column | verdict figure |", "|---|---|"]
    seed = {"DedupEnabled": "the scenario's `workload.dedup`", "TestRun": "the run's number in the session"}
    out += [f"| `{c}` | {'`' + k + '`' if k else seed[c]} |" for c, k in files.SEED_COLUMNS]
    out += [f"| `{c}` | {meaning.get(c, '')} |" for c in files.EXTRA_COLUMNS]
    out += ["", "## session_table.csv", "", "The VerneMQ seed's per-run table (seconds; NA where a column does "
            "not apply).", "", "| column | verdict figure |", "|---|---|"]
    out += [f"| `{c}` | `{k}` |" for c, k in session_table.COLUMNS]
    for name, columns in files.CSV_LOGS.items():
        out += ["", f"## {name}", ""] + _columns(columns)
    out += ["", "## summary.json and `analyze --format json`", "",
            "`summary.json` is `{\"summary\": …, \"runs\": [verdict, …]}`; the summary holds `runs`, `result`, "
            "`results` (runs per result), `totals` (the sum over the runs of " +
            ", ".join(f"`{k}`" for k in files.TOTALS) + "), `verdicts` (each check's rate with its Wilson "
            "interval), `incomplete_runs`, `outages`. `analyze --format json` prints the list of verdicts alone. "
            "A verdict's keys:", "", "| key | type | holds |", "|---|---|---|"]
    out += [f"| `{k}` | `{type_words(k)}` | {meaning.get(k, '')} |" for k in Verdict.__annotations__]
    out += ["", "## JUnit (`--junit FILE`)", "", "One `<testsuite>` per session (its name), one `<testcase>` per "
            "run and expectation: `classname` the session, `name` `" + expect.JUNIT_CASE + "`; a violation is a "
            "`<failure type=\"violation\">`, a run that could not decide an `<error type=\"undecided\">`."]
    return "\n".join(out) + "\n"


PAGES = {"reference/cli.md": cli_page, "reference/scenario.md": scenario_page,
         "reference/faults.md": faults_page, "reference/verdicts.md": verdicts_page,
         "reference/outputs.md": outputs_page}


REPO = Path(__file__).resolve().parents[2]


def from_root(name: str) -> str:
    """A file of the repository's root as a page at the site's root: its links into docs/
    made the site's."""
    text = (REPO / name).read_text()
    text = text.replace("](docs/", "](").replace("](BENCHMARKS.md)", "](benchmarks.md)")
    return text.replace("<!-- runnable -->\n", "")


def on_files(files, config):
    """MkDocs hook: the generated pages join the site's files."""
    from mkdocs.structure.files import File

    for path, make in PAGES.items():
        files.append(File.generated(config, path, content=make()))
    files.append(File.generated(config, "index.md", content=from_root("README.md")))
    files.append(File.generated(config, "benchmarks.md", content=from_root("BENCHMARKS.md")))
    return files


def readme_matrix(readme: Path) -> tuple[str, str]:
    """The README's text, and the same with its matrix block as the code gives it now."""
    text = readme.read_text()
    head, rest = text.split(MATRIX_START, 1)
    _, tail = rest.split(MATRIX_END, 1)
    return text, f"{head}{MATRIX_START}\n{matrix()}{MATRIX_END}{tail}"


if __name__ == "__main__":
    if sys.argv[1:] == ["--readme"]:
        path = Path(__file__).resolve().parents[2] / "README.md"
        old, new = readme_matrix(path)
        path.write_text(new)
        print("README matrix " + ("unchanged" if old == new else "rewritten"))
    else:
        print("usage: python -m brokerchaos.docsite --readme", file=sys.stderr)
        sys.exit(2)
