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
import jaxgru.interop

ROOT = pathlib.Path(__file__).resolve().parents[1]
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
    for module in (jaxgru, jaxgru.interop):
        for name in module.__all__:
            obj = getattr(module, name)
            tests += [t for t in finder.find(obj, f"{module.__name__}.{name}") if t.examples]
    return tests


DOCTESTS = _docstring_tests()


def test_public_functions_have_examples():
    names = {t.name.rsplit(".", 1)[-1] for t in DOCTESTS}
    assert {"gru", "lstm", "from_torch"} <= names, names


@pytest.mark.parametrize("test", DOCTESTS, ids=[t.name for t in DOCTESTS])
def test_docstring_example(test):
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
        result = runner.run(test, out=lambda s: None)
    assert result.failed == 0, f"{test.name}: {result.failed} of {result.attempted} examples failed"


def test_public_api_is_documented():
    for module in (jaxgru, jaxgru.interop):
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
