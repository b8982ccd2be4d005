"""A report page opened in a real headless browser (Debian's chromium, driven by playwright):
what it asked for over the network, what it logged, which plots drew."""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@dataclass
class Loaded:
    requests: list[str] = field(default_factory=list)
    console: list[str] = field(default_factory=list)  # errors and warnings only
    plots: int = 0  # plotly graph divs on the page
    ids: list[str] = field(default_factory=list)  # their element ids, in page order
    drawn: int = 0  # of those, the ones plotly drew (data, and a trace or heat map in its SVG)
    links: list[str] = field(default_factory=list)  # in-page links whose target is missing
    title: str = ""


def open_report(path: Path, screenshot: Path) -> Loaded:
    return open_page(Path(path).resolve().as_uri(), screenshot)


def open_page(url: str, screenshot: Path) -> Loaded:
    from playwright.sync_api import sync_playwright

    out = Loaded()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("request", lambda r: out.requests.append(r.url) if r.url != url else None)
            page.on("console", lambda m: out.console.append(f"{m.type}: {m.text}")
                    if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: out.console.append(f"pageerror: {e}"))
            page.goto(url, wait_until="load", timeout=60_000)
            page.wait_for_load_state("networkidle", timeout=30_000)
            out.title = page.title()
            out.ids = page.evaluate("[...document.querySelectorAll('div.plotly-graph-div')].map(d => d.id)")
            out.plots = len(out.ids)
            out.drawn = page.evaluate(
                "[...document.querySelectorAll('div.plotly-graph-div')].filter("
                "d => (d.data || []).length > 0 && d.querySelector('svg.main-svg')"
                " && d.querySelector('g.trace, g.hm image')).length")
            out.links = page.evaluate(
                "[...document.querySelectorAll('a[href^=\"#\"]')].map(a => a.getAttribute('href').slice(1))"
                ".filter(id => !document.getElementById(id))")
            page.screenshot(path=str(screenshot), full_page=False)
        finally:
            browser.close()
    return out


OUTPUT = Path(__file__).resolve().parents[1] / "test-output" / "screenshots"


def check_report(path: Path, name: str) -> Loaded:
    """The report loads offline with nothing logged, every plot drawn, every in-page link
    landing; its screenshot is kept in test-output/screenshots/NAME.png."""
    assert Path(path).is_file(), f"no report at {path}"
    OUTPUT.mkdir(parents=True, exist_ok=True)
    shot = OUTPUT / f"{name}.png"
    got = open_report(path, shot)
    assert got.requests == [], f"the page asked the network for {got.requests[:5]}"
    assert got.console == [], got.console
    assert got.plots > 0 and got.drawn == got.plots, f"{got.drawn} of {got.plots} plots drawn"
    assert got.links == [], f"links to nothing: {got.links}"
    assert shot.stat().st_size > 10_000, "an empty screenshot"
    return got
