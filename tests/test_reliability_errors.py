"""docs/errors.md lists every error the library raises, and each example raises its message.

The page's first ``python`` block sets up the names its examples use; each table row is
``| `where` | `Exception` | `example` | `message template` |`` with ``{...}`` placeholders.
"""

from __future__ import annotations

import ast
import collections
import contextlib
import pathlib
import re

import jax
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "errors.md"
PLACEHOLDER = re.compile(r"\{[^{}]*\}")


def _cells(line: str) -> list[str]:
    """The cells of a markdown table row (``\\|`` is a literal bar), code spans unwrapped."""
    cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
    return [c[1:-1] if len(c) > 1 and c[0] == c[-1] == "`" else c for c in cells]


def _rows() -> list[tuple[str, str, str | None, str]]:
    rows = []
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        if not line.startswith("| `"):
            continue
        where, exc, example, message = _cells(line)
        rows.append((where, exc, None if example.startswith("—") else example, message))
    return rows


ROWS = _rows()


def _normal(template: str) -> str:
    return PLACEHOLDER.sub("{}", template)


def _source_template(node: ast.Raise) -> str:
    """The message of a raise as a template: its string / f-string argument, {...} kept."""
    exc = node.exc
    if not isinstance(exc, ast.Call) or not exc.args:
        return ""
    arg = exc.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in arg.values)
    return "{}"


def _raises_in_the_library() -> collections.Counter:
    """(file:function, exception, template) of every ``raise X(...)`` under jaxgru/."""
    found = collections.Counter()
    package = ROOT / "jaxgru"
    for path in sorted(package.rglob("*.py")):
        def visit(node, names, path=path):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    visit(child, [*names, child.name])
                    continue
                if isinstance(child, ast.Raise) and child.exc is not None:
                    exc = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
                    where = f"{path.relative_to(package).as_posix()}:{'.'.join(names)}"
                    found[where, ast.unparse(exc).split(".")[-1], _normal(_source_template(child))] += 1
                visit(child, names)

        visit(ast.parse(path.read_text(encoding="utf-8")), [])
    return found


def test_every_raise_in_the_library_is_documented():
    documented = collections.Counter((w, e, _normal(m)) for w, e, _, m in ROWS)
    in_code = _raises_in_the_library()
    missing, stale = in_code - documented, documented - in_code
    assert not missing, f"raises missing from docs/errors.md (add a row): {sorted(missing)}"
    assert not stale, f"rows of docs/errors.md that match no raise (update them): {sorted(stale)}"


@pytest.fixture(scope="module")
def namespace():
    """The names the examples use: the page's first python block, run once."""
    setup = re.search(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.DOTALL).group(1)
    ns = {"__name__": "errors_md"}
    with _user_settings():
        exec(compile(setup, "docs/errors.md[setup]", "exec"), ns)
    return ns


def _user_settings():
    """JAX's default promotion rules, as users run (conftest makes them strict for the library)."""
    stack = contextlib.ExitStack()
    stack.enter_context(jax.numpy_rank_promotion("allow"))
    stack.enter_context(jax.numpy_dtype_promotion("standard"))
    return stack


@pytest.mark.parametrize(("where", "exc", "example", "message"), ROWS,
                         ids=[f"{r[0]}-{i}" for i, r in enumerate(ROWS)])
def test_each_example_raises_its_documented_error(namespace, where, exc, example, message):
    if example is None:
        assert exc == "AssertionError", f"{where}: only internal invariants may lack an example"
        return
    with _user_settings(), pytest.raises(Exception) as info:  # the type is checked below
        exec(compile(example, f"docs/errors.md[{where}]", "exec"), dict(namespace))
    error = info.value
    assert exc in [c.__name__ for c in type(error).__mro__], (where, exc, type(error), str(error))
    pattern = ".*?".join(re.escape(part) for part in PLACEHOLDER.split(message))
    text = str(error)
    # WGPUUnavailableError wraps its message: "jaxgru: no usable WebGPU adapter (...). To get one ..."
    found = re.search(pattern, text, re.DOTALL) if exc == "WGPUUnavailableError" else re.fullmatch(
        pattern, text, re.DOTALL)
    assert found, f"{where}: {text!r} does not match the documented {message!r}"
