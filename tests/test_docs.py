"""Every example users read runs: README.md, docs/*.md code blocks, and docstring examples."""

from __future__ import annotations

import doctest
import pathlib
import re
import subprocess
import sys

import jax
import pytest

import jaxgru
import jaxgru.equinox
import jaxgru.flax
import jaxgru.interop
import jaxgru.webgpu

ROOT = pathlib.Path(__file__).resolve().parents[1]
# every public module: its __all__ is the public API that docs/api/ must cover
PUBLIC_MODULES = (jaxgru, jaxgru.interop, jaxgru.flax, jaxgru.equinox, jaxgru.webgpu)
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCKS = [
    (page, i, code)
    for page in PAGES
    for i, code in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.DOTALL))
]


def test_pages_have_examples():
    assert {p.name for p, _, _ in BLOCKS} >= {"README.md", "converters.md"}


@pytest.mark.parametrize(("page", "index", "code"), BLOCKS,
                         ids=[f"{p.relative_to(ROOT)}:{i}" for p, i, _ in BLOCKS])
def test_markdown_example_runs(page, index, code):
    # Users run with JAX's default promotion rules (conftest makes them strict for the library).
    with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
        exec(compile(code, f"{page.name}[example {index}]", "exec"), {"__name__": "__docs__"})


def _docstring_tests():
    finder = doctest.DocTestFinder(exclude_empty=True)
    tests = []
    for module in PUBLIC_MODULES:
        for name in module.__all__:
            obj = getattr(module, name)
            tests += [t for t in finder.find(obj, f"{module.__name__}.{name}") if t.examples]
    return tests


DOCTESTS = _docstring_tests()


def test_public_functions_have_examples():
    names = {t.name.rsplit(".", 1)[-1] for t in DOCTESTS}
    assert {"gru", "lstm", "from_torch", "GRU", "LSTM", "from_params", "LayerWeights",
            "counters", "adapters_info"} <= names, names
    modules = {t.name.split(".")[1] for t in DOCTESTS if t.name.count(".") > 1}
    assert {"flax", "equinox", "webgpu"} <= modules, modules


@pytest.mark.parametrize("test", DOCTESTS, ids=[t.name for t in DOCTESTS])
def test_docstring_example(test):
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
        result = runner.run(test, out=lambda s: None)
    assert result.failed == 0, f"{test.name}: {result.failed} of {result.attempted} examples failed"


def test_public_api_is_documented():
    for module in PUBLIC_MODULES:
        for name in module.__all__:
            doc = getattr(module, name).__doc__ or ""
            assert len(doc.strip()) > 20, f"{module.__name__}.{name} has no docstring"


def test_interop_import_pulls_in_no_optional_dependency():
    code = (
        "import sys, jaxgru.interop as m; "
        "print(sorted(set(m.__all__) - set(dir(m))), "
        "[d for d in ('torch', 'keras', 'onnx', 'onnxruntime', 'flax') if d in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] []"


# --------------------------------------------------------------------------------------
# the documentation site (mkdocs.yml, docs/api/)
# --------------------------------------------------------------------------------------
API_PAGES = sorted((ROOT / "docs" / "api").glob("*.md"))
API_TARGETS = [t for page in API_PAGES for t in re.findall(r"^::: ([\w.]+)\s*$", page.read_text(), flags=re.M)]


def test_api_pages_cover_the_public_api():
    missing = [f"{m.__name__}.{name}" for m in PUBLIC_MODULES for name in m.__all__
               if f"{m.__name__}.{name}" not in API_TARGETS]
    assert not missing, f"not in docs/api/*.md (add a ::: line): {missing}"


def test_api_pages_name_only_public_objects():
    public = {f"{m.__name__}.{name}" for m in PUBLIC_MODULES for name in m.__all__}
    assert sorted(set(API_TARGETS) - public) == []
    assert len(API_TARGETS) == len(set(API_TARGETS)), "an object is documented twice"


def test_every_page_is_in_the_site_navigation():
    nav = set(re.findall(r":\s*(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), flags=re.M))
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert pages == nav


def test_gate_order_picture_is_drawn_by_its_script(tmp_path):
    pytest.importorskip("matplotlib")
    out = subprocess.run([sys.executable, str(ROOT / "docs" / "scripts" / "gate_orders.py"), str(tmp_path / "g.png")],
                         capture_output=True, text=True, check=False, timeout=120)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (ROOT / "docs" / "img" / "gate_orders.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "](img/gate_orders.png)" in (ROOT / "docs" / "semantics.md").read_text()


def test_performance_page_is_the_report_of_the_committed_results(monkeypatch):
    # docs/performance.md is benchmarks/report.py's output: the notes with the tables and targets
    # of results/bench_full.json. Its tables once stayed at a suite three days old while later
    # suites went to other files; notes edited without a re-run leave the page behind as well.
    import json

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    report = __import__("report")
    data = json.loads((ROOT / "benchmarks" / "results" / "bench_full.json").read_text())
    notes = (ROOT / "benchmarks" / "performance_notes.md").read_text()
    assert report.page(data, notes) == (ROOT / "docs" / "performance.md").read_text(), (
        "run python benchmarks/report.py (with the suite's results in benchmarks/results/bench_full.json)")
