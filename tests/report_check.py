"""make test-lab, second part: make reproduce's report opened in a real browser (Debian's chromium
through Playwright, as tests/lab_check.py). The report comes from the dry run's fast path (random
models of the checkpoints' shapes, make reproduce DRY=1 with its small grids) into
build/reproduction-check/; the page must show every figure (each image decoded, none broken), link
nowhere that is missing, and hold the paper's numbers of every table it sets beside this run's.
A screenshot goes to build/reproduction-check/report.png. Run: `python tests/report_check.py`."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from lab_check import chromium  # noqa: E402

OUT = REPO / "build" / "reproduction-check"
PRESETS = ["xsum-t5", "wikitext2-gpt2"]


def main() -> int:
    import pandas as pd
    from playwright.sync_api import sync_playwright

    from bildlib.analysis import reported
    from bildlib.experiments.paper import report, reproduce

    shutil.rmtree(OUT, ignore_errors=True)
    rc = reproduce.main(
        ["--dry", "--fast", "--in-process", "--device", "cpu", "--root", str(OUT), "--presets", *PRESETS]
    )
    problems = (
        [] if rc == 0 else [f"make reproduce's fast dry run exited {rc}: {(OUT / 'runs.csv').read_text()}"]
    )
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto((OUT / "report.html").as_uri())
        page.wait_for_load_state("load")
        images = page.evaluate(
            "() => [...document.images].map(i => [i.alt, i.complete && i.naturalWidth > 0])"
        )
        links = page.evaluate("() => [...document.links].map(a => a.href)")
        text = page.inner_text("body")
        tables = page.locator("table").count()
        page.screenshot(path=OUT / "report.png", full_page=True)
        browser.close()
    pngs = sorted(OUT.rglob("*.png"))
    if len(images) != len([x for x in pngs if x.name != "report.png"]) or not images:
        problems.append(f"{len(images)} images in the page, {len(pngs)} figures written")
    problems += [f"figure {alt} did not decode" for alt, ok in images if not ok]
    problems += [f"link to nowhere: {h}" for h in links if h.startswith("file:") and not Path(h[7:]).exists()]
    want = sum(len(t) for t in report.TABLES.values())
    if tables < want:
        problems.append(f"{tables} tables in the page, {want} expected (Tables 1-5)")
    for preset, table in [("xsum-t5", t) for t in ("Table 1", "Table 3", "Table 4", "Table 5")] + [
        ("wikitext2-gpt2", "Table 2")
    ]:
        for x in reported.rows(preset, table)["score"]:
            if f"{x:.2f}" not in text:
                problems.append(f"the paper's {table} score {x:.2f} is not on the page")
    runs = pd.read_csv(OUT / "runs.csv", keep_default_na=False)
    if set(runs["preset"]) != set(PRESETS):
        problems.append(f"runs.csv holds {sorted(set(runs['preset']))}")
    for p_ in problems:
        print("FAIL:", p_)
    print(
        "PASS: make reproduce's report opens in Chromium, its figures and tables whole"
        if not problems
        else ""
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
