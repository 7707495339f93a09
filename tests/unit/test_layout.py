"""The code's layout and the docs' links: checks that read files, and run nothing heavy."""

import re
import subprocess
import sys
from pathlib import Path

from benchmarks.import_graph import LAYERS, imports, layer_of, modules  # the layers the picture draws

ROOT = Path(__file__).resolve().parents[2]


def _modules() -> dict[str, Path]:
    return modules()


def _imports(name: str, path: Path, _modules_unused=None) -> list[tuple[str, list[str], int]]:
    return imports(name, path)


def test_no_import_circle():
    """No module reaches itself through imports, at module level or inside functions."""
    modules = _modules()
    edges = {m: set() for m in modules}
    for m, path in modules.items():
        for base, names, _ in _imports(m, path, modules):
            for target in [base, *(f"{base}.{n}" for n in names)]:
                if target in modules and target != m:
                    edges[m].add(target)
    cycles = []
    state: dict[str, int] = {}

    def visit(m, stack):
        state[m] = 1
        for t in sorted(edges[m]):
            if state.get(t) == 1:
                cycles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t, stack + [t])
        state[m] = 2

    for m in sorted(modules):
        if m not in state:
            visit(m, [m])
    assert not cycles, "import circles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_no_module_imports_another_modules_private_name():
    modules = _modules()
    bad = []
    for m, path in modules.items():
        for base, names, line in _imports(m, path, modules):
            if base.startswith(("cdmpp", "benchmarks")):
                bad += [f"{path.relative_to(ROOT)}:{line} {n}" for n in names if n.startswith("_") and n != "__version__"]
    assert not bad, bad


def test_no_product_module_over_450_lines_and_no_benchmark_over_600():
    long = [f"{p.relative_to(ROOT)} ({n})" for m, p in _modules().items()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > (600 if m.startswith("benchmarks") else 450)]
    assert not long, long


def test_at_most_14_top_level_subcommands():
    from cdmpp.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert "tune" in sub.choices and len(sub.choices) <= 14, sorted(sub.choices)


def test_the_command_line_tables_and_metrics_load_no_lightning():
    code = ("import sys, cdmpp.cli, cdmpp.train.metrics, cdmpp.train.report, benchmarks; "
            "print(' '.join(m for m in ('lightning', 'torch', 'tvm') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "lightning" not in loaded and "tvm" not in loaded


def _anchors(text: str) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def test_results_cites_only_files_that_exist_and_its_links_resolve():
    """Every committed record RESULTS.md (and the other reports) names exists, and every link
    resolves: a file link to a file (relative to the document), an anchor to a heading of
    the file it points into."""
    for doc in ("RESULTS.md", "README.md", "CHANGELOG.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))):
        path = ROOT / doc
        text = path.read_text(encoding="utf-8")
        cited = set(re.findall(r"(?:docs/results|docs/plots|datasets/tuning)/[\w./{},-]+", text))
        missing = []
        for c in cited:
            c = c.rstrip(".,)")
            m = re.match(r"(.*)\{([^}]*)\}(.*)", c)
            for cited_path in ([m.group(1) + x + m.group(3) for x in m.group(2).split(",")] if m else [c]):
                if not (ROOT / cited_path).exists():
                    missing.append(cited_path)
        assert not missing, f"{doc} cites missing files: {sorted(missing)}"
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if target.startswith(("http://", "https://")):
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file) if file else path
            assert dest.exists(), f"{doc}: the link {target} points at nothing"
            if anchor and dest.suffix == ".md":
                assert anchor in _anchors(dest.read_text(encoding="utf-8")), f"{doc}: no heading for the link {target}"


def test_the_collector_reaches_the_metaschedule_side_without_the_http_service():
    """The collector (``cdmpp.collect``) and the MetaSchedule side (``cdmpp.tuning``) import
    nothing of ``cdmpp.serve``, at module level or inside a function."""
    modules = _modules()
    bad = [f"{path.relative_to(ROOT)}:{line} {base}" for m, path in modules.items()
           if m.startswith(("cdmpp.collect", "cdmpp.tuning"))
           for base, _, line in _imports(m, path, modules) if base.startswith("cdmpp.serve")]
    assert not bad, bad


def test_the_product_imports_no_benchmark():
    """No module of the product imports the ``benchmarks`` package (its own package, which
    adds ``cdmpp bench`` through the ``cdmpp.commands`` entry point), by an import statement
    at any depth or by a file path."""
    modules = _modules()
    bad = [f"{path.relative_to(ROOT)}:{line} {base}" for m, path in modules.items() if not m.startswith("benchmarks")
           for base, _, line in _imports(m, path, modules) if base.split(".")[0] == "benchmarks"]
    bad += [str(p.relative_to(ROOT)) for m, p in modules.items() if not m.startswith("benchmarks")
            and re.search(r"""["']benchmarks["'/]""", p.read_text(encoding="utf-8"))]
    assert not bad, bad
    toml = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^\[project\.entry-points\."cdmpp\.commands"\]\nbench = "benchmarks\.cli:add_parser"', toml, re.M)


def test_the_readme_is_a_short_user_guide():
    """README.md stays a user guide: at most 250 lines, none over 160 characters; RESULTS.md
    at most 400 lines."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(readme) <= 250, len(readme)
    long = [i + 1 for i, line in enumerate(readme) if len(line) > 160]
    assert not long, f"README.md lines over 160 characters: {long}"
    assert len((ROOT / "RESULTS.md").read_text(encoding="utf-8").splitlines()) <= 400


def test_the_cli_reference_matches_the_parsers():
    """docs/cli.md is what ``cdmpp bench cli-reference`` writes from today's parsers."""
    from benchmarks.cli_reference import reference

    assert (ROOT / "docs" / "cli.md").read_text(encoding="utf-8") == reference(), \
        "docs/cli.md is stale: run `cdmpp bench cli-reference -o docs/cli.md`"


def _layer(module: str) -> int | None:
    return layer_of(module)


def test_no_module_imports_a_layer_above_its_own():
    """The layers of :data:`LAYERS`: the core (featurize, model, predictor, records, device)
    imports no train/, serve/, CLI or benchmarks code, the collector nothing of the tuner, and
    so on up, at module level or inside a function."""
    modules = _modules()
    bad = []
    for m, path in modules.items():
        own = _layer(m)
        assert own is not None, f"{m} is in no layer of LAYERS"
        for base, names, line in _imports(m, path, modules):
            for target in [base, *(f"{base}.{n}" for n in names)]:
                if target in modules and (up := _layer(target)) is not None and up > own:
                    bad.append(f"{path.relative_to(ROOT)}:{line} ({LAYERS[own][0]}) imports {target} "
                               f"({LAYERS[up][0]})")
    assert not bad, "\n".join(sorted(set(bad)))
