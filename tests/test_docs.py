"""The documentation: the site builds strictly (a broken link or a page missing from the nav
fails it), its generated reference pages say what the code says, the README's matrix is the
code's, the README's runnable command blocks run as written, and the site's index and one
generated page open in a real browser with nothing logged and nothing fetched from the
network."""
import functools
import http.server
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from brokerchaos import docsite
from brokerchaos.faults import FAULTS

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    r = subprocess.run([str(REPO / ".venv/bin/mkdocs"), "build", "--strict", "-d", str(out)], cwd=REPO,
                       capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "WARNING" not in r.stderr, r.stderr
    return out


def test_the_site_builds_strictly_with_the_generated_reference(site):
    faults = (site / "reference" / "faults.html").read_text()
    for action in FAULTS.names():  # every registered action has its entry
        assert f"<code>{action}</code>" in faults, action
    cli = (site / "reference" / "cli.html").read_text()
    assert "brokerchaos doctor" in cli and "--dry-run" in cli
    assert "acked loss" in (site / "reference" / "verdicts.html").read_text()
    assert "message_ttl" in faults  # a system's option, from its model
    index = (site / "index.html").read_text()
    assert "five-minute tour" in index and 'src="img/report-run.png"' in index
    assert "Today&rsquo;s figures" in (site / "benchmarks.html").read_text() or \
        "Today's figures" in (site / "benchmarks.html").read_text()


def test_the_readme_is_a_front_door_and_its_matrix_is_the_code_s():
    text, regenerated = docsite.readme_matrix(README)
    assert text == regenerated, "the README's matrix differs from the code's: python -m brokerchaos.docsite --readme"
    assert len(text.splitlines()) <= 200
    for link in re.findall(r"\]\(([^)#]+)", text):  # every relative link lands on a file
        assert link.startswith("http") or (REPO / link).exists(), link


def _runnable_blocks() -> list[list[str]]:
    blocks, lines = [], README.read_text().splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "<!-- runnable -->":
            assert lines[i + 1].startswith("```"), "a runnable mark stands right above a code block"
            end = lines.index("```", i + 2)
            blocks.append([c for c in lines[i + 2:end] if c.strip()])
    return blocks


@pytest.mark.skipif(os.geteuid() != 0, reason="doctor's probes and the dry run's machine check need root")
def test_the_readme_s_runnable_commands_run_as_written(tmp_path):
    blocks = _runnable_blocks()
    assert blocks, "no block of the README is marked runnable"
    for name in (".venv", "scenarios", "campaigns"):  # a checkout's layout, written into a scratch copy
        (tmp_path / name).symlink_to(REPO / name)
    for block in blocks:
        for cmd in block:
            r = subprocess.run(cmd, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, f"{cmd}: exit {r.returncode}\n{r.stdout[-2000:]}{r.stderr[-2000:]}"


@pytest.mark.skipif(not shutil.which("chromium") and not os.path.exists("/usr/bin/chromium"),
                    reason="chromium not installed (make setup)")
def test_the_site_s_index_and_a_generated_page_open_in_a_browser(site, tmp_path):
    from browser import OUTPUT, open_page

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.RequestHandlerClass.log_message = lambda *a: None
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    OUTPUT.mkdir(parents=True, exist_ok=True)
    try:
        for page in ("index.html", "reference/faults.html"):
            got = open_page(base + page, OUTPUT / f"site-{page.replace('/', '-')}.png")
            assert got.console == [], (page, got.console)
            outside = [u for u in got.requests if not u.startswith(base)]
            assert outside == [], (page, outside[:5])
            assert "brokerchaos" in got.title, got.title
    finally:
        server.shutdown()
        server.server_close()
