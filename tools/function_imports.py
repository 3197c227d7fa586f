"""Function-level imports in memfold's packages, checked against an allow-list (issue 44).

An import belongs at the top of its module. It may sit inside a function only to keep an optional
extra or a heavy dependency off a cold path, and then it is listed in ``tools/function_imports.toml``
under the importing module with its reason:

- ``extra``: an optional dependency (``[project.optional-dependencies]``), named in the allow-list's
  ``[extras]`` table; the module works without it installed.
- ``heavy``: a heavy dependency (duckdb, tiktoken, pydantic settings, the projector, openai, kafka, ...)
  kept off a path that does not need it, such as ``memfold --help`` or a light read.

An import cycle is no reason: the acyclic contract in ``.importlinter`` holds for function-level imports
too. An ``extra`` must be a top-level package named in ``[extras]``; the standard library never is.

Walks the packages named by ``[tool.setuptools] package-dir`` in pyproject.toml (the top-level folders
installed as ``memfold.*``), stdlib ``ast`` only. Exit 0 when every function-level import is listed and
every listed one still exists; exit 1 with one line per finding otherwise.

    python tools/function_imports.py [--root DIR] [--allow FILE]
"""

from __future__ import annotations

import argparse
import ast
import sys
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REASONS = ("extra", "heavy")
ALLOW_NAME = "tools/function_imports.toml"
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


@dataclass(frozen=True)
class FunctionImport:
    path: str  # relative to the root, as shown in findings
    line: int
    module: str  # the importing module, dotted (memfold.cli.main)
    imports: str  # the imported module, dotted (memfold.engine.engine, duckdb)


def package_dirs(root: Path) -> dict[str, Path]:
    """``{"memfold.cli": root/"cli", ...}`` from pyproject.toml's package-dir."""
    with (root / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)
    mapping = project["tool"]["setuptools"]["package-dir"]
    return {name: root / folder for name, folder in mapping.items()}


def modules(root: Path) -> dict[str, Path]:
    """Every module of the packages: dotted name -> file."""
    dirs = package_dirs(root)
    found: dict[str, Path] = {}
    for package, folder in dirs.items():
        for file in sorted(folder.rglob("*.py")):
            parts = file.relative_to(folder).with_suffix("").parts
            # A file under a nested package with its own package-dir entry is named by that entry.
            if any(
                other != package and other.startswith(package + ".") and file.is_relative_to(dirs[other])
                for other in dirs
            ):
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = file
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> list[str]:
    """The modules one import statement brings in: ``from memfold.engine import namespaces`` is
    ``memfold.engine.namespaces`` (a submodule), ``from memfold.cli.render import print_table`` is
    ``memfold.cli.render``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: resolved against the importing package
        package = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    names = []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        names.append(sub if sub in known else base)
    return list(dict.fromkeys(names))


def _in_functions(node: ast.AST, in_function: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """The import statements under ``node`` that sit in a function body, ``if TYPE_CHECKING:`` blocks left out."""
    found: list[ast.Import | ast.ImportFrom] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            # Annotations only: never runs. Its else branch does.
            for other in child.orelse:
                found.extend(_in_functions(ast.Module(body=[other], type_ignores=[]), in_function))
            continue
        if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
            found.append(child)
        found.extend(_in_functions(child, in_function or isinstance(child, FUNCTIONS)))
    return found


def function_imports(root: Path) -> list[FunctionImport]:
    """Every function-level import of the packages under ``root``, one per imported module."""
    found = modules(root)
    known = set(found)
    result: list[FunctionImport] = []
    for module, file in found.items():
        rel = file.relative_to(root).as_posix()
        tree = ast.parse(file.read_bytes(), filename=rel)
        for node in _in_functions(tree):
            for name in _imported(node, module, file.name == "__init__.py", known):
                result.append(FunctionImport(rel, node.lineno, module, name))
    return sorted(result, key=lambda i: (i.path, i.line, i.imports))


def load_allow(path: Path) -> tuple[dict[tuple[str, str], str], set[str], list[str]]:
    """The allow-list: ``{(importing module, imported module): reason}``, the extras' import names,
    and the problems of the file itself."""
    with path.open("rb") as f:
        data = tomllib.load(f)
    extras = set(data.get("extras", {}))
    allow: dict[tuple[str, str], str] = {}
    problems: list[str] = []
    for module, reasons in data.get("allow", {}).items():
        for reason, imported in reasons.items():
            if reason not in REASONS:
                problems.append(f"{path.name}: [allow.\"{module}\"] has reason {reason!r}; the reasons are {', '.join(REASONS)}")
                continue
            for name in imported:
                key = (module, name)
                if key in allow:
                    problems.append(f"{path.name}: {module} -> {name} is listed twice ({allow[key]}, {reason})")
                allow[key] = reason
    for (module, name), reason in allow.items():
        top = name.partition(".")[0]
        if reason == "extra" and top not in extras:
            problems.append(f"{path.name}: {module} -> {name} is listed as extra, but {top} is not in [extras]")
    return allow, extras, problems


def check(root: Path, allow_path: Path) -> tuple[list[str], str]:
    """The findings (one line each) and the closing count."""
    imports = function_imports(root)
    allow, _extras, findings = load_allow(allow_path)
    listed = Counter()
    used: set[tuple[str, str]] = set()
    unlisted = 0
    for imp in imports:
        key = (imp.module, imp.imports)
        if key in allow:
            used.add(key)
            listed[allow[key]] += 1
            continue
        unlisted += 1
        findings.append(f"{imp.path}:{imp.line} imports {imp.imports} inside a function; move it to the top "
                        f"or list it in {ALLOW_NAME} with a reason")
    stale = [key for key in allow if key not in used]
    for module, name in stale:
        findings.append(f"{ALLOW_NAME}: {module} -> {name} ({allow[(module, name)]}) matches no function-level "
                        "import any more; remove it")
    by_reason = ", ".join(f"{reason} {listed[reason]}" for reason in REASONS)
    summary = (f"{len(imports)} function-level imports: {sum(listed.values())} allow-listed ({by_reason}), "
               f"{unlisted} unlisted; {len(stale)} stale allow-list entries")
    return findings, summary


def main(argv: list[str] | None = None) -> int:
    here = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=here, help="the project folder (pyproject.toml)")
    parser.add_argument("--allow", type=Path, help=f"the allow-list (default: ROOT/{ALLOW_NAME})")
    args = parser.parse_args(argv)
    findings, summary = check(args.root, args.allow or args.root / ALLOW_NAME)
    for line in findings:
        print(line)
    print(summary)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
