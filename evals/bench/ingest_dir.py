"""Directory ingest throughput: ``groundkit ingest PATH`` over generated trees, and the loaders'
share of its time.

    python -m evals.bench ingest-dir --dsn postgresql://...        # 10,000 Markdown files, 200 PDFs
    python -m evals.bench ingest-dir --markdown 1000 --pdfs 20     # a smaller run

For each tree (``--markdown`` small Markdown files of 60-250 words under headings, in 100
folders; ``--pdfs`` PDFs of 4-8 pages with an outline, written with fpdf2 from the test extra)
it measures, in the same run:

- ``loaders``: every file read through the tree and loaded (parsed), on one thread, nothing
  written: the loaders' own cost;
- ``ingest --jobs 1`` and ``--jobs 2`` into a new database each: the whole command's work
  (plan, load, put_object, missing-file check), as the CLI runs it;
- ``rerun``: the same tree again (every file unchanged: one duplicate write each).

The loaders' share is ``loaders / ingest --jobs 1``: under 1, the database's writes, not the
parsing, set the pace.
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from evals.bench.common import log, scratch_db, server
from groundkit import ingest as core
from groundkit.client import Groundkit
from groundkit.loaders import kind_of, load

_WORDS = ("loom warp weft heddle shuttle reed bobbin selvedge treadle beater yarn wool linen cotton dye "
          "pattern twill tabby draft harness pick shed tension skein spindle fibre cloth bench price "
          "commission studio market customer invoice course module lesson practice").split()


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n)).capitalize() + "."


def write_markdown(root: Path, n: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    for i in range(n):
        folder = root / f"part{i % 100:02}"
        folder.mkdir(parents=True, exist_ok=True)
        words = rng.randint(60, 250)
        sections = [f"## Section {s}\n\n" + " ".join(_sentence(rng, 12) for _ in range(words // 36 + 1))
                    for s in range(3)]
        (folder / f"note{i:05}.md").write_text(f"# Note {i}\n\n" + "\n\n".join(sections) + "\n")


def write_pdfs(root: Path, n: int, seed: int = 11) -> None:
    from fpdf import FPDF

    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        pdf = FPDF()
        pdf.set_font("helvetica", size=11)
        pdf.set_title(f"Handbook {i}")
        for p in range(rng.randint(4, 8)):
            pdf.add_page()
            pdf.start_section(f"Chapter {p + 1}", level=0)
            pdf.multi_cell(0, 6, " ".join(_sentence(rng, 14) for _ in range(25)))
        pdf.output(str(root / f"handbook{i:03}.pdf"))


def loaders_only(path: Path) -> tuple[float, int]:
    """Seconds to read and load every file on one thread; how many loaded."""
    plan = core.plan(str(path))
    started = time.perf_counter()
    n = 0
    try:
        for rel in plan.files:
            kind = kind_of(rel)
            assert kind is not None
            load(kind, plan.tree.read(rel, core.MAX_BYTES), rel, max_pages=core.MAX_PAGES)
            n += 1
    finally:
        plan.tree.close()
    return time.perf_counter() - started, n


def ingest_once(dsn: str, path: Path, jobs: int) -> tuple[float, core.IngestReport]:
    options = core.IngestOptions(space_id="library", tier="T0", jobs=jobs)
    started = time.perf_counter()
    plan = core.plan(str(path))
    try:
        with Groundkit.connect(dsn) as gk:
            report, _ = core.run(gk, dsn, plan, options)
    finally:
        plan.tree.close()
    return time.perf_counter() - started, report


def measure(server_dsn: str, label: str, path: Path) -> None:
    load_s, n = loaders_only(path)
    log(f"{label}: loaders alone {load_s:.1f} s for {n} files")
    runs: dict[str, float] = {}
    for jobs in (1, 2):
        with scratch_db(server_dsn, "ingestdir") as dsn:
            with Groundkit.connect(dsn) as gk:
                gk.put_space("library")
            runs[f"jobs {jobs}"], report = ingest_once(dsn, path, jobs)
            assert report.loaded == n and not report.failed, report
            if jobs == 2:
                runs["rerun, jobs 2"], again = ingest_once(dsn, path, jobs)
                assert again.unchanged == n, again
    print(f"\n{label}: {n} files, {sum(f.stat().st_size for f in path.rglob('*') if f.is_file()) / 1e6:.1f} MB")
    print(f"  {'loaders alone (1 thread)':<28}{load_s:8.1f} s  {n / load_s:8.0f} files/s")
    for name, seconds in runs.items():
        print(f"  {'ingest, ' + name:<28}{seconds:8.1f} s  {n / seconds:8.0f} files/s")
    print(f"  loaders' share of ingest --jobs 1: {load_s / runs['jobs 1']:.2f}; "
          f"--jobs 2 vs --jobs 1: {runs['jobs 1'] / runs['jobs 2']:.2f}x")


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.bench ingest-dir", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", help="a server to create scratch databases on (default: a throwaway embedded one)")
    ap.add_argument("--markdown", type=int, default=10_000, help="small Markdown files (default 10,000)")
    ap.add_argument("--pdfs", type=int, default=200, help="PDFs (default 200)")
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="gk-ingest-dir-"))
    try:
        log(f"writing {args.markdown} Markdown files and {args.pdfs} PDFs under {root}")
        write_markdown(root / "markdown", args.markdown)
        write_pdfs(root / "pdfs", args.pdfs)
        with server(args.dsn) as server_dsn:
            if args.markdown:
                measure(server_dsn, "markdown", root / "markdown")
            if args.pdfs:
                measure(server_dsn, "pdf", root / "pdfs")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0
